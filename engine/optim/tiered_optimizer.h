// The tiered optimizers (kernels/tiered_update.h for the arithmetic), each
// treating a parameter by its role (ParameterRole), never by its name:
//   skewadam:  dense backbone (attention, norms, embedding, head): fp32
//              momentum, second moment factored for matrices, exact for
//              vectors; expert bank: second moment factored per expert,
//              momentum none, bf16 or fp32 (expert_momentum); router: fp32
//              momentum and an exact second moment.
//   adafactor: no momentum; factored second moment for every matrix (per
//              expert for the experts), exact for vectors.
//   lion:      fp32 momentum and sign updates, no second moment.
// skewadam and adafactor clip each tensor's update to an rms of at most
// clip_threshold (Adafactor's d); all three decay every parameter but the
// RMSNorm scales (decoupled, as AdamW).
//
// Sharding: the owned ranges (ZeRO-1) cut through matrices, so the partial
// row and column sums of g^2 and the partial sums of u^2 are summed over the
// group that shares the tensor: the stage's batch group for the dense region
// and the lm_head, the data-parallel group for the experts. The factored
// statistics are then whole on every rank of that group (a replica); the
// group's rank 0 saves them. A small tensor one rank holds whole (most of
// them) updates there in one go while it is in cache, before the
// collectives (whole_update_elements); its new statistics join the group's
// sum.
//
// Placement (settings.offload): none keeps the state in device memory;
// serial and stream keep master weights, momentum and exact moments in host
// memory and update there (stream overlaps the gradients' copies with the
// first pass and the weights' copies with the last). The gradients are
// staged whole on the host (three passes read them). The factored
// statistics are small and stay with the state.
#ifndef PLATEAU_ENGINE_OPTIM_TIERED_OPTIMIZER_H_
#define PLATEAU_ENGINE_OPTIM_TIERED_OPTIMIZER_H_

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/memory/copy_engine.h"
#include "engine/memory/tensor.h"
#include "engine/model/parameter_layout.h"
#include "engine/model/split_buffers.h"
#include "engine/optim/adamw_optimizer.h"
#include "engine/optim/gradient_copies.h"
#include "engine/optim/master_copies.h"
#include "engine/optim/optimizer.h"
#include "engine/optim/tier_rule.h"
#include "engine/parallel/communicator.h"
#include "kernels/ops.h"
#include "proto/job.pb.h"

namespace plateau::engine {

struct TieredSettings {
  TieredKind kind = TieredKind::kSkewAdam;
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float epsilon = 1e-8f;
  float weight_decay = 0.1f;
  float clip_threshold = 1.0f;
  // SkewAdam's expert bank.
  MomentumStorage expert_momentum = MomentumStorage::kNone;
  // A tensor this rank holds whole and of at most this many elements (4 MiB
  // of float32) updates in one go, its later passes finding it in the cache
  // (L2 or L3); 0: every tensor takes the separate passes. Measured: 1 << 18
  // left the example's embedding and head to three passes through memory,
  // 10% slower.
  int64_t whole_update_elements = int64_t{1} << 20;
  OptimizerOffload offload = OptimizerOffload::kNone;
  // With offload: the host threads that update, and the slices that copy
  // and update together (a bucket ends after this many elements).
  int host_threads = 1;
  int64_t bucket_elements = kOffloadBucketElements;
};

class TieredOptimizer final : public Optimizer {
 public:
  // Allocates zeroed state (and with offload the master weights, copied
  // from `weights`, widened where they are bf16; with offload, bf16
  // gradients are widened on their way to the host, GradientCopies).
  // weights and gradients: laid out by `layout`, which must outlive the
  // optimizer, as must the buffers. Empty `owned`: every parameter. dense_group
  // and expert_group: the ZeroShards groups of the dense and the expert regions
  // (null: this rank alone). INVALID_ARGUMENT for bf16 weight storage without
  // offload (and so for bf16 gradients).
  static absl::StatusOr<std::unique_ptr<TieredOptimizer>> Create(
      const TieredSettings& settings, const ParameterLayout* layout,
      std::vector<OwnedRange> owned, Communicator* dense_group,
      Communicator* expert_group, const SplitBuffers& weights,
      const SplitBuffers& gradients, kernels::Ops* ops,
      AccountedAllocator* allocator);

