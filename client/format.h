// Text for people and scripts: enum names, UTC times, ages, aligned tables,
// progress bars and protobuf JSON. Every function is pure: no clock, no
// terminal, no I/O; callers pass "now" where an age is wanted.
#ifndef PLATEAU_CLIENT_FORMAT_H_
#define PLATEAU_CLIENT_FORMAT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "google/protobuf/message.h"
#include "google/protobuf/timestamp.pb.h"
#include "proto/job.pb.h"
#include "proto/memory.pb.h"
#include "proto/node.pb.h"

namespace plateau::client {

// Enum values without their prefix: "RUNNING", "CHECKPOINTED", "READY";
// memory pools, components and device kinds in lower case ("device",
// "vocab_projection", "cuda"). An unknown number prints as the number.
std::string StateName(v1::JobState state);
std::string EventKindName(v1::JobEventKind kind);
std::string NodeStateName(v1::NodeState state);
std::string PoolName(v1::MemoryPool pool);
std::string ComponentName(v1::MemoryComponent component);
std::string DeviceKindName(v1::DeviceKind kind);

// SUCCEEDED, FAILED or CANCELLED: the job will not change again.
bool IsFinalState(v1::JobState state);

// Whether the timestamp was set (proto3 cannot tell zero from unset).
bool IsSet(const google::protobuf::Timestamp& time);
absl::Time ToTime(const google::protobuf::Timestamp& time);

// "2026-11-29 17:03:12Z" (UTC whatever the local zone); "-" when unset.
std::string FormatTime(const google::protobuf::Timestamp& time);

// The largest whole unit, rounded down: "12s", "5m", "3h", "2d". Negative
// ages (clock skew) read "0s".
std::string FormatAge(absl::Duration age);
// FormatAge(now - time); "-" when `time` is unset.
std::string AgeSince(const google::protobuf::Timestamp& time, absl::Time now);

// "[#####...............]": `width` cells between the brackets, filled in
// proportion to step/total (clamped to 0..width; all empty when total <= 0).
std::string ProgressBar(int64_t step, int64_t total, int width);

// Left-aligned columns separated by two spaces, one line per row (each
// ending in '\n'), no trailing spaces. Short rows are padded with "".
std::string FormatTable(const std::vector<std::string>& header,
                        const std::vector<std::vector<std::string>>& rows);

// Text from the service (names, paths, errors, log lines, specs) as it may
// reach a terminal: every control character but '\n' and '\t' (ESC, CR,
// BEL, backspace, DEL, and the C1 controls whether UTF-8 encoded or raw) is
// written as \xNN, so that nothing a spec or a rank prints can move the
// cursor, retitle the window or hide a line. Other text, UTF-8 included,
// is kept.
std::string TerminalSafe(absl::string_view text);

// Pretty-printed protobuf JSON, proto field names, default values included,
// ending in '\n'. INTERNAL if protobuf refuses the message.
absl::StatusOr<std::string> ToJson(const google::protobuf::Message& message);

}  // namespace plateau::client

#endif  // PLATEAU_CLIENT_FORMAT_H_
