#include "engine/train/model_io.h"

#include <algorithm>
#include <cstring>
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
#include "nlohmann/json.hpp"

namespace plateau::engine {
namespace {

constexpr uint32_t kHeaderBytesTag = 1;
constexpr uint32_t kHeaderTag = 2;
constexpr uint32_t kDataTag = 3;

// Pieces without their data, as JSON: [[name, shape, offset, elements]...].
std::string DescribePieces(const std::vector<TensorPiece>& pieces) {
  nlohmann::json described = nlohmann::json::array();
  for (const TensorPiece& piece : pieces) {
    described.push_back(
        {piece.name, piece.global_shape, piece.offset, piece.elements});
  }
  return described.dump();
}

absl::StatusOr<std::vector<TensorPiece>> ParsePieces(const std::string& text,
                                                     int rank) {
  std::vector<TensorPiece> pieces;
  try {
    for (const nlohmann::json& entry : nlohmann::json::parse(text)) {
      TensorPiece piece;
      piece.name = entry.at(0).get<std::string>();
      piece.global_shape = entry.at(1).get<std::vector<int64_t>>();
      piece.offset = entry.at(2).get<int64_t>();
      piece.elements = entry.at(3).get<int64_t>();
      pieces.push_back(std::move(piece));
    }
  } catch (const std::exception& error) {
    return absl::InternalError(absl::StrCat(
        "rank ", rank, " sent an unreadable piece list: ", error.what()));
  }
  return pieces;
}

// Communicators move device memory: host bytes go through a device buffer.
absl::StatusOr<Tensor> DeviceBytes(int64_t bytes,
                                   AccountedAllocator& allocator) {
  return Tensor::Create(allocator, DeviceBytesBuffer(bytes));
}

absl::Status SendHostBytes(Communicator& world, const void* data, int64_t bytes,
                           uint32_t tag, kernels::Ops& ops,
                           AccountedAllocator& allocator) {
  ASSIGN_OR_RETURN(Tensor device, DeviceBytes(bytes, allocator));
  ops.CopyFromHost(bytes, data, device.f32());
  return world.Send(device.f32(), bytes, /*peer=*/0, tag);
}

absl::Status ReceiveHostBytes(Communicator& world, int peer, void* data,
                              int64_t bytes, uint32_t tag, kernels::Ops& ops,
                              AccountedAllocator& allocator) {
  ASSIGN_OR_RETURN(Tensor device, DeviceBytes(bytes, allocator));
  RETURN_IF_ERROR(world.Receive(device.f32(), bytes, peer, tag));
  ops.CopyToHost(bytes, device.f32(), data);
  return absl::OkStatus();
}

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

int64_t TotalElements(const std::vector<TensorPiece>& pieces) {
  int64_t total = 0;
  for (const TensorPiece& piece : pieces) total += piece.elements;
  return total;
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

// Calls visit(part, packed_offset) for the parts of `pieces`, packed one
// after the other, that fill each message of at most kCheckpointChunkElements
// (CheckpointChunkElements) in turn, then flush(elements) once a message
// is full or the last is done.
template <typename Visit, typename Flush>
absl::Status ForEachMessage(const std::vector<TensorPiece>& pieces, Visit visit,
                            Flush flush) {
  const int64_t message = CheckpointChunkElements(TotalElements(pieces));
  int64_t filled = 0;
  for (const TensorPiece& piece : pieces) {
    for (int64_t done = 0; done < piece.elements;) {
      const int64_t count = std::min(piece.elements - done, message - filled);
      visit(PartOf(piece, done, count), filled);
      done += count;
      filled += count;
      if (filled == message) {
        RETURN_IF_ERROR(flush(filled));
        filled = 0;
      }
    }
  }
  if (filled > 0) RETURN_IF_ERROR(flush(filled));
  return absl::OkStatus();
}

// A rank other than 0: its piece list, then its pieces packed in order.
absl::Status SendPieces(const std::vector<TensorPiece>& pieces,
                        Communicator& world, kernels::Ops& ops,
                        AccountedAllocator& allocator) {
  const std::string header = DescribePieces(pieces);
  const int64_t header_bytes = static_cast<int64_t>(header.size());
  RETURN_IF_ERROR(SendHostBytes(world, &header_bytes, sizeof(header_bytes),
                                kHeaderBytesTag, ops, allocator));
  RETURN_IF_ERROR(SendHostBytes(world, header.data(), header_bytes, kHeaderTag,
                                ops, allocator));
  ASSIGN_OR_RETURN(
      Tensor packed,
      DeviceBytes(CheckpointChunkElements(TotalElements(pieces)) * kFloatBytes,
                  allocator));
  return ForEachMessage(
      pieces,
      [&](const TensorPiece& part, int64_t offset) {
        if (part.bfloat16_data == nullptr && part.pool == MemoryPool::kDevice) {
          ops.Copy(part.elements, part.data, packed.f32() + offset);
          return;
        }
        ForEachFloatChunk(
            part, ops, [&](int64_t done, int64_t count, const float* values) {
              ops.CopyFromHost(count * kFloatBytes, values,
                               packed.f32() + offset + done);
            });
      },
      [&](int64_t elements) {
        return world.Send(packed.f32(), elements * kFloatBytes, /*peer=*/0,
                          kDataTag);
      });
}

// Where each whole tensor lives in the snapshot, and which of its elements
// the pieces cover.
struct WholeTensor {
  std::vector<int64_t> shape;
  int64_t host_offset = 0;
  std::vector<std::pair<int64_t, int64_t>> covered;  // [begin, end)
};

absl::Status CheckCoverage(const std::map<std::string, WholeTensor>& wholes) {
  for (const auto& [name, whole] : wholes) {
    std::vector<std::pair<int64_t, int64_t>> covered = whole.covered;
    std::sort(covered.begin(), covered.end());
    int64_t next = 0;
    for (const auto& [begin, end] : covered) {
      if (begin != next) {
        return absl::InternalError(
            absl::StrCat(name, ": the ranks' pieces ",
                         begin < next ? "overlap" : "leave a gap",
                         " at element ", std::min(begin, next)));
      }
      next = end;
    }
    if (next != ShapeElements(whole.shape)) {
      return absl::InternalError(
          absl::StrCat(name, ": the ranks' pieces cover ", next, " of ",
                       ShapeElements(whole.shape), " elements"));
    }
  }
  return absl::OkStatus();
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

std::vector<TensorPiece> CheckpointWeightPieces(
    Model& model, const CheckpointWeights& sent,
    std::vector<TensorPiece> masters) {
  std::vector<TensorPiece> pieces;
  if (sent.from_masters) pieces = std::move(masters);
  const ParameterLayout& layout = model.layout();
  for (const ParameterInfo& info : layout.parameters()) {
    if (sent.from_masters && TrainedByOptimizer(info)) continue;
    if (layout.SplitOverExpertRanks(info) ? !sent.experts : !sent.dense) {
      continue;
    }
    pieces.push_back(StoredPiece(model, info));
  }
  return pieces;
}

absl::StatusOr<HostSnapshot> GatherWholeTensors(
    const std::vector<TensorPiece>& all_pieces, Communicator* world,
    kernels::Ops& ops, AccountedAllocator& allocator) {
  std::vector<TensorPiece> pieces;
  for (const TensorPiece& piece : all_pieces) {
    if (!piece.replica) pieces.push_back(piece);
  }
  const int ranks = world == nullptr ? 1 : world->size();
  if (world != nullptr && world->rank() != 0) {
    RETURN_IF_ERROR(SendPieces(pieces, *world, ops, allocator));
    return HostSnapshot();
  }
  // Every rank's piece list first, to lay out the whole tensors.
  std::vector<std::vector<TensorPiece>> rank_pieces(ranks);
  rank_pieces[0] = pieces;
  for (int rank = 1; rank < ranks; ++rank) {
    int64_t header_bytes = 0;
    RETURN_IF_ERROR(ReceiveHostBytes(*world, rank, &header_bytes,
                                     sizeof(header_bytes), kHeaderBytesTag, ops,
                                     allocator));
    std::string header(static_cast<size_t>(header_bytes), '\0');
    RETURN_IF_ERROR(ReceiveHostBytes(*world, rank, header.data(), header_bytes,
                                     kHeaderTag, ops, allocator));
    ASSIGN_OR_RETURN(rank_pieces[rank], ParsePieces(header, rank));
  }
  std::map<std::string, WholeTensor> wholes;
  for (int rank = 0; rank < ranks; ++rank) {
    for (const TensorPiece& piece : rank_pieces[rank]) {
      WholeTensor& whole = wholes[piece.name];
      if (whole.covered.empty()) {
        whole.shape = piece.global_shape;
      } else if (whole.shape != piece.global_shape) {
        return absl::InternalError(
            absl::StrCat(piece.name, ": rank ", rank, " has shape ",
                         ShapeString(piece.global_shape), ", another rank ",
                         ShapeString(whole.shape)));
      }
      whole.covered.push_back({piece.offset, piece.offset + piece.elements});
    }
  }
  RETURN_IF_ERROR(CheckCoverage(wholes));

  HostSnapshot snapshot;
  int64_t total = 0;
  for (auto& [name, whole] : wholes) {
    whole.host_offset = total;
    total += ShapeElements(whole.shape);
  }
  ASSIGN_OR_RETURN(snapshot.host,
                   Tensor::Create(allocator, HostSnapshotBuffer(total)));
  for (const auto& [name, whole] : wholes) {
    snapshot.views.push_back(
        {name, SafetensorsDtype::kF32, whole.shape,
         snapshot.host.f32() + whole.host_offset,
         static_cast<size_t>(ShapeElements(whole.shape)) * sizeof(float)});
  }
  auto destination = [&](const TensorPiece& piece) {
    return snapshot.host.f32() + wholes.at(piece.name).host_offset +
           piece.offset;
  };
  for (const TensorPiece& piece : pieces) {
    if (piece.bfloat16_data == nullptr && piece.pool == MemoryPool::kDevice) {
      ops.CopyToHost(piece.elements * kFloatBytes, piece.data,
                     destination(piece));
    } else {
      ForEachFloatChunk(
          piece, ops, [&](int64_t done, int64_t count, const float* values) {
            std::memcpy(destination(piece) + done, values, count * kFloatBytes);
          });
    }
  }
  for (int rank = 1; rank < ranks; ++rank) {
    const std::vector<TensorPiece>& received = rank_pieces[rank];
    ASSIGN_OR_RETURN(
        Tensor packed,
        DeviceBytes(
            CheckpointChunkElements(TotalElements(received)) * kFloatBytes,
            allocator));
    // Each message is received whole before its parts are copied out.
    std::vector<std::pair<TensorPiece, int64_t>> parts;
    RETURN_IF_ERROR(ForEachMessage(
        received,
        [&](const TensorPiece& part, int64_t offset) {
          parts.push_back({part, offset});
        },
        [&](int64_t elements) -> absl::Status {
          RETURN_IF_ERROR(world->Receive(packed.f32(), elements * kFloatBytes,
                                         rank, kDataTag));
          for (const auto& [part, offset] : parts) {
            ops.CopyToHost(part.elements * kFloatBytes, packed.f32() + offset,
                           destination(part));
          }
          parts.clear();
          return absl::OkStatus();
        }));
  }
  return snapshot;
}

absl::Status CheckWholeTensors(const SafetensorsReader& file,
                               const TensorShapes& expected) {
  std::vector<std::string> problems;
  for (const auto& [name, shape] : expected) {
    const TensorEntry* entry = file.Find(name);
    if (entry == nullptr) {
      problems.push_back(absl::StrCat(name, ": missing"));
    } else if (entry->dtype != SafetensorsDtype::kF32) {
      problems.push_back(absl::StrCat(name, ": dtype ",
                                      SafetensorsDtypeName(entry->dtype),
                                      ", expected F32"));
    } else if (entry->shape != shape) {
      problems.push_back(absl::StrCat(name, ": shape ",
                                      ShapeString(entry->shape), ", expected ",
                                      ShapeString(shape)));
    }
  }
  for (const TensorEntry& entry : file.tensors()) {
    if (!expected.count(entry.name)) {
      problems.push_back(absl::StrCat(entry.name, ": not part of this model"));
    }
  }
  if (problems.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(file.path(), " does not match the model:\n  ",
                   absl::StrJoin(problems, "\n  ")));
}

absl::Status LoadPieces(const SafetensorsReader& file,
                        const TensorShapes& expected,
                        const std::vector<TensorPiece>& pieces,
                        kernels::Ops& ops) {
  RETURN_IF_ERROR(CheckWholeTensors(file, expected));
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
  }
  for (const TensorPiece& piece : pieces) {
    const TensorEntry* entry = file.Find(piece.name);
    WritePiece(piece, static_cast<const float*>(entry->data) + piece.offset,
               ops);
  }
  return absl::OkStatus();
}

absl::Status LoadWeights(const SafetensorsReader& file,
                         const ModelConfig& config,
                         const std::vector<TensorPiece>& pieces,
                         kernels::Ops& ops) {
  return LoadPieces(file, WeightShapes(config), pieces, ops);
}

absl::Status LoadWeights(const SafetensorsReader& file, Model& model) {
  return LoadWeights(file, model.config(),
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
