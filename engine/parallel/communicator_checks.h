// The argument checks of the Communicator contract, shared by its backends so
// that every backend rejects a bad call alike: INVALID_ARGUMENT, with nothing
// sent and the group still usable.
#ifndef PLATEAU_ENGINE_PARALLEL_COMMUNICATOR_CHECKS_H_
#define PLATEAU_ENGINE_PARALLEL_COMMUNICATOR_CHECKS_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"

namespace plateau::engine {

// A group's name, this rank's place in it, and its timeout.
absl::Status CheckGroupArguments(const std::string& group_name, int rank,
                                 int size, absl::Duration timeout);

// `count` units (`unit`: "elements", "bytes") at `data`.
absl::Status CheckBuffer(absl::string_view op, const void* data, int64_t count,
                         absl::string_view unit);

// Two buffers of a collective that moves count_per_rank elements per rank.
absl::Status CheckPerRankBuffers(absl::string_view op, const void* input,
                                 const void* output, int64_t count_per_rank);

// AllToAllV's sizes (one per rank, none negative, this rank's to itself the
// same both ways) and its buffers.
absl::Status CheckAllToAllV(const void* send,
                            absl::Span<const int64_t> send_bytes,
                            const void* receive,
                            absl::Span<const int64_t> recv_bytes, int rank,
                            int size);

}  // namespace plateau::engine

#endif  // PLATEAU_ENGINE_PARALLEL_COMMUNICATOR_CHECKS_H_
