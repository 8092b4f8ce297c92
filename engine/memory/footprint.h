// What a block of the engine allocates, said once. A block names each of
// its buffers as a BufferSpec computed from the config and the token counts
// (llm.c's table of activation sizes, one per block) and allocates from it;
// the same block's footprint functions play those specs, in the block's
// order, into a FootprintSink. The memory planner's sink is a ledger, so
// its prediction follows any change to a block's buffers without restating
// a size (docs/ARCHITECTURE.md section 9); the engine's footprint tests
// check every footprint against the allocations the block really makes.
#ifndef PLATEAU_ENGINE_MEMORY_FOOTPRINT_H_
#define PLATEAU_ENGINE_MEMORY_FOOTPRINT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "engine/memory/dtype.h"
#include "engine/memory/memory_component.h"

namespace plateau::engine {

// A buffer's extents; the planner makes millions of specs, so they stay
// off the heap.
using BufferShape = absl::InlinedVector<int64_t, 4>;

struct BufferSpec {
  MemoryComponent component = MemoryComponent::kOther;
  BufferShape shape;
  DType dtype = DType::kFloat32;
  MemoryPool pool = MemoryPool::kDevice;

  int64_t elements() const;
  int64_t bytes() const { return elements() * DTypeBytes(dtype); }
  // bytes(), or nullopt where a negative extent or a product that does not
  // fit in int64 makes it meaningless.
  std::optional<int64_t> checked_bytes() const;
};

// A device buffer of `shape` elements of `dtype`, charged to `component`.
BufferSpec DeviceBuffer(MemoryComponent component, BufferShape shape,
                        DType dtype = DType::kFloat32);

// Where footprints are played: the planner's ledger, or a test's recorder.
class FootprintSink {
 public:
  // A live buffer; 0 is the handle of none.
  using Handle = int64_t;

  virtual ~FootprintSink() = default;
  virtual Handle Allocate(const BufferSpec& spec) = 0;
  // Frees a live buffer and sets *handle to 0; 0 is ignored.
  virtual void Free(Handle* handle) = 0;
  // Names the phase the next allocations belong to ("layer 3 backward").
  virtual void SetPhase(const std::string& phase) { (void)phase; }

  // Frees every handle of `handles`, in order, and clears it.
  void FreeAll(std::vector<Handle>* handles);
};

}  // namespace plateau::engine

#endif  // PLATEAU_ENGINE_MEMORY_FOOTPRINT_H_
