// The memory model: a job spec's peak bytes on every rank, by pool and
// component, from replaying each rank's allocations (rank_replay.h), once
// for each of the distinct ranks (DistinctRanks).
#ifndef PLATEAU_PLAN_MEMORY_MODEL_H_
#define PLATEAU_PLAN_MEMORY_MODEL_H_

#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "plan/rank_replay.h"
#include "proto/job.pb.h"
#include "proto/plan.pb.h"

namespace plateau::plan {

// What a prediction assumes of the router, in every layer and micro-batch,
// every source rank alike. The first of these that is set applies:
// layer_expert_load, worst_case, skew.
struct Routing {
  // The plans' routing (WorstCase()): every token's copies go to the same
  // top_k experts, the last ones, which sit on the last expert ranks; each
  // rank is replayed with them moved onto its own last experts. No
  // expert, and no expert rank, can be sent more copies, so a whole
  // dispatch planned so holds whatever the router does, on every rank. An
  // untrained router comes close: the example job's did within ten steps
  // (docs/PLANNER.md). With PipelinedLLEP over expert ranks PredictMemory
  // also replays each rank under the routings that fill its chunks and
  // lend or borrow the most experts (memory_model.cc), and keeps for each
  // rank the one that peaks highest on its device.
  static Routing WorstCase() {
    Routing routing;
    routing.worst_case = true;
    return routing;
  }
  static Routing OfSkew(double skew) {
    Routing routing;
    routing.skew = skew;
    return routing;
  }
  // When not empty, each layer's expert shares of the copies (per layer one
  // per expert, summing to 1), e.g. as measured by a run.
  std::vector<std::vector<double>> layer_expert_load;
  bool worst_case = false;
  // The busiest expert's copies over the mean expert's (>= 1; taken as at
  // most experts / top_k, when it has a copy of every token): expert 0
  // takes that much, the others share the rest evenly.
  double skew = 1.0;
};

// REQUIRES: spec passed ValidateJobSpec with its schedules set (an auto
// spec's chosen). INVALID_ARGUMENT when the batch does not split over the
// layout's ranks and micro-batches, or for a malformed routing. A job that
// validates (train.eval_every > 0) is predicted for `validation_windows`
// windows of its data, or, when 0 (plateaud cannot read the data), for
// rounds that give every rank one window more than a training micro-batch.
absl::StatusOr<v1::MemoryPrediction> PredictMemory(
    const v1::JobSpec& spec, const Routing& routing,
    int64_t validation_windows = 0);

// PredictMemory's prediction (of unknown validation windows) when its
// device peak is at most `ceiling_bytes`, nullopt when it is above. The
// replays stop at the first that peaks past the ceiling, so a spec far
// from it costs a few replays instead of all of them: the planner's
// searches ask whether a spec fits, or beats the best so far, far more
// often than they keep a prediction.
absl::StatusOr<std::optional<v1::MemoryPrediction>> PredictMemoryWithin(
    const v1::JobSpec& spec, const Routing& routing, int64_t ceiling_bytes);

// The replay of `spec` (rank_replay.h) that PredictMemory runs for every
// distinct rank; the same errors.
absl::StatusOr<ReplayJob> ReplayJobOf(const v1::JobSpec& spec,
                                      const Routing& routing,
                                      int64_t validation_windows = 0);

// The rank `prediction` names as its worst; nullptr when it does not list
// it (a stored plan keeps only that one).
const v1::RankPrediction* WorstRank(const v1::MemoryPrediction& prediction);

// What `component` held of `rank`'s device pool when the pool peaked.
int64_t DeviceBytesAtPeak(const v1::RankPrediction& rank,
                          v1::MemoryComponent component);

// How the spec's schedules read: "dispatch_chunk_tokens 1024, ring_dtp,
// sco, optimizer_offload stream", or "none".
std::string DescribeSchedules(const v1::ScheduleSpec& schedules);

}  // namespace plateau::plan

#endif  // PLATEAU_PLAN_MEMORY_MODEL_H_
