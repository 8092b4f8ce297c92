#include "absl/strings/str_cat.h"
#include "engine/cuda_backend.h"
#include "engine/train/test_backend.h"
#include "kernels/cuda/cuda_api.h"
#include "kernels/cuda/device.h"

namespace plateau::engine {

const char* TestBackendName() { return "cuda"; }

absl::StatusOr<std::unique_ptr<Backend>> MakeTestBackend() {
  CudaBackendOptions options;
  options.matmul_precision = kernels::cuda::MatmulPrecision::kFloat32;
  options.device_memory_bytes = int64_t{1} << 30;
  return CreateCudaBackend(options);
}

absl::Status PrepareTestBackend(int world) {
  const absl::Status device = kernels::cuda::RequireCudaDevice();
  if (!device.ok()) {
    return absl::UnimplementedError(
        absl::StrCat("the CUDA backend needs a GPU: ", device.message()));
  }
#ifdef PLATEAU_CUDA_EMULATION
  kernels::cuda::emulation::SetDeviceMemoryProtection(world == 1);
  return absl::OkStatus();
#else
  if (world == 1) return absl::OkStatus();
  return absl::UnimplementedError(absl::StrCat(
      world,
      " ranks as threads on one GPU would talk Gloo over device memory; on a "
      "GPU they need a device each and NCCL"));
#endif
}

}  // namespace plateau::engine
