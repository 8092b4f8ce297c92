#include "worker/agent/rank_lease.h"

#include <time.h>

#include <algorithm>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/file_util.h"

namespace plateau::worker {
namespace {

constexpr absl::string_view kExpiryPrefix = "expires_monotonic_ns ";

}  // namespace

std::string RankLeasePath(const std::string& directory) {
  return absl::StrCat(directory, "/lease");
}

absl::Duration MonotonicNow() {
  timespec now = {};
  clock_gettime(CLOCK_MONOTONIC, &now);
  return absl::DurationFromTimespec(now);
}

absl::Status WriteRankLease(const std::string& path, absl::Duration expiry) {
  return WriteFileAtomically(
      path,
      {absl::StrCat(kExpiryPrefix, absl::ToInt64Nanoseconds(expiry), "\n")},
      Durability::kUnsynced);
}

absl::StatusOr<absl::Duration> ReadRankLease(const std::string& path) {
  absl::StatusOr<std::string> text = ReadFileToString(path);
  if (!text.ok()) return text.status();
  absl::string_view body = absl::StripTrailingAsciiWhitespace(*text);
  int64_t nanoseconds = 0;
  if (!absl::ConsumePrefix(&body, kExpiryPrefix) ||
      !absl::SimpleAtoi(body, &nanoseconds)) {
    return absl::DataLossError(
        absl::StrCat(path, " does not hold \"", kExpiryPrefix, "N\""));
  }
  return absl::Nanoseconds(nanoseconds);
}

RankLeaseWatchdog::RankLeaseWatchdog(std::string path,
                                     absl::Duration poll_interval,
                                     ExpiredCallback on_expired)
    : path_(std::move(path)),
      poll_interval_(poll_interval),
      on_expired_(std::move(on_expired)) {
  thread_ = std::thread([this] { Watch(); });
}

RankLeaseWatchdog::~RankLeaseWatchdog() {
  stop_ = true;
  thread_.join();
}

void RankLeaseWatchdog::Watch() {
  while (!stop_) {
    const absl::StatusOr<absl::Duration> expiry = ReadRankLease(path_);
    const absl::Duration now = MonotonicNow();
    if (!expiry.ok()) {
      on_expired_(absl::StrCat("its lease cannot be read (",
                               expiry.status().message(), ")"));
      return;
    }
    if (now > *expiry) {
      on_expired_(absl::StrCat(
          "its lease expired ", absl::FormatDuration(now - *expiry),
          " ago: the worker agent has lost touch with plateaud (cut off or "
          "frozen), which will requeue the job elsewhere"));
      return;
    }
    const absl::Duration wait = std::min(poll_interval_, *expiry - now);
    const absl::Duration until = MonotonicNow() + wait;
    while (!stop_ && MonotonicNow() < until) {
      absl::SleepFor(std::min(absl::Milliseconds(10), until - MonotonicNow()));
    }
  }
}

}  // namespace plateau::worker
