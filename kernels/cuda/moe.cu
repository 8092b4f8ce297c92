// The mixture-of-experts kernels: the router (a thread per token, experts
// being few), the expert layout from the stably sorted assignments (sort.cu),
// and the row permutations, each output element or row with one writer.
// Formulas as in kernels/cpu/moe.cc.
#include <math.h>

#include "kernels/cuda/device_code.cuh"
#include "kernels/cuda/kernels.h"

namespace plateau::kernels::cuda {
namespace {

constexpr int kCombineThreads = 128;

// As the CPU's: either form keeps expf's argument non-positive.
__device__ float SigmoidOf(float x) {
  if (x >= 0.0f) return 1.0f / (1.0f + expf(-x));
  const float e = expf(x);
  return e / (1.0f + e);
}

// Softmax probs, or sigmoid scores normalised into probs, as on the CPU.
// Top-k by repeated selection in the order (score descending, index
// ascending; the score is the prob or the sigmoid, plus any expert bias),
// each pick the best expert after the previous one in that order: the
// CPU's choice, ties to the lower index. A NaN score ranks lowest, so every
// pick finds an expert. The gates are the chosen probs renormalised.
__global__ void RouterForwardKernel(int64_t tokens, int64_t experts,
                                    int64_t top_k, bool sigmoid,
                                    const float* logits,
                                    const float* expert_bias, float* probs,
                                    int32_t* expert_index, float* gates,
                                    float* logsumexp, float* score_sums) {
  for (int64_t t = GlobalThread(); t < tokens; t += GridThreads()) {
    const float* row = logits + t * experts;
    float* p = probs + t * experts;
    float score_sum = 0.0f;
    if (sigmoid) {
      for (int64_t e = 0; e < experts; ++e) score_sum += SigmoidOf(row[e]);
      score_sums[t] = score_sum;
      for (int64_t e = 0; e < experts; ++e)
        p[e] = SigmoidOf(row[e]) / score_sum;
    } else {
      float max = row[0];
      for (int64_t e = 1; e < experts; ++e) max = row[e] > max ? row[e] : max;
      float sum = 0.0f;
      for (int64_t e = 0; e < experts; ++e) {
        p[e] = expf(row[e] - max);
        sum += p[e];
      }
      for (int64_t e = 0; e < experts; ++e) p[e] /= sum;
      if (logsumexp != nullptr) logsumexp[t] = max + logf(sum);
    }
    auto rank = [=](int64_t e) {
      float score = sigmoid ? SigmoidOf(row[e]) : p[e];
      if (expert_bias != nullptr) score += expert_bias[e];
      return score == score ? score : -INFINITY;
    };
    float previous = 0.0f;
    int64_t previous_index = -1;
    float selected_sum = 0.0f;
    for (int64_t j = 0; j < top_k; ++j) {
      int64_t best = -1;
      for (int64_t e = 0; e < experts; ++e) {
        const float value = rank(e);
        const bool after_previous = previous_index < 0 || value < previous ||
                                    (value == previous && e > previous_index);
        if (after_previous && (best < 0 || value > rank(best))) best = e;
      }
      expert_index[t * top_k + j] = static_cast<int32_t>(best);
      selected_sum += p[best];
      previous = rank(best);
      previous_index = best;
    }
    for (int64_t j = 0; j < top_k; ++j) {
      gates[t * top_k + j] = p[expert_index[t * top_k + j]] / selected_sum;
    }
  }
}

// With S = sum_j p[e_j] and g_j = p[e_j] / S:
//   dp[e] = dprobs_per_expert[e] + (dg_j - sum_i dg_i g_i) / S  if e = e_j;
//   softmax: dlogits[e] = p[e] * (dp[e] - sum_e' dp[e'] p[e']), plus
//   z_loss_scale * logsumexp * p[e] with a z-loss; sigmoid: the same times
//   (1 - s[e]), s[e] = p[e] * score_sums[t].
__global__ void RouterBackwardKernel(
    int64_t tokens, int64_t experts, int64_t top_k, bool sigmoid,
    const float* probs, const int32_t* expert_index, const float* gates,
    const float* dgates, const float* dprobs_per_expert, const float* logsumexp,
    float z_loss_scale, const float* score_sums, float* dlogits) {
  for (int64_t t = GlobalThread(); t < tokens; t += GridThreads()) {
    const float* p = probs + t * experts;
    const int32_t* selected = expert_index + t * top_k;
    const float* g = gates + t * top_k;
    const float* dg = dgates + t * top_k;
    float selected_sum = 0.0f;
    float gate_dot = 0.0f;
    for (int64_t j = 0; j < top_k; ++j) {
      selected_sum += p[selected[j]];
      gate_dot += dg[j] * g[j];
    }
    auto dp = [&](int64_t e) {
      float value = dprobs_per_expert == nullptr ? 0.0f : dprobs_per_expert[e];
      for (int64_t j = 0; j < top_k; ++j) {
        if (selected[j] == e) value += (dg[j] - gate_dot) / selected_sum;
      }
      return value;
    };
    float prob_dot = 0.0f;
    for (int64_t e = 0; e < experts; ++e) prob_dot += dp(e) * p[e];
    float* d = dlogits + t * experts;
    if (sigmoid) {
      for (int64_t e = 0; e < experts; ++e) {
        const float s = p[e] * score_sums[t];
        d[e] = p[e] * (1.0f - s) * (dp(e) - prob_dot);
      }
      continue;
    }
    for (int64_t e = 0; e < experts; ++e) d[e] = p[e] * (dp(e) - prob_dot);
    if (logsumexp != nullptr) {
      const float z_gradient = z_loss_scale * logsumexp[t];
      for (int64_t e = 0; e < experts; ++e) d[e] += z_gradient * p[e];
    }
  }
}

__global__ void ExpertRowsKernel(int64_t assignments, int64_t top_k,
                                 const int32_t* sorted_assignments,
                                 int32_t* assignment_row, int32_t* row_token) {
  for (int64_t r = GlobalThread(); r < assignments; r += GridThreads()) {
    const int32_t assignment = sorted_assignments[r];
    assignment_row[assignment] = static_cast<int32_t>(r);
    row_token[r] = static_cast<int32_t>(assignment / top_k);
  }
}

// offsets[e]: the first sorted row whose expert is >= e.
__global__ void ExpertOffsetsKernel(int64_t assignments, int64_t experts,
                                    const int32_t* sorted_experts,
                                    int64_t* offsets) {
  for (int64_t e = GlobalThread(); e <= experts; e += GridThreads()) {
    int64_t low = 0;
    int64_t high = assignments;
    while (low < high) {
      const int64_t middle = low + (high - low) / 2;
      if (sorted_experts[middle] < e) {
        low = middle + 1;
      } else {
        high = middle;
      }
    }
    offsets[e] = low;
  }
}

template <typename Element>
__global__ void GatherRowsKernel(int64_t rows, int64_t dim, const Element* x,
                                 const int32_t* row_token, Element* out) {
  const int64_t count = rows * dim;
  for (int64_t i = GlobalThread(); i < count; i += GridThreads()) {
    out[i] = x[static_cast<int64_t>(row_token[i / dim]) * dim + i % dim];
  }
}

// RmsNormForwardKernel's arithmetic (normalization.cu), row by row.
template <typename Out>
__global__ void GatherRmsNormedRowsKernel(int64_t rows, int64_t dim,
                                          const float* x,
                                          const float* inverse_rms,
                                          const float* weight,
                                          const int32_t* row_token, Out* out) {
  const int64_t count = rows * dim;
  for (int64_t i = GlobalThread(); i < count; i += GridThreads()) {
    const int64_t token = row_token[i / dim];
    const int64_t j = i % dim;
    StoreAs(x[token * dim + j] * inverse_rms[token] * weight[j], &out[i]);
  }
}

template <typename Row>
__global__ void GatherRowsBackwardKernel(int64_t tokens, int64_t top_k,
                                         int64_t dim, const Row* drows,
                                         const int32_t* assignment_row,
                                         float* dx) {
  const int64_t count = tokens * dim;
  for (int64_t i = GlobalThread(); i < count; i += GridThreads()) {
    const int64_t t = i / dim;
    const int64_t d = i % dim;
    float sum = dx[i];
    for (int64_t j = 0; j < top_k; ++j) {
      const int64_t row = assignment_row[t * top_k + j];
      if (row >= 0) sum += ValueOf(drows[row * dim + d]);
    }
    dx[i] = sum;
  }
}

// Reads residual[i] before writing out[i], so out may alias residual. Rows
// of float32 or bf16.
template <typename Row>
__global__ void CombineRowsKernel(int64_t tokens, int64_t top_k, int64_t dim,
                                  const Row* rows,
                                  const int32_t* assignment_row,
                                  const float* gates, const float* residual,
                                  float* out) {
  const int64_t count = tokens * dim;
  for (int64_t i = GlobalThread(); i < count; i += GridThreads()) {
    const int64_t t = i / dim;
    const int64_t d = i % dim;
    float sum = residual[i];
    for (int64_t j = 0; j < top_k; ++j) {
      const int64_t row = assignment_row[t * top_k + j];
      if (row >= 0) sum += gates[t * top_k + j] * ValueOf(rows[row * dim + d]);
    }
    out[i] = sum;
  }
}

// A block per token: for each of its assignments, drows = gate * dout and
// dgate = dot(dout, rows) over the block.
template <typename Row, typename Gradient, typename Out>
__global__ void CombineRowsBackwardKernel(
    int64_t top_k, int64_t dim, const Row* rows, const int32_t* assignment_row,
    const float* gates, const Gradient* dout, Out* drows, float* dgates) {
  const int64_t t = blockIdx.x;
  const Gradient* gradient = dout + t * dim;
  for (int64_t j = 0; j < top_k; ++j) {
    const int64_t row = assignment_row[t * top_k + j];
    if (row < 0) continue;  // the same for the whole block
    const float gate = gates[t * top_k + j];
    const Row* source = rows + row * dim;
    Out* target = drows + row * dim;
    float dot = 0.0f;
    for (int64_t d = threadIdx.x; d < dim; d += blockDim.x) {
      const float value = ValueOf(gradient[d]);
      dot += value * ValueOf(source[d]);
      StoreAs(gate * value, &target[d]);
    }
    dot = BlockSum(dot);
    if (threadIdx.x == 0) dgates[t * top_k + j] = dot;
  }
}

unsigned int Blocks(int64_t count) {
  return static_cast<unsigned int>(GridStrideBlocks(count));
}

template <typename Element>
cudaError_t LaunchGatherRowsAs(int64_t rows, int64_t dim, const Element* x,
                               const int32_t* row_token, Element* out,
                               cudaStream_t stream) {
  ForgetStaleError();
  if (rows * dim == 0) return cudaSuccess;
  PLATEAU_LAUNCH(GatherRowsKernel<Element>, Blocks(rows * dim), kBlockThreads,
                 stream)
  (rows, dim, x, row_token, out);
  return cudaGetLastError();
}

template <typename Out>
cudaError_t LaunchGatherRmsNormedRowsAs(int64_t rows, int64_t dim,
                                        const float* x,
                                        const float* inverse_rms,
                                        const float* weight,
                                        const int32_t* row_token, Out* out,
                                        cudaStream_t stream) {
  ForgetStaleError();
  if (rows * dim == 0) return cudaSuccess;
  PLATEAU_LAUNCH(GatherRmsNormedRowsKernel<Out>, Blocks(rows * dim),
                 kBlockThreads, stream)
  (rows, dim, x, inverse_rms, weight, row_token, out);
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchRouterForward(int64_t tokens, int64_t experts, int64_t top_k,
                                bool sigmoid, const float* logits,
                                const float* expert_bias, float* probs,
                                int32_t* expert_index, float* gates,
                                float* logsumexp, float* score_sums,
                                cudaStream_t stream) {
  ForgetStaleError();
  if (tokens == 0) return cudaSuccess;
  PLATEAU_LAUNCH(RouterForwardKernel, Blocks(tokens), kBlockThreads, stream)
  (tokens, experts, top_k, sigmoid, logits, expert_bias, probs, expert_index,
   gates, logsumexp, score_sums);
  return cudaGetLastError();
}

cudaError_t LaunchRouterBackward(int64_t tokens, int64_t experts, int64_t top_k,
                                 bool sigmoid, const float* probs,
                                 const int32_t* expert_index,
                                 const float* gates, const float* dgates,
                                 const float* dprobs_per_expert,
                                 const float* logsumexp, float z_loss_scale,
                                 const float* score_sums, float* dlogits,
                                 cudaStream_t stream) {
  ForgetStaleError();
  if (tokens == 0) return cudaSuccess;
  PLATEAU_LAUNCH(RouterBackwardKernel, Blocks(tokens), kBlockThreads, stream)
  (tokens, experts, top_k, sigmoid, probs, expert_index, gates, dgates,
   dprobs_per_expert, logsumexp, z_loss_scale, score_sums, dlogits);
  return cudaGetLastError();
}

cudaError_t LaunchExpertLayout(int64_t assignments, int64_t experts,
                               int64_t top_k, const SortedItems& sorted,
                               int32_t* assignment_row, int32_t* row_token,
                               int64_t* offsets, cudaStream_t stream) {
  ForgetStaleError();
  if (assignments > 0) {
    PLATEAU_LAUNCH(ExpertRowsKernel, Blocks(assignments), kBlockThreads, stream)
    (assignments, top_k, sorted.positions, assignment_row, row_token);
  }
  PLATEAU_LAUNCH(ExpertOffsetsKernel, Blocks(experts + 1), kBlockThreads,
                 stream)
  (assignments, experts, sorted.keys, offsets);
  return cudaGetLastError();
}

cudaError_t LaunchGatherRows(int64_t rows, int64_t dim, const float* x,
                             const int32_t* row_token, float* out,
                             cudaStream_t stream) {
  return LaunchGatherRowsAs(rows, dim, x, row_token, out, stream);
}

cudaError_t LaunchGatherRows(int64_t rows, int64_t dim, const uint16_t* x,
                             const int32_t* row_token, uint16_t* out,
                             cudaStream_t stream) {
  return LaunchGatherRowsAs(rows, dim, x, row_token, out, stream);
}

cudaError_t LaunchGatherRmsNormedRows(int64_t rows, int64_t dim, const float* x,
                                      const float* inverse_rms,
                                      const float* weight,
                                      const int32_t* row_token, float* out,
                                      cudaStream_t stream) {
  return LaunchGatherRmsNormedRowsAs(rows, dim, x, inverse_rms, weight,
                                     row_token, out, stream);
}

cudaError_t LaunchGatherRmsNormedRowsToBf16(
    int64_t rows, int64_t dim, const float* x, const float* inverse_rms,
    const float* weight, const int32_t* row_token, uint16_t* out,
    cudaStream_t stream) {
  return LaunchGatherRmsNormedRowsAs(rows, dim, x, inverse_rms, weight,
                                     row_token, out, stream);
}

template <typename Row>
cudaError_t LaunchGatherRowsBackwardOf(int64_t tokens, int64_t top_k,
                                       int64_t dim, const Row* drows,
                                       const int32_t* assignment_row, float* dx,
                                       cudaStream_t stream) {
  ForgetStaleError();
  if (tokens * dim == 0) return cudaSuccess;
  PLATEAU_LAUNCH(GatherRowsBackwardKernel<Row>, Blocks(tokens * dim),
                 kBlockThreads, stream)
  (tokens, top_k, dim, drows, assignment_row, dx);
  return cudaGetLastError();
}

cudaError_t LaunchGatherRowsBackward(int64_t tokens, int64_t top_k, int64_t dim,
                                     const float* drows,
                                     const int32_t* assignment_row, float* dx,
                                     cudaStream_t stream) {
  return LaunchGatherRowsBackwardOf(tokens, top_k, dim, drows, assignment_row,
                                    dx, stream);
}

cudaError_t LaunchGatherRowsBackward(int64_t tokens, int64_t top_k, int64_t dim,
                                     const uint16_t* drows,
                                     const int32_t* assignment_row, float* dx,
                                     cudaStream_t stream) {
  return LaunchGatherRowsBackwardOf(tokens, top_k, dim, drows, assignment_row,
                                    dx, stream);
}

template <typename Row>
cudaError_t LaunchCombineRowsOf(int64_t tokens, int64_t top_k, int64_t dim,
                                const Row* rows, const int32_t* assignment_row,
                                const float* gates, const float* residual,
                                float* out, cudaStream_t stream) {
  ForgetStaleError();
  if (tokens * dim == 0) return cudaSuccess;
  PLATEAU_LAUNCH(CombineRowsKernel<Row>, Blocks(tokens * dim), kBlockThreads,
                 stream)
  (tokens, top_k, dim, rows, assignment_row, gates, residual, out);
  return cudaGetLastError();
}

template <typename Row, typename Gradient, typename Out>
cudaError_t LaunchCombineRowsBackwardOf(int64_t tokens, int64_t top_k,
                                        int64_t dim, const Row* rows,
                                        const int32_t* assignment_row,
                                        const float* gates,
                                        const Gradient* dout, Out* drows,
                                        float* dgates, cudaStream_t stream) {
  ForgetStaleError();
  if (tokens == 0) return cudaSuccess;
  const auto kernel = CombineRowsBackwardKernel<Row, Gradient, Out>;
  PLATEAU_LAUNCH(kernel, static_cast<unsigned int>(tokens), kCombineThreads,
                 stream)
  (top_k, dim, rows, assignment_row, gates, dout, drows, dgates);
  return cudaGetLastError();
}

cudaError_t LaunchCombineRows(int64_t tokens, int64_t top_k, int64_t dim,
                              const float* rows, const int32_t* assignment_row,
                              const float* gates, const float* residual,
                              float* out, cudaStream_t stream) {
  return LaunchCombineRowsOf(tokens, top_k, dim, rows, assignment_row, gates,
                             residual, out, stream);
}

cudaError_t LaunchCombineRows(int64_t tokens, int64_t top_k, int64_t dim,
                              const uint16_t* rows,
                              const int32_t* assignment_row, const float* gates,
                              const float* residual, float* out,
                              cudaStream_t stream) {
  return LaunchCombineRowsOf(tokens, top_k, dim, rows, assignment_row, gates,
                             residual, out, stream);
}

cudaError_t LaunchCombineRowsBackward(int64_t tokens, int64_t top_k,
                                      int64_t dim, const float* rows,
                                      const int32_t* assignment_row,
                                      const float* gates, const float* dout,
                                      float* drows, float* dgates,
                                      cudaStream_t stream) {
  return LaunchCombineRowsBackwardOf(tokens, top_k, dim, rows, assignment_row,
                                     gates, dout, drows, dgates, stream);
}

cudaError_t LaunchCombineRowsBackward(int64_t tokens, int64_t top_k,
                                      int64_t dim, const uint16_t* rows,
                                      const int32_t* assignment_row,
                                      const float* gates, const uint16_t* dout,
                                      uint16_t* drows, float* dgates,
                                      cudaStream_t stream) {
  return LaunchCombineRowsBackwardOf(tokens, top_k, dim, rows, assignment_row,
                                     gates, dout, drows, dgates, stream);
}

}  // namespace plateau::kernels::cuda
