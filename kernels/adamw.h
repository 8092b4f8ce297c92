// AdamW as PyTorch defines it (decoupled weight decay, bias correction), shared
// by the CPU and CUDA kernels so both compute the same update:
//   p <- p * (1 - lr * wd)
//   m <- beta1 * m + (1 - beta1) * g
//   v <- beta2 * v + (1 - beta2) * g^2
//   p <- p - lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
#ifndef PLATEAU_KERNELS_ADAMW_H_
#define PLATEAU_KERNELS_ADAMW_H_

#include <cmath>
#include <cstdint>

namespace plateau::kernels {

struct AdamWHyperparameters {
  float learning_rate = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float epsilon = 1e-8f;
  float weight_decay = 0.0f;
  // 1 for the first update.
  int64_t step = 1;
};

// The per-step scalars of the update, computed once per step (in double, so
// that 1 - beta^t keeps its precision for large t) rather than per element.
struct AdamWCoefficients {
  float decay;  // 1 - lr * wd
  float beta1;
  float one_minus_beta1;
  float beta2;
  float one_minus_beta2;
  float step_size;                 // lr / (1 - beta1^t)
  float inverse_sqrt_correction2;  // 1 / sqrt(1 - beta2^t)
  float epsilon;
};

inline AdamWCoefficients ComputeAdamWCoefficients(
    const AdamWHyperparameters& hyper) {
  const double t = static_cast<double>(hyper.step);
  const double correction1 = 1.0 - std::pow(double{hyper.beta1}, t);
  const double correction2 = 1.0 - std::pow(double{hyper.beta2}, t);
  AdamWCoefficients c;
  c.decay = static_cast<float>(1.0 - double{hyper.learning_rate} *
                                         double{hyper.weight_decay});
  c.beta1 = hyper.beta1;
  c.one_minus_beta1 = static_cast<float>(1.0 - double{hyper.beta1});
  c.beta2 = hyper.beta2;
  c.one_minus_beta2 = static_cast<float>(1.0 - double{hyper.beta2});
  c.step_size = static_cast<float>(double{hyper.learning_rate} / correction1);
  c.inverse_sqrt_correction2 = static_cast<float>(1.0 / std::sqrt(correction2));
  c.epsilon = hyper.epsilon;
  return c;
}

}  // namespace plateau::kernels

#endif  // PLATEAU_KERNELS_ADAMW_H_
