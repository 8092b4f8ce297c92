#include "worker/engine/model/dispatch_chunks.h"

#include <algorithm>

#include "common/status_macros.h"

namespace plateau::engine {
namespace {

// How many of the indices [0, n) are chunk c's out of `chunks`.
int64_t InChunk(int64_t n, int64_t chunk, int64_t chunks) {
  return n > chunk ? (n - chunk - 1) / chunks + 1 : 0;
}

}  // namespace

absl::StatusOr<DispatchChunks> DispatchChunks::Split(
    const LayerContext& context, const DispatchPlan& plan, int64_t cap) {
  if (cap < 1) {
    return absl::InvalidArgumentError(
        "the dispatch chunk cap must be at least one token copy");
  }
  const ModelConfig& config = *context.config;
  DispatchChunks chunks;
  chunks.ranks_ = context.expert_ranks();
  chunks.self_ = chunks.ranks_ > 1 ? context.groups.experts->rank() : 0;
  chunks.local_experts_ = context.shard.expert_count;
  chunks.first_expert_ = context.shard.first_expert;
  chunks.rank_expert_counts_ = plan.rank_expert_counts;
  chunks.expert_offsets_ = plan.expert_offsets;
  // K: the largest (source, destination) list over the cap.
  int64_t largest_pair = 0;
  for (int source = 0; source < chunks.ranks_; ++source) {
    for (int destination = 0; destination < chunks.ranks_; ++destination) {
      int64_t pair = 0;
      for (int64_t e = 0; e < chunks.local_experts_; ++e) {
        pair +=
            plan.rank_expert_counts[source * config.experts +
                                    destination * chunks.local_experts_ + e];
      }
      largest_pair = std::max(largest_pair, pair);
    }
  }
  chunks.chunks_ = std::max<int64_t>(1, (largest_pair + cap - 1) / cap);
  const int64_t copies = context.tokens() * config.top_k;
  chunks.assignment_row_.resize(copies);
  chunks.row_token_.resize(copies);
  context.ops->CopyToHost(copies * 4, plan.assignment_row.i32(),
                          chunks.assignment_row_.data());
  context.ops->CopyToHost(copies * 4, plan.row_token.i32(),
                          chunks.row_token_.data());
  return chunks;
}

absl::StatusOr<DispatchPlan> DispatchChunks::Chunk(const LayerContext& context,
                                                   int64_t chunk) const {
  const ModelConfig& config = *context.config;
  const int64_t experts = config.experts;
  const int64_t local = local_experts_;
  const int64_t k = chunks_;
  DispatchPlan plan;
  plan.rank_expert_counts = rank_expert_counts_;

  // Sending: this rank's list for destination r is its local rows of r's
  // experts; the chunk takes every k-th from offset `chunk`. The chunk's
  // rows follow the destination, then the position in the list.
  plan.expert_offsets.assign(experts + 1, 0);
  plan.send_rows.assign(ranks_, 0);
  std::vector<int64_t> pair_begin(ranks_ + 1), chunk_begin(ranks_ + 1, 0);
  for (int r = 0; r <= ranks_; ++r) {
    pair_begin[r] = expert_offsets_[std::min<int64_t>(r * local, experts)];
  }
  for (int r = 0; r < ranks_; ++r) {
    for (int64_t e = r * local; e < (r + 1) * local; ++e) {
      const int64_t begin = expert_offsets_[e] - pair_begin[r];
      const int64_t end = expert_offsets_[e + 1] - pair_begin[r];
      plan.expert_offsets[e + 1] = plan.expert_offsets[e] +
                                   InChunk(end, chunk, k) -
                                   InChunk(begin, chunk, k);
    }
    plan.send_rows[r] = InChunk(pair_begin[r + 1] - pair_begin[r], chunk, k);
    chunk_begin[r + 1] = chunk_begin[r] + plan.send_rows[r];
  }
  const int64_t rows = chunk_begin[ranks_];
  const int64_t copies = context.tokens() * config.top_k;
  std::vector<int32_t> assignment_row(copies, -1);
  std::vector<int32_t> row_token(rows);
  for (int64_t copy = 0; copy < copies; ++copy) {
    const int64_t row = assignment_row_[copy];
    const int r = static_cast<int>(
        std::upper_bound(pair_begin.begin(), pair_begin.end(), row) -
        pair_begin.begin() - 1);
    const int64_t index = row - pair_begin[r];
    if (index % k != chunk) continue;
    const int64_t chunk_row = chunk_begin[r] + index / k;
    assignment_row[copy] = static_cast<int32_t>(chunk_row);
    row_token[chunk_row] = row_token_[row];
  }
  ASSIGN_OR_RETURN(
      plan.assignment_row,
      context.Allocate(MemoryComponent::kDispatch, {copies}, DType::kInt32));
  ASSIGN_OR_RETURN(plan.row_token, context.Allocate(MemoryComponent::kDispatch,
                                                    {rows}, DType::kInt32));
  context.ops->CopyFromHost(copies * 4, assignment_row.data(),
                            plan.assignment_row.i32());
  context.ops->CopyFromHost(rows * 4, row_token.data(), plan.row_token.i32());

  // Receiving: source s's list for this rank is s's copies for its local
  // experts, in expert order; the chunk takes the same every k-th.
  plan.receive_rows.assign(ranks_, 0);
  for (int source = 0; source < ranks_; ++source) {
    int64_t begin = 0;
    for (int64_t e = 0; e < local; ++e) {
      const int64_t end =
          begin + rank_expert_counts_[source * experts + first_expert_ + e];
      const int64_t received =
          InChunk(end, chunk, k) - InChunk(begin, chunk, k);
      plan.segments.push_back({source, e, plan.received_rows, received});
      plan.receive_rows[source] += received;
      plan.received_rows += received;
      begin = end;
    }
  }
  return plan;
}

}  // namespace plateau::engine
