// Causal attention, FlashAttention style in that nothing of seq_len x seq_len
// is ever stored: a warp per query walks its keys with an online softmax
// (running max and sum), each lane holding kLaneElements of the head's
// dimensions. Backward recomputes the probabilities from the saved
// log-sum-exp, once per query (dq: a warp per query walks its keys) and once
// per key (dk, dv: a warp per key and key-value head walks the queries of
// every query head of its group), so every gradient has one writer and no
// atomics. q, k, v and out are float32 or bf16 (Input);
// either way the math is float32 on their exact values, in the same order.
#include <math.h>

#include <type_traits>

#include "kernels/cuda/device_code.cuh"
#include "kernels/cuda/kernels.h"

namespace plateau::kernels::cuda {
namespace {

// Rows of one (sequence, head): token t's row of q, k, v or out.
struct HeadView {
  int64_t row0 = 0;    // the sequence's first row
  int64_t column = 0;  // the head's first column
  int64_t stride = 0;
  template <typename T>
  __device__ T* Row(T* x, int64_t t) const {
    return x + (row0 + t) * stride + column;
  }
};

template <int kLaneElements, typename T>
__device__ __forceinline__ void LoadRow(const T* row, int64_t head_dim,
                                        int lane, float* values) {
  for (int i = 0; i < kLaneElements; ++i) {
    const int64_t d = lane + 32 * i;
    values[i] = d < head_dim ? ValueOf(row[d]) : 0.0f;
  }
}

template <int kLaneElements, typename T>
__device__ __forceinline__ float Dot(const float* values, const T* row,
                                     int64_t head_dim, int lane) {
  float partial = 0.0f;
  for (int i = 0; i < kLaneElements; ++i) {
    const int64_t d = lane + 32 * i;
    if (d < head_dim) partial += values[i] * ValueOf(row[d]);
  }
  return WarpSum(partial);
}

// The warp's (sequence, head, token); false when the token is past the end.
// Every lane of a warp gets the same answer, so warps leave whole. `head` is
// a query head, except in the key-gradient kernel, whose grid runs over the
// key and value heads.
struct WarpTask {
  int64_t sequence, head, token;
  int lane;
  // The (sequence, query head)'s rows of a tensor with `stride`.
  __device__ HeadView View(const AttentionDims& dims, int64_t stride) const {
    return HeadViewOf(dims, head, stride);
  }
  // The rows of k or v that query head `head` attends with.
  __device__ HeadView KeyValueView(const AttentionDims& dims,
                                   int64_t stride) const {
    return HeadViewOf(dims, head / (dims.heads / dims.kv_heads), stride);
  }
  __device__ HeadView HeadViewOf(const AttentionDims& dims, int64_t of_head,
                                 int64_t stride) const {
    return {sequence * dims.seq_len, of_head * dims.head_dim, stride};
  }
  // Where the (sequence, query head)'s entries of a [batch, heads,
  // seq_len] array start: the forward's logsumexp (whose heads are the
  // layer's) and the backward's delta; and of the logsumexp a backward over
  // a piece of the heads reads, laid out by the layer's heads.
  __device__ int64_t RowTerms(const AttentionDims& dims,
                              int64_t query_head) const {
    return (sequence * dims.heads + query_head) * dims.seq_len;
  }
  __device__ int64_t LogsumexpRow(const AttentionDims& dims,
                                  int64_t query_head) const {
    return (sequence * dims.logsumexp_heads + query_head) * dims.seq_len;
  }
};

__device__ __forceinline__ float SoftmaxScale(const AttentionDims& dims) {
  return 1.0f / sqrtf(static_cast<float>(dims.head_dim));
}
__device__ __forceinline__ bool TaskOf(const AttentionDims& dims,
                                       WarpTask* task) {
  task->lane = threadIdx.x % 32;
  task->token = static_cast<int64_t>(blockIdx.x) * kAttentionWarpsPerBlock +
                threadIdx.x / 32;
  task->head = blockIdx.y;
  task->sequence = blockIdx.z;
  return task->token < dims.seq_len;
}

template <int kLaneElements, typename Input>
__global__ void AttentionForwardKernel(AttentionDims dims, const Input* q,
                                       const Input* k, const Input* v,
                                       int64_t qkv_stride, Input* out,
                                       int64_t out_stride, float* logsumexp) {
  WarpTask task;
  if (!TaskOf(dims, &task)) return;
  const HeadView queries = task.View(dims, qkv_stride);
  const HeadView keys_values = task.KeyValueView(dims, qkv_stride);
  const HeadView outputs = task.View(dims, out_stride);
  const float scale = SoftmaxScale(dims);
  float query[kLaneElements];
  float accumulator[kLaneElements];
  LoadRow<kLaneElements>(queries.Row(q, task.token), dims.head_dim, task.lane,
                         query);
  for (int i = 0; i < kLaneElements; ++i) accumulator[i] = 0.0f;
  float running_max = -INFINITY;
  float running_sum = 0.0f;
  for (int64_t key = 0; key <= task.token; ++key) {
    const float score =
        scale * Dot<kLaneElements>(query, keys_values.Row(k, key),
                                   dims.head_dim, task.lane);
    const float new_max = fmaxf(running_max, score);
    const float rescale = expf(running_max - new_max);
    const float probability = expf(score - new_max);
    running_sum = running_sum * rescale + probability;
    running_max = new_max;
    const Input* value = keys_values.Row(v, key);
    for (int i = 0; i < kLaneElements; ++i) {
      const int64_t d = task.lane + 32 * i;
      if (d < dims.head_dim) {
        accumulator[i] =
            accumulator[i] * rescale + probability * ValueOf(value[d]);
      }
    }
  }
  Input* out_row = outputs.Row(out, task.token);
  for (int i = 0; i < kLaneElements; ++i) {
    const int64_t d = task.lane + 32 * i;
    if (d < dims.head_dim) StoreAs(accumulator[i] / running_sum, out_row + d);
  }
  if (task.lane == 0) {
    logsumexp[task.RowTerms(dims, task.head) + task.token] =
        running_max + logf(running_sum);
  }
}

// delta[t] = dot(dout[t], out[t]): the softmax backward's row term.
template <int kLaneElements, typename Input>
__global__ void AttentionDeltaKernel(AttentionDims dims, const Input* out,
                                     const float* dout, int64_t out_stride,
                                     float* delta) {
  WarpTask task;
  if (!TaskOf(dims, &task)) return;
  const HeadView outputs = task.View(dims, out_stride);
  float gradient[kLaneElements];
  LoadRow<kLaneElements>(outputs.Row(dout, task.token), dims.head_dim,
                         task.lane, gradient);
  const float dot = Dot<kLaneElements>(gradient, outputs.Row(out, task.token),
                                       dims.head_dim, task.lane);
  if (task.lane == 0) {
    delta[task.RowTerms(dims, task.head) + task.token] = dot;
  }
}

// For query t and key s <= t: p = exp(scale q.k - lse_t), dp = dout_t . v_s,
// ds = p (dp - delta_t); dq_t = scale sum_s ds k_s.
template <int kLaneElements, typename Input>
__global__ void AttentionQueryGradientKernel(
    AttentionDims dims, const Input* q, const Input* k, const Input* v,
    int64_t qkv_stride, const float* dout, int64_t out_stride,
    const float* logsumexp, const float* delta, float* dq) {
  WarpTask task;
  if (!TaskOf(dims, &task)) return;
  const HeadView queries = task.View(dims, qkv_stride);
  const HeadView keys_values = task.KeyValueView(dims, qkv_stride);
  const HeadView outputs = task.View(dims, out_stride);
  const float scale = SoftmaxScale(dims);
  const float query_logsumexp =
      logsumexp[task.LogsumexpRow(dims, task.head) + task.token];
  const float query_delta = delta[task.RowTerms(dims, task.head) + task.token];
  float query[kLaneElements], gradient[kLaneElements],
      accumulator[kLaneElements];
  LoadRow<kLaneElements>(queries.Row(q, task.token), dims.head_dim, task.lane,
                         query);
  LoadRow<kLaneElements>(outputs.Row(dout, task.token), dims.head_dim,
                         task.lane, gradient);
  for (int i = 0; i < kLaneElements; ++i) accumulator[i] = 0.0f;
  for (int64_t key = 0; key <= task.token; ++key) {
    const Input* key_row = keys_values.Row(k, key);
    const float probability = expf(
        scale * Dot<kLaneElements>(query, key_row, dims.head_dim, task.lane) -
        query_logsumexp);
    const float score_gradient =
        probability * (Dot<kLaneElements>(gradient, keys_values.Row(v, key),
                                          dims.head_dim, task.lane) -
                       query_delta);
    for (int i = 0; i < kLaneElements; ++i) {
      const int64_t d = task.lane + 32 * i;
      if (d < dims.head_dim) {
        accumulator[i] += score_gradient * ValueOf(key_row[d]);
      }
    }
  }
  float* dq_row = task.HeadViewOf(dims, task.head, dims.gradient_stride)
                      .Row(dq, task.token);
  for (int i = 0; i < kLaneElements; ++i) {
    const int64_t d = task.lane + 32 * i;
    if (d < dims.head_dim) dq_row[d] = scale * accumulator[i];
  }
}

// For key s and query t >= s of each query head h of the key and value head's
// group, in order: dv_s = sum_h sum_t p dout_t; dk_s = scale sum_h sum_t ds
// q_t. The grid's heads are the key and value heads.
template <int kLaneElements, typename Input>
__global__ void AttentionKeyGradientKernel(
    AttentionDims dims, const Input* q, const Input* k, const Input* v,
    int64_t qkv_stride, const float* dout, int64_t out_stride,
    const float* logsumexp, const float* delta, float* dk, float* dv) {
  WarpTask task;
  if (!TaskOf(dims, &task)) return;
  const HeadView keys_values = task.View(dims, qkv_stride);
  const float scale = SoftmaxScale(dims);
  const int64_t group_size = dims.heads / dims.kv_heads;
  const int64_t key = task.token;
  float key_values[kLaneElements], value_values[kLaneElements];
  float key_gradient[kLaneElements], value_gradient[kLaneElements];
  LoadRow<kLaneElements>(keys_values.Row(k, key), dims.head_dim, task.lane,
                         key_values);
  LoadRow<kLaneElements>(keys_values.Row(v, key), dims.head_dim, task.lane,
                         value_values);
  for (int i = 0; i < kLaneElements; ++i) {
    key_gradient[i] = 0.0f;
    value_gradient[i] = 0.0f;
  }
  for (int64_t member = 0; member < group_size; ++member) {
    const int64_t query_head = task.head * group_size + member;
    const HeadView queries = task.HeadViewOf(dims, query_head, qkv_stride);
    const HeadView outputs = task.HeadViewOf(dims, query_head, out_stride);
    const int64_t row_terms = task.RowTerms(dims, query_head);
    const int64_t logsumexp_row = task.LogsumexpRow(dims, query_head);
    for (int64_t query = key; query < dims.seq_len; ++query) {
      const Input* query_row = queries.Row(q, query);
      const float* gradient_row = outputs.Row(dout, query);
      const float probability =
          expf(scale * Dot<kLaneElements>(key_values, query_row, dims.head_dim,
                                          task.lane) -
               logsumexp[logsumexp_row + query]);
      const float score_gradient =
          probability * (Dot<kLaneElements>(value_values, gradient_row,
                                            dims.head_dim, task.lane) -
                         delta[row_terms + query]);
      for (int i = 0; i < kLaneElements; ++i) {
        const int64_t d = task.lane + 32 * i;
        if (d < dims.head_dim) {
          value_gradient[i] += probability * gradient_row[d];
          key_gradient[i] += score_gradient * ValueOf(query_row[d]);
        }
      }
    }
  }
  const HeadView gradients =
      task.HeadViewOf(dims, task.head, dims.gradient_stride);
  float* dk_row = gradients.Row(dk, key);
  float* dv_row = gradients.Row(dv, key);
  for (int i = 0; i < kLaneElements; ++i) {
    const int64_t d = task.lane + 32 * i;
    if (d < dims.head_dim) {
      dk_row[d] = scale * key_gradient[i];
      dv_row[d] = value_gradient[i];
    }
  }
}

// A warp per token of each (`heads`, sequence).
dim3 AttentionGrid(const AttentionDims& dims, int64_t heads) {
  return dim3(
      static_cast<unsigned int>((dims.seq_len + kAttentionWarpsPerBlock - 1) /
                                kAttentionWarpsPerBlock),
      static_cast<unsigned int>(heads), static_cast<unsigned int>(dims.batch));
}

constexpr int kAttentionThreads = 32 * kAttentionWarpsPerBlock;

// The kernels are named by variables: PLATEAU_LAUNCH is a macro, and a
// template's argument list would split its arguments.
template <int kLaneElements, typename Input>
cudaError_t Forward(const AttentionDims& dims, const Input* q, const Input* k,
                    const Input* v, int64_t qkv_stride, Input* out,
                    int64_t out_stride, float* logsumexp, cudaStream_t stream) {
  const auto forward = AttentionForwardKernel<kLaneElements, Input>;
  PLATEAU_LAUNCH(forward, AttentionGrid(dims, dims.heads), kAttentionThreads,
                 stream)
  (dims, q, k, v, qkv_stride, out, out_stride, logsumexp);
  return cudaGetLastError();
}

template <int kLaneElements, typename Input>
cudaError_t Backward(const AttentionDims& dims, const Input* q, const Input* k,
                     const Input* v, int64_t qkv_stride, const Input* out,
                     const float* dout, int64_t out_stride,
                     const float* logsumexp, float* dq, float* dk, float* dv,
                     float* delta, cudaStream_t stream) {
  const dim3 grid = AttentionGrid(dims, dims.heads);
  const auto row_terms = AttentionDeltaKernel<kLaneElements, Input>;
  const auto query_gradients =
      AttentionQueryGradientKernel<kLaneElements, Input>;
  const auto key_gradients = AttentionKeyGradientKernel<kLaneElements, Input>;
  PLATEAU_LAUNCH(row_terms, grid, kAttentionThreads, stream)
  (dims, out, dout, out_stride, delta);
  PLATEAU_LAUNCH(query_gradients, grid, kAttentionThreads, stream)
  (dims, q, k, v, qkv_stride, dout, out_stride, logsumexp, delta, dq);
  PLATEAU_LAUNCH(key_gradients, AttentionGrid(dims, dims.kv_heads),
                 kAttentionThreads, stream)
  (dims, q, k, v, qkv_stride, dout, out_stride, logsumexp, delta, dk, dv);
  return cudaGetLastError();
}

// launch(std::integral_constant<int, E>()) for the head's lane elements E.
template <typename Launch>
cudaError_t WithLaneElements(int64_t head_dim, Launch launch) {
  switch (AttentionLaneElements(head_dim)) {
    case 1:
      return launch(std::integral_constant<int, 1>());
    case 2:
      return launch(std::integral_constant<int, 2>());
    case 4:
      return launch(std::integral_constant<int, 4>());
    case 8:
      return launch(std::integral_constant<int, 8>());
    case 16:
      return launch(std::integral_constant<int, 16>());
  }
  return cudaErrorInvalidValue;
}

template <typename Input>
cudaError_t LaunchForward(const AttentionDims& dims, const Input* q,
                          const Input* k, const Input* v, int64_t qkv_stride,
                          Input* out, int64_t out_stride, float* logsumexp,
                          cudaStream_t stream) {
  ForgetStaleError();
  if (dims.batch * dims.heads * dims.seq_len == 0) return cudaSuccess;
  return WithLaneElements(dims.head_dim, [&](auto lanes) {
    return Forward<decltype(lanes)::value>(dims, q, k, v, qkv_stride, out,
                                           out_stride, logsumexp, stream);
  });
}

template <typename Input>
cudaError_t LaunchBackward(const AttentionDims& dims, const Input* q,
                           const Input* k, const Input* v, int64_t qkv_stride,
                           const Input* out, const float* dout,
                           int64_t out_stride, const float* logsumexp,
                           float* dq, float* dk, float* dv, float* delta,
                           cudaStream_t stream) {
  ForgetStaleError();
  if (dims.batch * dims.heads * dims.seq_len == 0) return cudaSuccess;
  return WithLaneElements(dims.head_dim, [&](auto lanes) {
    return Backward<decltype(lanes)::value>(dims, q, k, v, qkv_stride, out,
                                            dout, out_stride, logsumexp, dq, dk,
                                            dv, delta, stream);
  });
}

}  // namespace

cudaError_t LaunchAttentionForward(const AttentionDims& dims, const float* q,
                                   const float* k, const float* v,
                                   int64_t qkv_stride, float* out,
                                   int64_t out_stride, float* logsumexp,
                                   cudaStream_t stream) {
  return LaunchForward(dims, q, k, v, qkv_stride, out, out_stride, logsumexp,
                       stream);
}

cudaError_t LaunchAttentionForward(const AttentionDims& dims, const uint16_t* q,
                                   const uint16_t* k, const uint16_t* v,
                                   int64_t qkv_stride, uint16_t* out,
                                   int64_t out_stride, float* logsumexp,
                                   cudaStream_t stream) {
  return LaunchForward(dims, q, k, v, qkv_stride, out, out_stride, logsumexp,
                       stream);
}

cudaError_t LaunchAttentionBackward(const AttentionDims& dims, const float* q,
                                    const float* k, const float* v,
                                    int64_t qkv_stride, const float* out,
                                    const float* dout, int64_t out_stride,
                                    const float* logsumexp, float* dq,
                                    float* dk, float* dv, float* delta,
                                    cudaStream_t stream) {
  return LaunchBackward(dims, q, k, v, qkv_stride, out, dout, out_stride,
                        logsumexp, dq, dk, dv, delta, stream);
}

cudaError_t LaunchAttentionBackward(const AttentionDims& dims,
                                    const uint16_t* q, const uint16_t* k,
                                    const uint16_t* v, int64_t qkv_stride,
                                    const uint16_t* out, const float* dout,
                                    int64_t out_stride, const float* logsumexp,
                                    float* dq, float* dk, float* dv,
                                    float* delta, cudaStream_t stream) {
  return LaunchBackward(dims, q, k, v, qkv_stride, out, dout, out_stride,
                        logsumexp, dq, dk, dv, delta, stream);
}

}  // namespace plateau::kernels::cuda
