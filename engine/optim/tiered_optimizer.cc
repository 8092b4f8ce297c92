#include "engine/optim/tiered_optimizer.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "common/status_macros.h"
#include "engine/memory/dtype.h"
#include "kernels/cpu/cpu_ops.h"

namespace plateau::engine {
namespace {

int64_t MomentumBytes(MomentumStorage storage) {
  switch (storage) {
    case MomentumStorage::kNone:
      return 0;
    case MomentumStorage::kBfloat16:
      return 2;
    case MomentumStorage::kFloat32:
      return 4;
  }
  return 0;
}

// `shape` without the dimension `from_end` places from its end: the row
// statistics drop the columns (1), the column statistics the rows (2).
std::vector<int64_t> WithoutDimension(std::vector<int64_t> shape,
                                      size_t from_end) {
  shape.erase(shape.end() - static_cast<std::ptrdiff_t>(from_end));
  return shape;
}

}  // namespace

TieredOptimizer::TieredOptimizer(const TieredSettings& settings,
                                 const ParameterLayout* layout,
                                 const SplitBuffers& weights,
                                 const SplitBuffers& gradients,
                                 kernels::Ops* ops)
    : settings_(settings),
      layout_(layout),
      weights_(weights),
      gradients_(gradients),
      ops_(ops),
      state_ops_(ops) {}

absl::StatusOr<std::unique_ptr<TieredOptimizer>> TieredOptimizer::Create(
    const TieredSettings& settings, const ParameterLayout* layout,
    std::vector<OwnedRange> owned, Communicator* dense_group,
    Communicator* expert_group, const SplitBuffers& weights,
    const SplitBuffers& gradients, kernels::Ops* ops,
    AccountedAllocator* allocator) {
  if (settings.offload != OptimizerOffload::kNone &&
      settings.host_threads < 1) {
    return absl::InvalidArgumentError("optimizer offload needs host threads");
  }
  if (layout->bf16_weight_storage() &&
      settings.offload == OptimizerOffload::kNone) {
    return absl::InvalidArgumentError(
        "bf16 weight storage needs an offloaded optimizer, whose masters "
        "keep the float32 weights");
  }
  if (!(settings.clip_threshold > 0.0f)) {
    return absl::InvalidArgumentError(
        absl::StrCat("the update clip threshold must be positive, not ",
                     settings.clip_threshold));
  }
  std::unique_ptr<TieredOptimizer> optimizer(
      new TieredOptimizer(settings, layout, weights, gradients, ops));
  if (owned.empty()) owned.push_back({0, layout->total_elements()});
  RETURN_IF_ERROR(optimizer->Plan(owned, dense_group, expert_group));
  RETURN_IF_ERROR(optimizer->Allocate(*allocator));
  if (optimizer->offloaded()) optimizer->CopyMastersFromWeights();
  return optimizer;
}

absl::Status TieredOptimizer::Plan(const std::vector<OwnedRange>& owned,
                                   Communicator* dense_group,
                                   Communicator* expert_group) {
  groups_[kDenseGroup].communicator = dense_group;
  groups_[kExpertGroup].communicator = expert_group;
  // Units of every parameter on this rank (the same list on every rank of a
  // group), and where each parameter's first unit is.
  std::map<const ParameterInfo*, int> first_unit;
  for (const ParameterInfo& info : layout_->parameters()) {
    if (!TrainedByOptimizer(info)) continue;
    const std::vector<int64_t>& shape = info.global_shape;
    Unit unit;
    unit.parameter = &info;
    unit.rule =
        TierRuleOf(settings_.kind, settings_.expert_momentum, info.role, shape);
    unit.decay = info.role != ParameterRole::kNorm;
    unit.group =
        info.role == ParameterRole::kExpert ? kExpertGroup : kDenseGroup;
    unit.rows = shape.size() >= 2 ? shape[shape.size() - 2] : 1;
    unit.columns = shape.back();
    // Only an expert bank has several matrices (this rank's experts are
    // whole ones); a Ring-DTP shard of the lm_head is part of one.
    int64_t first_matrix = 0;
    int64_t matrices = 1;
    if (shape.size() > 2) {
      const int64_t unit_elements = unit.rows * unit.columns;
      if (info.global_offset % unit_elements != 0 ||
          info.elements % unit_elements != 0) {
        return absl::InternalError(absl::StrCat(
            info.name, ": this rank's part ", ShapeString(info.shape),
            " is not made of whole matrices of ", ShapeString(shape)));
      }
      first_matrix = info.global_offset / unit_elements;
      matrices = info.elements / unit_elements;
    }
    first_unit[&info] = static_cast<int>(units_.size());
    Group& group = groups_[unit.group];
    for (int64_t m = 0; m < matrices; ++m) {
      unit.matrix_index = first_matrix + m;
      unit.statistics_offset = group.statistics_elements;
      if (unit.rule.factored) {
        group.statistics_elements += unit.rows + unit.columns;
      }
      unit.sum_slot = static_cast<int64_t>(group.sums.size());
      group.sums.push_back(0.0);
      units_.push_back(unit);
    }
  }
  // Each unit is in one region, so in at most one owned range: its row and
  // column sums come from one slice.
  std::vector<bool> sliced(units_.size(), false);
  for (const OwnedRange& range : owned) {
    for (const ParameterInfo& info : layout_->parameters()) {
      if (!TrainedByOptimizer(info)) continue;
      int64_t begin = std::max(range.begin, info.offset);
      const int64_t end = std::min(range.end, info.offset + info.elements);
      while (begin < end) {
        const int64_t whole_element =
            info.global_offset + (begin - info.offset);
        const Unit& first = units_[first_unit.at(&info)];
        const int64_t unit_elements = first.rows * first.columns;
        const int64_t matrix = whole_element / unit_elements;
        Slice slice;
        slice.unit = first_unit.at(&info) +
                     static_cast<int>(matrix - first.matrix_index);
        slice.offset = begin;
        slice.owned_offset = owned_elements_;
        slice.first_element = whole_element % unit_elements;
        slice.elements =
            std::min(end - begin, unit_elements - slice.first_element);
        if (sliced[slice.unit]) {
          return absl::InvalidArgumentError(absl::StrCat(
              info.name, ": the owned ranges hold two parts of one tensor"));
        }
        sliced[slice.unit] = true;
        const TierRule& rule = units_[slice.unit].rule;
        int64_t& momentum = momentum_elements_[static_cast<int>(rule.momentum)];
        if (rule.momentum != MomentumStorage::kNone) {
          slice.momentum_offset = momentum;
          momentum += slice.elements;
        }
        if (rule.second_moment && !rule.factored) {
          slice.second_moment_offset = second_moment_elements_;
          second_moment_elements_ += slice.elements;
        }
        owned_elements_ += slice.elements;
        slices_.push_back(slice);
        begin += slice.elements;
      }
    }
  }
  return absl::OkStatus();
}

absl::Status TieredOptimizer::Allocate(AccountedAllocator& allocator) {
  const MemoryPool pool = offloaded() ? MemoryPool::kHost : MemoryPool::kDevice;
  if (offloaded()) {
    host_ops_ = std::make_unique<kernels::cpu::CpuOps>(settings_.host_threads);
    state_ops_ = host_ops_.get();
  }
  // The state as Plan counted it, in the buffers its footprint names.
  TieredState state;
  state.owned_elements = owned_elements_;
  state.momentum_float32 =
      momentum_elements_[static_cast<int>(MomentumStorage::kFloat32)];
  state.momentum_bfloat16 =
      momentum_elements_[static_cast<int>(MomentumStorage::kBfloat16)];
  state.exact_second_moment = second_moment_elements_;
  state.bf16_weight_storage = layout_->bf16_weight_storage();
  state.bf16_gradients = layout_->bf16_gradients();
  std::array<bool, 2> grouped{};
  for (int g = 0; g < 2; ++g) {
    state.statistics[g] = groups_[g].statistics_elements;
    grouped[g] = groups_[g].communicator != nullptr;
  }
  const TieredStateBuffers buffers =
      TieredStateBuffers::For(state, offloaded(), grouped);
  // Zeroed state (bfloat16: zero bits); no tensor for no elements.
  auto zeroed = [&](Tensor& tensor, const BufferSpec& spec) -> absl::Status {
    if (spec.elements() == 0) return absl::OkStatus();
    ASSIGN_OR_RETURN(tensor, Tensor::Create(allocator, spec));
    const int64_t floats = spec.bytes() / kFloatBytes;
    (spec.pool == pool ? state_ops_ : ops_)->Fill(floats, 0.0f, tensor.f32());
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(zeroed(momentum_, buffers.momentum));
  RETURN_IF_ERROR(zeroed(momentum_bfloat16_, buffers.momentum_bfloat16));
  RETURN_IF_ERROR(zeroed(second_moment_, buffers.second_moment));
  for (int g = 0; g < 2; ++g) {
    RETURN_IF_ERROR(zeroed(groups_[g].statistics, buffers.statistics[g]));
    RETURN_IF_ERROR(zeroed(groups_[g].partial, buffers.partial[g]));
    RETURN_IF_ERROR(zeroed(groups_[g].transfer, buffers.transfer[g]));
  }
  if (!offloaded()) return absl::OkStatus();
  RETURN_IF_ERROR(zeroed(master_weights_, buffers.master_weights));
  RETURN_IF_ERROR(zeroed(staging_, buffers.staging));
  ASSIGN_OR_RETURN(
      weights_up_,
      MasterCopies::Create(weights_, ops_, host_ops_.get(), &allocator));
  ASSIGN_OR_RETURN(gradients_down_,
                   GradientCopies::Create(gradients_, ops_, &allocator));
  return absl::OkStatus();
}

float* TieredOptimizer::SliceParameters(const Slice& slice) {
  return offloaded() ? master_weights_.f32() + slice.owned_offset
                     : weights_.Float32At(slice.offset);
}

const float* TieredOptimizer::SliceGradients(const Slice& slice) {
  return offloaded() ? staging_.f32() + slice.owned_offset
                     : gradients_.Float32At(slice.offset);
}

kernels::TieredSlice TieredOptimizer::KernelSlice(const Slice& slice,
                                                  float correction) {
  const Unit& unit = units_[slice.unit];
  kernels::TieredSlice kernel;
  kernel.count = slice.elements;
  kernel.params = SliceParameters(slice);
  kernel.grads = SliceGradients(slice);
  kernel.decay = unit.decay;
  if (unit.rule.momentum == MomentumStorage::kFloat32) {
    kernel.momentum = momentum_.f32() + slice.momentum_offset;
  } else if (unit.rule.momentum == MomentumStorage::kBfloat16) {
    kernel.momentum_bfloat16 =
        momentum_bfloat16_.bf16() + slice.momentum_offset;
  }
  kernel.second_moment_scale = correction;
  if (unit.rule.factored) {
    // The group's partial buffer holds the sums, then the roots.
    Group& group = groups_[unit.group];
    float* partial = group.partial.f32() + unit.statistics_offset;
    float* statistics = group.statistics.f32() + unit.statistics_offset;
    kernel.row_sums = partial;
    kernel.column_sums = partial + unit.rows;
    kernel.row_roots = partial;
    kernel.column_roots = partial + unit.rows;
    kernel.row_statistics = statistics;
    kernel.column_statistics = statistics + unit.rows;
    kernel.first_element = slice.first_element;
    kernel.rows = unit.rows;
    kernel.columns = unit.columns;
  } else if (unit.rule.second_moment) {
    kernel.second_moment = second_moment_.f32() + slice.second_moment_offset;
  }
  return kernel;
}

absl::Status TieredOptimizer::ReduceStatistics(Group& group) {
  const int64_t count = group.statistics_elements;
  if (group.communicator == nullptr || count == 0) return absl::OkStatus();
  if (!offloaded()) {
    return group.communicator->AllReduceSum(group.partial.f32(), count);
  }
  ops_->CopyFromHost(count * kFloatBytes, group.partial.f32(),
                     group.transfer.f32());
  RETURN_IF_ERROR(
      group.communicator->AllReduceSum(group.transfer.f32(), count));
  ops_->CopyToHost(count * kFloatBytes, group.transfer.f32(),
                   group.partial.f32());
  return absl::OkStatus();
}

std::vector<std::pair<size_t, size_t>> TieredOptimizer::Buckets() const {
  if (!offloaded()) return {{0, slices_.size()}};
  std::vector<std::pair<size_t, size_t>> buckets;
  int64_t elements = 0;
  for (size_t s = 0; s < slices_.size(); ++s) {
    if (buckets.empty() || elements >= settings_.bucket_elements) {
      buckets.push_back({s, s});
      elements = 0;
    }
    buckets.back().second = s + 1;
    elements += slices_[s].elements;
  }
  return buckets;
}

absl::Status TieredOptimizer::Step(float learning_rate, int64_t step) {
  const kernels::TieredCoefficients coefficients =
      kernels::ComputeTieredCoefficients(learning_rate, settings_.beta1,
                                         settings_.beta2, settings_.epsilon,
                                         settings_.weight_decay, step);
  const float correction =
      kernels::SecondMomentCorrection(settings_.beta2, step);
  std::vector<kernels::TieredSlice> kernel_slices;
  kernel_slices.reserve(slices_.size());
  for (const Slice& slice : slices_) {
    kernel_slices.push_back(KernelSlice(slice, correction));
  }

  // With offload the owned gradients go to host staging first, a bucket of
  // slices at a time; stream starts on each bucket as soon as it is there.
  const std::vector<std::pair<size_t, size_t>> buckets = Buckets();
  const bool stream = settings_.offload == OptimizerOffload::kStream;
  std::vector<CopyEngine::Ticket> arrived(buckets.size(), 0);
  if (offloaded()) {
    for (size_t b = 0; b < buckets.size(); ++b) {
      for (size_t s = buckets[b].first; s < buckets[b].second; ++s) {
        arrived[b] =
            gradients_down_->ToHost(slices_[s].offset, slices_[s].elements,
                                    staging_.f32() + slices_[s].owned_offset);
      }
    }
    if (!stream && !buckets.empty()) gradients_down_->Wait(arrived.back());
  }
  auto wait_for_gradients = [&](size_t b) {
    if (stream) gradients_down_->Wait(arrived[b]);
  };
  // Updated weights go back to the device as soon as they are final, while
  // the next ones update (stream), or one after the other (serial).
  auto send_weights = [&](const std::vector<size_t>& indices) {
    if (!offloaded()) return;
    for (size_t s : indices) {
      weights_up_->Send(master_weights_.f32() + slices_[s].owned_offset,
                        slices_[s].offset, slices_[s].elements);
    }
    if (!stream) weights_up_->Wait();
  };
  // The slices of [first, end) that `wanted` picks, and their kernel slices.
  std::vector<size_t> indices;
  std::vector<kernels::TieredSlice> picked;
  auto pick = [&](size_t first, size_t end, auto wanted) {
    indices.clear();
    picked.clear();
    for (size_t s = first; s < end; ++s) {
      if (!wanted(s)) continue;
      indices.push_back(s);
      picked.push_back(kernel_slices[s]);
    }
  };
  auto all = [](size_t) { return true; };

  if (settings_.kind == TieredKind::kLion) {
    for (size_t b = 0; b < buckets.size(); ++b) {
      wait_for_gradients(b);
      pick(buckets[b].first, buckets[b].second, all);
      state_ops_->LionUpdate(coefficients, picked);
      send_weights(indices);
    }
    if (offloaded()) weights_up_->Wait();
    return absl::OkStatus();
  }

  // ---- 1. Each whole tensor small enough for the cache, in one go ----
  // Its sums, statistics, moments, u, rms and update while it is still in
  // cache. The group's partial buffer gets its new statistics (and zero
  // from every other rank of the group).
  for (Group& group : groups_) {
    if (group.statistics_elements > 0) {
      state_ops_->Fill(group.statistics_elements, 0.0f, group.partial.f32());
    }
  }
  auto cache_resident = [&](size_t s) {
    const Unit& unit = units_[slices_[s].unit];
    return slices_[s].elements == unit.rows * unit.columns &&
           slices_[s].elements <= settings_.whole_update_elements;
  };
  for (size_t b = 0; b < buckets.size(); ++b) {
    wait_for_gradients(b);
    pick(buckets[b].first, buckets[b].second, cache_resident);
    state_ops_->TieredUpdate(coefficients, picked, settings_.clip_threshold);
    send_weights(indices);
  }

  // ---- 2. The other factored slices: statistics summed over each group ----
  // Each rank adds (1 - beta2) x its sums; the one holding the matrix's
  // first element also beta2 x R and C (the same on every rank).
  auto factored_elsewhere = [&](size_t s) {
    return units_[slices_[s].unit].rule.factored && !cache_resident(s);
  };
  for (size_t b = 0; b < buckets.size(); ++b) {
    pick(buckets[b].first, buckets[b].second, factored_elsewhere);
    state_ops_->AccumulateSquares(picked);
  }
  pick(0, slices_.size(), factored_elsewhere);
  for (size_t s : indices) {
    const Unit& unit = units_[slices_[s].unit];
    Group& group = groups_[unit.group];
    const int64_t count = unit.rows + unit.columns;
    float* partial = group.partial.f32() + unit.statistics_offset;
    float* statistics = group.statistics.f32() + unit.statistics_offset;
    state_ops_->Scale(count, 1.0f - settings_.beta2, partial);
    if (slices_[s].first_element == 0) {
      state_ops_->Scale(count, settings_.beta2, statistics);
      state_ops_->Add(count, partial, statistics, partial);
    }
  }
  for (Group& group : groups_) {
    if (group.statistics_elements == 0) continue;
    RETURN_IF_ERROR(ReduceStatistics(group));
    state_ops_->Copy(group.statistics_elements, group.partial.f32(),
                     group.statistics.f32());
  }
  // Their roots, in the partial buffer: sqrt(R / (sum(R) (1 - beta2^t)))
  // and sqrt(C).
  for (size_t s : indices) {
    const Unit& unit = units_[slices_[s].unit];
    Group& group = groups_[unit.group];
    const float* statistics = group.statistics.f32() + unit.statistics_offset;
    float* roots = group.partial.f32() + unit.statistics_offset;
    const double row_total = state_ops_->Sum(unit.rows, statistics);
    state_ops_->SquareRoots(unit.rows,
                            static_cast<float>(correction / row_total),
                            statistics, roots);
    state_ops_->SquareRoots(unit.columns, 1.0f, statistics + unit.rows,
                            roots + unit.rows);
  }

  // ---- 3. The rest: moments and u^2 summed over each group, the update ----
  pick(0, slices_.size(), [&](size_t s) { return !cache_resident(s); });
  std::vector<double> slice_sums(picked.size(), 0.0);
  state_ops_->TieredMeasure(coefficients, picked, absl::MakeSpan(slice_sums));
  for (Group& group : groups_) {
    std::fill(group.sums.begin(), group.sums.end(), 0.0);
  }
  for (size_t i = 0; i < indices.size(); ++i) {
    const Unit& unit = units_[slices_[indices[i]].unit];
    groups_[unit.group].sums[unit.sum_slot] += slice_sums[i];
  }
  for (Group& group : groups_) {
    if (group.communicator == nullptr || group.sums.empty()) continue;
    RETURN_IF_ERROR(group.communicator->AllReduceSum(
        group.sums.data(), static_cast<int64_t>(group.sums.size())));
  }
  for (size_t i = 0; i < indices.size(); ++i) {
    const Unit& unit = units_[slices_[indices[i]].unit];
    const double rms = std::sqrt(groups_[unit.group].sums[unit.sum_slot] /
                                 static_cast<double>(unit.rows * unit.columns));
    picked[i].update_scale =
        static_cast<float>(1.0 / std::max(1.0, rms / settings_.clip_threshold));
  }
  state_ops_->TieredApply(coefficients, picked);
  send_weights(indices);
  if (offloaded()) weights_up_->Wait();
  return absl::OkStatus();
}

void TieredOptimizer::CopyMastersFromWeights() {
  for (const Slice& slice : slices_) {
    weights_up_->Fetch(slice.offset, slice.elements,
                       master_weights_.f32() + slice.owned_offset);
  }
}

std::vector<TensorPiece> TieredOptimizer::MasterPieces() {
  std::vector<TensorPiece> pieces;
  if (!offloaded()) return pieces;
  for (const Slice& slice : slices_) {
    const ParameterInfo& info = *units_[slice.unit].parameter;
    pieces.push_back(
        {info.name, info.global_shape,
         info.global_offset + (slice.offset - info.offset), slice.elements,
         master_weights_.f32() + slice.owned_offset, master_weights_.pool()});
  }
  return pieces;
}

std::vector<TensorPiece> TieredOptimizer::StatePieces() {
  std::vector<TensorPiece> pieces;
  const MemoryPool pool = offloaded() ? MemoryPool::kHost : MemoryPool::kDevice;
  for (const Slice& slice : slices_) {
    const Unit& unit = units_[slice.unit];
    const ParameterInfo& info = *unit.parameter;
    const int64_t offset = info.global_offset + (slice.offset - info.offset);
    if (unit.rule.momentum == MomentumStorage::kFloat32) {
      pieces.push_back({info.name + ".exp_avg", info.global_shape, offset,
                        slice.elements, momentum_.f32() + slice.momentum_offset,
                        pool});
    } else if (unit.rule.momentum == MomentumStorage::kBfloat16) {
      TensorPiece piece{info.name + ".exp_avg", info.global_shape, offset,
                        slice.elements,         nullptr,           pool};
      piece.bfloat16_data = momentum_bfloat16_.bf16() + slice.momentum_offset;
      pieces.push_back(piece);
    }
    if (unit.rule.second_moment && !unit.rule.factored) {
      pieces.push_back(
          {info.name + ".exp_avg_sq", info.global_shape, offset, slice.elements,
           second_moment_.f32() + slice.second_moment_offset, pool});
    }
  }
  for (const Unit& unit : units_) {
    if (!unit.rule.factored) continue;
    const ParameterInfo& info = *unit.parameter;
    const Group& group = groups_[unit.group];
    const bool replica =
        group.communicator != nullptr && group.communicator->rank() != 0;
    float* statistics =
        const_cast<float*>(group.statistics.f32()) + unit.statistics_offset;
    TensorPiece rows{info.name + ".exp_avg_sq_row",
                     WithoutDimension(info.global_shape, 1),
                     unit.matrix_index * unit.rows,
                     unit.rows,
                     statistics,
                     pool};
    rows.replica = replica;
    TensorPiece columns{info.name + ".exp_avg_sq_col",
                        WithoutDimension(info.global_shape, 2),
                        unit.matrix_index * unit.columns,
                        unit.columns,
                        statistics + unit.rows,
                        pool};
    columns.replica = replica;
    pieces.push_back(rows);
    pieces.push_back(columns);
  }
  return pieces;
}

std::map<std::string, int64_t> TieredOptimizer::StateBytesByTier() const {
  std::map<std::string, int64_t> bytes;
  for (const Slice& slice : slices_) {
    const Unit& unit = units_[slice.unit];
    int64_t per_element = MomentumBytes(unit.rule.momentum);
    if (unit.rule.second_moment && !unit.rule.factored) {
      per_element += kFloatBytes;
    }
    bytes[OptimizerTierOf(unit.parameter->role)] +=
        per_element * slice.elements;
  }
  for (const Unit& unit : units_) {
    int64_t& tier = bytes[OptimizerTierOf(unit.parameter->role)];
    if (unit.rule.factored) tier += (unit.rows + unit.columns) * kFloatBytes;
  }
  return bytes;
}

std::map<std::string, int64_t> TieredStateBytesByTier(
    const ModelConfig& config, const TieredSettings& settings) {
  std::map<std::string, int64_t> bytes;
  const ParameterLayout whole_model(config);
  for (const ParameterInfo& info : whole_model.parameters()) {
    if (!TrainedByOptimizer(info)) continue;
    const TierRule rule = TierRuleOf(settings.kind, settings.expert_momentum,
                                     info.role, info.global_shape);
    int64_t& tier = bytes[OptimizerTierOf(info.role)];
    tier += MomentumBytes(rule.momentum) * info.elements;
    if (!rule.second_moment) continue;
    if (!rule.factored) {
      tier += kFloatBytes * info.elements;
      continue;
    }
    const std::vector<int64_t>& shape = info.global_shape;
    const int64_t rows = shape[shape.size() - 2];
    const int64_t columns = shape.back();
    tier += kFloatBytes * (rows + columns) * (info.elements / (rows * columns));
  }
  return bytes;
}

TensorShapes TieredStateShapes(const ModelConfig& config,
                               const TieredSettings& settings) {
  TensorShapes shapes;
  const ParameterLayout whole_model(config);
  for (const ParameterInfo& info : whole_model.parameters()) {
    if (!TrainedByOptimizer(info)) continue;
    const TierRule rule = TierRuleOf(settings.kind, settings.expert_momentum,
                                     info.role, info.global_shape);
    if (rule.momentum != MomentumStorage::kNone) {
      shapes[info.name + ".exp_avg"] = info.global_shape;
    }
    if (!rule.second_moment) continue;
    if (rule.factored) {
      shapes[info.name + ".exp_avg_sq_row"] =
          WithoutDimension(info.global_shape, 1);
      shapes[info.name + ".exp_avg_sq_col"] =
          WithoutDimension(info.global_shape, 2);
    } else {
      shapes[info.name + ".exp_avg_sq"] = info.global_shape;
    }
  }
  return shapes;
}

}  // namespace plateau::engine
