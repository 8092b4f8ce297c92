// What the optimizers keep and what ZeRO-1 moves, from the shapes alone:
// the regions of a shard's flat buffers and this rank's share of each
// (zero_shards.h), the optimizers' state (adamw_optimizer.h,
// tiered_optimizer.h) as the buffers they allocate, and the footprints of
// their set-up and of the step's two collectives. The optimizers and
// ZeroShards allocate from these; the memory planner plays them.
#ifndef PLATEAU_ENGINE_OPTIM_OPTIMIZER_FOOTPRINT_H_
#define PLATEAU_ENGINE_OPTIM_OPTIMIZER_FOOTPRINT_H_

#include <array>
#include <cstdint>
#include <optional>
#include <vector>

#include "engine/memory/footprint.h"
#include "engine/model/parameter_layout.h"
#include "engine/optim/tier_rule.h"
#include "proto/job.pb.h"

namespace plateau::engine {

// A range [begin, end) of the model's flat buffers (ParameterLayout
// offsets) whose parameters this rank updates.
struct OwnedRange {
  int64_t begin = 0;
  int64_t end = 0;
};

// One region of the flat buffers, split evenly over a group of ranks; this
// rank is `group_index` of `group_size`.
struct ZeroRegion {
  int64_t begin = 0;
  int64_t elements = 0;
  int group_size = 1;
  int group_index = 0;
  // Split over the expert region's group (data parallel), not the dense
  // region's (the stage's batch group).
  bool expert_group = false;
  // How the device stores the region's weights (SplitBuffers): bf16 for
  // the regions bf16 reads rounded with bf16 weight storage.
  DType weights_dtype = DType::kFloat32;
  // How the device stores its gradients: bf16 for those regions with bf16
  // gradient accumulation.
  DType gradients_dtype = DType::kFloat32;

  int64_t shard_elements() const { return elements / group_size; }
  int64_t shard_begin() const { return begin + group_index * shard_elements(); }
};

// The dense region over the stage's batch group (expert x data parallel),
// in three (its float32-only parameters; from ParameterLayout::bf16_begin
// the embedding; from dense_products_begin its product weights: the
// reductions' buffers are a region's, so the embedding's is not added to
// the product weights'), and the expert region over the data-parallel
// group. A region may be empty.
std::vector<ZeroRegion> ZeroRegionsOf(const ParameterLayout& layout,
                                      int dense_group_size,
                                      int dense_group_index,
                                      int expert_group_size,
                                      int expert_group_index);
// This rank's shard of each non-empty region, in buffer order.
std::vector<OwnedRange> OwnedRangesOf(const std::vector<ZeroRegion>& regions);
// The elements of `owned` that the optimizers train (TrainedByOptimizer):
// those an offloaded optimizer keeps masters of.
int64_t OwnedTrainedElements(const ParameterLayout& layout,
                             const std::vector<OwnedRange>& owned);

// A region's shard while a collective moves it: the reduce-scatter's sums
// (gradients) or the all-gather's copy of this rank's shard (staging). A
// region of bf16 gradients is reduced in float32 a chunk of at most
// kGradientChunkElements of the shard at a time: its buffer holds every
// rank's part of the chunk widened, then the chunk's sums.
BufferSpec ReduceScatterBuffer(const ZeroRegion& region);
BufferSpec AllGatherBuffer(const ZeroRegion& region);
inline constexpr int64_t kGradientChunkElements = int64_t{1} << 20;
// With bf16 gradients, the float32 chunk that the gradient norm and
// clipping widen this rank's bf16 shards into (ZeroShards::
// OwnedSumOfSquares, ScaleOwned): at most kGradientChunkElements; nullopt
// when no region has bf16 gradients.
std::optional<BufferSpec> OwnedGradientChunkBuffer(
    const std::vector<ZeroRegion>& regions);
// ZeroShards::ReduceGradients, the norm and clipping of the owned
// gradients, and GatherWeights.
void ReduceGradientsFootprint(const std::vector<ZeroRegion>& regions,
                              FootprintSink& sink);
void OwnedGradientsFootprint(const std::vector<ZeroRegion>& regions,
                             FootprintSink& sink);
void GatherWeightsFootprint(const std::vector<ZeroRegion>& regions,
                            FootprintSink& sink);

// Where an optimizer keeps its state: on the device, or on the host with
// its updates streamed in buckets or done in one serial pass.
enum class OptimizerOffload { kNone, kSerial, kStream };
// `schedules.optimizer_offload` of a job spec.
OptimizerOffload OptimizerOffloadOf(v1::OptimizerOffload offload);
// The offloaded optimizers' bucket (AdamWSettings, TieredSettings).
inline constexpr int64_t kOffloadBucketElements = int64_t{1} << 18;

// With bf16 weight storage, the host staging an offloaded optimizer rounds
// its masters into on their way to the device (MasterCopies): two slots of
// kWriteBackSlotElements bf16 values.
inline constexpr int64_t kWriteBackSlotElements = int64_t{1} << 20;
BufferSpec WriteBackStagingBuffer();
// With bf16 gradient accumulation, the host slot an offloaded optimizer's
// bf16 gradients come down through to be widened (GradientCopies): at most
// kGradientFetchSlotElements bf16 values.
inline constexpr int64_t kGradientFetchSlotElements = int64_t{1} << 20;
BufferSpec GradientFetchStagingBuffer();

// AdamW over `owned`: two moments of every owned parameter element, and
// with offload the host master weights and the staging the copies stream
// through (two buckets, or with serial offload the whole state), and with
// bf16 weight storage the write-back's.
struct AdamWState {
  static AdamWState For(const ParameterLayout& layout,
                        const std::vector<OwnedRange>& owned,
                        OptimizerOffload offload, int64_t bucket_elements);

