// For tests: every rank of a layout as a thread of this process. Each
// thread connects its rank's groups over loopback Gloo through one
// in-memory store and runs `body` with them; a world of one runs `body` on
// this thread with no groups.
#ifndef PLATEAU_ENGINE_PARALLEL_RANK_THREADS_H_
#define PLATEAU_ENGINE_PARALLEL_RANK_THREADS_H_

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "engine/parallel/parallel_layout.h"
#include "engine/parallel/rank_groups.h"

namespace plateau::engine {

// body(rank, groups): groups is nullptr for a world of one, the rank's
// connection error if it could not connect within `timeout`. Returns once
// every rank's body has.
void RunEveryRank(
    const ParallelLayout& layout, absl::Duration timeout,
    absl::FunctionRef<void(int rank, absl::StatusOr<RankGroups*> groups)> body);

}  // namespace plateau::engine

#endif  // PLATEAU_ENGINE_PARALLEL_RANK_THREADS_H_
