// PipelinedLLEP's expert stage: dispatch -> experts -> combine, one chunk of
// DispatchChunks at a time, so that the dispatch buffers and the experts'
// activations hold one chunk (two while the next chunk's exchange is in
// flight) instead of every routed copy. With expert parallelism chunk c + 1's
// all-to-all runs on a helper thread while chunk c's experts compute.
//
// With expert parallelism the spilled experts (ExpertSpill) are borrowed
// first, and in backward their gradients go back to their owners at the end.
//
// Nothing of a chunk is kept for backward: backward dispatches and recomputes
// each chunk's experts, then differentiates it, so the bound holds over
// forward and backward. Backward gathers each chunk's rows normalized from
// the block's input (GatherNormedTokens), bitwise the forward's rows, so
// that the block keeps no normed tensor for it. Loss and gradients equal the
// unchunked stage's up to the order of floating-point sums (a token's copies
// may land in different chunks; an expert's weight gradient adds up chunk by
// chunk, and a borrowed expert's partly on its borrower).
#ifndef PLATEAU_ENGINE_MODEL_PIPELINED_EXPERTS_H_
#define PLATEAU_ENGINE_MODEL_PIPELINED_EXPERTS_H_

#include "absl/status/status.h"
#include "engine/model/dispatch_chunks.h"
#include "engine/model/experts.h"
#include "engine/model/layer_context.h"
#include "engine/model/rms_norm.h"

namespace plateau::engine {

// out = residual + sum over each token's copies of gate * expert(normed).
// out may alias residual.
absl::Status PipelinedExpertsForward(const LayerContext& context,
                                     const ExpertParameters<const float>& w,
                                     const DispatchChunks& chunks,
                                     const Tensor& normed, const float* gates,
                                     const float* residual, float* out);

// d_normed += the stage's gradient with respect to the normed input, given
// by its parts; writes d_gates (N, K); the experts' gradients accumulate
// into grads.
absl::Status PipelinedExpertsBackward(const LayerContext& context,
                                      const ExpertParameters<const float>& w,
                                      const ExpertParameters<float>& grads,
                                      const DispatchChunks& chunks,
                                      const NormInput& normed,
                                      const float* gates, const Tensor& dout,
                                      float* d_normed, float* d_gates);

}  // namespace plateau::engine

#endif  // PLATEAU_ENGINE_MODEL_PIPELINED_EXPERTS_H_
