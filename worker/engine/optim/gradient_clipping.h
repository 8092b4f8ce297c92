// Global gradient-norm clipping, as torch.nn.utils.clip_grad_norm_.
#ifndef PLATEAU_WORKER_ENGINE_OPTIM_GRADIENT_CLIPPING_H_
#define PLATEAU_WORKER_ENGINE_OPTIM_GRADIENT_CLIPPING_H_

#include "kernels/ops.h"
#include "worker/engine/memory/tensor.h"

namespace plateau::engine {

// Scales `gradients` by max_norm / norm when their L2 norm exceeds max_norm
// (> 0; 0 disables clipping). Returns the norm before clipping.
double ClipGradientNorm(kernels::Ops& ops, Tensor& gradients, double max_norm);

}  // namespace plateau::engine

#endif  // PLATEAU_WORKER_ENGINE_OPTIM_GRADIENT_CLIPPING_H_
