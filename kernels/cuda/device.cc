#include "kernels/cuda/device.h"

#include "absl/strings/str_cat.h"
#include "kernels/cuda/cuda_api.h"

namespace plateau::kernels::cuda {

absl::Status CudaStatus(int cuda_error, const char* what) {
  if (cuda_error == cudaSuccess) return absl::OkStatus();
  const auto error = static_cast<cudaError_t>(cuda_error);
  return absl::InternalError(
      absl::StrCat(what, " failed: ", cudaGetErrorName(error), " (",
                   cudaGetErrorString(error), ")"));
}

absl::StatusOr<std::vector<CudaDeviceInfo>> ListCudaDevices() {
  int count = 0;
  const cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess) {
    return absl::FailedPreconditionError(absl::StrCat(
        "no CUDA device: cudaGetDeviceCount returned ", cudaGetErrorName(error),
        " (", cudaGetErrorString(error), ")"));
  }
  if (count == 0) {
    return absl::FailedPreconditionError(
        "no CUDA device: the CUDA runtime found 0 devices");
  }
  std::vector<CudaDeviceInfo> devices;
  for (int index = 0; index < count; ++index) {
    cudaDeviceProp properties;
    absl::Status status = CudaStatus(
        cudaGetDeviceProperties(&properties, index), "cudaGetDeviceProperties");
    if (!status.ok()) return status;
    CudaDeviceInfo info;
    info.index = index;
    info.name = properties.name;
    info.memory_bytes = static_cast<int64_t>(properties.totalGlobalMem);
    info.compute_capability_major = properties.major;
    info.compute_capability_minor = properties.minor;
    devices.push_back(info);
  }
  return devices;
}

absl::StatusOr<CudaDeviceInfo> FindCudaDevice(int device) {
  absl::StatusOr<std::vector<CudaDeviceInfo>> devices = ListCudaDevices();
  if (!devices.ok()) return devices.status();
  if (device < 0 || device >= static_cast<int>(devices->size())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "CUDA device ", device, " does not exist: ", devices->size(),
        " device(s) visible"));
  }
  return (*devices)[device];
}

absl::StatusOr<CudaMemoryInfo> QueryCudaMemory(int device) {
  absl::Status status = RequireCudaDevice();
  if (!status.ok()) return status;
  status = CudaStatus(cudaSetDevice(device), "cudaSetDevice");
  if (!status.ok()) return status;
  size_t free_bytes = 0;
  size_t total_bytes = 0;
  status =
      CudaStatus(cudaMemGetInfo(&free_bytes, &total_bytes), "cudaMemGetInfo");
  if (!status.ok()) return status;
  CudaMemoryInfo info;
  info.free_bytes = static_cast<int64_t>(free_bytes);
  info.total_bytes = static_cast<int64_t>(total_bytes);
  return info;
}

absl::Status RequireCudaDevice() {
  // The answer cannot change within a process; ask the runtime once.
  static const absl::Status status = ListCudaDevices().status();
  return status;
}

}  // namespace plateau::kernels::cuda
