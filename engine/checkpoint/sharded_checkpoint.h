// Sharded checkpoints ("plateau-checkpoint", version 2; docs/ARCHITECTURE.md
// section 8): every rank writes the chunks it owns, and one index says
// where each chunk of each whole tensor is stored.
//
// A chunk is a flat row-major element range [begin, end) of a whole float32
// tensor. In the committed directory:
//   model.rank-00003.safetensors      rank 3's chunks of the weights
//   optimizer.rank-00003.safetensors  its chunks of the optimizer state
//   state.json                        the caller's JSON, from the committer
//   MANIFEST.json                     written last: the version-1 fields
//     ("files" lists every file with its bytes; state.json with its
//     SHA-256), "block_bytes", and per part ("weights", "optimizer_state")
//     every tensor's "dtype", "shape" and "chunks": [{"begin", "end",
//     "file", "offset" (of its first byte in the file), "crc32" (zlib's
//     CRC-32 of each block_bytes block of the chunk's bytes, the last one
//     short)}].
// The shard files are valid safetensors: a chunk that is a whole tensor is
// stored under its name and shape, any other as a 1-D tensor named
// "<name>[begin:end]".
//
// Write: every rank writes its files and a fragment of the index
// (rank-00003.json) into one staging directory of the step and syncs them
// (WriteCheckpointShard); once every rank has, one rank merges the
// fragments (MergeShardFragments), checks that every element of every
// expected tensor is stored exactly once, and commits as version 1 does
// (CommitShardedCheckpoint, checkpoint.h). A rank that fails leaves only the
// staging directory, which a later commit removes.
//
// Read: Checkpoint::Open (checkpoint.h) opens either version; a reader of a
// version-2 checkpoint reads only the blocks its ranges touch and checks
// their CRC-32 (ShardedTensorSource).
#ifndef PLATEAU_ENGINE_CHECKPOINT_SHARDED_CHECKPOINT_H_
#define PLATEAU_ENGINE_CHECKPOINT_SHARDED_CHECKPOINT_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/file_system.h"
#include "common/file_util.h"
#include "engine/checkpoint/tensor_source.h"
#include "nlohmann/json.hpp"

