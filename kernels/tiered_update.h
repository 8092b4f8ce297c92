// The updates of Plateau's tiered optimizers (SkewAdam, Adafactor, Lion; see
// engine/optim/tiered_optimizer.h), shared by the CPU and CUDA kernels
// so both compute the same thing. For one tensor (a whole matrix or vector;
// one expert's matrix of an expert bank) with gradient g at step t:
//   m <- beta1 * m + (1 - beta1) * g                      (with momentum)
//   second moment, exact:    v <- beta2 * v + (1 - beta2) * g^2
//                  factored: R <- beta2 * R + (1 - beta2) * rowsum(g^2 + tiny)
//                            C <- beta2 * C + (1 - beta2) * colsum(g^2 + tiny)
//                            v_ij = R_i * C_j / sum(R)      (Adafactor)
//   u = (m / (1 - beta1^t)  or  g) / (sqrt(v / (1 - beta2^t)) + eps)
//   u <- u / max(1, rms(u) / clip)                     (rms over the tensor)
//   p <- p * (1 - lr * wd) - lr * u
// The rms needs every element's u before any parameter moves, so a step is
// two passes over a tensor: Measure (moments, sum of u^2), then Apply (u
// again, from the moments).
//
// Lion (Chen et al. 2023) has no second moment and no rms clip:
//   p <- p * (1 - lr * wd) - lr * sign(beta1 * m + (1 - beta1) * g)
//   m <- beta2 * m + (1 - beta2) * g
#ifndef PLATEAU_KERNELS_TIERED_UPDATE_H_
#define PLATEAU_KERNELS_TIERED_UPDATE_H_

#include <cmath>
#include <cstdint>
#include <cstring>

namespace plateau::kernels {

// Added to every g^2 of a factored statistic (Adafactor's epsilon1), so that
// sum(R) of an all-zero gradient is not zero.
inline constexpr float kFactoredSquareFloor = 1e-30f;

// The per-step scalars, computed once per step in double.
struct TieredCoefficients {
  float decay = 1.0f;  // 1 - lr * wd
  float learning_rate = 0.0f;
  float beta1 = 0.0f;
  float one_minus_beta1 = 1.0f;
  float beta2 = 0.0f;
  float one_minus_beta2 = 1.0f;
  float momentum_correction = 1.0f;  // 1 / (1 - beta1^t)
  float epsilon = 1e-8f;
};

inline TieredCoefficients ComputeTieredCoefficients(float learning_rate,
                                                    float beta1, float beta2,
                                                    float epsilon,
                                                    float weight_decay,
                                                    int64_t step) {
  TieredCoefficients c;
  c.decay = static_cast<float>(1.0 - double{learning_rate} * weight_decay);
  c.learning_rate = learning_rate;
  c.beta1 = beta1;
  c.one_minus_beta1 = static_cast<float>(1.0 - double{beta1});
  c.beta2 = beta2;
  c.one_minus_beta2 = static_cast<float>(1.0 - double{beta2});
  c.momentum_correction = static_cast<float>(
      1.0 / (1.0 - std::pow(double{beta1}, static_cast<double>(step))));
  c.epsilon = epsilon;
  return c;
}

// 1 / (1 - beta2^t): the bias correction of a second moment.
inline float SecondMomentCorrection(float beta2, int64_t step) {
  return static_cast<float>(
      1.0 / (1.0 - std::pow(double{beta2}, static_cast<double>(step))));
}

// A contiguous run of one tensor's elements, its state, and what each pass
// needs of it.
struct TieredSlice {
  int64_t count = 0;
  float* params = nullptr;
  const float* grads = nullptr;
  // Weight decay applies (else the decay factor is 1), and the rms clip's
  // factor for the apply pass.
  bool decay = true;
  float update_scale = 1.0f;
  // At most one momentum; none: u is computed from the gradient.
  float* momentum = nullptr;
  uint16_t* momentum_bfloat16 = nullptr;
  // 1 / (1 - beta2^t), the second moment's bias correction.
  float second_moment_scale = 1.0f;
  // The second moment: per element (exact), or else factored: the square
  // roots of the matrix's row and column factors, sqrt(R_i / (sum(R) (1 -
  // beta2^t))) and sqrt(C_j), so that sqrt(v_ij) is their product; the slice
  // starts at element first_element of the row-major [rows, columns] matrix.
  float* second_moment = nullptr;
  const float* row_roots = nullptr;
  const float* column_roots = nullptr;
  int64_t first_element = 0;
  int64_t rows = 1;
  int64_t columns = 1;
  // Factored: where the first pass adds the slice's row and column sums of
  // g^2 + kFactoredSquareFloor.
  float* row_sums = nullptr;
  float* column_sums = nullptr;
  // Factored, for the update of a whole matrix in one go (TieredUpdate): its
  // statistics R and C. The update leaves this step's R and C in row_sums
  // and column_sums, and the roots it used here.
  float* row_statistics = nullptr;
  float* column_statistics = nullptr;
};

// bfloat16 as the top half of a float32, rounded to nearest even (NaN stays
// NaN).
inline uint16_t FloatToBfloat16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  if ((bits & 0x7fffffffu) > 0x7f800000u) return (bits >> 16) | 0x40;
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

inline float Bfloat16ToFloat(uint16_t value) {
  const uint32_t bits = uint32_t{value} << 16;
  float result;
  std::memcpy(&result, &bits, sizeof(result));
  return result;
}

}  // namespace plateau::kernels

#endif  // PLATEAU_KERNELS_TIERED_UPDATE_H_
