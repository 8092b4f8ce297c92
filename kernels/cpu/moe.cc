// CpuOps for the mixture-of-experts block: router, token permutation by
// expert, combine, and the SwiGLU activation of the experts.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "absl/types/span.h"
#include "kernels/cpu/bf16.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/vector_math.h"

namespace plateau::kernels::cpu {
namespace {

constexpr int64_t kTokenGrain = 16;
constexpr int64_t kElementGrain = 4096;

// GatherRowsBackward over rows of float32 or bf16, the same arithmetic
// either way.
template <typename Row>
void GatherRowsBackwardOf(ThreadPool& pool, int64_t tokens, int64_t top_k,
                          int64_t dim, const Row* drows,
                          const int32_t* assignment_row, float* dx) {
  pool.ParallelFor(tokens, kTokenGrain, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      float* target = dx + t * dim;
      for (int64_t j = 0; j < top_k; ++j) {
        const int64_t row = assignment_row[t * top_k + j];
        if (row < 0) continue;
        const Row* source = drows + row * dim;
        for (int64_t d = 0; d < dim; ++d) target[d] += ValueOf(source[d]);
      }
    }
  });
}

// CombineRows over rows of float32 or bf16, the same arithmetic either way.
template <typename Row>
void CombineRowsOf(ThreadPool& pool, int64_t tokens, int64_t top_k, int64_t dim,
                   const Row* rows, const int32_t* assignment_row,
                   const float* gates, const float* residual, float* out) {
  pool.ParallelFor(tokens, kTokenGrain, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      float* target = out + t * dim;
      if (target != residual + t * dim) {
        std::memcpy(target, residual + t * dim,
                    static_cast<size_t>(dim) * sizeof(float));
      }
      for (int64_t j = 0; j < top_k; ++j) {
        const int64_t row = assignment_row[t * top_k + j];
        if (row < 0) continue;
        const float gate = gates[t * top_k + j];
        const Row* source = rows + row * dim;
        for (int64_t d = 0; d < dim; ++d) {
          target[d] += gate * ValueOf(source[d]);
        }
      }
    }
  });
}

// A value stored as float32, or rounded to bf16.
inline void StoreAs(float value, float* out) { *out = value; }
inline void StoreAs(float value, uint16_t* out) { *out = FloatToBf16(value); }

template <typename Row, typename Gradient, typename Out>
void CombineRowsBackwardOf(ThreadPool& pool, int64_t tokens, int64_t top_k,
                           int64_t dim, const Row* rows,
                           const int32_t* assignment_row, const float* gates,
                           const Gradient* dout, Out* drows, float* dgates) {
  pool.ParallelFor(tokens, kTokenGrain, [&](int64_t begin, int64_t end) {
    std::vector<float> widened;
    for (int64_t t = begin; t < end; ++t) {
      const float* gradient = RowValues(dout + t * dim, dim, widened);
      for (int64_t j = 0; j < top_k; ++j) {
        const int64_t row = assignment_row[t * top_k + j];
        if (row < 0) continue;
        const Row* source = rows + row * dim;
        Out* target = drows + row * dim;
        const float gate = gates[t * top_k + j];
        float dot = 0.0f;
        for (int64_t d = 0; d < dim; ++d) {
          dot += gradient[d] * ValueOf(source[d]);
          StoreAs(gate * gradient[d], &target[d]);
        }
        dgates[t * top_k + j] = dot;
      }
    }
  });
}

// Either form keeps exp's argument non-positive: no overflow.
float Sigmoid(float x) {
  if (x >= 0.0f) return 1.0f / (1.0f + std::exp(-x));
  const float e = std::exp(x);
  return e / (1.0f + e);
}

}  // namespace

void CpuOps::SwiGluForward(int64_t count, const float* gate, const float* up,
                           float* out) {
  pool_.ParallelFor(count, kElementGrain, [&](int64_t begin, int64_t end) {
    SiluMultiply(end - begin, gate + begin, up + begin, out + begin);
  });
}

