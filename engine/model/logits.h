// The head's logits in either precision: `tokens` hidden states against
// `columns` rows of the lm_head (the plain head's (N, vocab), a Ring-DTP
// block's (tokens, vocab_block)), stored as RoundedActivationType. Under
// bf16 each float32 product is rounded once as the product writes it
// (GemmArgs::c_bf16), as the field's bf16 autocast rounds a projection's
// output: the cross-entropy reads the rounded values
// (in float32 math) and its backward replaces them by their gradient,
// rounded once, which the backward's products read as a bf16 operand (they
// would round a float32 one to the same values).
#ifndef PLATEAU_ENGINE_MODEL_LOGITS_H_
#define PLATEAU_ENGINE_MODEL_LOGITS_H_

#include <cstdint>

#include "engine/memory/tensor.h"
#include "engine/model/layer_context.h"
#include "engine/model/linear.h"
#include "engine/model/model_config.h"
#include "engine/model/output_head_footprint.h"

namespace plateau::engine {

// The first tokens * columns elements of `logits` (row t, column c at
// t * columns + c) = hidden . weights^T, rounded to bf16 when `logits` is.
void ProjectLogits(const LayerContext& context, int64_t tokens, int64_t columns,
                   LinearOperand hidden, LinearOperand weights, Tensor& logits);

// The backend's cross-entropy ops (kernels/ops.h) on logits of either
// type, laid out as ProjectLogits leaves them.
void LogitsCrossEntropyForward(kernels::Ops& ops, int64_t tokens, int64_t vocab,
                               const Tensor& logits, const int32_t* targets,
                               float* losses, float* logsumexp);
void LogitsFoldBlock(kernels::Ops& ops, int64_t tokens, int64_t block,
                     int64_t vocab_begin, const Tensor& logits,
                     const int32_t* targets, float* logsumexp,
                     float* target_logits);
void LogitsCrossEntropyBackward(kernels::Ops& ops, int64_t tokens,
                                int64_t block, int64_t vocab_begin,
                                const int32_t* targets, const float* logsumexp,
                                float scale, Tensor& logits);

}  // namespace plateau::engine

#endif  // PLATEAU_ENGINE_MODEL_LOGITS_H_
