#include "engine/checkpoint/sharded_checkpoint.h"

#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"

namespace plateau::engine {
namespace {

using Json = nlohmann::json;
using OrderedJson = nlohmann::ordered_json;

constexpr int64_t kFloatBytes = sizeof(float);
// The most elements a tensor of an index may have.
constexpr int64_t kMaxElements = int64_t{1} << 50;

std::string JoinPath(const std::string& directory, const std::string& name) {
  return absl::StrCat(directory, "/", name);
}

int64_t ElementsOf(const std::vector<int64_t>& shape) {
  int64_t elements = 1;
  for (const int64_t dimension : shape) elements *= dimension;
  return elements;
}

std::string ShapeText(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

std::string ShardFileName(CheckpointPart part, int rank) {
  return absl::StrFormat(
      "%s.rank-%05d.safetensors",
      part == CheckpointPart::kWeights ? "model" : "optimizer", rank);
}

std::string FragmentFileName(int rank) {
  return absl::StrFormat("rank-%05d.json", rank);
}

uint32_t Crc32(const uint8_t* data, int64_t bytes) {
  return static_cast<uint32_t>(
      crc32_z(crc32_z(0, nullptr, 0), data, static_cast<size_t>(bytes)));
}

std::vector<uint32_t> BlockChecksums(const uint8_t* data, int64_t bytes,
                                     int64_t block_bytes) {
  std::vector<uint32_t> checksums;
  for (int64_t done = 0; done < bytes; done += block_bytes) {
    checksums.push_back(
        Crc32(data + done, std::min(block_bytes, bytes - done)));
  }
  return checksums;
}

absl::Status CheckChunk(const ChunkView& chunk) {
  const int64_t whole = ElementsOf(chunk.shape);
  if (chunk.name.empty() || chunk.data == nullptr || chunk.begin < 0 ||
      chunk.elements <= 0 || chunk.begin + chunk.elements > whole) {
    return absl::InvalidArgumentError(
        absl::StrCat("chunk [", chunk.begin, ", ", chunk.begin + chunk.elements,
                     ") of '", chunk.name, "' ", ShapeText(chunk.shape),
                     " is empty, has no data or lies outside its tensor"));
  }
  return absl::OkStatus();
}

// Writes one part's chunks as a safetensors file; adds them to `tensors`
// (the fragment's part) and the file to `files`.
absl::Status WritePartFile(const std::string& staging, CheckpointPart part,
                           int rank, const std::vector<ChunkView>& chunks,
                           const ShardWriteOptions& options,
                           OrderedJson& tensors, OrderedJson& files,
                           int64_t& bytes_written) {
  const std::string name = ShardFileName(part, rank);
  const std::string path = JoinPath(staging, name);
  std::vector<TensorView> views;
  for (const ChunkView& chunk : chunks) {
    const bool whole =
        chunk.begin == 0 && chunk.elements == ElementsOf(chunk.shape);
    views.push_back({whole ? chunk.name
                           : absl::StrCat(chunk.name, "[", chunk.begin, ":",
                                          chunk.begin + chunk.elements, "]"),
                     SafetensorsDtype::kF32,
                     whole ? chunk.shape : std::vector<int64_t>{chunk.elements},
                     chunk.data,
                     static_cast<size_t>(chunk.elements * kFloatBytes)});
  }
  RETURN_IF_ERROR(
      WriteSafetensors(path, views, {{"format", "pt"}}, *options.file_system));
  // The data region follows the 8-byte length and the header; the writer
  // packs tensors in the order given.
  ASSIGN_OR_RETURN(std::unique_ptr<MappedFile> written,
                   options.file_system->MapFile(path));
  uint64_t header_bytes = 0;
  if (written->size_bytes() < sizeof(header_bytes)) {
    return absl::DataLossError(absl::StrCat(path, " is shorter than 8 bytes"));
  }
  std::memcpy(&header_bytes, written->data(), sizeof(header_bytes));
  int64_t offset = static_cast<int64_t>(sizeof(header_bytes) + header_bytes);
  for (const ChunkView& chunk : chunks) {
    const int64_t bytes = chunk.elements * kFloatBytes;
    OrderedJson stored = {
        {"begin", chunk.begin},
        {"end", chunk.begin + chunk.elements},
        {"file", name},
        {"offset", offset},
        {"crc32", BlockChecksums(reinterpret_cast<const uint8_t*>(chunk.data),
                                 bytes, options.block_bytes)}};
    OrderedJson& tensor = tensors[chunk.name];
    tensor["shape"] = chunk.shape;
    tensor["chunks"].push_back(std::move(stored));
    offset += bytes;
  }
  files.push_back({{"name", name}, {"bytes", written->size_bytes()}});
  bytes_written += static_cast<int64_t>(written->size_bytes());
  return absl::OkStatus();
}

// A JSON value's integer, or a DATA_LOSS saying where.
absl::StatusOr<int64_t> IntegerAt(const Json& object, const char* key,
                                  const std::string& where) {
  const auto found = object.find(key);
  if (found == object.end() || !found->is_number_integer() ||
      found->get<int64_t>() < 0) {
    return absl::DataLossError(
        absl::StrCat(where, ": no non-negative integer \"", key, "\""));
  }
  return found->get<int64_t>();
}

absl::StatusOr<StoredChunk> ParseChunk(const Json& json,
                                       const std::string& where) {
  if (!json.is_object()) {
    return absl::DataLossError(
        absl::StrCat(where, ": a chunk is not an object"));
  }
  StoredChunk chunk;
  ASSIGN_OR_RETURN(chunk.begin, IntegerAt(json, "begin", where));
  ASSIGN_OR_RETURN(chunk.end, IntegerAt(json, "end", where));
  ASSIGN_OR_RETURN(chunk.offset_bytes, IntegerAt(json, "offset", where));
  const auto file = json.find("file");
  const auto crc32 = json.find("crc32");
  if (file == json.end() || !file->is_string() || chunk.end <= chunk.begin ||
      crc32 == json.end() || !crc32->is_array()) {
    return absl::DataLossError(
        absl::StrCat(where, ": a chunk without a file, checksums or elements"));
  }
  chunk.file = file->get<std::string>();
  for (const Json& value : *crc32) {
    if (!value.is_number_unsigned() || value.get<uint64_t>() > 0xffffffffu) {
      return absl::DataLossError(absl::StrCat(where, ": a bad CRC-32"));
    }
    chunk.block_crc32.push_back(value.get<uint32_t>());
  }
  return chunk;
}

// One part of an index or a fragment: name -> {"shape", "chunks"}.
absl::StatusOr<PartIndex> ParsePart(const Json& json,
                                    const std::string& where) {
  if (!json.is_object()) {
    return absl::DataLossError(absl::StrCat(where, " is not an object"));
  }
  PartIndex part;
  for (const auto& [name, tensor_json] : json.items()) {
    const std::string tensor_where = absl::StrCat(where, " '", name, "'");
    IndexedTensor tensor;
    const auto shape = tensor_json.find("shape");
    const auto chunks = tensor_json.find("chunks");
    if (shape == tensor_json.end() || !shape->is_array() ||
        chunks == tensor_json.end() || !chunks->is_array()) {
      return absl::DataLossError(
          absl::StrCat(tensor_where, ": no \"shape\" or \"chunks\""));
    }
    // Bounded so that element and byte counts cannot overflow.
    int64_t elements = 1;
    for (const Json& dimension : *shape) {
      if (!dimension.is_number_unsigned() ||
          dimension.get<uint64_t>() >
              static_cast<uint64_t>(kMaxElements /
                                    std::max<int64_t>(elements, 1))) {
        return absl::DataLossError(absl::StrCat(
            tensor_where, ": a bad shape (or one of over 2^50 elements)"));
      }
      tensor.shape.push_back(dimension.get<int64_t>());
      elements *= tensor.shape.back();
    }
    for (const Json& chunk_json : *chunks) {
      ASSIGN_OR_RETURN(StoredChunk chunk, ParseChunk(chunk_json, tensor_where));
      tensor.chunks.push_back(std::move(chunk));
    }
    std::sort(tensor.chunks.begin(), tensor.chunks.end(),
              [](const StoredChunk& a, const StoredChunk& b) {
                return a.begin < b.begin;
              });
    part[name] = std::move(tensor);
  }
  return part;
}

// Where the chunks of `tensor` fail to store each element exactly once;
// "" when they do.
std::string CoverageFault(const IndexedTensor& tensor) {
  int64_t next = 0;
  for (const StoredChunk& chunk : tensor.chunks) {
    if (chunk.begin != next) {
      return absl::StrCat("its chunks ",
                          chunk.begin < next ? "overlap" : "leave a gap",
                          " at element ", std::min(chunk.begin, next));
    }
    next = chunk.end;
  }
  const int64_t elements = ElementsOf(tensor.shape);
  if (next != elements) {
    return absl::StrCat("its chunks store ", next, " of its ", elements,
                        " elements");
  }
  return "";
}

absl::Status CheckBlocks(const StoredChunk& chunk, int64_t block_bytes,
                         const std::string& where) {
  const int64_t bytes = (chunk.end - chunk.begin) * kFloatBytes;
  const int64_t blocks = (bytes + block_bytes - 1) / block_bytes;
  if (static_cast<int64_t>(chunk.block_crc32.size()) != blocks) {
    return absl::DataLossError(absl::StrCat(
        where, ": chunk [", chunk.begin, ", ", chunk.end, ") lists ",
        chunk.block_crc32.size(), " block checksums, not ", blocks));
  }
  return absl::OkStatus();
}

OrderedJson ChunkJson(const StoredChunk& chunk) {
  return {{"begin", chunk.begin},
          {"end", chunk.end},
          {"file", chunk.file},
          {"offset", chunk.offset_bytes},
          {"crc32", chunk.block_crc32}};
}

absl::StatusOr<ShardedIndex> ParseShardedIndexOrThrow(const Json& manifest) {
  ShardedIndex index;
  ASSIGN_OR_RETURN(index.block_bytes,
                   IntegerAt(manifest, "block_bytes", "the index"));
  if (index.block_bytes <= 0 || index.block_bytes % kFloatBytes != 0) {
    return absl::DataLossError(
        absl::StrCat("the index's block_bytes ", index.block_bytes,
                     " is not a positive multiple of 4"));
  }
  for (const CheckpointPart part : kCheckpointParts) {
    const char* part_name = CheckpointPartName(part);
    const auto found = manifest.find(part_name);
    if (found == manifest.end()) {
      return absl::DataLossError(
          absl::StrCat("the index has no \"", part_name, "\""));
    }
    ASSIGN_OR_RETURN(PartIndex parsed, ParsePart(*found, part_name));
    for (const auto& [name, tensor] : parsed) {
      const std::string where = absl::StrCat(part_name, " '", name, "'");
      if (found->at(name).value("dtype", "") != "F32") {
        return absl::DataLossError(absl::StrCat(where, " is not F32"));
      }
      if (const std::string fault = CoverageFault(tensor); !fault.empty()) {
        return absl::DataLossError(absl::StrCat(where, ": ", fault));
      }
      for (const StoredChunk& chunk : tensor.chunks) {
        RETURN_IF_ERROR(CheckBlocks(chunk, index.block_bytes, where));
      }
    }
    (part == CheckpointPart::kWeights ? index.weights : index.optimizer_state) =
        std::move(parsed);
  }
  return index;
}

absl::StatusOr<MergedShards> MergeShardFragmentsOrThrow(
    const std::string& staging, int world, const CheckpointShapes& expected) {
  MergedShards merged;
  merged.files = OrderedJson::array();
  std::map<std::string, IndexedTensor> parts[2];
  for (int rank = 0; rank < world; ++rank) {
    const std::string path = JoinPath(staging, FragmentFileName(rank));
    absl::StatusOr<std::string> text = ReadFileToString(path);
    if (!text.ok()) {
      return absl::DataLossError(
          absl::StrCat("rank ", rank, "'s part of the checkpoint is missing (",
                       path, ": ", text.status().message(), ")"));
    }
    Json fragment;
    try {
      fragment = Json::parse(*text);
    } catch (const Json::exception& error) {
      return absl::DataLossError(
          absl::StrCat(path, " is not valid JSON: ", error.what()));
    }
    if (!fragment.is_object() || fragment.value("rank", -1) != rank) {
      return absl::DataLossError(
          absl::StrCat(path, " is not rank ", rank, "'s fragment"));
    }
    ASSIGN_OR_RETURN(const int64_t block_bytes,
                     IntegerAt(fragment, "block_bytes", path));
    if (rank == 0) merged.block_bytes = block_bytes;
    if (block_bytes != merged.block_bytes || block_bytes <= 0) {
      return absl::DataLossError(absl::StrCat(path, ": blocks of ", block_bytes,
                                              " bytes, rank 0's of ",
                                              merged.block_bytes));
    }
    for (const Json& file : fragment.value("files", Json::array())) {
      if (!file.is_object() || !file.value("name", Json()).is_string() ||
          !file.value("bytes", Json()).is_number_unsigned()) {
        return absl::DataLossError(absl::StrCat(path, ": a bad file entry"));
      }
      merged.files.push_back({{"name", file.at("name").get<std::string>()},
                              {"bytes", file.at("bytes").get<uint64_t>()}});
    }
    merged.fragments.push_back(path);
    for (const CheckpointPart part : kCheckpointParts) {
      const char* part_name = CheckpointPartName(part);
      ASSIGN_OR_RETURN(PartIndex rank_part,
                       ParsePart(fragment.value(part_name, Json::object()),
                                 absl::StrCat(path, " ", part_name)));
      for (auto& [name, tensor] : rank_part) {
        IndexedTensor& whole = parts[static_cast<int>(part)][name];
        if (whole.chunks.empty()) {
          whole.shape = tensor.shape;
        } else if (whole.shape != tensor.shape) {
          return absl::InternalError(
              absl::StrCat(part_name, " '", name, "': rank ", rank,
                           " has shape ", ShapeText(tensor.shape),
                           ", another rank ", ShapeText(whole.shape)));
        }
        for (StoredChunk& chunk : tensor.chunks) {
          whole.chunks.push_back(std::move(chunk));
        }
      }
    }
  }
  for (const CheckpointPart part : kCheckpointParts) {
    const char* part_name = CheckpointPartName(part);
    const std::map<std::string, std::vector<int64_t>>& shapes =
        part == CheckpointPart::kWeights ? expected.weights
                                         : expected.optimizer_state;
    std::map<std::string, IndexedTensor>& stored =
        parts[static_cast<int>(part)];
    for (const auto& [name, tensor] : stored) {
      if (!shapes.count(name)) {
        return absl::InternalError(absl::StrCat(
            part_name, " '", name, "' was stored but is not the model's"));
      }
    }
    OrderedJson tensors = OrderedJson::object();
    for (const auto& [name, shape] : shapes) {
      const auto found = stored.find(name);
      if (found == stored.end()) {
        return absl::InternalError(
            absl::StrCat(part_name, " '", name, "': no rank stored it"));
      }
      IndexedTensor& tensor = found->second;
      if (tensor.shape != shape) {
        return absl::InternalError(absl::StrCat(
            part_name, " '", name, "' was stored as ", ShapeText(tensor.shape),
            ", the model's is ", ShapeText(shape)));
      }
      std::sort(tensor.chunks.begin(), tensor.chunks.end(),
                [](const StoredChunk& a, const StoredChunk& b) {
                  return a.begin < b.begin;
                });
      if (const std::string fault = CoverageFault(tensor); !fault.empty()) {
        return absl::InternalError(
            absl::StrCat(part_name, " '", name, "': ", fault));
      }
      OrderedJson chunks = OrderedJson::array();
      for (const StoredChunk& chunk : tensor.chunks) {
        chunks.push_back(ChunkJson(chunk));
      }
      tensors[name] = {{"dtype", "F32"},
                       {"shape", tensor.shape},
                       {"chunks", std::move(chunks)}};
    }
    merged.parts[part_name] = std::move(tensors);
  }
  return merged;
}

}  // namespace

const char* CheckpointPartName(CheckpointPart part) {
  return part == CheckpointPart::kWeights ? "weights" : "optimizer_state";
}

absl::StatusOr<ShardWriteResult> WriteCheckpointShard(
    const std::string& staging, int rank, const ShardContents& contents,
    const ShardWriteOptions& options) {
  if (rank < 0 || options.block_bytes <= 0 ||
      options.block_bytes % kFloatBytes != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("a checkpoint shard needs a rank >= 0 and blocks of a "
                     "positive multiple of 4 bytes (rank ",
                     rank, ", block_bytes ", options.block_bytes, ")"));
  }
  for (const std::vector<ChunkView>* chunks :
       {&contents.weights, &contents.optimizer_state}) {
    for (const ChunkView& chunk : *chunks) RETURN_IF_ERROR(CheckChunk(chunk));
  }
  FileSystem& file_system = *options.file_system;
  // Any rank may come first: each makes what is missing.
  const std::string checkpoints = staging.substr(0, staging.rfind('/'));
  for (const std::string& directory : {checkpoints, staging}) {
    const absl::Status made = file_system.CreateDirectory(directory);
    if (!made.ok() && !absl::IsAlreadyExists(made)) return made;
  }
  ShardWriteResult result;
  OrderedJson fragment = {{"rank", rank},
                          {"block_bytes", options.block_bytes},
                          {"files", OrderedJson::array()},
                          {"weights", OrderedJson::object()},
                          {"optimizer_state", OrderedJson::object()}};
  RETURN_IF_ERROR(WritePartFile(staging, CheckpointPart::kWeights, rank,
                                contents.weights, options, fragment["weights"],
                                fragment["files"], result.bytes_written));
  RETURN_IF_ERROR(WritePartFile(staging, CheckpointPart::kOptimizerState, rank,
                                contents.optimizer_state, options,
                                fragment["optimizer_state"], fragment["files"],
                                result.bytes_written));
  const std::string text = fragment.dump() + "\n";
  RETURN_IF_ERROR(WriteFileSynced(JoinPath(staging, FragmentFileName(rank)),
                                  text.data(), text.size(), file_system));
  RETURN_IF_ERROR(file_system.SyncDirectory(staging));
  result.bytes_written += static_cast<int64_t>(text.size());
  return result;
}

absl::StatusOr<MergedShards> MergeShardFragments(
    const std::string& staging, int world, const CheckpointShapes& expected) {
  // A field of the wrong type throws.
  try {
    return MergeShardFragmentsOrThrow(staging, world, expected);
  } catch (const Json::exception& error) {
    return absl::DataLossError(absl::StrCat("a fragment of the checkpoint in ",
                                            staging,
                                            " is malformed: ", error.what()));
  }
}

absl::StatusOr<ShardedIndex> ParseShardedIndex(const Json& manifest) {
  // A field of the wrong type throws.
  try {
    return ParseShardedIndexOrThrow(manifest);
  } catch (const Json::exception& error) {
    return absl::DataLossError(
        absl::StrCat("the index is malformed: ", error.what()));
  }
}

std::vector<PlannedRead> PlanRead(const IndexedTensor& tensor,
                                  int64_t block_bytes, int64_t begin,
                                  int64_t end) {
  std::vector<PlannedRead> reads;
  for (const StoredChunk& chunk : tensor.chunks) {
    if (chunk.end <= begin || chunk.begin >= end) continue;
    const int64_t chunk_bytes = (chunk.end - chunk.begin) * kFloatBytes;
    const int64_t first_byte =
        (std::max(begin, chunk.begin) - chunk.begin) * kFloatBytes;
    const int64_t end_byte =
        (std::min(end, chunk.end) - chunk.begin) * kFloatBytes;
    PlannedRead read;
    read.chunk = &chunk;
    read.first_block = first_byte / block_bytes;
    const int64_t last_block = (end_byte - 1) / block_bytes;
    read.blocks = last_block - read.first_block + 1;
    read.bytes = std::min((last_block + 1) * block_bytes, chunk_bytes) -
                 read.first_block * block_bytes;
    reads.push_back(read);
  }
  return reads;
}

LazyFileMaps::LazyFileMaps(std::string directory,
                           std::map<std::string, int64_t> listed_bytes,
                           FileSystem& file_system)
    : directory_(std::move(directory)),
      listed_bytes_(std::move(listed_bytes)),
      file_system_(file_system) {}

absl::StatusOr<const MappedFile*> LazyFileMaps::Get(
    const std::string& name) const {
  const std::string path = JoinPath(directory_, name);
  const auto listed = listed_bytes_.find(name);
  if (listed == listed_bytes_.end()) {
    return absl::DataLossError(
        absl::StrCat(path, " is not listed in the checkpoint's manifest"));
  }
  absl::MutexLock lock(&mutex_);
  std::unique_ptr<MappedFile>& mapped = mapped_[name];
  if (mapped != nullptr) return mapped.get();
  absl::StatusOr<std::unique_ptr<MappedFile>> opened =
      file_system_.MapFile(path);
  if (!opened.ok()) {
    // A listed file that is gone is damage; one that cannot be read now
    // (EIO, EACCES) is not, and keeps its code.
    return absl::Status(absl::IsNotFound(opened.status())
                            ? absl::StatusCode::kDataLoss
                            : opened.status().code(),
                        absl::StrCat("cannot open ", path,
                                     ", listed in the "
                                     "checkpoint's manifest: ",
                                     opened.status().message()));
  }
  if (static_cast<int64_t>((*opened)->size_bytes()) != listed->second) {
    return absl::DataLossError(
        absl::StrCat(path, " has ", (*opened)->size_bytes(),
                     " bytes but the manifest lists ", listed->second));
  }
  mapped = *std::move(opened);
  return mapped.get();
}

ShardedTensorSource::ShardedTensorSource(std::string directory,
                                         int64_t block_bytes,
                                         const PartIndex* index,
                                         const LazyFileMaps* files)
    : directory_(std::move(directory)),
      block_bytes_(block_bytes),
      index_(index),
      files_(files) {}

std::map<std::string, TensorInfo> ShardedTensorSource::Tensors() const {
  std::map<std::string, TensorInfo> tensors;
  for (const auto& [name, tensor] : *index_) {
    tensors[name] = {SafetensorsDtype::kF32, tensor.shape};
  }
  return tensors;
}

absl::Status ShardedTensorSource::Read(const std::string& name, int64_t begin,
                                       int64_t count, float* out) const {
  const auto found = index_->find(name);
  if (found == index_->end()) {
    return absl::InvalidArgumentError(
        absl::StrCat(directory_, " has no tensor ", name));
  }
  const IndexedTensor& tensor = found->second;
  const int64_t end = begin + count;
  if (begin < 0 || count < 0 || end > ElementsOf(tensor.shape)) {
    return absl::InvalidArgumentError(
        absl::StrCat(directory_, ": elements [", begin, ", ", end,
                     ") are outside ", name, " ", ShapeText(tensor.shape)));
  }
  if (count == 0) return absl::OkStatus();
  for (const PlannedRead& read : PlanRead(tensor, block_bytes_, begin, end)) {
    const StoredChunk& chunk = *read.chunk;
    ASSIGN_OR_RETURN(const MappedFile* file, files_->Get(chunk.file));
    const int64_t chunk_bytes = (chunk.end - chunk.begin) * kFloatBytes;
    const uint8_t* data = file->data() + chunk.offset_bytes;
    for (int64_t block = read.first_block;
         block < read.first_block + read.blocks; ++block) {
      {
        absl::MutexLock lock(&mutex_);
        if (verified_.contains({&chunk, block})) continue;
      }
      const int64_t block_begin = block * block_bytes_;
      const int64_t block_end =
          std::min(block_begin + block_bytes_, chunk_bytes);
      const uint32_t actual =
          Crc32(data + block_begin, block_end - block_begin);
      const uint32_t stored = chunk.block_crc32[static_cast<size_t>(block)];
      if (actual != stored) {
        return absl::DataLossError(absl::StrFormat(
            "%s: bytes [%d, %d) of %s (its elements [%d, %d)) fail their "
            "CRC-32: the index says %08x, the file holds %08x",
            JoinPath(directory_, chunk.file), chunk.offset_bytes + block_begin,
            chunk.offset_bytes + block_end, name,
            chunk.begin + block_begin / kFloatBytes,
            chunk.begin + block_end / kFloatBytes, stored, actual));
      }
      absl::MutexLock lock(&mutex_);
      if (verified_.insert({&chunk, block}).second) {
        bytes_read_ += block_end - block_begin;
      }
    }
    const int64_t first = std::max(begin, chunk.begin);
    const int64_t last = std::min(end, chunk.end);
    std::memcpy(out + (first - begin),
                data + (first - chunk.begin) * kFloatBytes,
                static_cast<size_t>((last - first) * kFloatBytes));
  }
  return absl::OkStatus();
}

}  // namespace plateau::engine
