// CpuOps causal attention, FlashAttention-2 style: queries and keys are
// visited in blocks, the softmax is computed online (running max and sum per
// query), and the backward pass recomputes each block's probabilities from
// the saved log-sum-exp. Working memory is a few blocks per thread, never
// seq_len x seq_len. Work is split across threads by (sequence, head) in
// forward and by (sequence, key and value head) in backward, whose dk and dv
// sum the group's query heads in order; every reduction runs in a fixed
// order, so results are reproducible.
// Every block a product reads is dense in per-thread memory: bf16 q, k, v
// are widened into it, float32 ones copied, so both storage types run the
// same float32 products on the same values, through oneDNN or OpenBLAS
// (CpuOps::AttentionBlocksThroughOneDnn).
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/types/span.h"
#include "common/status_macros.h"
#include "kernels/cpu/bf16.h"
#include "kernels/cpu/blas.h"
#include "kernels/cpu/blas_split.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/simd.h"
#include "kernels/cpu/vector_math.h"

namespace plateau::kernels::cpu {
namespace {

constexpr int64_t kBlock = kAttentionBlockTokens;

// One of attention's block products on dense float32 blocks, c = alpha op(a)
// op(b) + beta c as `layout` says (a is m x k, b is k x n, c is m x n):
// through oneDNN's kernel for the layout, or OpenBLAS where it is null.
struct BlockProduct {
  absl::Status Run(int64_t m, int64_t k, int64_t n, const float* a,
                   const float* b, float* c) const {
    if (kernel != nullptr) {
      UseOneOneDnnThread();
      return kernel->Run(m, k, n, a, b, c);
    }
    GemmArgs args;
    args.transpose_a = layout.a_transposed ? Transpose::kYes : Transpose::kNo;
    args.transpose_b = layout.b_transposed ? Transpose::kYes : Transpose::kNo;
    args.m = m;
    args.n = n;
    args.k = k;
    args.alpha = layout.alpha;
    args.a = a;
    args.lda = layout.a_transposed ? m : k;
    args.b = b;
    args.ldb = layout.b_transposed ? k : n;
    args.beta = layout.beta;
    args.c = c;
    args.ldc = n;
    BlasGemm(args);
    return absl::OkStatus();
  }

