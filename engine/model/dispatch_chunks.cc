#include "engine/model/dispatch_chunks.h"

#include <algorithm>
#include <utility>

#include "common/status_macros.h"
#include "engine/model/moe_footprint.h"

namespace plateau::engine {
absl::StatusOr<DispatchChunks> DispatchChunks::Split(
    const LayerContext& context, const DispatchPlan& plan, int64_t cap,
    std::vector<ExpertSpill> spills) {
  if (cap < 1) {
    return absl::InvalidArgumentError(
        "the dispatch chunk cap must be at least one token copy");
  }
  const ModelConfig& config = *context.config;
  const int64_t experts = config.experts;
  const int64_t local = context.shard.expert_count;
  DispatchChunks chunks;
  const int ranks = chunks.ranks_ = context.expert_ranks();
  const int self = ranks > 1 ? context.groups.experts->rank() : 0;
  chunks.spills_ = std::move(spills);
  const std::vector<int64_t>& counts = plan.rank_expert_counts;
  const std::vector<int64_t> spilled =
      SpilledCopies(chunks.spills_, ranks, experts);
  std::vector<std::vector<const ExpertSpill*>> borrowed_by(ranks);
  for (int r = 0; r < ranks; ++r) {
    borrowed_by[r] = SpillsBorrowedBy(chunks.spills_, r);
  }

  // K from the longest of every pair's lists; this rank's lists row by row,
  // in the order DispatchListLengths counts them.
  const std::vector<int64_t> lengths =
      DispatchListLengths(counts, chunks.spills_, ranks, experts);
  const int64_t longest = *std::max_element(lengths.begin(), lengths.end());
  chunks.chunks_ = std::max<int64_t>(1, (longest + cap - 1) / cap);
  const int64_t copies = context.tokens() * config.top_k;
  chunks.row_destination_.assign(copies, 0);
  chunks.row_index_.assign(copies, 0);
  for (int r = 0; r < ranks; ++r) {
    int64_t length = 0;
    auto add = [&](int64_t expert, int64_t first, int64_t count) {
      const int64_t begin = plan.expert_offsets[expert] + first;
      for (int64_t i = 0; i < count; ++i) {
        chunks.row_destination_[begin + i] = r;
        chunks.row_index_[begin + i] = length + i;
      }
      length += count;
    };
    const int64_t own = self * experts;
    for (int64_t e = r * local; e < (r + 1) * local; ++e) {
      add(e, 0, counts[own + e] - spilled[own + e]);
    }
    for (const ExpertSpill* spill : borrowed_by[r]) {
      const int64_t e = spill->expert;
      add(e, counts[own + e] - spilled[own + e], spilled[own + e]);
    }
    chunks.send_list_rows_.push_back(length);
  }

  chunks.received_.assign(ranks, {});
  const int64_t first_expert = context.shard.first_expert;
  for (int s = 0; s < ranks; ++s) {
    for (int64_t e = 0; e < local; ++e) {
      const int64_t index = s * experts + first_expert + e;
      chunks.received_[s].push_back({e, false, counts[index] - spilled[index]});
    }
    int64_t borrowed = 0;
    for (const ExpertSpill* spill : borrowed_by[self]) {
      chunks.received_[s].push_back(
          {borrowed++, true, spilled[s * experts + spill->expert]});
    }
  }
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
  const int64_t k = chunks_;
  DispatchPlan plan;
  // Sending: every k-th of each list from offset `chunk`; the chunk's rows
  // follow the destination, then the position in the list.
  plan.send_rows.assign(ranks_, 0);
  std::vector<int64_t> chunk_begin(ranks_ + 1, 0);
  for (int r = 0; r < ranks_; ++r) {
    plan.send_rows[r] = CopiesInChunk(send_list_rows_[r], chunk, k);
    chunk_begin[r + 1] = chunk_begin[r] + plan.send_rows[r];
  }
  plan.local_rows = chunk_begin[ranks_];
  const int64_t copies = static_cast<int64_t>(assignment_row_.size());
  std::vector<int32_t> assignment_row(copies, -1);
  std::vector<int32_t> row_token(plan.local_rows);
  for (int64_t copy = 0; copy < copies; ++copy) {
    const int64_t row = assignment_row_[copy];
    const int64_t index = row_index_[row];
    if (index % k != chunk) continue;
    const int64_t chunk_row = chunk_begin[row_destination_[row]] + index / k;
    assignment_row[copy] = static_cast<int32_t>(chunk_row);
    row_token[chunk_row] = row_token_[row];
  }
  ASSIGN_OR_RETURN(
      plan.assignment_row,
      context.Allocate(
          MoeBuffers::For(*context.config, context.sequences).assignment_row));
  ASSIGN_OR_RETURN(plan.row_token,
                   context.Allocate(RowTokenBuffer(plan.local_rows)));
  context.ops->CopyFromHost(copies * 4, assignment_row.data(),
                            plan.assignment_row.i32());
  context.ops->CopyFromHost(plan.local_rows * 4, row_token.data(),
                            plan.row_token.i32());

  // Receiving: the same every k-th of each source's list for this rank.
  plan.receive_rows.assign(ranks_, 0);
  for (int source = 0; source < ranks_; ++source) {
    int64_t begin = 0;
    for (const ReceivedBlock& block : received_[source]) {
      const int64_t end = begin + block.copies;
      const int64_t rows =
          CopiesInChunk(end, chunk, k) - CopiesInChunk(begin, chunk, k);
      plan.segments.push_back({source, block.local_expert, plan.received_rows,
                               rows, block.borrowed});
      plan.receive_rows[source] += rows;
      plan.received_rows += rows;
      begin = end;
    }
  }
  return plan;
}

}  // namespace plateau::engine
