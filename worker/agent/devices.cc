#include "worker/agent/devices.h"

#include <unistd.h>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace plateau::worker {

absl::StatusOr<std::vector<v1::Device>> DevicesOf(const std::string& flag,
                                                  int64_t device_memory_bytes) {
  int count = 0;
  if (flag == "auto") {
    count = 1;
  } else if (flag == "cuda") {
    return absl::UnimplementedError(
        "--devices cuda: this build trains on the CPU backend only; use "
        "--devices cpu:N");
  } else if (!absl::StartsWith(flag, "cpu:") ||
             !absl::SimpleAtoi(flag.substr(4), &count) || count < 1 ||
             count > 1024) {
    return absl::InvalidArgumentError(
        absl::StrCat("--devices '", flag,
                     "': expected auto, cuda or cpu:N with N from 1 to 1024"));
  }
  if (device_memory_bytes <= 0) {
    return absl::InvalidArgumentError("--device_memory must be positive");
  }
  std::vector<v1::Device> devices(count);
  for (int i = 0; i < count; ++i) {
    devices[i].set_index(i);
    devices[i].set_kind(v1::DEVICE_KIND_CPU);
    devices[i].set_model("cpu");
    devices[i].set_memory_bytes(device_memory_bytes);
  }
  return devices;
}

int64_t HostMemoryBytes() {
  return static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) *
         static_cast<int64_t>(sysconf(_SC_PAGESIZE));
}

}  // namespace plateau::worker
