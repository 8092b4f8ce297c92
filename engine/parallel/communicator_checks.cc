#include "engine/parallel/communicator_checks.h"

#include "absl/strings/str_cat.h"

namespace plateau::engine {

absl::Status CheckGroupArguments(const std::string& group_name, int rank,
                                 int size, absl::Duration timeout) {
  if (group_name.empty()) return absl::InvalidArgumentError("no group name");
  if (size < 1 || rank < 0 || rank >= size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "group '", group_name, "': bad rank ", rank, " of size ", size));
  }
  if (timeout < absl::Milliseconds(1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("group '", group_name, "': timeout ",
                     absl::FormatDuration(timeout), " is under 1ms"));
  }
  return absl::OkStatus();
}

absl::Status CheckBuffer(absl::string_view op, const void* data, int64_t count,
                         absl::string_view unit) {
  if (count < 0 || (count > 0 && data == nullptr)) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": bad buffer of ", count, " ", unit));
  }
  return absl::OkStatus();
}

absl::Status CheckPerRankBuffers(absl::string_view op, const void* input,
                                 const void* output, int64_t count_per_rank) {
  if (count_per_rank < 0 ||
      (count_per_rank > 0 && (input == nullptr || output == nullptr))) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": bad buffers of ", count_per_rank, " per rank"));
  }
  return absl::OkStatus();
}

absl::Status CheckAllToAllV(const void* send,
                            absl::Span<const int64_t> send_bytes,
                            const void* receive,
                            absl::Span<const int64_t> recv_bytes, int rank,
                            int size) {
  if (static_cast<int>(send_bytes.size()) != size ||
      static_cast<int>(recv_bytes.size()) != size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "AllToAllV: ", send_bytes.size(), " send and ", recv_bytes.size(),
        " receive sizes for a group of ", size));
  }
  int64_t send_total = 0;
  int64_t recv_total = 0;
  for (int r = 0; r < size; ++r) {
    if (send_bytes[r] < 0 || recv_bytes[r] < 0) {
      return absl::InvalidArgumentError("AllToAllV: negative size");
    }
    send_total += send_bytes[r];
    recv_total += recv_bytes[r];
  }
  if (send_bytes[rank] != recv_bytes[rank]) {
    return absl::InvalidArgumentError(absl::StrCat(
        "AllToAllV: rank ", rank, " sends itself ", send_bytes[rank],
        " bytes but expects ", recv_bytes[rank]));
  }
  if ((send_total > 0 && send == nullptr) ||
      (recv_total > 0 && receive == nullptr)) {
    return absl::InvalidArgumentError("AllToAllV: null buffer");
  }
  return absl::OkStatus();
}

}  // namespace plateau::engine
