#include "engine/memory/accounted_scratch_arena.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace plateau::engine {
namespace {

constexpr int64_t kGranularityBytes = int64_t{1} << 20;

}  // namespace

AccountedScratchArena::AccountedScratchArena(AccountedAllocator* allocator,
                                             MemoryPool pool,
                                             MemoryComponent component)
    : allocator_(allocator), pool_(pool), component_(component) {}

absl::StatusOr<void*> AccountedScratchArena::Reserve(int64_t bytes) {
  if (bytes <= block_.bytes()) return block_.data();
  const int64_t rounded =
      (bytes + kGranularityBytes - 1) / kGranularityBytes * kGranularityBytes;
  // The smaller block goes first: at the pool's edge both do not fit.
  block_.Reset();
  absl::StatusOr<Allocation> block =
      allocator_->Allocate(pool_, component_, rounded);
  if (!block.ok()) {
    return absl::Status(block.status().code(),
                        absl::StrCat("kernel scratch of ", bytes,
                                     " bytes: ", block.status().message()));
  }
  block_ = *std::move(block);
  return block_.data();
}

}  // namespace plateau::engine
