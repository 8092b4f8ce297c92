#include "engine/cuda_backend.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/byte_size.h"
#include "engine/memory/cuda_memory_source.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/device.h"

namespace plateau::engine {

absl::StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(
    const CudaBackendOptions& options) {
  absl::StatusOr<std::vector<kernels::cuda::CudaDeviceInfo>> devices =
      kernels::cuda::ListCudaDevices();
  if (!devices.ok()) return devices.status();
  if (options.device < 0 ||
      options.device >= static_cast<int>(devices->size())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "CUDA device ", options.device, " does not exist: ", devices->size(),
        " device(s) visible"));
  }
  const kernels::cuda::CudaDeviceInfo& device = (*devices)[options.device];
  const int64_t usable = kernels::cuda::CudaDevicePoolBytes(device);
  if (options.device_memory_bytes < 0 || options.device_memory_bytes > usable) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a device pool of ", FormatBytes(options.device_memory_bytes),
        " does not fit CUDA device ", options.device, " (", device.name,
        "): ", FormatBytes(device.memory_bytes), " less ",
        FormatBytes(kernels::cuda::kCudaReservedBytes),
        " for the CUDA context, cuBLAS and NCCL leaves ", FormatBytes(usable)));
  }
  const int64_t capacity =
      options.device_memory_bytes > 0 ? options.device_memory_bytes : usable;
  return Backend::Assemble(
      absl::StrCat("cuda (device ", options.device, ": ", device.name, ", sm_",
                   device.compute_capability_major,
                   device.compute_capability_minor, ", ",
                   kernels::cuda::MatmulPrecisionName(options.matmul_precision),
                   " products, device memory ", FormatBytes(capacity), ")"),
      absl::StrCat("cuda: ", device.name, " sm_",
                   device.compute_capability_major,
                   device.compute_capability_minor, ", ",
                   kernels::cuda::MatmulPrecisionName(options.matmul_precision),
                   " products"),
      std::make_unique<CudaDeviceMemorySource>(options.device),
      std::make_unique<PinnedHostMemorySource>(), capacity,
      [&options](kernels::ScratchArena& scratch)
          -> absl::StatusOr<std::unique_ptr<kernels::Ops>> {
        kernels::cuda::CudaOpsOptions ops;
        ops.device = options.device;
        ops.matmul_precision = options.matmul_precision;
        ops.scratch = &scratch;
        absl::StatusOr<std::unique_ptr<kernels::cuda::CudaOps>> made =
            kernels::cuda::CudaOps::Create(ops);
        if (!made.ok()) return made.status();
        return std::unique_ptr<kernels::Ops>(*std::move(made));
      });
}

}  // namespace plateau::engine
