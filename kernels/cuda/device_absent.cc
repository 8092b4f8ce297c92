// device.h in a build without the CUDA toolkit (bazel/cuda.bzl): there is
// never a device, and every entry point says why.
#include "absl/strings/str_cat.h"
#include "kernels/cuda/device.h"

namespace plateau::kernels::cuda {
namespace {

absl::Status NoCudaInThisBuild() {
  return absl::FailedPreconditionError(
      "no CUDA device: this build of Plateau has no CUDA support (it was "
      "built without the CUDA toolkit; rebuild with the toolkit at "
      "/usr/local/cuda or $CUDA_PATH)");
}

}  // namespace

absl::Status CudaStatus(int cuda_error, const char* what) {
  if (cuda_error == 0) return absl::OkStatus();
  return absl::InternalError(
      absl::StrCat(what, " failed: CUDA error ", cuda_error));
}

absl::StatusOr<std::vector<CudaDeviceInfo>> ListCudaDevices() {
  return NoCudaInThisBuild();
}

absl::Status RequireCudaDevice() { return NoCudaInThisBuild(); }

absl::StatusOr<CudaDeviceInfo> FindCudaDevice(int) {
  return NoCudaInThisBuild();
}

absl::StatusOr<CudaMemoryInfo> QueryCudaMemory(int) {
  return NoCudaInThisBuild();
}

}  // namespace plateau::kernels::cuda
