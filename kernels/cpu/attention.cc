// CpuOps causal attention, FlashAttention-2 style: queries and keys are
// visited in blocks, the softmax is computed online (running max and sum per
// query), and the backward pass recomputes each block's probabilities from
// the saved log-sum-exp. Working memory is a few blocks per thread, never
// seq_len x seq_len. Work is split across threads by (sequence, head) in
// forward and by (sequence, key and value head) in backward, whose dk and dv
// sum the group's query heads in order; every reduction runs in a fixed
// order, so results are reproducible.
// bf16 q, k, v are widened a block at a time into per-thread float32 rows,
// so both storage types run the same float32 products on the same values.
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "absl/types/span.h"
#include "kernels/cpu/bf16.h"
#include "kernels/cpu/blas_split.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/vector_math.h"

namespace plateau::kernels::cpu {
namespace {

constexpr int64_t kBlock = kAttentionBlockTokens;

void GemmBlock(Transpose transpose_a, Transpose transpose_b, int64_t m,
               int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
               const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  GemmArgs args;
  args.transpose_a = transpose_a;
  args.transpose_b = transpose_b;
  args.m = m;
  args.n = n;
  args.k = k;
  args.alpha = alpha;
  args.a = a;
  args.lda = lda;
  args.b = b;
  args.ldb = ldb;
  args.beta = beta;
  args.c = c;
  args.ldc = ldc;
  BlasGemm(args);
}

// Per-thread working memory, sized for one block pair. The widened rows are
// for bf16 inputs only (empty for float32 ones).
struct AttentionScratch {
  AttentionScratch(int64_t head_dim, bool widens_inputs)
      : scores(kBlock * kBlock),
        score_grads(kBlock * kBlock),
        accumulator(kBlock * head_dim),
        key_grads(kBlock * head_dim),
        value_grads(kBlock * head_dim),
        running_max(kBlock),
        running_sum(kBlock),
        widened_queries(widens_inputs ? kBlock * head_dim : 0),
        widened_keys(widens_inputs ? kBlock * head_dim : 0),
        widened_values(widens_inputs ? kBlock * head_dim : 0) {}
  std::vector<float> scores, score_grads, accumulator, key_grads, value_grads,
      running_max, running_sum, widened_queries, widened_keys, widened_values;
};

// `count` rows of q, k or v (head_dim values each, `stride` apart) as float32
// for the block products: in place for float32 storage, widened (exactly)
// into `widened` for bf16.
struct BlockRows {
  const float* data;
  int64_t stride;
};
BlockRows RowsOf(const float* rows, int64_t stride, int64_t /*count*/,
                 int64_t /*head_dim*/, std::vector<float>& /*widened*/) {
  return {rows, stride};
}
BlockRows RowsOf(const uint16_t* rows, int64_t stride, int64_t count,
                 int64_t head_dim, std::vector<float>& widened) {
  WidenBf16Matrix(count, head_dim, rows, stride, /*transpose=*/false,
                  widened.data(), head_dim);
  return {widened.data(), head_dim};
}

float ValueOf(float value) { return value; }
float ValueOf(uint16_t value) { return Bf16ToFloat(value); }
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
void ForwardHead(const AttentionShape& shape, const Element* q,
                 const Element* k, const Element* v, int64_t stride,
                 Element* out, int64_t out_stride, float* logsumexp,
                 AttentionScratch& s) {
  const int64_t head_dim = shape.head_dim;
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  for (int64_t query_begin = 0; query_begin < shape.seq_len;
       query_begin += kBlock) {
    const int64_t query_count = std::min(kBlock, shape.seq_len - query_begin);
    std::fill(s.running_max.begin(), s.running_max.end(),
              -std::numeric_limits<float>::infinity());
    std::fill(s.running_sum.begin(), s.running_sum.end(), 0.0f);
    std::fill(s.accumulator.begin(), s.accumulator.end(), 0.0f);
    const BlockRows queries = RowsOf(q + query_begin * stride, stride,
                                     query_count, head_dim, s.widened_queries);
    for (int64_t key_begin = 0; key_begin < query_begin + query_count;
         key_begin += kBlock) {
      const int64_t key_count = std::min(kBlock, shape.seq_len - key_begin);
      const BlockRows keys = RowsOf(k + key_begin * stride, stride, key_count,
                                    head_dim, s.widened_keys);
      const BlockRows values = RowsOf(v + key_begin * stride, stride, key_count,
                                      head_dim, s.widened_values);
      // scores = scale * Q_block K_block^T      (query_count, key_count)
      GemmBlock(Transpose::kNo, Transpose::kYes, query_count, key_count,
                head_dim, scale, queries.data, queries.stride, keys.data,
                keys.stride, 0.0f, s.scores.data(), kBlock);
      for (int64_t i = 0; i < query_count; ++i) {
        float* row = s.scores.data() + i * kBlock;
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
      // accumulator += P V_block      (query_count, head_dim)
      GemmBlock(Transpose::kNo, Transpose::kNo, query_count, head_dim,
                key_count, 1.0f, s.scores.data(), kBlock, values.data,
                values.stride, 1.0f, s.accumulator.data(), head_dim);
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
}

template <typename Element>
void BackwardHead(const AttentionShape& shape, const Element* q,
                  const Element* k, const Element* v, int64_t stride,
                  const Element* out, const float* dout, int64_t out_stride,
                  const float* logsumexp, float* dq, float* dk, float* dv,
                  int64_t gradient_stride, bool accumulate_key_value_grads,
                  AttentionScratch& s) {
  const int64_t head_dim = shape.head_dim;
  const int64_t seq_len = shape.seq_len;
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
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
    const BlockRows keys = RowsOf(k + key_begin * stride, stride, key_count,
                                  head_dim, s.widened_keys);
    const BlockRows values = RowsOf(v + key_begin * stride, stride, key_count,
                                    head_dim, s.widened_values);
    for (int64_t query_begin = key_begin / kBlock * kBlock;
         query_begin < seq_len; query_begin += kBlock) {
      const int64_t query_count = std::min(kBlock, seq_len - query_begin);
      const BlockRows queries =
          RowsOf(q + query_begin * stride, stride, query_count, head_dim,
                 s.widened_queries);
      // P = exp(scale * Q K^T - logsumexp), causal      (query_count,
      // key_count)
      GemmBlock(Transpose::kNo, Transpose::kYes, query_count, key_count,
                head_dim, scale, queries.data, queries.stride, keys.data,
                keys.stride, 0.0f, s.scores.data(), kBlock);
      for (int64_t i = 0; i < query_count; ++i) {
        float* row = s.scores.data() + i * kBlock;
        const int64_t visible =
            VisibleKeys(query_begin + i, key_begin, key_count);
        ExpAndSum(visible, row, 1.0f, logsumexp[query_begin + i], row);
        std::fill(row + visible, row + key_count, 0.0f);
      }
      // dV_block += P^T dO      (key_count, head_dim)
      GemmBlock(Transpose::kYes, Transpose::kNo, key_count, head_dim,
                query_count, 1.0f, s.scores.data(), kBlock,
                dout + query_begin * out_stride, out_stride, 1.0f,
                s.value_grads.data(), head_dim);
      // dP = dO V_block^T      (query_count, key_count)
      GemmBlock(Transpose::kNo, Transpose::kYes, query_count, key_count,
                head_dim, 1.0f, dout + query_begin * out_stride, out_stride,
                values.data, values.stride, 0.0f, s.score_grads.data(), kBlock);
      // dS = P * (dP - delta), in place of dP.
      for (int64_t i = 0; i < query_count; ++i) {
        const float* probabilities = s.scores.data() + i * kBlock;
        float* grads = s.score_grads.data() + i * kBlock;
        const float row_delta = delta[query_begin + i];
        for (int64_t j = 0; j < key_count; ++j) {
          grads[j] = probabilities[j] * (grads[j] - row_delta);
        }
      }
      // dQ_block += scale * dS K_block      (query_count, head_dim)
      GemmBlock(Transpose::kNo, Transpose::kNo, query_count, head_dim,
                key_count, scale, s.score_grads.data(), kBlock, keys.data,
                keys.stride, 1.0f, dq + query_begin * gradient_stride,
                gradient_stride);
      // dK_block += scale * dS^T Q_block      (key_count, head_dim)
      GemmBlock(Transpose::kYes, Transpose::kNo, key_count, head_dim,
                query_count, scale, s.score_grads.data(), kBlock, queries.data,
                queries.stride, 1.0f, s.key_grads.data(), head_dim);
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
}

template <typename Element>
void ForwardHeads(ThreadPool& pool, const AttentionShape& shape,
                  const Element* q, const Element* k, const Element* v,
                  int64_t qkv_stride, Element* out, int64_t out_stride,
                  float* logsumexp) {
  const int64_t heads_total = shape.batch * shape.heads;
  pool.ParallelFor(heads_total, 1, [&](int64_t begin, int64_t end) {
    AttentionScratch scratch(shape.head_dim, std::is_same_v<Element, uint16_t>);
    for (int64_t index = begin; index < end; ++index) {
      const int64_t sequence = index / shape.heads;
      const int64_t head = index % shape.heads;
      const int64_t row = sequence * shape.seq_len;
      const int64_t query_offset = row * qkv_stride + head * shape.head_dim;
      const int64_t key_offset =
          row * qkv_stride + head / shape.group_size() * shape.head_dim;
      ForwardHead(shape, q + query_offset, k + key_offset, v + key_offset,
                  qkv_stride, out + row * out_stride + head * shape.head_dim,
                  out_stride, logsumexp + index * shape.seq_len, scratch);
    }
  });
}

template <typename Element>
void BackwardHeads(ThreadPool& pool, const AttentionShape& shape,
                   const Element* q, const Element* k, const Element* v,
                   int64_t qkv_stride, const Element* out, const float* dout,
                   int64_t out_stride, const float* logsumexp, float* dq,
                   float* dk, float* dv) {
  const int64_t key_value_heads_total = shape.batch * shape.kv_heads;
  const int64_t gradient_stride =
      shape.gradient_stride > 0 ? shape.gradient_stride : qkv_stride;
  pool.ParallelFor(key_value_heads_total, 1, [&](int64_t begin, int64_t end) {
    AttentionScratch scratch(shape.head_dim, std::is_same_v<Element, uint16_t>);
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
        BackwardHead(shape, q + row * qkv_stride + column, k + key_offset,
                     v + key_offset, qkv_stride, out + out_offset,
                     dout + out_offset, out_stride,
                     logsumexp + (sequence * shape.logsumexp_heads() + head) *
                                     shape.seq_len,
                     dq + row * gradient_stride + column,
                     dk + key_gradient_offset, dv + key_gradient_offset,
                     gradient_stride,
                     /*accumulate_key_value_grads=*/member > 0, scratch);
      }
    }
  });
}

}  // namespace

void CpuOps::AttentionForward(const AttentionShape& shape, const float* q,
                              const float* k, const float* v,
                              int64_t qkv_stride, float* out,
                              int64_t out_stride, float* logsumexp) {
  ForwardHeads(pool_, shape, q, k, v, qkv_stride, out, out_stride, logsumexp);
}

void CpuOps::AttentionBackward(const AttentionShape& shape, const float* q,
                               const float* k, const float* v,
                               int64_t qkv_stride, const float* out,
                               const float* dout, int64_t out_stride,
                               const float* logsumexp, float* dq, float* dk,
                               float* dv) {
  BackwardHeads(pool_, shape, q, k, v, qkv_stride, out, dout, out_stride,
                logsumexp, dq, dk, dv);
}

void CpuOps::AttentionForwardBf16(const AttentionShape& shape,
                                  const uint16_t* q, const uint16_t* k,
                                  const uint16_t* v, int64_t qkv_stride,
                                  uint16_t* out, int64_t out_stride,
                                  float* logsumexp) {
  ForwardHeads(pool_, shape, q, k, v, qkv_stride, out, out_stride, logsumexp);
}

void CpuOps::AttentionBackwardBf16(const AttentionShape& shape,
                                   const uint16_t* q, const uint16_t* k,
                                   const uint16_t* v, int64_t qkv_stride,
                                   const uint16_t* out, const float* dout,
                                   int64_t out_stride, const float* logsumexp,
                                   float* dq, float* dk, float* dv) {
  BackwardHeads(pool_, shape, q, k, v, qkv_stride, out, dout, out_stride,
                logsumexp, dq, dk, dv);
}

}  // namespace plateau::kernels::cpu
