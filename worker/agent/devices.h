// What a node offers plateaud: its devices (from --devices and
// --device_memory) and its host memory.
#ifndef PLATEAU_WORKER_AGENT_DEVICES_H_
#define PLATEAU_WORKER_AGENT_DEVICES_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/cuda/device.h"
#include "proto/node.pb.h"

namespace plateau::worker {

struct OfferedDevices {
  std::vector<v1::Device> devices;
  // For the agent's log: what was offered, and for "auto" without a GPU why
  // the CPU devices.
  std::string summary;
};

// "cpu:N" gives N CPU devices of cpu_memory_bytes each (the CPU backend's
// device pool cap, docs/ARCHITECTURE.md section 5). "cuda" gives every device
// of `cuda_devices` (ListCudaDevices' answer) with the memory its pool may hold
// (CudaDevicePoolBytes), and FAILED_PRECONDITION saying why when there is
// none. "auto" is "cuda" where there are CUDA devices and "cpu:1" where there
// are none. Errors name the flag and the accepted forms.
absl::StatusOr<OfferedDevices> DevicesOf(
    const std::string& flag, int64_t cpu_memory_bytes,
    const absl::StatusOr<std::vector<kernels::cuda::CudaDeviceInfo>>&
        cuda_devices);

// Physical memory of this machine.
int64_t HostMemoryBytes();

}  // namespace plateau::worker

#endif  // PLATEAU_WORKER_AGENT_DEVICES_H_
