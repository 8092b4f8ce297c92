// nccl_communicator.h in a build without the CUDA toolkit (bazel/cuda.bzl).
#include "engine/parallel/nccl_communicator.h"
#include "kernels/cuda/device.h"

namespace plateau::engine {

absl::StatusOr<std::unique_ptr<NcclCommunicator>> NcclCommunicator::Create(
    std::shared_ptr<gloo::rendezvous::Store>, const std::string&, int, int,
    absl::Duration, int) {
  // Always an error here: this build has no CUDA device.
  return kernels::cuda::RequireCudaDevice();
}

}  // namespace plateau::engine