void CpuOps::SwiGluForwardToBf16(int64_t count, const float* gate,
                                 const float* up, uint16_t* out) {
  pool_.ParallelFor(count, kElementGrain, [&](int64_t begin, int64_t end) {
    float values[kElementGrain];
    for (int64_t first = begin; first < end; first += kElementGrain) {
      const int64_t size = std::min(kElementGrain, end - first);
      SiluMultiply(size, gate + first, up + first, values);
      ConvertToBf16(absl::MakeConstSpan(values, size),
                    absl::MakeSpan(out + first, size));
    }
  });
}

void CpuOps::SwiGluBackward(int64_t count, const float* gate, const float* up,
                            const float* dout, float* dgate, float* dup) {
  pool_.ParallelFor(count, kElementGrain, [&](int64_t begin, int64_t end) {
    SiluMultiplyBackward(end - begin, gate + begin, up + begin, dout + begin,
                         dgate + begin, dup + begin);
  });
}

void CpuOps::SwiGluForwardBf16(int64_t count, const uint16_t* gate,
                               const uint16_t* up, uint16_t* out) {
  pool_.ParallelFor(count, kElementGrain, [&](int64_t begin, int64_t end) {
    float gates[kElementGrain], ups[kElementGrain], values[kElementGrain];
    for (int64_t first = begin; first < end; first += kElementGrain) {
      const int64_t size = std::min(kElementGrain, end - first);
      WidenBf16(absl::MakeConstSpan(gate + first, size),
                absl::MakeSpan(gates, size));
      WidenBf16(absl::MakeConstSpan(up + first, size),
                absl::MakeSpan(ups, size));
      SiluMultiply(size, gates, ups, values);
      ConvertToBf16(absl::MakeConstSpan(values, size),
                    absl::MakeSpan(out + first, size));
    }
  });
}

void CpuOps::SwiGluBackwardBf16(int64_t count, const uint16_t* gate,
                                const uint16_t* up, const float* dout,
                                uint16_t* dgate, uint16_t* dup) {
  pool_.ParallelFor(count, kElementGrain, [&](int64_t begin, int64_t end) {
    float gates[kElementGrain], ups[kElementGrain];
    float gate_grads[kElementGrain], up_grads[kElementGrain];
    for (int64_t first = begin; first < end; first += kElementGrain) {
      const int64_t size = std::min(kElementGrain, end - first);
      WidenBf16(absl::MakeConstSpan(gate + first, size),
                absl::MakeSpan(gates, size));
      WidenBf16(absl::MakeConstSpan(up + first, size),
                absl::MakeSpan(ups, size));
      SiluMultiplyBackward(size, gates, ups, dout + first, gate_grads,
                           up_grads);
      ConvertToBf16(absl::MakeConstSpan(gate_grads, size),
                    absl::MakeSpan(dgate + first, size));
      ConvertToBf16(absl::MakeConstSpan(up_grads, size),
                    absl::MakeSpan(dup + first, size));
    }
  });
}