namespace plateau::engine {

inline constexpr int64_t kShardedCheckpointVersion = 2;
inline constexpr int64_t kDefaultChecksumBlockBytes = int64_t{4} << 20;

// The two parts of a checkpoint, named as in the index.
enum class CheckpointPart { kWeights, kOptimizerState };
inline constexpr CheckpointPart kCheckpointParts[] = {
    CheckpointPart::kWeights, CheckpointPart::kOptimizerState};
const char* CheckpointPartName(CheckpointPart part);

// One chunk a rank writes; `data` (host memory) holds its elements.
struct ChunkView {
  std::string name;
  std::vector<int64_t> shape;  // the whole tensor's
  int64_t begin = 0;
  int64_t elements = 0;
  const float* data = nullptr;
};

// A rank's chunks of each part.
struct ShardContents {
  std::vector<ChunkView> weights;
  std::vector<ChunkView> optimizer_state;
};

struct ShardWriteOptions {
  int64_t block_bytes = kDefaultChecksumBlockBytes;
  FileSystem* file_system = &PosixFileSystem();
};

// What one rank wrote.
struct ShardWriteResult {
  int64_t bytes_written = 0;  // its files, fragment included
};

// Writes `rank`'s shard files and its fragment (last) into `staging`,
// creating it if absent, each synced. INVALID_ARGUMENT for a chunk outside
// its tensor or with no data; the file system's error otherwise.
absl::StatusOr<ShardWriteResult> WriteCheckpointShard(
    const std::string& staging, int rank, const ShardContents& contents,
    const ShardWriteOptions& options = {});

// The whole tensors expected in each part, name -> shape.
struct CheckpointShapes {
  std::map<std::string, std::vector<int64_t>> weights;
  std::map<std::string, std::vector<int64_t>> optimizer_state;
};

// The fragments of ranks [0, world) in `staging`, merged: every file they
// list, and each part's tensors with their chunks as the index lists them
// ("dtype", "shape", "chunks"), in name order. INTERNAL naming the tensor
// and element when the chunks do not store every element of `expected`
// exactly once (or store another tensor); DATA_LOSS naming a fragment that
// is missing or unreadable.
struct MergedShards {
  int64_t block_bytes = 0;
  nlohmann::ordered_json files;  // [{"name", "bytes"}, ...]
  std::map<std::string, nlohmann::ordered_json> parts;  // by part name
  std::vector<std::string> fragments;                   // their paths
};
absl::StatusOr<MergedShards> MergeShardFragments(
    const std::string& staging, int world, const CheckpointShapes& expected);

// One stored chunk, as the index lists it.
struct StoredChunk {
  int64_t begin = 0;
  int64_t end = 0;
  std::string file;
  int64_t offset_bytes = 0;
  std::vector<uint32_t> block_crc32;
};

// A part's tensors as the index lists them: name -> shape and chunks,
// sorted by begin.
struct IndexedTensor {
  std::vector<int64_t> shape;
  std::vector<StoredChunk> chunks;
};
using PartIndex = std::map<std::string, IndexedTensor>;

// The index of each part and the block size, from a version-2 manifest's
// JSON. DATA_LOSS saying what is wrong.
struct ShardedIndex {
  int64_t block_bytes = 0;
  PartIndex weights;
  PartIndex optimizer_state;
  const PartIndex& part(CheckpointPart which) const {
    return which == CheckpointPart::kWeights ? weights : optimizer_state;
  }
};
absl::StatusOr<ShardedIndex> ParseShardedIndex(const nlohmann::json& manifest);

// The byte ranges a reader of elements [begin, end) of one tensor touches:
// for each chunk that intersects it, the whole blocks that hold the
// intersection. Planning only: no file is read.
struct PlannedRead {
  const StoredChunk* chunk = nullptr;
  int64_t first_block = 0;
  int64_t blocks = 0;
  int64_t bytes = 0;  // of those blocks
};
std::vector<PlannedRead> PlanRead(const IndexedTensor& tensor,
                                  int64_t block_bytes, int64_t begin,
                                  int64_t end);

// A checkpoint's files, each mapped when first read (a reader opens only
// the files its ranges are in) and checked against the size the manifest
// lists. Thread-safe.
class LazyFileMaps {
 public:
  // `listed_bytes`: every file the manifest lists, and its size.
  LazyFileMaps(std::string directory,
               std::map<std::string, int64_t> listed_bytes,
               FileSystem& file_system);
  // DATA_LOSS naming the file when it is not listed, missing or not of its
  // listed size; the file system's error (an I/O error) otherwise.
  absl::StatusOr<const MappedFile*> Get(const std::string& name) const;
  const std::map<std::string, int64_t>& listed_bytes() const {
    return listed_bytes_;
  }

 private:
  const std::string directory_;
  const std::map<std::string, int64_t> listed_bytes_;
  FileSystem& file_system_;
  mutable absl::Mutex mutex_;
  mutable std::map<std::string, std::unique_ptr<MappedFile>> mapped_
      ABSL_GUARDED_BY(mutex_);
};

// A part of an open version-2 checkpoint. Read checks the CRC-32 of every
// block it touches, once per block over the source's life, and counts each
// block's bytes once. Thread-safe.
class ShardedTensorSource : public TensorSource {
 public:
  // REQUIRES: every chunk of `index` lies within its file's listed size.
  ShardedTensorSource(std::string directory, int64_t block_bytes,
                      const PartIndex* index, const LazyFileMaps* files);

  const std::string& description() const override { return directory_; }
  std::map<std::string, TensorInfo> Tensors() const override;
  // DATA_LOSS naming the file, tensor and byte range of a block whose
  // CRC-32 does not match; INVALID_ARGUMENT for a range outside the
  // tensor or a tensor not in the part.
  absl::Status Read(const std::string& name, int64_t begin, int64_t count,
                    float* out) const override;
  int64_t bytes_read() const override { return bytes_read_.load(); }

 private:
  std::string directory_;
  int64_t block_bytes_;
  const PartIndex* index_;
  const LazyFileMaps* files_;
  mutable std::atomic<int64_t> bytes_read_{0};
  mutable absl::Mutex mutex_;
  // (chunk, block) of the blocks whose CRC-32 matched.
  mutable absl::flat_hash_set<std::pair<const StoredChunk*, int64_t>> verified_
      ABSL_GUARDED_BY(mutex_);
};

}  // namespace plateau::engine

#endif  // PLATEAU_ENGINE_CHECKPOINT_SHARDED_CHECKPOINT_H_
