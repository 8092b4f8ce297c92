// Causal attention against a naive float64 attention that materialises
// every score (fine at test sizes).
#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "kernels/ops_conformance.h"

namespace plateau::kernels::conformance {
namespace {

struct AttentionReference {
  Doubles out;
  Doubles logsumexp;
};

// q, k, v: rows of `stride`, the heads in the first heads * head_dim columns.
AttentionReference ReferenceAttention(const AttentionShape& shape,
                                      const Doubles& q, const Doubles& k,
                                      const Doubles& v, int64_t stride) {
  const int64_t width = shape.heads * shape.head_dim;
  AttentionReference result{Doubles(shape.batch * shape.seq_len * width, 0.0),
                            Doubles(shape.batch * shape.heads * shape.seq_len)};
  const double scale = 1.0 / std::sqrt(static_cast<double>(shape.head_dim));
  for (int64_t s = 0; s < shape.batch; ++s) {
    for (int64_t h = 0; h < shape.heads; ++h) {
      for (int64_t i = 0; i < shape.seq_len; ++i) {
        const int64_t query_row = s * shape.seq_len + i;
        Doubles scores(i + 1);
        double max = -1e300;
        for (int64_t j = 0; j <= i; ++j) {
          const int64_t key_row = s * shape.seq_len + j;
          double dot = 0;
          for (int64_t d = 0; d < shape.head_dim; ++d) {
            dot += q[query_row * stride + h * shape.head_dim + d] *
                   k[key_row * stride + h * shape.head_dim + d];
          }
          scores[j] = dot * scale;
          max = std::max(max, scores[j]);
        }
        double sum = 0;
        for (double& score : scores) {
          score = std::exp(score - max);
          sum += score;
        }
        for (int64_t j = 0; j <= i; ++j) {
          const int64_t key_row = s * shape.seq_len + j;
          for (int64_t d = 0; d < shape.head_dim; ++d) {
            result.out[query_row * width + h * shape.head_dim + d] +=
                scores[j] / sum * v[key_row * stride + h * shape.head_dim + d];
          }
        }
        result.logsumexp[(s * shape.heads + h) * shape.seq_len + i] =
            max + std::log(sum);
      }
    }
  }
  return result;
}

// 150 tokens cross a 128-token block (the CPU's); head_dim 40 is not a
// power of two.
std::vector<AttentionShape> TestShapes() {
  std::vector<AttentionShape> shapes;
  for (const auto& [seq_len, head_dim] :
       std::vector<std::pair<int64_t, int64_t>>{{150, 8}, {45, 40}}) {
    AttentionShape shape;
    shape.batch = 2;
    shape.seq_len = seq_len;
    shape.heads = 2;
    shape.head_dim = head_dim;
    shapes.push_back(shape);
  }
  return shapes;
}

TEST_P(OpsConformanceTest, AttentionForwardAndBackward) {
  for (const AttentionShape& shape : TestShapes()) {
    const int64_t width = shape.heads * shape.head_dim;
    const int64_t stride = 3 * width;  // [q | k | v] rows, as in the model
    const int64_t rows = shape.batch * shape.seq_len;
    const Floats qkv = RandomFloats(rows * stride, 16, 0.5f);
    const Floats dout = RandomFloats(rows * width, 17);
    DeviceFloats device_qkv(backend(), qkv), device_dout(backend(), dout),
        out(backend(), rows * width),
        logsumexp(backend(), shape.batch * shape.heads * shape.seq_len),
        dqkv(backend(), rows * stride);
    const float* q = device_qkv.get();
    ops().AttentionForward(shape, q, q + width, q + 2 * width, stride,
                           out.get(), width, logsumexp.get());
    const auto split = [&](const Doubles& source, int part) {
      Doubles view(rows * stride, 0.0);
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t c = 0; c < width; ++c) {
          view[r * stride + c] = source[r * stride + part * width + c];
        }
      }
      return view;
    };
    const Doubles all = ToDoubles(qkv);
    const AttentionReference expected = ReferenceAttention(
        shape, split(all, 0), split(all, 1), split(all, 2), stride);
    ExpectClose(out.Read(), expected.out, 2e-5, "attention out");
    ExpectClose(logsumexp.Read(), expected.logsumexp, 2e-5,
                "attention logsumexp");

    float* d = dqkv.get();
    ops().AttentionBackward(shape, q, q + width, q + 2 * width, stride,
                            out.get(), device_dout.get(), width,
                            logsumexp.get(), d, d + width, d + 2 * width);
    const std::vector<size_t> coordinates =
        SampleCoordinates(qkv.size(), 400, 3);
    ExpectGradient(dqkv.Read(),
                   NumericGradient(
                       [&](const Doubles& point) {
                         return ReferenceAttention(shape, split(point, 0),
                                                   split(point, 1),
                                                   split(point, 2), stride)
                             .out;
                       },
                       all, ToDoubles(dout), coordinates),
                   coordinates, 1e-4, "attention backward");
  }
}

// Attention over bf16 storage is the float32 attention over the stored
// values: the same logsumexp, the same out rounded, the same gradients.
TEST_P(OpsConformanceTest, AttentionBf16IsFloat32MathOnItsValues) {
  for (const AttentionShape& shape : TestShapes()) {
    const int64_t width = shape.heads * shape.head_dim;
    const int64_t stride = 3 * width;
    const int64_t rows = shape.batch * shape.seq_len;
    const int64_t statistics = shape.batch * shape.heads * shape.seq_len;
    const Bf16s qkv_bits = ToBf16(RandomFloats(rows * stride, 18, 0.5f));
    const Floats dout = RandomFloats(rows * width, 19);

    DeviceBf16s bf16_qkv(backend(), qkv_bits),
        bf16_out(backend(), rows * width);
    DeviceFloats bf16_logsumexp(backend(), statistics),
        bf16_dqkv(backend(), rows * stride);
    const uint16_t* q = bf16_qkv.get();
    ops().AttentionForwardBf16(shape, q, q + width, q + 2 * width, stride,
                               bf16_out.get(), width, bf16_logsumexp.get());

    DeviceFloats qkv(backend(), FromBf16(qkv_bits)),
        out(backend(), rows * width), logsumexp(backend(), statistics),
        dqkv(backend(), rows * stride), device_dout(backend(), dout);
    const float* q32 = qkv.get();
    ops().AttentionForward(shape, q32, q32 + width, q32 + 2 * width, stride,
                           out.get(), width, logsumexp.get());
    ExpectSame(bf16_logsumexp.Read(), logsumexp.Read(),
               "AttentionForwardBf16's logsumexp");
    const Bf16s out_bits = bf16_out.Read();
    EXPECT_EQ(out_bits, ToBf16(out.Read())) << "AttentionForwardBf16's out";

    // The float32 backward reads the out that the bf16 forward stored.
    DeviceFloats stored_out(backend(), FromBf16(out_bits));
    ops().AttentionBackwardBf16(
        shape, q, q + width, q + 2 * width, stride, bf16_out.get(),
        device_dout.get(), width, bf16_logsumexp.get(), bf16_dqkv.get(),
        bf16_dqkv.get() + width, bf16_dqkv.get() + 2 * width);
    float* d = dqkv.get();
    ops().AttentionBackward(shape, q32, q32 + width, q32 + 2 * width, stride,
                            stored_out.get(), device_dout.get(), width,
                            logsumexp.get(), d, d + width, d + 2 * width);
    ExpectSame(bf16_dqkv.Read(), dqkv.Read(), "AttentionBackwardBf16");
  }
}

}  // namespace
}  // namespace plateau::kernels::conformance