void CpuOps::RouterForward(const RouterShape& shape, const float* logits,
                           const float* expert_bias, float* probs,
                           int32_t* expert_index, float* gates,
                           float* logsumexp, float* score_sums) {
  const int64_t experts = shape.experts, top_k = shape.top_k;
  const bool sigmoid = shape.score == RouterScore::kSigmoid;
  pool_.ParallelFor(shape.tokens, kTokenGrain, [&](int64_t begin, int64_t end) {
    std::vector<bool> taken(experts);
    std::vector<float> score(experts);
    for (int64_t t = begin; t < end; ++t) {
      const float* row = logits + t * experts;
      float* p = probs + t * experts;
      if (sigmoid) {
        float sum = 0.0f;
        for (int64_t e = 0; e < experts; ++e) {
          score[e] = Sigmoid(row[e]);
          sum += score[e];
        }
        score_sums[t] = sum;
        for (int64_t e = 0; e < experts; ++e) p[e] = score[e] / sum;
      } else {
        const float max = *std::max_element(row, row + experts);
        float sum = 0.0f;
        for (int64_t e = 0; e < experts; ++e) {
          p[e] = std::exp(row[e] - max);
          sum += p[e];
        }
        for (int64_t e = 0; e < experts; ++e) p[e] /= sum;
        if (logsumexp != nullptr) logsumexp[t] = max + std::log(sum);
        std::copy_n(p, experts, score.begin());
      }
      if (expert_bias != nullptr) {
        for (int64_t e = 0; e < experts; ++e) score[e] += expert_bias[e];
      }
      // Top-k by repeated selection: experts is small, and ties must go to
      // the lower index on every backend.
      std::fill(taken.begin(), taken.end(), false);
      float selected_sum = 0.0f;
      for (int64_t j = 0; j < top_k; ++j) {
        int64_t best = -1;
        for (int64_t e = 0; e < experts; ++e) {
          if (!taken[e] && (best < 0 || score[e] > score[best])) best = e;
        }
        taken[best] = true;
        expert_index[t * top_k + j] = static_cast<int32_t>(best);
        selected_sum += p[best];
      }
      for (int64_t j = 0; j < top_k; ++j) {
        gates[t * top_k + j] = p[expert_index[t * top_k + j]] / selected_sum;
      }
    }
  });
}

// With S = sum_j p[e_j] and g_j = p[e_j] / S:
//   dp[e_j] += (dg_j - sum_i dg_i g_i) / S,   plus dprobs_per_expert[e];
//   softmax: dlogits[e] = p[e] * (dp[e] - sum_e' dp[e'] p[e']), plus
//   z_loss_scale * logsumexp * p[e] with a z-loss;
//   sigmoid (p = s / score_sum): dlogits[e] = p[e] * (1 - s[e]) * (dp[e] -
//   sum_e' dp[e'] p[e']), the normalisation's backward times s' = s (1 - s).
void CpuOps::RouterBackward(const RouterShape& shape, const float* probs,
                            const int32_t* expert_index, const float* gates,
                            const float* dgates,
                            absl::Span<const float> dprobs_per_expert,
                            const float* logsumexp, float z_loss_scale,
                            const float* score_sums, float* dlogits) {
  const int64_t experts = shape.experts, top_k = shape.top_k;
  const bool sigmoid = shape.score == RouterScore::kSigmoid;
  pool_.ParallelFor(shape.tokens, kTokenGrain, [&](int64_t begin, int64_t end) {
    std::vector<float> dp(experts);
    for (int64_t t = begin; t < end; ++t) {
      const float* p = probs + t * experts;
      const int32_t* selected = expert_index + t * top_k;
      const float* g = gates + t * top_k;
      const float* dg = dgates + t * top_k;
      for (int64_t e = 0; e < experts; ++e) {
        dp[e] = dprobs_per_expert.empty() ? 0.0f : dprobs_per_expert[e];
      }
      float selected_sum = 0.0f;
      float gate_dot = 0.0f;
      for (int64_t j = 0; j < top_k; ++j) {
        selected_sum += p[selected[j]];
        gate_dot += dg[j] * g[j];
      }
      for (int64_t j = 0; j < top_k; ++j) {
        dp[selected[j]] += (dg[j] - gate_dot) / selected_sum;
      }
      float prob_dot = 0.0f;
      for (int64_t e = 0; e < experts; ++e) prob_dot += dp[e] * p[e];
      float* d = dlogits + t * experts;
      if (sigmoid) {
        for (int64_t e = 0; e < experts; ++e) {
          const float s = p[e] * score_sums[t];
          d[e] = p[e] * (1.0f - s) * (dp[e] - prob_dot);
        }
        continue;
      }
      for (int64_t e = 0; e < experts; ++e) d[e] = p[e] * (dp[e] - prob_dot);
      if (logsumexp != nullptr) {
        const float z_gradient = z_loss_scale * logsumexp[t];
        for (int64_t e = 0; e < experts; ++e) d[e] += z_gradient * p[e];
      }
    }
  });
}

