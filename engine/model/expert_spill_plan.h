// LLEP, the least-loaded half of PipelinedLLEP (docs/ARCHITECTURE.md section
// 2): when an expert rank would receive more than kSpillFactor times the mean
// rank's token copies, copies of its busiest experts go to the least-loaded
// rank instead, which borrows those experts' weights for the layer (see
// expert_spill.h) and returns their gradients. Each expert is lent at most
// once per layer; every rank derives the same spills from the dispatch
// plan's count matrix. Pure computation, shared with the memory planner.
#ifndef PLATEAU_ENGINE_MODEL_EXPERT_SPILL_PLAN_H_
#define PLATEAU_ENGINE_MODEL_EXPERT_SPILL_PLAN_H_

#include <cstdint>
#include <vector>

namespace plateau::engine {

inline constexpr double kSpillFactor = 1.25;

struct ExpertSpill {
  int64_t expert = 0;  // of the whole model
  int owner = 0;       // the expert rank holding its weights
  int borrower = 0;    // the expert rank serving the spilled copies
  // (expert ranks) how many of each source's copies for the expert go to
  // the borrower: the last ones of them in the source's local order.
  std::vector<int64_t> copies;
};

// rank_expert_counts: (ranks x experts), copies each rank routes to each
// expert (DispatchPlan). Experts are split evenly over the ranks in order.
std::vector<ExpertSpill> PlanExpertSpill(
    const std::vector<int64_t>& rank_expert_counts, int ranks, int64_t experts);

// The spills `rank` serves, in the order its received rows and its borrowed
// weights list them: by owner, then by spill.
std::vector<const ExpertSpill*> SpillsBorrowedBy(
    const std::vector<ExpertSpill>& spills, int rank);

// (ranks x experts): how many of each source's copies for each expert go to
// the expert's borrower; 0 for an expert not lent.
std::vector<int64_t> SpilledCopies(const std::vector<ExpertSpill>& spills,
                                   int ranks, int64_t experts);

// (ranks x ranks): the copies source s sends destination r, at
// [s * ranks + r]: those for r's own experts less what they spill, then the
// spilled copies of the experts r borrows. The lists a chunked dispatch
// (DispatchChunks) splits into chunks.
std::vector<int64_t> DispatchListLengths(
    const std::vector<int64_t>& rank_expert_counts,
    const std::vector<ExpertSpill>& spills, int ranks, int64_t experts);

}  // namespace plateau::engine

#endif  // PLATEAU_ENGINE_MODEL_EXPERT_SPILL_PLAN_H_
