#include "worker/engine/train/model_io.h"

#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "worker/engine/memory/tensor.h"

namespace plateau::engine {
namespace {

struct NamedBuffer {
  std::string name;
  std::vector<int64_t> shape;
  float* data;  // device memory
  int64_t elements;
};

std::vector<NamedBuffer> WeightBuffers(Model& model) {
  std::vector<NamedBuffer> buffers;
  for (const ParameterInfo& info : model.layout().parameters()) {
    buffers.push_back({info.name, info.shape,
                       model.weights().f32() + info.offset, info.elements});
  }
  return buffers;
}

std::vector<NamedBuffer> OptimizerBuffers(Optimizer& optimizer) {
  std::vector<NamedBuffer> buffers;
  for (const OptimizerStateTensor& state : optimizer.StateTensors()) {
    buffers.push_back({state.name, state.shape, state.data, state.elements});
  }
  return buffers;
}

absl::StatusOr<HostSnapshot> Snapshot(const std::vector<NamedBuffer>& buffers,
                                      kernels::Ops& ops,
                                      AccountedAllocator& allocator) {
  int64_t total = 0;
  for (const NamedBuffer& buffer : buffers) total += buffer.elements;
  HostSnapshot snapshot;
  ASSIGN_OR_RETURN(snapshot.host,
                   Tensor::Create(allocator, MemoryPool::kHost,
                                  MemoryComponent::kStaging, {total}));
  int64_t offset = 0;
  for (const NamedBuffer& buffer : buffers) {
    float* destination = snapshot.host.f32() + offset;
    const size_t bytes = static_cast<size_t>(buffer.elements) * sizeof(float);
    ops.CopyToHost(static_cast<int64_t>(bytes), buffer.data, destination);
    snapshot.views.push_back({buffer.name, SafetensorsDtype::kF32, buffer.shape,
                              destination, bytes});
    offset += buffer.elements;
  }
  return snapshot;
}

absl::Status LoadBuffers(const SafetensorsReader& file,
                         const std::vector<NamedBuffer>& buffers,
                         kernels::Ops& ops) {
  std::vector<std::string> problems;
  std::set<std::string> expected;
  for (const NamedBuffer& buffer : buffers) {
    expected.insert(buffer.name);
    const TensorEntry* entry = file.Find(buffer.name);
    if (entry == nullptr) {
      problems.push_back(absl::StrCat(buffer.name, ": missing"));
    } else if (entry->dtype != SafetensorsDtype::kF32) {
      problems.push_back(absl::StrCat(buffer.name, ": dtype ",
                                      SafetensorsDtypeName(entry->dtype),
                                      ", expected F32"));
    } else if (entry->shape != buffer.shape) {
      problems.push_back(absl::StrCat(buffer.name, ": shape ",
                                      ShapeString(entry->shape), ", expected ",
                                      ShapeString(buffer.shape)));
    }
  }
  for (const TensorEntry& entry : file.tensors()) {
    if (!expected.count(entry.name)) {
      problems.push_back(absl::StrCat(entry.name, ": not part of this model"));
    }
  }
  if (!problems.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(file.path(), " does not match the model:\n  ",
                     absl::StrJoin(problems, "\n  ")));
  }
  for (const NamedBuffer& buffer : buffers) {
    const TensorEntry* entry = file.Find(buffer.name);
    ops.CopyFromHost(static_cast<int64_t>(entry->bytes), entry->data,
                     buffer.data);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<HostSnapshot> SnapshotWeights(Model& model,
                                             AccountedAllocator& allocator) {
  return Snapshot(WeightBuffers(model), model.ops(), allocator);
}

absl::StatusOr<HostSnapshot> SnapshotOptimizer(Optimizer& optimizer,
                                               kernels::Ops& ops,
                                               AccountedAllocator& allocator) {
  return Snapshot(OptimizerBuffers(optimizer), ops, allocator);
}

absl::Status LoadWeights(const SafetensorsReader& file, Model& model) {
  return LoadBuffers(file, WeightBuffers(model), model.ops());
}

absl::Status LoadOptimizerState(const SafetensorsReader& file,
                                Optimizer& optimizer, kernels::Ops& ops) {
  return LoadBuffers(file, OptimizerBuffers(optimizer), ops);
}

}  // namespace plateau::engine