// A counting sort; linear and cheap next to the expert products, so serial.
void CpuOps::ComputeExpertLayout(int64_t tokens, int64_t experts, int64_t top_k,
                                 const int32_t* expert_index,
                                 int32_t* assignment_row, int32_t* row_token,
                                 absl::Span<int64_t> expert_offsets) {
  std::fill(expert_offsets.begin(), expert_offsets.end(), 0);
  const int64_t assignments = tokens * top_k;
  for (int64_t a = 0; a < assignments; ++a) {
    ++expert_offsets[expert_index[a] + 1];
  }
  for (int64_t e = 0; e < experts; ++e) {
    expert_offsets[e + 1] += expert_offsets[e];
  }
  std::vector<int64_t> cursor(expert_offsets.begin(),
                              expert_offsets.begin() + experts);
  for (int64_t a = 0; a < assignments; ++a) {
    const int64_t row = cursor[expert_index[a]]++;
    assignment_row[a] = static_cast<int32_t>(row);
    row_token[row] = static_cast<int32_t>(a / top_k);
  }
}

void CpuOps::GatherRows(int64_t rows, int64_t dim, const float* x,
                        const int32_t* row_token, float* out) {
  pool_.ParallelFor(rows, kTokenGrain, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      std::memcpy(out + r * dim, x + static_cast<int64_t>(row_token[r]) * dim,
                  static_cast<size_t>(dim) * sizeof(float));
    }
  });
}

void CpuOps::GatherRowsBf16(int64_t rows, int64_t dim, const uint16_t* x,
                            const int32_t* row_token, uint16_t* out) {
  pool_.ParallelFor(rows, kTokenGrain, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      std::memcpy(out + r * dim, x + static_cast<int64_t>(row_token[r]) * dim,
                  static_cast<size_t>(dim) * sizeof(uint16_t));
    }
  });
}

void CpuOps::GatherRowsBackward(int64_t tokens, int64_t top_k, int64_t dim,
                                const float* drows,
                                const int32_t* assignment_row, float* dx) {
  GatherRowsBackwardOf(pool_, tokens, top_k, dim, drows, assignment_row, dx);
}

void CpuOps::GatherRowsBackwardBf16(int64_t tokens, int64_t top_k, int64_t dim,
                                    const uint16_t* drows,
                                    const int32_t* assignment_row, float* dx) {
  GatherRowsBackwardOf(pool_, tokens, top_k, dim, drows, assignment_row, dx);
}

void CpuOps::CombineRows(int64_t tokens, int64_t top_k, int64_t dim,
                         const float* rows, const int32_t* assignment_row,
                         const float* gates, const float* residual,
                         float* out) {
  CombineRowsOf(pool_, tokens, top_k, dim, rows, assignment_row, gates,
                residual, out);
}

void CpuOps::CombineRowsBf16(int64_t tokens, int64_t top_k, int64_t dim,
                             const uint16_t* rows,
                             const int32_t* assignment_row, const float* gates,
                             const float* residual, float* out) {
  CombineRowsOf(pool_, tokens, top_k, dim, rows, assignment_row, gates,
                residual, out);
}

void CpuOps::CombineRowsBackward(int64_t tokens, int64_t top_k, int64_t dim,
                                 const float* rows,
                                 const int32_t* assignment_row,
                                 const float* gates, const float* dout,
                                 float* drows, float* dgates) {
  CombineRowsBackwardOf(pool_, tokens, top_k, dim, rows, assignment_row, gates,
                        dout, drows, dgates);
}

void CpuOps::CombineRowsBackwardBf16(int64_t tokens, int64_t top_k, int64_t dim,
                                     const uint16_t* rows,
                                     const int32_t* assignment_row,
                                     const float* gates, const uint16_t* dout,
                                     uint16_t* drows, float* dgates) {
  CombineRowsBackwardOf(pool_, tokens, top_k, dim, rows, assignment_row, gates,
                        dout, drows, dgates);
}

}  // namespace plateau::kernels::cpu
