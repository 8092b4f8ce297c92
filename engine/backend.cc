#include "engine/backend.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/byte_size.h"
#include "kernels/cpu/blas.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/onednn_matmul.h"
#include "kernels/cpu/simd.h"

namespace plateau::engine {

std::unique_ptr<Backend> Backend::CreateCpu(int threads,
                                            int64_t device_capacity_bytes) {
  absl::StatusOr<std::unique_ptr<Backend>> backend = Assemble(
      absl::StrCat(
          "cpu (", threads, " threads, ",
          kernels::cpu::SimdLevelName(kernels::cpu::DetectedSimdLevel()),
          ", bf16 products: ", kernels::cpu::CpuOps::Bf16ProductsKernel(),
          ", device memory ", FormatBytes(device_capacity_bytes), ")"),
      absl::StrCat(
          "cpu: simd ",
          kernels::cpu::SimdLevelName(kernels::cpu::DetectedSimdLevel()),
          ", openblas ", kernels::cpu::Blas().corename(), ", onednn ",
          kernels::cpu::OneDnnIsa()),
      std::make_unique<HostMemorySource>(),
      std::make_unique<HostMemorySource>(), device_capacity_bytes,
      [threads](kernels::ScratchArena& scratch)
          -> absl::StatusOr<std::unique_ptr<kernels::Ops>> {
        return std::make_unique<kernels::cpu::CpuOps>(threads, &scratch);
      });
  // Making CpuOps cannot fail (a missing OpenBLAS ends the process).
  return *std::move(backend);
}

absl::StatusOr<std::unique_ptr<Backend>> Backend::Assemble(
    std::string description, std::string kernels,
    std::unique_ptr<MemorySource> device_memory,
    std::unique_ptr<MemorySource> host_memory, int64_t device_capacity_bytes,
    const OpsFactory& make_ops) {
  std::unique_ptr<Backend> backend(new Backend());
  backend->description_ = std::move(description);
  backend->kernels_ = std::move(kernels);
  backend->device_memory_ = std::move(device_memory);
  backend->host_memory_ = std::move(host_memory);
  AccountedAllocator::Options options;
  options.device_source = backend->device_memory_.get();
  options.host_source = backend->host_memory_.get();
  options.device_capacity_bytes = device_capacity_bytes;
  backend->allocator_ = std::make_unique<AccountedAllocator>(options);
  backend->scratch_ = std::make_unique<AccountedScratchArena>(
      backend->allocator_.get(), MemoryPool::kDevice, MemoryComponent::kOther);
  absl::StatusOr<std::unique_ptr<kernels::Ops>> ops =
      make_ops(*backend->scratch_);
  if (!ops.ok()) return ops.status();
  backend->ops_ = *std::move(ops);
  return backend;
}

}  // namespace plateau::engine
