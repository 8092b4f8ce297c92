#include <algorithm>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/cuda_ops_internal.h"
#include "kernels/cuda/kernels.h"

namespace plateau::kernels::cuda {

void CudaOps::SwiGluForward(int64_t count, const float* gate, const float* up,
                            float* out) {
  if (failed()) return;
  Check(LaunchSwiGluForward(count, gate, up, out, compute_stream_),
        "SwiGluForward");
}

void CudaOps::SwiGluForwardToBf16(int64_t count, const float* gate,
                                  const float* up, uint16_t* out) {
  if (failed()) return;
  Check(LaunchSwiGluForwardToBf16(count, gate, up, out, compute_stream_),
        "SwiGluForwardToBf16");
}

void CudaOps::SwiGluBackward(int64_t count, const float* gate, const float* up,
                             const float* dout, float* dgate, float* dup) {
  if (failed()) return;
  Check(
      LaunchSwiGluBackward(count, gate, up, dout, dgate, dup, compute_stream_),
      "SwiGluBackward");
}

void CudaOps::SwiGluForwardBf16(int64_t count, const uint16_t* gate,
                                const uint16_t* up, uint16_t* out) {
  if (failed()) return;
  Check(LaunchSwiGluForwardBf16(count, gate, up, out, compute_stream_),
        "SwiGluForwardBf16");
}

void CudaOps::SwiGluBackwardBf16(int64_t count, const uint16_t* gate,
                                 const uint16_t* up, const float* dout,
                                 uint16_t* dgate, uint16_t* dup) {
  if (failed()) return;
  Check(
      LaunchSwiGluBackward(count, gate, up, dout, dgate, dup, compute_stream_),
      "SwiGluBackwardBf16");
}

void CudaOps::RouterForward(const RouterShape& shape, const float* logits,
                            const float* expert_bias, float* probs,
                            int32_t* expert_index, float* gates,
                            float* logsumexp, float* score_sums) {
  if (failed()) return;
  Check(LaunchRouterForward(shape.tokens, shape.experts, shape.top_k,
                            shape.score == RouterScore::kSigmoid, logits,
                            expert_bias, probs, expert_index, gates, logsumexp,
                            score_sums, compute_stream_),
        "RouterForward");
}

void CudaOps::RouterBackward(const RouterShape& shape, const float* probs,
                             const int32_t* expert_index, const float* gates,
                             const float* dgates,
                             absl::Span<const float> dprobs_per_expert,
                             const float* logsumexp, float z_loss_scale,
                             const float* score_sums, float* dlogits) {
  if (failed() || shape.tokens == 0) return;
  float* per_expert = nullptr;
  if (!dprobs_per_expert.empty()) {
    const std::vector<char*> places = UploadAll(
        {{dprobs_per_expert.data(),
          static_cast<int64_t>(dprobs_per_expert.size() * sizeof(float))}},
        0, "RouterBackward");
    if (places.empty()) return;
    per_expert = At<float>(places[0], 0);
  }
  Check(
      LaunchRouterBackward(shape.tokens, shape.experts, shape.top_k,
                           shape.score == RouterScore::kSigmoid, probs,
                           expert_index, gates, dgates, per_expert, logsumexp,
                           z_loss_scale, score_sums, dlogits, compute_stream_),
      "RouterBackward");
}

void CudaOps::ComputeExpertLayout(int64_t tokens, int64_t experts,
                                  int64_t top_k, const int32_t* expert_index,
                                  int32_t* assignment_row, int32_t* row_token,
                                  absl::Span<int64_t> expert_offsets) {
  std::fill(expert_offsets.begin(), expert_offsets.end(), 0);
  if (failed()) return;
  const int64_t assignments = tokens * top_k;
  ScratchLayout layout;
  const int64_t sort = layout.Add<int32_t>(SortScratchInts(assignments));
  const int64_t offsets = layout.Add<int64_t>(experts + 1);
  char* scratch = Scratch(layout.bytes(), "ComputeExpertLayout");
  if (scratch == nullptr) return;
  SortedItems sorted;
  if (assignments > 0 &&
      !Check(LaunchStableSortByKey(assignments, expert_index, KeyBits(experts),
                                   At<int32_t>(scratch, sort), &sorted,
                                   compute_stream_),
             "ComputeExpertLayout")) {
    return;
  }
  if (!Check(LaunchExpertLayout(assignments, experts, top_k, sorted,
                                assignment_row, row_token,
                                At<int64_t>(scratch, offsets), compute_stream_),
             "ComputeExpertLayout") ||
      !Download(scratch + offsets, (experts + 1) * int64_t{sizeof(int64_t)},
                expert_offsets.data(), "ComputeExpertLayout")) {
    std::fill(expert_offsets.begin(), expert_offsets.end(), 0);
  }
}

void CudaOps::GatherRows(int64_t rows, int64_t dim, const float* x,
                         const int32_t* row_token, float* out) {
  if (failed()) return;
  Check(LaunchGatherRows(rows, dim, x, row_token, out, compute_stream_),
        "GatherRows");
}

void CudaOps::GatherRowsBf16(int64_t rows, int64_t dim, const uint16_t* x,
                             const int32_t* row_token, uint16_t* out) {
  if (failed()) return;
  Check(LaunchGatherRows(rows, dim, x, row_token, out, compute_stream_),
        "GatherRowsBf16");
}

void CudaOps::GatherRmsNormedRows(int64_t rows, int64_t dim, const float* x,
                                  const float* inverse_rms, const float* weight,
                                  const int32_t* row_token, float* out) {
  if (failed()) return;
  Check(LaunchGatherRmsNormedRows(rows, dim, x, inverse_rms, weight, row_token,
                                  out, compute_stream_),
        "GatherRmsNormedRows");
}

void CudaOps::GatherRmsNormedRowsToBf16(
    int64_t rows, int64_t dim, const float* x, const float* inverse_rms,
    const float* weight, const int32_t* row_token, uint16_t* out) {
  if (failed()) return;
  Check(LaunchGatherRmsNormedRowsToBf16(rows, dim, x, inverse_rms, weight,
                                        row_token, out, compute_stream_),
        "GatherRmsNormedRowsToBf16");
}

void CudaOps::GatherRowsBackward(int64_t tokens, int64_t top_k, int64_t dim,
                                 const float* drows,
                                 const int32_t* assignment_row, float* dx) {
  if (failed()) return;
  Check(LaunchGatherRowsBackward(tokens, top_k, dim, drows, assignment_row, dx,
                                 compute_stream_),
        "GatherRowsBackward");
}

void CudaOps::GatherRowsBackwardBf16(int64_t tokens, int64_t top_k, int64_t dim,
                                     const uint16_t* drows,
                                     const int32_t* assignment_row, float* dx) {
  if (failed()) return;
  Check(LaunchGatherRowsBackward(tokens, top_k, dim, drows, assignment_row, dx,
                                 compute_stream_),
        "GatherRowsBackwardBf16");
}

void CudaOps::CombineRows(int64_t tokens, int64_t top_k, int64_t dim,
                          const float* rows, const int32_t* assignment_row,
                          const float* gates, const float* residual,
                          float* out) {
  if (failed()) return;
  Check(LaunchCombineRows(tokens, top_k, dim, rows, assignment_row, gates,
                          residual, out, compute_stream_),
        "CombineRows");
}

void CudaOps::CombineRowsBackward(int64_t tokens, int64_t top_k, int64_t dim,
                                  const float* rows,
                                  const int32_t* assignment_row,
                                  const float* gates, const float* dout,
                                  float* drows, float* dgates) {
  if (failed()) return;
  Check(LaunchCombineRowsBackward(tokens, top_k, dim, rows, assignment_row,
                                  gates, dout, drows, dgates, compute_stream_),
        "CombineRowsBackward");
}

void CudaOps::CombineRowsBf16(int64_t tokens, int64_t top_k, int64_t dim,
                              const uint16_t* rows,
                              const int32_t* assignment_row, const float* gates,
                              const float* residual, float* out) {
  if (failed()) return;
  Check(LaunchCombineRows(tokens, top_k, dim, rows, assignment_row, gates,
                          residual, out, compute_stream_),
        "CombineRowsBf16");
}

void CudaOps::CombineRowsBackwardBf16(int64_t tokens, int64_t top_k,
                                      int64_t dim, const uint16_t* rows,
                                      const int32_t* assignment_row,
                                      const float* gates, const uint16_t* dout,
                                      uint16_t* drows, float* dgates) {
  if (failed()) return;
  Check(LaunchCombineRowsBackward(tokens, top_k, dim, rows, assignment_row,
                                  gates, dout, drows, dgates, compute_stream_),
        "CombineRowsBackwardBf16");
}

}  // namespace plateau::kernels::cuda