  int64_t state_elements = 0;
  BufferSpec first_moment, second_moment;  // optimizer, device or host
  BufferSpec master_weights;               // host weights   (offload only)
  BufferSpec staging;                      // host staging   (offload only)
  std::optional<BufferSpec> write_back;    // WriteBackStagingBuffer
  // GradientFetchStagingBuffer (offload with bf16 gradients only).
  std::optional<BufferSpec> gradient_fetch;
};
inline constexpr int kAdamWStagingSlots = 2;

// A tiered optimizer (SkewAdam, Adafactor, Lion) over `owned`: its
// momentum (float32 and bfloat16), exact second moments, the factored
// statistics of the dense and the expert group (with their partial sums,
// and with offload a device buffer for their reduction), and with offload
// the host master weights and staging.
struct TieredState {
  static TieredState For(const ParameterLayout& layout,
                         const std::vector<OwnedRange>& owned, TieredKind kind,
                         MomentumStorage expert_momentum);

  int64_t owned_elements = 0;
  int64_t momentum_float32 = 0;
  int64_t momentum_bfloat16 = 0;
  int64_t exact_second_moment = 0;
  std::array<int64_t, 2> statistics{};  // dense group, expert group
  bool bf16_weight_storage = false;     // the layout's
  bool bf16_gradients = false;          // the layout's
};
// The buffers TieredOptimizer::Allocate makes for `state`, in its pool
// (the host with offload); grouped[g]: group g (dense, expert) has a
// communicator, as every group has in a run of more than one rank.
// Buffers of no elements are not made.
struct TieredStateBuffers {
  static TieredStateBuffers For(const TieredState& state, bool offloaded,
                                const std::array<bool, 2>& grouped);

  BufferSpec momentum;           // optimizer
  BufferSpec momentum_bfloat16;  // optimizer
  BufferSpec second_moment;      // optimizer
  // Per group (dense, expert): the statistics, their partial sums, and
  // with offload a device buffer for their reduction (staging).
  std::array<BufferSpec, 2> statistics, partial, transfer;
  BufferSpec master_weights;  // host weights  (offload only)
  BufferSpec staging;         // host staging  (offload only)
  // WriteBackStagingBuffer (offload with bf16 weight storage only).
  std::optional<BufferSpec> write_back;
  // GradientFetchStagingBuffer (offload with bf16 gradients only).
  std::optional<BufferSpec> gradient_fetch;
};

// The optimizer state a rank puts in a checkpoint (its StatePieces but the
// replicas'), in elements. first_in_group[g]: this rank is the first of
// group g (dense, expert), or the group has no communicator: the others
// hold replicas of its factored statistics.
int64_t AdamWCheckpointElements(const AdamWState& state);
int64_t TieredCheckpointElements(const TieredState& state,
                                 const std::array<bool, 2>& first_in_group);

// The set-up footprints (allocations kept for the run).
void AdamWSetUpFootprint(const AdamWState& state, FootprintSink& sink);
void TieredSetUpFootprint(const TieredStateBuffers& buffers,
                          FootprintSink& sink);

}  // namespace plateau::engine

#endif  // PLATEAU_ENGINE_OPTIM_OPTIMIZER_FOOTPRINT_H_
