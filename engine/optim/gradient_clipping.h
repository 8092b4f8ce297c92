// Global gradient-norm clipping, as torch.nn.utils.clip_grad_norm_. The norm
// is over the whole model's gradients: with ZeRO shards every rank sums the
// squares of the elements it owns and the sums are added over all ranks.
#ifndef PLATEAU_ENGINE_OPTIM_GRADIENT_CLIPPING_H_
#define PLATEAU_ENGINE_OPTIM_GRADIENT_CLIPPING_H_

namespace plateau::engine {

// What gradients whose L2 norm is `norm` are scaled by: max_norm / norm when
// norm exceeds max_norm (> 0; 0 disables clipping), else 1.
float GradientClipFactor(double norm, double max_norm);

}  // namespace plateau::engine

#endif  // PLATEAU_ENGINE_OPTIM_GRADIENT_CLIPPING_H_
