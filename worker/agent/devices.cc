#include "worker/agent/devices.h"

#include <unistd.h>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/byte_size.h"

namespace plateau::worker {
namespace {

OfferedDevices CpuDevices(int count, int64_t memory_bytes) {
  OfferedDevices offered;
  offered.devices.resize(count);
  for (int i = 0; i < count; ++i) {
    offered.devices[i].set_index(i);
    offered.devices[i].set_kind(v1::DEVICE_KIND_CPU);
    offered.devices[i].set_model("cpu");
    offered.devices[i].set_memory_bytes(memory_bytes);
  }
  offered.summary =
      absl::StrCat(count, " cpu device(s) of ", FormatBytes(memory_bytes));
  return offered;
}

OfferedDevices CudaDevices(
    const std::vector<kernels::cuda::CudaDeviceInfo>& cuda_devices) {
  OfferedDevices offered;
  for (const kernels::cuda::CudaDeviceInfo& info : cuda_devices) {
    v1::Device& device = offered.devices.emplace_back();
    device.set_index(info.index);
    device.set_kind(v1::DEVICE_KIND_CUDA);
    device.set_model(info.name);
    device.set_memory_bytes(kernels::cuda::CudaDevicePoolBytes(info));
  }
  offered.summary = absl::StrCat(
      cuda_devices.size(), " cuda device(s): ", cuda_devices[0].name, ", ",
      FormatBytes(offered.devices[0].memory_bytes()), " each for the pool");
  return offered;
}

}  // namespace

absl::StatusOr<OfferedDevices> DevicesOf(
    const std::string& flag, int64_t cpu_memory_bytes,
    const absl::StatusOr<std::vector<kernels::cuda::CudaDeviceInfo>>&
        cuda_devices) {
  if (flag == "cuda" || flag == "auto") {
    if (cuda_devices.ok() && !cuda_devices->empty()) {
      return CudaDevices(*cuda_devices);
    }
    const std::string reason =
        cuda_devices.ok() ? "no CUDA device"
                          : std::string(cuda_devices.status().message());
    if (flag == "cuda") {
      return absl::FailedPreconditionError(
          absl::StrCat("--devices cuda: ", reason,
                       "; offer CPU devices with --devices cpu:N"));
    }
    if (cpu_memory_bytes <= 0) {
      return absl::InvalidArgumentError("--device_memory must be positive");
    }
    OfferedDevices offered = CpuDevices(1, cpu_memory_bytes);
    offered.summary =
        absl::StrCat(offered.summary, " (--devices auto: ", reason, ")");
    return offered;
  }
  int count = 0;
  if (!absl::StartsWith(flag, "cpu:") ||
      !absl::SimpleAtoi(flag.substr(4), &count) || count < 1 || count > 1024) {
    return absl::InvalidArgumentError(
        absl::StrCat("--devices '", flag,
                     "': expected auto, cuda or cpu:N with N from 1 to 1024"));
  }
  if (cpu_memory_bytes <= 0) {
    return absl::InvalidArgumentError("--device_memory must be positive");
  }
  return CpuDevices(count, cpu_memory_bytes);
}

int64_t HostMemoryBytes() {
  return static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) *
         static_cast<int64_t>(sysconf(_SC_PAGESIZE));
}

}  // namespace plateau::worker
