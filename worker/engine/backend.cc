#include "worker/engine/backend.h"

#include "absl/strings/str_cat.h"
#include "common/byte_size.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/simd.h"

namespace plateau::engine {

std::unique_ptr<Backend> Backend::CreateCpu(int threads,
                                            int64_t device_capacity_bytes) {
  std::unique_ptr<Backend> backend(new Backend());
  backend->ops_ = std::make_unique<kernels::cpu::CpuOps>(threads);
  backend->device_memory_ = std::make_unique<HostMemorySource>();
  backend->host_memory_ = std::make_unique<HostMemorySource>();
  AccountedAllocator::Options options;
  options.device_source = backend->device_memory_.get();
  options.host_source = backend->host_memory_.get();
  options.device_capacity_bytes = device_capacity_bytes;
  backend->allocator_ = std::make_unique<AccountedAllocator>(options);
  backend->description_ = absl::StrCat(
      "cpu (", threads, " threads, ",
      kernels::cpu::SimdLevelName(kernels::cpu::DetectedSimdLevel()),
      ", device memory ", FormatBytes(device_capacity_bytes), ")");
  return backend;
}

}  // namespace plateau::engine
