// Causal attention against a naive float64 attention that materialises
// every score (fine at test sizes).
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/ops_conformance.h"

namespace plateau::kernels::conformance {
namespace {

struct AttentionReference {
  Doubles out;
  Doubles logsumexp;
};

// q, k, v: rows of `stride`, the heads in the first columns (heads of q,
// kv_heads of k and v).
AttentionReference ReferenceAttention(const AttentionShape& shape,
                                      const Doubles& q, const Doubles& k,
                                      const Doubles& v, int64_t stride) {
  const int64_t width = shape.heads * shape.head_dim;
  AttentionReference result{Doubles(shape.batch * shape.seq_len * width, 0.0),
                            Doubles(shape.batch * shape.heads * shape.seq_len)};
  const double scale = 1.0 / std::sqrt(static_cast<double>(shape.head_dim));
  for (int64_t s = 0; s < shape.batch; ++s) {
    for (int64_t h = 0; h < shape.heads; ++h) {
      const int64_t key_column = h / shape.group_size() * shape.head_dim;
      for (int64_t i = 0; i < shape.seq_len; ++i) {
        const int64_t query_row = s * shape.seq_len + i;
        Doubles scores(i + 1);
        double max = -1e300;
        for (int64_t j = 0; j <= i; ++j) {
          const int64_t key_row = s * shape.seq_len + j;
          double dot = 0;
          for (int64_t d = 0; d < shape.head_dim; ++d) {
            dot += q[query_row * stride + h * shape.head_dim + d] *
                   k[key_row * stride + key_column + d];
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
                scores[j] / sum * v[key_row * stride + key_column + d];
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
// power of two. The last two are grouped-query attention: groups of two
// query heads, and one group of three.
std::vector<AttentionShape> TestShapes() {
  struct Sizes {
    int64_t seq_len, head_dim, heads, kv_heads;
  };
  std::vector<AttentionShape> shapes;
  for (const Sizes& sizes : std::vector<Sizes>{
           {150, 8, 2, 2}, {45, 40, 2, 2}, {150, 8, 4, 2}, {45, 40, 3, 1}}) {
    AttentionShape shape;
    shape.batch = 2;
    shape.seq_len = sizes.seq_len;
    shape.heads = sizes.heads;
    shape.kv_heads = sizes.kv_heads;
    shape.head_dim = sizes.head_dim;
    shapes.push_back(shape);
  }
  return shapes;
}

// [q | k | v] rows, as in the model: where k and v start, and the row width.
struct QkvColumns {
  explicit QkvColumns(const AttentionShape& shape)
      : q_width(shape.heads * shape.head_dim),
        kv_width(shape.kv_heads * shape.head_dim),
        k(q_width),
        v(q_width + kv_width),
        stride(q_width + 2 * kv_width) {}
  int64_t q_width, kv_width, k, v, stride;
};

// The rows of `qkv` (stride columns.stride) with only the `width` columns
// from `first` kept, moved to the front.
Doubles ColumnsOf(const Doubles& qkv, const QkvColumns& columns, int64_t first,
                  int64_t width) {
  const int64_t rows = static_cast<int64_t>(qkv.size()) / columns.stride;
  Doubles view(qkv.size(), 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < width; ++c) {
      view[r * columns.stride + c] = qkv[r * columns.stride + first + c];
    }
  }
  return view;
}

AttentionReference ReferenceAttentionOfRows(const AttentionShape& shape,
                                            const Doubles& qkv) {
  const QkvColumns columns(shape);
  return ReferenceAttention(
      shape, ColumnsOf(qkv, columns, 0, columns.q_width),
      ColumnsOf(qkv, columns, columns.k, columns.kv_width),
      ColumnsOf(qkv, columns, columns.v, columns.kv_width), columns.stride);
}

TEST_P(OpsConformanceTest, AttentionForwardAndBackward) {
  for (const AttentionShape& shape : TestShapes()) {
    const QkvColumns columns(shape);
    const int64_t width = columns.q_width;
    const int64_t stride = columns.stride;
    const int64_t rows = shape.batch * shape.seq_len;
    const Floats qkv = RandomFloats(rows * stride, 16, 0.5f);
    const Floats dout = RandomFloats(rows * width, 17);
    DeviceFloats device_qkv(backend(), qkv), device_dout(backend(), dout),
        out(backend(), rows * width),
        logsumexp(backend(), shape.batch * shape.heads * shape.seq_len),
        dqkv(backend(), rows * stride);
    const float* q = device_qkv.get();
    ops().AttentionForward(shape, q, q + columns.k, q + columns.v, stride,
                           out.get(), width, logsumexp.get());
    const Doubles all = ToDoubles(qkv);
    const AttentionReference expected = ReferenceAttentionOfRows(shape, all);
    ExpectClose(out.Read(), expected.out, 2e-5, "attention out");
    ExpectClose(logsumexp.Read(), expected.logsumexp, 2e-5,
                "attention logsumexp");

    float* d = dqkv.get();
    ops().AttentionBackward(shape, q, q + columns.k, q + columns.v, stride,
                            out.get(), device_dout.get(), width,
                            logsumexp.get(), d, d + columns.k, d + columns.v);
    const std::vector<size_t> coordinates =
        SampleCoordinates(qkv.size(), 400, 3);
    ExpectGradient(dqkv.Read(),
                   NumericGradient(
                       [&](const Doubles& point) {
                         return ReferenceAttentionOfRows(shape, point).out;
                       },
                       all, ToDoubles(dout), coordinates),
                   coordinates, 1e-4, "attention backward");
  }
}

// Attention over bf16 storage is the float32 attention over the stored
// values: the same logsumexp, the same out rounded, the same gradients.
TEST_P(OpsConformanceTest, AttentionBf16IsFloat32MathOnItsValues) {
  for (const AttentionShape& shape : TestShapes()) {
    const QkvColumns columns(shape);
    const int64_t width = columns.q_width;
    const int64_t stride = columns.stride;
    const int64_t rows = shape.batch * shape.seq_len;
    const int64_t statistics = shape.batch * shape.heads * shape.seq_len;
    const Bf16s qkv_bits = ToBf16(RandomFloats(rows * stride, 18, 0.5f));
    const Floats dout = RandomFloats(rows * width, 19);

    DeviceBf16s bf16_qkv(backend(), qkv_bits),
        bf16_out(backend(), rows * width);
    DeviceFloats bf16_logsumexp(backend(), statistics),
        bf16_dqkv(backend(), rows * stride);
    const uint16_t* q = bf16_qkv.get();
    ops().AttentionForwardBf16(shape, q, q + columns.k, q + columns.v, stride,
                               bf16_out.get(), width, bf16_logsumexp.get());

    DeviceFloats qkv(backend(), FromBf16(qkv_bits)),
        out(backend(), rows * width), logsumexp(backend(), statistics),
        dqkv(backend(), rows * stride), device_dout(backend(), dout);
    const float* q32 = qkv.get();
    ops().AttentionForward(shape, q32, q32 + columns.k, q32 + columns.v, stride,
                           out.get(), width, logsumexp.get());
    ExpectSame(bf16_logsumexp.Read(), logsumexp.Read(),
               "AttentionForwardBf16's logsumexp");
    const Bf16s out_bits = bf16_out.Read();
    EXPECT_EQ(out_bits, ToBf16(out.Read())) << "AttentionForwardBf16's out";

    // The float32 backward reads the out that the bf16 forward stored.
    DeviceFloats stored_out(backend(), FromBf16(out_bits));
    ops().AttentionBackwardBf16(
        shape, q, q + columns.k, q + columns.v, stride, bf16_out.get(),
        device_dout.get(), width, bf16_logsumexp.get(), bf16_dqkv.get(),
        bf16_dqkv.get() + columns.k, bf16_dqkv.get() + columns.v);
    float* d = dqkv.get();
    ops().AttentionBackward(shape, q32, q32 + columns.k, q32 + columns.v,
                            stride, stored_out.get(), device_dout.get(), width,
                            logsumexp.get(), d, d + columns.k, d + columns.v);
    ExpectSame(bf16_dqkv.Read(), dqkv.Read(), "AttentionBackwardBf16");
  }
}

// A backward over a piece of the heads, one key and value head's group at a
// time with its gradients in rows of the piece's own width ([dq | dk | dv],
// the layer's logsumexp), gives bitwise the whole backward's columns of
// those heads: how the attention block keeps its float32 gradients to a
// piece.
TEST_P(OpsConformanceTest, AttentionBackwardOfAPieceIsTheWholesColumns) {
  for (const AttentionShape& shape : TestShapes()) {
    if (shape.kv_heads < 2) continue;
    const QkvColumns columns(shape);
    const int64_t width = columns.q_width;
    const int64_t stride = columns.stride;
    const int64_t rows = shape.batch * shape.seq_len;
    DeviceFloats qkv(backend(), RandomFloats(rows * stride, 20, 0.5f)),
        dout(backend(), RandomFloats(rows * width, 21)),
        out(backend(), rows * width),
        logsumexp(backend(), shape.batch * shape.heads * shape.seq_len),
        whole(backend(), rows * stride);
    const float* q = qkv.get();
    ops().AttentionForward(shape, q, q + columns.k, q + columns.v, stride,
                           out.get(), width, logsumexp.get());
    float* d = whole.get();
    ops().AttentionBackward(shape, q, q + columns.k, q + columns.v, stride,
                            out.get(), dout.get(), width, logsumexp.get(), d,
                            d + columns.k, d + columns.v);
    const Floats expected = whole.Read();

    const int64_t group = shape.group_size();
    const int64_t head_dim = shape.head_dim;
    AttentionShape piece = shape;
    piece.heads = group;
    piece.kv_heads = 1;
    piece.layer_heads = shape.heads;
    piece.gradient_stride = (group + 2) * head_dim;
    for (int64_t kv_head = 0; kv_head < shape.kv_heads; ++kv_head) {
      const int64_t query_column = kv_head * group * head_dim;
      const int64_t key_column = kv_head * head_dim;
      DeviceFloats gradients(backend(), rows * piece.gradient_stride);
      float* g = gradients.get();
      ops().AttentionBackward(
          piece, q + query_column, q + columns.k + key_column,
          q + columns.v + key_column, stride, out.get() + query_column,
          dout.get() + query_column, width,
          logsumexp.get() + kv_head * group * shape.seq_len, g,
          g + group * head_dim, g + (group + 1) * head_dim);
      // The piece's columns of the whole, in the piece's order.
      Floats whole_columns;
      for (int64_t r = 0; r < rows; ++r) {
        const float* row = expected.data() + r * stride;
        whole_columns.insert(whole_columns.end(), row + query_column,
                             row + query_column + group * head_dim);
        for (const int64_t first : {columns.k, columns.v}) {
          whole_columns.insert(whole_columns.end(), row + first + key_column,
                               row + first + key_column + head_dim);
        }
      }
      ExpectSame(gradients.Read(), whole_columns,
                 "AttentionBackward over a piece of the heads");
    }
  }
}

}  // namespace
}  // namespace plateau::kernels::conformance
