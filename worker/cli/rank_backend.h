// The backend a `plateau-worker train` rank runs on, from its flags:
// --backend cpu (CpuOps, Gloo; the default) or cuda (CudaOps on the
// --cuda_devices entry of its local rank, NCCL), and the device pool's
// capacity, --device_memory (default 4GiB on the CPU, all the device allows
// on CUDA, kernels::cuda::CudaDevicePoolBytes).
#ifndef PLATEAU_WORKER_CLI_RANK_BACKEND_H_
#define PLATEAU_WORKER_CLI_RANK_BACKEND_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "engine/backend.h"
#include "engine/parallel/parallel_layout.h"
#include "engine/parallel/rank_groups.h"
#include "gloo/rendezvous/store.h"
#include "kernels/cuda/matmul_precision.h"

namespace plateau::worker {

struct RankBackend {
  bool cuda = false;
  int cuda_device = 0;
  kernels::cuda::MatmulPrecision matmul_precision =
      kernels::cuda::MatmulPrecision::kFloat32;
  // The device pool's capacity; on CUDA 0 for all the device allows.
  int64_t device_memory_bytes = 0;
  int threads = 1;
};

// INVALID_ARGUMENT naming the flag for a bad value; local_rank is the
// rank's index among its launcher's ranks (0 when not launched).
absl::StatusOr<RankBackend> RankBackendFromFlags(int local_rank, int threads);

// The device pool's capacity in bytes, resolved on CUDA (for planning
// `schedules: auto`); FindCudaDevice's error without the device.
absl::StatusOr<int64_t> DevicePoolBytes(const RankBackend& backend);

engine::BackendFactory BackendFactoryOf(const RankBackend& backend);

// Gloo groups on the CPU backend (listening on interface_address), NCCL
// groups on the device on CUDA, all through `store` with `timeout`.
engine::GroupConnector GroupConnectorOf(
    const RankBackend& backend, std::shared_ptr<gloo::rendezvous::Store> store,
    absl::Duration timeout, const std::string& interface_address);

}  // namespace plateau::worker

#endif  // PLATEAU_WORKER_CLI_RANK_BACKEND_H_
