#include "worker/cli/rank_backend.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"
#include "engine/cuda_backend.h"
#include "engine/parallel/gloo_communicator.h"
#include "engine/parallel/nccl_communicator.h"
#include "kernels/cuda/device.h"
#include "worker/cli/flags.h"

namespace plateau::worker {
namespace {

// The --cuda_devices entry of `local_rank`, or local_rank itself without
// the flag.
absl::StatusOr<int> CudaDeviceOf(int local_rank) {
  const std::string list = absl::GetFlag(FLAGS_cuda_devices);
  if (list.empty()) return local_rank;
  const std::vector<std::string> entries = absl::StrSplit(list, ',');
  std::vector<int> devices;
  for (const std::string& entry : entries) {
    int device = 0;
    if (!absl::SimpleAtoi(entry, &device) || device < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--cuda_devices '", list,
          "': expected device indices separated by commas, e.g. 0,1"));
    }
    devices.push_back(device);
  }
  if (local_rank >= static_cast<int>(devices.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("--cuda_devices '", list, "' names ", devices.size(),
                     " device(s), too few for local rank ", local_rank));
  }
  return devices[local_rank];
}

}  // namespace

absl::StatusOr<RankBackend> RankBackendFromFlags(int local_rank, int threads) {
  RankBackend backend;
  backend.threads = threads;
  const std::string kind = absl::GetFlag(FLAGS_backend);
  if (kind != "cpu" && kind != "cuda") {
    return absl::InvalidArgumentError(
        absl::StrCat("--backend '", kind, "': expected cpu or cuda"));
  }
  backend.cuda = kind == "cuda";
  const std::string matmul = absl::GetFlag(FLAGS_cuda_matmul);
  if (matmul != "fp32" && matmul != "tf32") {
    return absl::InvalidArgumentError(
        absl::StrCat("--cuda_matmul '", matmul, "': expected fp32 or tf32"));
  }
  backend.matmul_precision =
      matmul == "fp32" ? kernels::cuda::MatmulPrecision::kFloat32
                       : kernels::cuda::MatmulPrecision::kTensorFloat32;
  ASSIGN_OR_RETURN(
      backend.device_memory_bytes,
      DeviceMemoryFlagBytes(backend.cuda ? 0 : kDefaultCpuDeviceMemoryBytes));
  if (backend.cuda) {
    ASSIGN_OR_RETURN(backend.cuda_device, CudaDeviceOf(local_rank));
  }
  return backend;
}

absl::StatusOr<int64_t> DevicePoolBytes(const RankBackend& backend) {
  if (!backend.cuda || backend.device_memory_bytes > 0) {
    return backend.device_memory_bytes;
  }
  ASSIGN_OR_RETURN(const kernels::cuda::CudaDeviceInfo device,
                   kernels::cuda::FindCudaDevice(backend.cuda_device));
  return kernels::cuda::CudaDevicePoolBytes(device);
}

engine::BackendFactory BackendFactoryOf(const RankBackend& backend) {
  if (!backend.cuda) {
    return [backend]() -> absl::StatusOr<std::unique_ptr<engine::Backend>> {
      return engine::Backend::CreateCpu(backend.threads,
                                        backend.device_memory_bytes);
    };
  }
  return [backend] {
    engine::CudaBackendOptions options;
    options.device = backend.cuda_device;
    options.matmul_precision = backend.matmul_precision;
    options.device_memory_bytes = backend.device_memory_bytes;
    return engine::CreateCudaBackend(options);
  };
}

engine::GroupConnector GroupConnectorOf(
    const RankBackend& backend, std::shared_ptr<gloo::rendezvous::Store> store,
    absl::Duration timeout, const std::string& interface_address) {
  return [backend, store = std::move(store), timeout, interface_address](
             const std::string& group_name, int group_rank, int group_size)
             -> absl::StatusOr<std::unique_ptr<engine::Communicator>> {
    if (backend.cuda) {
      ASSIGN_OR_RETURN(std::unique_ptr<engine::NcclCommunicator> nccl,
                       engine::NcclCommunicator::Create(
                           store, group_name, group_rank, group_size, timeout,
                           backend.cuda_device));
      return std::unique_ptr<engine::Communicator>(std::move(nccl));
    }
    return engine::GlooGroupConnector(store, timeout, interface_address)(
        group_name, group_rank, group_size);
  };
}

}  // namespace plateau::worker
