// Which CUDA devices this process can use. Every CUDA entry point checks this
// first, so a machine without a GPU (or without a driver) gets a clean
// FAILED_PRECONDITION instead of a crash.
#ifndef PLATEAU_KERNELS_CUDA_DEVICE_H_
#define PLATEAU_KERNELS_CUDA_DEVICE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace plateau::kernels::cuda {

struct CudaDeviceInfo {
  int index = 0;
  std::string name;
  int64_t memory_bytes = 0;
  int compute_capability_major = 0;
  int compute_capability_minor = 0;
};

// What a device's memory pool (the engine's device pool) may hold: the
// card's memory less what the CUDA context, cuBLAS's workspace and NCCL's
// buffers take outside the pool (NCCL's grow with the channels and, on
// NVSwitch machines, NVLS; NCCL_NVLS_ENABLE=0 keeps them small).
inline constexpr int64_t kCudaReservedBytes = int64_t{4} << 30;
inline int64_t CudaDevicePoolBytes(const CudaDeviceInfo& device) {
  return device.memory_bytes > kCudaReservedBytes
             ? device.memory_bytes - kCudaReservedBytes
             : 0;
}

// FAILED_PRECONDITION "no CUDA device: ..." when the runtime finds none.
absl::StatusOr<std::vector<CudaDeviceInfo>> ListCudaDevices();

// OK when at least one device is usable; the error of ListCudaDevices else.
absl::Status RequireCudaDevice();

// Device `device`: ListCudaDevices' error without one, INVALID_ARGUMENT
// saying how many there are when it does not exist.
absl::StatusOr<CudaDeviceInfo> FindCudaDevice(int device);

// What the driver says of a device's memory now (cudaMemGetInfo): in use is
// everything the process and others hold there, pools and libraries alike.
struct CudaMemoryInfo {
  int64_t free_bytes = 0;
  int64_t total_bytes = 0;
  int64_t used_bytes() const { return total_bytes - free_bytes; }
};
absl::StatusOr<CudaMemoryInfo> QueryCudaMemory(int device);

// Turns a CUDA runtime error code into a Status naming the failed call.
absl::Status CudaStatus(int cuda_error, const char* what);

}  // namespace plateau::kernels::cuda

#endif  // PLATEAU_KERNELS_CUDA_DEVICE_H_