  // Fails only when a group's collective fails: the group is then unusable
  // and the step half done (the run resumes from its last checkpoint).
  absl::Status Step(float learning_rate, int64_t step) override;
  std::vector<TensorPiece> MasterPieces() override;
  std::vector<TensorPiece> StatePieces() override;
  std::map<std::string, int64_t> StateBytesByTier() const override;

 private:
  // A tensor the update normalises as a whole: a whole-model matrix or
  // vector, or one expert's matrix.
  struct Unit {
    const ParameterInfo* parameter = nullptr;
    TierRule rule;
    bool decay = false;
    int group = 0;             // kDenseGroup or kExpertGroup
    int64_t matrix_index = 0;  // the expert, for an expert bank
    int64_t rows = 1;
    int64_t columns = 1;
    // Factored: R at statistics_offset, C after it, in the group's buffers.
    int64_t statistics_offset = 0;
    int64_t sum_slot = 0;  // in the group's sums of u^2
  };
  // This rank's owned elements of one unit.
  struct Slice {
    int unit = 0;
    int64_t offset = 0;         // in the flat buffers
    int64_t owned_offset = 0;   // in the master weights and host staging
    int64_t first_element = 0;  // within the unit
    int64_t elements = 0;
    int64_t momentum_offset = -1;       // in the momentum of its storage
    int64_t second_moment_offset = -1;  // in the exact second moments
  };
  struct Group {
    Communicator* communicator = nullptr;  // null: this rank alone
    int64_t statistics_elements = 0;
    Tensor statistics;  // R and C of its factored units  optimizer
    // One step's row and column sums, then (once summed into statistics)
    // the roots the update reads.
    Tensor partial;            // optimizer
    Tensor transfer;           // with offload: partial on the device  staging
    std::vector<double> sums;  // of u^2, one per unit (Unit::sum_slot)
  };
  static constexpr int kDenseGroup = 0;
  static constexpr int kExpertGroup = 1;

  TieredOptimizer(const TieredSettings& settings, const ParameterLayout* layout,
                  const SplitBuffers& weights, const SplitBuffers& gradients,
                  kernels::Ops* ops);

  absl::Status Plan(const std::vector<OwnedRange>& owned,
                    Communicator* dense_group, Communicator* expert_group);
  absl::Status Allocate(AccountedAllocator& allocator);
  // With offload: the master weights from the model's weights.
  void CopyMastersFromWeights();
  bool offloaded() const {
    return settings_.offload != OptimizerOffload::kNone;
  }
  float* SliceParameters(const Slice& slice);
  const float* SliceGradients(const Slice& slice);
  // correction: 1 / (1 - beta2^t).
  kernels::TieredSlice KernelSlice(const Slice& slice, float correction);
  // [first, end) ranges of slices_: one without offload, else of about
  // bucket_elements each.
  std::vector<std::pair<size_t, size_t>> Buckets() const;
  // Sums a group's buffer over the group; with offload through the device.
  absl::Status ReduceStatistics(Group& group);

  TieredSettings settings_;
  const ParameterLayout* layout_;
  SplitBuffers weights_;
  SplitBuffers gradients_;
  kernels::Ops* ops_;
  // The ops that update the state: the backend's, or with offload host ops.
  std::unique_ptr<kernels::Ops> host_ops_;
  kernels::Ops* state_ops_;
  std::vector<Unit> units_;
  std::vector<Slice> slices_;
  Group groups_[2];
  int64_t owned_elements_ = 0;
  int64_t momentum_elements_[3] = {0, 0, 0};  // by MomentumStorage
  int64_t second_moment_elements_ = 0;
  Tensor momentum_;           // fp32   optimizer
  Tensor momentum_bfloat16_;  // bf16   optimizer
  Tensor second_moment_;      // exact  optimizer
  // With offload (host): the owned weights' master copy, and the owned
  // gradients.
  Tensor master_weights_;  // weights
  Tensor staging_;         // staging
  std::unique_ptr<GradientCopies> gradients_down_;
  std::unique_ptr<MasterCopies> weights_up_;
};

// The whole model's state bytes by tier on one rank (what StateBytesByTier
// reports there), computed from the shapes alone: for configurations too
// large to allocate.
std::map<std::string, int64_t> TieredStateBytesByTier(
    const ModelConfig& config, const TieredSettings& settings);

// The whole model's state under `settings`, as StatePieces names it.
TensorShapes TieredStateShapes(const ModelConfig& config,
                               const TieredSettings& settings);

}  // namespace plateau::engine

#endif  // PLATEAU_ENGINE_OPTIM_TIERED_OPTIMIZER_H_
