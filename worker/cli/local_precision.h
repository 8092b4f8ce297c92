// precision: auto for the runs plateau-worker makes on its own (train
// outside plateaud, eval), chosen as plateaud chooses it at a job's first
// attempt (plan/precision_choice.h), for this machine: its CPU's bf16
// products measured here (kernels/cpu/bf16_speedup.h) or its GPUs, and
// whether the spec fits the device pool in fp32. A run's ranks are given
// the choice (--precision), never each its own.
#ifndef PLATEAU_WORKER_CLI_LOCAL_PRECISION_H_
#define PLATEAU_WORKER_CLI_LOCAL_PRECISION_H_

#include <optional>

#include "absl/status/statusor.h"
#include "engine/checkpoint/checkpoint.h"
#include "plan/precision_choice.h"
#include "proto/job.pb.h"
#include "worker/cli/rank_backend.h"

namespace plateau::worker {

// REQUIRES: IsAutoPrecision(spec), spec passed ValidateJobSpec. Errors
// from planning the spec in fp32 for `backend`'s device pool.
absl::StatusOr<plan::PrecisionChoice> ChooseLocalPrecision(
    const v1::JobSpec& spec, const RankBackend& backend);

// The precision a checkpoint's products were trained in (its state.json
// says), or nullopt where it does not say. An auto run resumed, or
// evaluated, from a checkpoint goes on in it.
std::optional<v1::Precision> TrainedPrecision(
    const engine::Checkpoint& checkpoint);

// The spec with --precision (and its reason, --precision_reason) applied:
// the precision a launcher chose for an auto spec. INVALID_ARGUMENT for a
// value other than bf16 or fp32, or one that contradicts the spec's own
// precision; FAILED_PRECONDITION for an auto spec reaching a rank that is
// not told its precision (its ranks could each choose differently).
absl::StatusOr<plan::PrecisionChoice> ApplyPrecisionFlags(bool launched_rank,
                                                          v1::JobSpec* spec);

}  // namespace plateau::worker

#endif  // PLATEAU_WORKER_CLI_LOCAL_PRECISION_H_