  MatmulLayout layout;
  const OneDnnMatmul* kernel = nullptr;
};

// The products of one head's forward and backward, their names after the
// blocks they make: P (probabilities), dS (score gradients), dO (output
// gradients), scale = 1 / sqrt(head_dim).
struct AttentionProducts {
  BlockProduct scores;             // S = scale Q K^T
  BlockProduct add_values;         // O += P V
  BlockProduct add_value_grads;    // dV += P^T dO
  BlockProduct probability_grads;  // dP = dO V^T
  BlockProduct query_grads;        // dQ = scale dS K
  BlockProduct add_key_grads;      // dK += scale dS^T Q
};

// oneDNN's kernels from `ops` where attention's blocks go through oneDNN
// (CpuOps::AttentionBlocksThroughOneDnn), else none: OpenBLAS.
AttentionProducts MakeAttentionProducts(int64_t head_dim, CpuOps* ops) {
  const bool through_onednn = CpuOps::AttentionBlocksThroughOneDnn();
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  const auto product = [&](bool a_transposed, bool b_transposed, float alpha,
                           float beta) {
    BlockProduct made;
    made.layout.a_transposed = a_transposed;
    made.layout.b_transposed = b_transposed;
    made.layout.input = MatmulInput::kFloat32;
    made.layout.alpha = alpha;
    made.layout.beta = beta;
    if (through_onednn) made.kernel = ops->Matmul(made.layout);
    return made;
  };
  AttentionProducts products;
  products.scores = product(false, true, scale, 0.0f);
  products.add_values = product(false, false, 1.0f, 1.0f);
  products.add_value_grads = product(true, false, 1.0f, 1.0f);
  products.probability_grads = product(false, true, 1.0f, 0.0f);
  products.query_grads = product(false, false, scale, 0.0f);
  products.add_key_grads = product(true, false, scale, 1.0f);
  return products;
}

// Per-thread working memory, sized for one block pair: every operand of the
// products is a dense block here (scores and their gradients as rows of the
// block's keys).
struct AttentionScratch {
  explicit AttentionScratch(int64_t head_dim)
      : scores(kBlock * kBlock),
        score_grads(kBlock * kBlock),
        accumulator(kBlock * head_dim),
        queries(kBlock * head_dim),
        keys(kBlock * head_dim),
        values(kBlock * head_dim),
        output_grads(kBlock * head_dim),
        query_grads(kBlock * head_dim),
        key_grads(kBlock * head_dim),
        value_grads(kBlock * head_dim),
        running_max(kBlock),
        running_sum(kBlock) {}
  std::vector<float> scores, score_grads, accumulator, queries, keys, values,
      output_grads, query_grads, key_grads, value_grads, running_max,
      running_sum;
};

// `count` rows of head_dim values, `stride` apart, as a dense float32 block
// in `to`: copied, or widened (exactly) from bf16, so that both storage
// types run the same products on the same values.
const float* DenseRows(const float* rows, int64_t stride, int64_t count,
                       int64_t head_dim, std::vector<float>& to) {
  for (int64_t row = 0; row < count; ++row) {
    std::copy_n(rows + row * stride, head_dim, to.data() + row * head_dim);
  }
  return to.data();
}
const float* DenseRows(const uint16_t* rows, int64_t stride, int64_t count,
                       int64_t head_dim, std::vector<float>& to) {
  WidenBf16Matrix(count, head_dim, rows, stride, to.data(), head_dim);
  return to.data();
}

void StoreRow(const float* row, int64_t count, float* to) {
  std::copy_n(row, count, to);
}
void StoreRow(const float* row, int64_t count, uint16_t* to) {
  ConvertToBf16(absl::MakeConstSpan(row, count), absl::MakeSpan(to, count));
}

// to = row (the group's first query head), or to += row (the others).
void StoreGrads(const float* row, int64_t count, bool accumulate, float* to) {
  if (!accumulate) {
    std::copy_n(row, count, to);
    return;
  }
  for (int64_t i = 0; i < count; ++i) to[i] += row[i];
}

// Keys [key_begin, key_begin + key_count) visible to the query at position
// `query`: a causal prefix of the block.
int64_t VisibleKeys(int64_t query, int64_t key_begin, int64_t key_count) {
  return std::clamp<int64_t>(query - key_begin + 1, 0, key_count);
}

// Element is float (float32 storage) or uint16_t (bf16).
template <typename Element>
absl::Status ForwardHead(const AttentionShape& shape,
                         const AttentionProducts& products, const Element* q,
                         const Element* k, const Element* v, int64_t stride,
                         Element* out, int64_t out_stride, float* logsumexp,
                         AttentionScratch& s) {
  const int64_t head_dim = shape.head_dim;
  for (int64_t query_begin = 0; query_begin < shape.seq_len;
       query_begin += kBlock) {
    const int64_t query_count = std::min(kBlock, shape.seq_len - query_begin);
    std::fill(s.running_max.begin(), s.running_max.end(),
              -std::numeric_limits<float>::infinity());
    std::fill(s.running_sum.begin(), s.running_sum.end(), 0.0f);
    std::fill(s.accumulator.begin(), s.accumulator.end(), 0.0f);
    const float* queries = DenseRows(q + query_begin * stride, stride,
                                     query_count, head_dim, s.queries);
    for (int64_t key_begin = 0; key_begin < query_begin + query_count;
         key_begin += kBlock) {
      const int64_t key_count = std::min(kBlock, shape.seq_len - key_begin);
      const float* keys = DenseRows(k + key_begin * stride, stride, key_count,
                                    head_dim, s.keys);
      const float* values = DenseRows(v + key_begin * stride, stride, key_count,
                                      head_dim, s.values);
      // S = scale Q_block K_block^T      (query_count, key_count)
      RETURN_IF_ERROR(products.scores.Run(query_count, head_dim, key_count,
                                          queries, keys, s.scores.data()));
      for (int64_t i = 0; i < query_count; ++i) {
        float* row = s.scores.data() + i * key_count;
        const int64_t visible =
            VisibleKeys(query_begin + i, key_begin, key_count);
        const float block_max = VectorMax(visible, row);
        const float new_max = std::max(s.running_max[i], block_max);
        const float rescale = ScalarExp(s.running_max[i] - new_max);
        const float block_sum = ExpAndSum(visible, row, 1.0f, new_max, row);
        std::fill(row + visible, row + key_count, 0.0f);
        s.running_sum[i] = s.running_sum[i] * rescale + block_sum;
        s.running_max[i] = new_max;
        if (rescale != 1.0f) {
          float* accumulator = s.accumulator.data() + i * head_dim;
          for (int64_t d = 0; d < head_dim; ++d) accumulator[d] *= rescale;
        }
      }
      // O += P V_block      (query_count, head_dim)
      RETURN_IF_ERROR(products.add_values.Run(query_count, key_count, head_dim,
                                              s.scores.data(), values,
                                              s.accumulator.data()));
    }
    for (int64_t i = 0; i < query_count; ++i) {
      const float inverse_sum = 1.0f / s.running_sum[i];
      float* accumulator = s.accumulator.data() + i * head_dim;
      for (int64_t d = 0; d < head_dim; ++d) accumulator[d] *= inverse_sum;
      StoreRow(accumulator, head_dim, out + (query_begin + i) * out_stride);
      logsumexp[query_begin + i] =
          s.running_max[i] + std::log(s.running_sum[i]);
    }
  }
  return absl::OkStatus();
}

template <typename Element>
absl::Status BackwardHead(const AttentionShape& shape,
                          const AttentionProducts& products, const Element* q,
                          const Element* k, const Element* v, int64_t stride,
                          const Element* out, const float* dout,
                          int64_t out_stride, const float* logsumexp, float* dq,
                          float* dk, float* dv, int64_t gradient_stride,
                          bool accumulate_key_value_grads,
                          AttentionScratch& s) {
  const int64_t head_dim = shape.head_dim;
  const int64_t seq_len = shape.seq_len;
  // delta[t] = dot(dout[t], out[t]): the softmax backward's row term.
  std::vector<float> delta(seq_len);
  for (int64_t t = 0; t < seq_len; ++t) {
    float dot = 0.0f;
    for (int64_t d = 0; d < head_dim; ++d) {
      dot += dout[t * out_stride + d] * ValueOf(out[t * out_stride + d]);
    }
    delta[t] = dot;
    std::fill(dq + t * gradient_stride, dq + t * gradient_stride + head_dim,
              0.0f);
  }
  for (int64_t key_begin = 0; key_begin < seq_len; key_begin += kBlock) {
    const int64_t key_count = std::min(kBlock, seq_len - key_begin);
    std::fill(s.key_grads.begin(), s.key_grads.end(), 0.0f);
    std::fill(s.value_grads.begin(), s.value_grads.end(), 0.0f);
    const float* keys =
        DenseRows(k + key_begin * stride, stride, key_count, head_dim, s.keys);
    const float* values = DenseRows(v + key_begin * stride, stride, key_count,
                                    head_dim, s.values);
    for (int64_t query_begin = key_begin / kBlock * kBlock;
         query_begin < seq_len; query_begin += kBlock) {
      const int64_t query_count = std::min(kBlock, seq_len - query_begin);
      const float* queries = DenseRows(q + query_begin * stride, stride,
                                       query_count, head_dim, s.queries);
      const float* output_grads =
          DenseRows(dout + query_begin * out_stride, out_stride, query_count,
                    head_dim, s.output_grads);
      // P = exp(scale Q K^T - logsumexp), causal      (query_count,
      // key_count)
      RETURN_IF_ERROR(products.scores.Run(query_count, head_dim, key_count,
                                          queries, keys, s.scores.data()));
      for (int64_t i = 0; i < query_count; ++i) {
        float* row = s.scores.data() + i * key_count;
        const int64_t visible =
            VisibleKeys(query_begin + i, key_begin, key_count);
        ExpAndSum(visible, row, 1.0f, logsumexp[query_begin + i], row);
        std::fill(row + visible, row + key_count, 0.0f);
      }
      // dV_block += P^T dO      (key_count, head_dim)
      RETURN_IF_ERROR(products.add_value_grads.Run(
          key_count, query_count, head_dim, s.scores.data(), output_grads,
          s.value_grads.data()));
      // dP = dO V_block^T      (query_count, key_count)
      RETURN_IF_ERROR(products.probability_grads.Run(
          query_count, head_dim, key_count, output_grads, values,
          s.score_grads.data()));
      // dS = P * (dP - delta), in place of dP.
      for (int64_t i = 0; i < query_count; ++i) {
        const float* probabilities = s.scores.data() + i * key_count;
        float* grads = s.score_grads.data() + i * key_count;
        const float row_delta = delta[query_begin + i];
        for (int64_t j = 0; j < key_count; ++j) {
          grads[j] = probabilities[j] * (grads[j] - row_delta);
        }
      }
      // dQ_block += scale dS K_block      (query_count, head_dim)
      RETURN_IF_ERROR(products.query_grads.Run(query_count, key_count, head_dim,
                                               s.score_grads.data(), keys,
                                               s.query_grads.data()));
      for (int64_t i = 0; i < query_count; ++i) {
        float* to = dq + (query_begin + i) * gradient_stride;
        const float* from = s.query_grads.data() + i * head_dim;
        for (int64_t d = 0; d < head_dim; ++d) to[d] += from[d];
      }
      // dK_block += scale dS^T Q_block      (key_count, head_dim)
      RETURN_IF_ERROR(products.add_key_grads.Run(key_count, query_count,
                                                 head_dim, s.score_grads.data(),
                                                 queries, s.key_grads.data()));
    }
    for (int64_t j = 0; j < key_count; ++j) {
      StoreGrads(s.key_grads.data() + j * head_dim, head_dim,
                 accumulate_key_value_grads,
                 dk + (key_begin + j) * gradient_stride);
      StoreGrads(s.value_grads.data() + j * head_dim, head_dim,
                 accumulate_key_value_grads,
                 dv + (key_begin + j) * gradient_stride);
    }
  }
  return absl::OkStatus();
}

template <typename Element>
void ForwardHeads(ThreadPool& pool, const AttentionProducts& products,
                  const AttentionShape& shape, const Element* q,
                  const Element* k, const Element* v, int64_t qkv_stride,
                  Element* out, int64_t out_stride, float* logsumexp,
                  const std::function<void(absl::Status)>& record_error) {
  const int64_t heads_total = shape.batch * shape.heads;
  pool.ParallelFor(heads_total, 1, [&](int64_t begin, int64_t end) {
    AttentionScratch scratch(shape.head_dim);
    for (int64_t index = begin; index < end; ++index) {
      const int64_t sequence = index / shape.heads;
      const int64_t head = index % shape.heads;
      const int64_t row = sequence * shape.seq_len;
      const int64_t query_offset = row * qkv_stride + head * shape.head_dim;
      const int64_t key_offset =
          row * qkv_stride + head / shape.group_size() * shape.head_dim;
      const absl::Status done = ForwardHead(
          shape, products, q + query_offset, k + key_offset, v + key_offset,
          qkv_stride, out + row * out_stride + head * shape.head_dim,
          out_stride, logsumexp + index * shape.seq_len, scratch);
      if (!done.ok()) record_error(done);
    }
  });
}

template <typename Element>
void BackwardHeads(ThreadPool& pool, const AttentionProducts& products,
                   const AttentionShape& shape, const Element* q,
                   const Element* k, const Element* v, int64_t qkv_stride,
                   const Element* out, const float* dout, int64_t out_stride,
                   const float* logsumexp, float* dq, float* dk, float* dv,
                   const std::function<void(absl::Status)>& record_error) {
  const int64_t key_value_heads_total = shape.batch * shape.kv_heads;
  const int64_t gradient_stride =
      shape.gradient_stride > 0 ? shape.gradient_stride : qkv_stride;
  pool.ParallelFor(key_value_heads_total, 1, [&](int64_t begin, int64_t end) {
    AttentionScratch scratch(shape.head_dim);
    for (int64_t index = begin; index < end; ++index) {
      const int64_t sequence = index / shape.kv_heads;
      const int64_t key_value_head = index % shape.kv_heads;
      const int64_t row = sequence * shape.seq_len;
      const int64_t key_column = key_value_head * shape.head_dim;
      const int64_t key_offset = row * qkv_stride + key_column;
      const int64_t key_gradient_offset = row * gradient_stride + key_column;
      for (int64_t member = 0; member < shape.group_size(); ++member) {
        const int64_t head = key_value_head * shape.group_size() + member;
        const int64_t column = head * shape.head_dim;
        const int64_t out_offset = row * out_stride + column;
        const absl::Status done = BackwardHead(
            shape, products, q + row * qkv_stride + column, k + key_offset,
            v + key_offset, qkv_stride, out + out_offset, dout + out_offset,
            out_stride,
            logsumexp +
                (sequence * shape.logsumexp_heads() + head) * shape.seq_len,
            dq + row * gradient_stride + column, dk + key_gradient_offset,
            dv + key_gradient_offset, gradient_stride,
            /*accumulate_key_value_grads=*/member > 0, scratch);
        if (!done.ok()) record_error(done);
      }
    }
  });
}

bool OpenBlasRunsAvx512() {
  const std::string core = absl::AsciiStrToLower(Blas().corename());
  return core == "skylakex" || core == "cooperlake" || core == "sapphirerapids";
}

}  // namespace

bool CpuOps::AttentionBlocksThroughOneDnn() {
  static const bool through_onednn =
      DetectedSimdLevel() == SimdLevel::kAvx512 && !OpenBlasRunsAvx512();
  return through_onednn;
}

void CpuOps::AttentionForward(const AttentionShape& shape, const float* q,
                              const float* k, const float* v,
                              int64_t qkv_stride, float* out,
                              int64_t out_stride, float* logsumexp) {
  ForwardHeads(pool_, MakeAttentionProducts(shape.head_dim, this), shape, q, k,
               v, qkv_stride, out, out_stride, logsumexp,
               [this](absl::Status error) { RecordError(std::move(error)); });
}

void CpuOps::AttentionBackward(const AttentionShape& shape, const float* q,
                               const float* k, const float* v,
                               int64_t qkv_stride, const float* out,
                               const float* dout, int64_t out_stride,
                               const float* logsumexp, float* dq, float* dk,
                               float* dv) {
  BackwardHeads(pool_, MakeAttentionProducts(shape.head_dim, this), shape, q, k,
                v, qkv_stride, out, dout, out_stride, logsumexp, dq, dk, dv,
                [this](absl::Status error) { RecordError(std::move(error)); });
}

void CpuOps::AttentionForwardBf16(const AttentionShape& shape,
                                  const uint16_t* q, const uint16_t* k,
                                  const uint16_t* v, int64_t qkv_stride,
                                  uint16_t* out, int64_t out_stride,
                                  float* logsumexp) {
  ForwardHeads(pool_, MakeAttentionProducts(shape.head_dim, this), shape, q, k,
               v, qkv_stride, out, out_stride, logsumexp,
               [this](absl::Status error) { RecordError(std::move(error)); });
}

void CpuOps::AttentionBackwardBf16(const AttentionShape& shape,
                                   const uint16_t* q, const uint16_t* k,
                                   const uint16_t* v, int64_t qkv_stride,
                                   const uint16_t* out, const float* dout,
                                   int64_t out_stride, const float* logsumexp,
                                   float* dq, float* dk, float* dv) {
  BackwardHeads(pool_, MakeAttentionProducts(shape.head_dim, this), shape, q, k,
                v, qkv_stride, out, dout, out_stride, logsumexp, dq, dk, dv,
                [this](absl::Status error) { RecordError(std::move(error)); });
}

}  // namespace plateau::kernels::cpu
