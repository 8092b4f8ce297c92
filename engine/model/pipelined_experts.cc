#include "engine/model/pipelined_experts.h"

#include <functional>
#include <future>
#include <utility>

#include "common/status_macros.h"
#include "engine/model/expert_spill.h"

namespace plateau::engine {
namespace {

// A chunk's plan and its rows where its experts are.
struct DispatchedChunk {
  DispatchPlan plan;
  Tensor received;  // (received rows, D)  dispatch
};

// A chunk's copies gathered from the normed input, in the experts' input
// type.
using GatherChunk =
    std::function<absl::StatusOr<Tensor>(const DispatchPlan& plan)>;

// Hands out the chunks in order, each already dispatched. With expert
// parallelism the next chunk's exchange starts on a helper thread as soon as
// one is handed out; the caller must call WaitForPrefetch() before it uses
// the expert group itself, so that only one thread talks to it at a time.
class ChunkDispatcher {
 public:
  ChunkDispatcher(const LayerContext& context, const DispatchChunks& chunks,
                  GatherChunk gather)
      : context_(context),
        chunks_(chunks),
        gather_(std::move(gather)),
        overlap_(context.expert_ranks() > 1) {}

  // Waits for the helper before the members it uses go away.
  ~ChunkDispatcher() {
    if (prefetch_.valid()) prefetch_.wait();
  }

  absl::StatusOr<DispatchedChunk> Next() {
    absl::StatusOr<DispatchedChunk> chunk =
        prefetch_.valid() ? prefetch_.get() : Dispatch(next_);
    ++next_;
    // After a failure no more exchanges start: the caller returns the error.
    if (chunk.ok() && overlap_ && next_ < chunks_.count()) {
      prefetch_ = std::async(std::launch::async,
                             [this, c = next_] { return Dispatch(c); });
    }
    return chunk;
  }

  void WaitForPrefetch() {
    if (prefetch_.valid()) prefetch_.wait();
  }

 private:
  absl::StatusOr<DispatchedChunk> Dispatch(int64_t chunk) const {
    DispatchedChunk dispatched;
    ASSIGN_OR_RETURN(dispatched.plan, chunks_.Chunk(context_, chunk));
    ASSIGN_OR_RETURN(Tensor rows, gather_(dispatched.plan));
    ASSIGN_OR_RETURN(dispatched.received,
                     SendToExperts(context_, dispatched.plan, std::move(rows)));
    return dispatched;
  }

  const LayerContext& context_;
  const DispatchChunks& chunks_;
  const GatherChunk gather_;
  const bool overlap_;
  int64_t next_ = 0;
  std::future<absl::StatusOr<DispatchedChunk>> prefetch_;
};

}  // namespace

absl::Status PipelinedExpertsForward(const LayerContext& context,
                                     const ExpertParameters<const float>& w,
                                     const DispatchChunks& chunks,
                                     const Tensor& normed, const float* gates,
                                     const float* residual, float* out) {
  ASSIGN_OR_RETURN(BorrowedExperts borrowed,
                   BorrowExperts(context, chunks.spills(), w));
  const ExpertBank<const float> bank{w, borrowed.weights()};
  ChunkDispatcher dispatcher(context, chunks, [&](const DispatchPlan& plan) {
    return GatherTokens(context, plan, normed);
  });
  for (int64_t c = 0; c < chunks.count(); ++c) {
    ASSIGN_OR_RETURN(DispatchedChunk chunk, dispatcher.Next());
    Tensor output;
    {
      ExpertActivations transient;
      ASSIGN_OR_RETURN(output,
                       ExpertsForward(context, bank, chunk.plan.segments,
                                      chunk.received, &transient));
    }
    chunk.received.Reset();
    dispatcher.WaitForPrefetch();
    ASSIGN_OR_RETURN(Tensor returned,
                     ReturnFromExperts(context, chunk.plan, std::move(output)));
    // The first chunk starts from the residual, the others add to out.
    CombineTokens(context, chunk.plan, returned, gates, c == 0 ? residual : out,
                  out);
  }
  return absl::OkStatus();
}

absl::Status PipelinedExpertsBackward(const LayerContext& context,
                                      const ExpertParameters<const float>& w,
                                      const ExpertParameters<float>& grads,
                                      const DispatchChunks& chunks,
                                      const NormInput& normed,
                                      const float* gates, const Tensor& dout,
                                      float* d_normed, float* d_gates) {
  ASSIGN_OR_RETURN(BorrowedExperts borrowed,
                   BorrowExperts(context, chunks.spills(), w));
  ASSIGN_OR_RETURN(BorrowedExperts borrowed_grads,
                   ZeroBorrowedGradients(context, chunks.spills()));
  const ExpertBank<const float> bank{w, borrowed.weights()};
  const ExpertBank<float> grad_bank{grads, borrowed_grads.gradients()};
  ChunkDispatcher dispatcher(context, chunks, [&](const DispatchPlan& plan) {
    return GatherNormedTokens(context, plan, normed);
  });
  for (int64_t c = 0; c < chunks.count(); ++c) {
    ASSIGN_OR_RETURN(DispatchedChunk chunk, dispatcher.Next());
    // Recompute the chunk's experts, keeping their activations this time.
    ExpertActivations saved;
    ASSIGN_OR_RETURN(Tensor output,
                     ExpertsForward(context, bank, chunk.plan.segments,
                                    chunk.received, &saved));
    dispatcher.WaitForPrefetch();
    ASSIGN_OR_RETURN(Tensor returned,
                     ReturnFromExperts(context, chunk.plan, std::move(output)));
    // Every copy is in exactly one chunk: each chunk writes its own d_gates.
    ASSIGN_OR_RETURN(Tensor d_returned,
                     CombineTokensBackward(context, chunk.plan, returned, gates,
                                           dout, d_gates));
    returned.Reset();
    ASSIGN_OR_RETURN(Tensor d_output,
                     SendToExperts(context, chunk.plan, std::move(d_returned)));
    ASSIGN_OR_RETURN(
        Tensor d_received,
        ExpertsBackward(context, bank, grad_bank, chunk.plan.segments,
                        std::move(chunk.received), std::move(saved),
                        std::move(d_output)));
    ASSIGN_OR_RETURN(Tensor d_rows, ReturnFromExperts(context, chunk.plan,
                                                      std::move(d_received)));
    GatherTokensBackward(context, chunk.plan, d_rows, d_normed);
  }
  return ReturnBorrowedGradients(context, chunks.spills(),
                                 std::move(borrowed_grads), grads);
}

}  // namespace plateau::engine
