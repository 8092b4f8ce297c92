#include "engine/train/model_io.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "engine/memory/dtype.h"
#include "engine/model/initial_weights.h"
#include "engine/model/parameter_layout.h"
#include "engine/train/checkpoint_footprint.h"
#include "kernels/tiered_update.h"

namespace plateau::engine {
namespace {

// bfloat16 pieces convert through a bounded host buffer.
constexpr int64_t kConversionElements = int64_t{1} << 16;

// Calls use(done, count, values) with the piece's values as float32 in host
// memory, in order, a bounded chunk at a time.
template <typename Use>
void ForEachFloatChunk(const TensorPiece& piece, kernels::Ops& ops, Use use) {
  if (piece.bfloat16_data == nullptr && piece.pool == MemoryPool::kHost) {
    use(0, piece.elements, piece.data);
    return;
  }
  const int64_t chunk = std::min(kConversionElements, piece.elements);
  std::vector<float> values(static_cast<size_t>(chunk));
  std::vector<uint16_t> bits(piece.bfloat16_data == nullptr ? 0 : chunk);
  for (int64_t done = 0; done < piece.elements; done += chunk) {
    const int64_t count = std::min(chunk, piece.elements - done);
    if (piece.bfloat16_data == nullptr) {
      ops.CopyToHost(count * kFloatBytes, piece.data + done, values.data());
    } else {
      const uint16_t* source = piece.bfloat16_data + done;
      if (piece.pool == MemoryPool::kHost) {
        std::copy_n(source, count, bits.data());
      } else {
        ops.CopyToHost(count * int64_t{sizeof(uint16_t)}, source, bits.data());
      }
      for (int64_t i = 0; i < count; ++i) {
        values[i] = kernels::Bfloat16ToFloat(bits[i]);
      }
    }
    use(done, count, values.data());
  }
}

// Sets the piece's values from float32 `source` in host memory.
void WritePiece(const TensorPiece& piece, const float* source,
                kernels::Ops& ops) {
  if (piece.bfloat16_data == nullptr) {
    if (piece.pool == MemoryPool::kHost) {
      std::memcpy(piece.data, source, piece.elements * kFloatBytes);
    } else {
      ops.CopyFromHost(piece.elements * kFloatBytes, source, piece.data);
    }
    return;
  }
  const int64_t chunk = std::min(kConversionElements, piece.elements);
  std::vector<uint16_t> bits(static_cast<size_t>(chunk));
  for (int64_t done = 0; done < piece.elements; done += chunk) {
    const int64_t count = std::min(chunk, piece.elements - done);
    for (int64_t i = 0; i < count; ++i) {
      bits[i] = kernels::FloatToBfloat16(source[done + i]);
    }
    uint16_t* destination = piece.bfloat16_data + done;
    if (piece.pool == MemoryPool::kHost) {
      std::copy_n(bits.data(), count, destination);
    } else {
      ops.CopyFromHost(count * int64_t{sizeof(uint16_t)}, bits.data(),
                       destination);
    }
  }
}

// Elements [first, first + count) of `piece`.
TensorPiece PartOf(const TensorPiece& piece, int64_t first, int64_t count) {
  TensorPiece part = piece;
  part.offset += first;
  part.elements = count;
  if (part.data != nullptr) part.data += first;
  if (part.bfloat16_data != nullptr) part.bfloat16_data += first;
  return part;
}

// Parameter `info` as the model stores it.
TensorPiece StoredPiece(Model& model, const ParameterInfo& info) {
  TensorPiece piece{info.name, info.global_shape, info.global_offset,
                    info.elements};
  const SplitBuffers stored = model.weight_buffers();
  if (stored.InBf16(info.offset)) {
    piece.bfloat16_data = stored.Bf16At(info.offset);
  } else {
    piece.data = stored.Float32At(info.offset);
  }
  return piece;
}

}  // namespace

TensorShapes WeightShapes(const ModelConfig& config) {
  TensorShapes shapes;
  const ParameterLayout whole_model(config);
  for (const ParameterInfo& info : whole_model.parameters()) {
    shapes[info.name] = info.global_shape;
  }
  return shapes;
}

std::vector<TensorPiece> WeightPieces(Model& model, bool dense, bool experts) {
  std::vector<TensorPiece> pieces;
  for (const ParameterInfo& info : model.layout().parameters()) {
    if (model.layout().SplitOverExpertRanks(info) ? !experts : !dense) {
      continue;
    }
    pieces.push_back(StoredPiece(model, info));
  }
  return pieces;
}

void InitializeMasters(uint64_t seed, const ParameterLayout& layout,
                       const std::vector<TensorPiece>& masters) {
  if (!layout.bf16_weight_storage()) return;
  for (const TensorPiece& master : masters) {
    const ParameterInfo& info = *layout.Find(master.name);
    if (info.offset < layout.bf16_begin()) continue;
    InitialWeights(seed, info, master.offset, master.elements, master.data);
  }
}

std::vector<TensorPiece> OwnedWeightPieces(Model& model,
                                           const std::vector<OwnedRange>& owned,
                                           bool trained, bool untrained) {
  std::vector<TensorPiece> pieces;
  for (const OwnedRange& range : owned) {
    for (const ParameterInfo& info : model.layout().parameters()) {
      if (TrainedByOptimizer(info) ? !trained : !untrained) continue;
      const int64_t begin = std::max(range.begin, info.offset);
      const int64_t end = std::min(range.end, info.offset + info.elements);
      if (begin >= end) continue;
      pieces.push_back(
          PartOf(StoredPiece(model, info), begin - info.offset, end - begin));
    }
  }
  return pieces;
}

absl::StatusOr<ShardSnapshot> SnapshotShard(
    const std::vector<TensorPiece>& weights,
    const std::vector<TensorPiece>& optimizer_state, kernels::Ops& ops,
    AccountedAllocator& allocator) {
  int64_t total = 0;
  for (const std::vector<TensorPiece>* pieces : {&weights, &optimizer_state}) {
    for (const TensorPiece& piece : *pieces) {
      if (!piece.replica) total += piece.elements;
    }
  }
  ShardSnapshot snapshot;
  ASSIGN_OR_RETURN(snapshot.host,
                   Tensor::Create(allocator, SnapshotBuffer(total)));
  float* next = snapshot.host.f32();
  for (const auto& [pieces, chunks] :
       {std::pair{&weights, &snapshot.contents.weights},
        std::pair{&optimizer_state, &snapshot.contents.optimizer_state}}) {
    for (const TensorPiece& piece : *pieces) {
      if (piece.replica || piece.elements == 0) continue;
      if (piece.bfloat16_data == nullptr && piece.pool == MemoryPool::kDevice) {
        ops.CopyToHost(piece.elements * kFloatBytes, piece.data, next);
      } else {
        ForEachFloatChunk(
            piece, ops, [&](int64_t done, int64_t count, const float* values) {
              std::memcpy(next + done, values, count * kFloatBytes);
            });
      }
      chunks->push_back(
          {piece.name, piece.global_shape, piece.offset, piece.elements, next});
      next += piece.elements;
    }
  }
  return snapshot;
}

absl::Status CheckWholeTensors(const TensorSource& source,
                               const TensorShapes& expected) {
  const std::map<std::string, TensorInfo> stored = source.Tensors();
  std::vector<std::string> problems;
  for (const auto& [name, shape] : expected) {
    const auto entry = stored.find(name);
    if (entry == stored.end()) {
      problems.push_back(absl::StrCat(name, ": missing"));
    } else if (entry->second.dtype != SafetensorsDtype::kF32) {
      problems.push_back(absl::StrCat(name, ": dtype ",
                                      SafetensorsDtypeName(entry->second.dtype),
                                      ", expected F32"));
    } else if (entry->second.shape != shape) {
      problems.push_back(absl::StrCat(name, ": shape ",
                                      ShapeString(entry->second.shape),
                                      ", expected ", ShapeString(shape)));
    }
  }
  for (const auto& [name, info] : stored) {
    if (!expected.count(name)) {
      problems.push_back(absl::StrCat(name, ": not part of this model"));
    }
  }
  if (problems.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(source.description(), " does not match the model:\n  ",
                   absl::StrJoin(problems, "\n  ")));
}

absl::Status LoadPieces(const TensorSource& source,
                        const TensorShapes& expected,
                        const std::vector<TensorPiece>& pieces,
                        kernels::Ops& ops) {
  RETURN_IF_ERROR(CheckWholeTensors(source, expected));
  // (name, offset, elements) -> the pieces that hold those elements.
  std::map<std::tuple<std::string, int64_t, int64_t>,
           std::vector<const TensorPiece*>>
      ranges;
  for (const TensorPiece& piece : pieces) {
    const auto found = expected.find(piece.name);
    if (found == expected.end() || found->second != piece.global_shape ||
        piece.offset < 0 ||
        piece.offset + piece.elements > ShapeElements(piece.global_shape)) {
      return absl::InternalError(absl::StrCat(
          "piece [", piece.offset, ", ", piece.offset + piece.elements, ") of ",
          piece.name, " ", ShapeString(piece.global_shape),
          " is not part of the expected tensors"));
    }
    ranges[{piece.name, piece.offset, piece.elements}].push_back(&piece);
  }
  std::vector<float> values(static_cast<size_t>(kConversionElements));
  for (const auto& [range, targets] : ranges) {
    const auto& [name, offset, elements] = range;
    for (int64_t done = 0; done < elements; done += kConversionElements) {
      const int64_t count = std::min(kConversionElements, elements - done);
      RETURN_IF_ERROR(source.Read(name, offset + done, count, values.data()));
      for (const TensorPiece* target : targets) {
        WritePiece(PartOf(*target, done, count), values.data(), ops);
      }
    }
  }
  return absl::OkStatus();
}

absl::Status LoadWeights(const TensorSource& source, const ModelConfig& config,
                         const std::vector<TensorPiece>& pieces,
                         kernels::Ops& ops) {
  return LoadPieces(source, WeightShapes(config), pieces, ops);
}

absl::Status LoadWeights(const TensorSource& source, Model& model) {
  return LoadWeights(source, model.config(),
                     WeightPieces(model, /*dense=*/true, /*experts=*/true),
                     model.ops());
}

void LoadHfWeights(const HfModelDirectory& directory,
                   const std::vector<TensorPiece>& pieces, kernels::Ops& ops) {
  std::vector<float> values(static_cast<size_t>(kConversionElements));
  for (TensorPiece piece : pieces) {
    if (!directory.HasValues(piece.name)) continue;
    const int64_t elements = piece.elements;
    for (int64_t done = 0; done < elements; done += kConversionElements) {
      piece.elements = std::min(kConversionElements, elements - done);
      directory.Read(piece.name, piece.offset, piece.elements, values.data());
      WritePiece(piece, values.data(), ops);
      piece.offset += piece.elements;
      if (piece.bfloat16_data != nullptr) {
        piece.bfloat16_data += piece.elements;
      } else {
        piece.data += piece.elements;
      }
    }
  }
}

void LoadHfWeights(const HfModelDirectory& directory, Model& model) {
  LoadHfWeights(directory,
                WeightPieces(model, /*dense=*/true, /*experts=*/true),
                model.ops());
}

}  // namespace plateau::engine
