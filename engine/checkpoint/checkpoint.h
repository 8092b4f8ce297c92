// Training checkpoints ("plateau-checkpoint"; docs/ARCHITECTURE.md section
// 8). Version 2 is sharded: every rank writes its own chunks and the
// manifest indexes them (sharded_checkpoint.h). Version 1, which this file
// writes with WriteCheckpoint and which still loads, holds whole tensors:
//
// One directory per step under the run directory:
//   <run_dir>/checkpoints/step-00000050/  the step, at least 8 digits
//     model.safetensors      the weights, names given by the caller
//     optimizer.safetensors  the optimizer state, names given by the caller
//     state.json             the caller's JSON (step, seed, data position,
//                            RNG, ...); its schema is the caller's
//     MANIFEST.json          written last:
//       {"format": "plateau-checkpoint", "version": 1, "step": 50,
//        "files": [{"name": "model.safetensors", "bytes": 1234,
//                   "sha256": "<64 lowercase hex digits>"}, ...]}
// Both safetensors files get the metadata "format": "pt" unless the caller
// sets "format" (the Hugging Face loaders expect it).
//
// Commit: the files are written into checkpoints/.step-00000050.tmp-XXXXXX/
// and fsynced, MANIFEST.json last, then the directory is fsynced and renamed
// to step-00000050 (an existing one is swapped with it atomically where the
// file system can, else moved aside for a moment), and checkpoints/ is
// fsynced. A checkpoint is complete when its MANIFEST.json exists, parses,
// names its own step and lists the three files with their sizes; a directory
// whose name starts with '.', or without a manifest, is never taken for one.
//
// Faults: a write that fails at any step (disk full, EIO, a short write, a
// crash between two steps; tested step by step under the fault-injecting
// file system) leaves every earlier checkpoint as it was and never a
// complete-looking one that does not verify; a reader skips damaged ones.
//
// REQUIRES: one writer per run directory at a time (a write deletes other
// writers' temporary directories as stale); a RunFence (run_fence.h) makes
// sure of it across attempts of a plateaud job.
#ifndef PLATEAU_ENGINE_CHECKPOINT_CHECKPOINT_H_
#define PLATEAU_ENGINE_CHECKPOINT_CHECKPOINT_H_

#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/file_system.h"
#include "engine/checkpoint/run_fence.h"
#include "engine/checkpoint/safetensors.h"
#include "engine/checkpoint/sharded_checkpoint.h"
#include "engine/checkpoint/tensor_source.h"

namespace plateau::engine {

inline constexpr char kCheckpointFormatName[] = "plateau-checkpoint";
inline constexpr int64_t kCheckpointVersion = 1;
inline constexpr char kCheckpointsDirectoryName[] = "checkpoints";
inline constexpr char kManifestFileName[] = "MANIFEST.json";
inline constexpr char kModelFileName[] = "model.safetensors";
inline constexpr char kOptimizerFileName[] = "optimizer.safetensors";
inline constexpr char kStateFileName[] = "state.json";

// "step-00000050".
std::string CheckpointDirectoryName(int64_t step);
// "<run_dir>/checkpoints/step-00000050", as WriteCheckpoint returns it.
std::string CheckpointDirectory(const std::string& run_dir, int64_t step);

// What a checkpoint holds. The views borrow the caller's buffers.
struct CheckpointContents {
  std::vector<TensorView> weights;
  std::vector<TensorView> optimizer_state;
  std::map<std::string, std::string> weights_metadata;
  std::string state_json;  // must be valid JSON
};

struct CheckpointWriteOptions {
  // Complete checkpoints kept after a write, the new one among them; 0 keeps
  // all.
  int keep_last = 3;
  // Claimed for the run directory: the commit and the deletions happen under
  // RunFence::Guard, so that a fenced-out writer gets its FAILED_PRECONDITION
  // and changes nothing but its own staging directory.
  const RunFence* fence = nullptr;
  FileSystem* file_system = &PosixFileSystem();
};

// Writes and commits the checkpoint of `step` (see the top of this file) and
// returns its directory. A checkpoint of the same step is replaced. Then,
// best effort, deletes stale temporary directories and complete checkpoints
// beyond the newest keep_last: the one just written is always kept, with the
// keep_last - 1 highest other steps. INVALID_ARGUMENT for a negative step or
// keep_last, state_json that is not JSON, or a bad tensor (see
// WriteSafetensors); then nothing is committed. A failing file-system step
// fails the write with its error (RESOURCE_EXHAUSTED for a full disk).
absl::StatusOr<std::string> WriteCheckpoint(
    const std::string& run_dir, int64_t step,
    const CheckpointContents& contents,
    const CheckpointWriteOptions& options = {});

// "<run_dir>/checkpoints/.step-00000050.tmp-<write_id>": the staging
// directory of a sharded write, the same for every rank of it. write_id
// names the write (every rank passes the same) and is a plain file-name
// part.
std::string ShardStagingDirectory(const std::string& run_dir, int64_t step,
                                  const std::string& write_id);

struct ShardedCommitOptions {
  int keep_last = 3;  // as CheckpointWriteOptions
  const RunFence* fence = nullptr;
  FileSystem* file_system = &PosixFileSystem();
};

// After ranks [0, world) have each written their shard of `step` into
// `staging` (WriteCheckpointShard): merges their fragments
// (MergeShardFragments; its errors), writes state.json and MANIFEST.json
// (version 2), syncs, commits and prunes as WriteCheckpoint does, and
// returns the checkpoint's directory. Nothing is committed on error.
absl::StatusOr<std::string> CommitShardedCheckpoint(
    const std::string& run_dir, int64_t step, const std::string& staging,
    int world, const CheckpointShapes& expected, const std::string& state_json,
    const ShardedCommitOptions& options = {});

// An open checkpoint of either version. Version 1's files are mapped and
// verified whole when opened (with verify_checksums); version 2's
// state.json is, and its shard files are mapped when first read and their
// chunks verified block by block as they are read, so a reader touches
// only what it reads. Immutable: every method is const and
// thread-safe.
class Checkpoint {
 public:
  // FAILED_PRECONDITION "incomplete checkpoint ..." without a manifest;
  // DATA_LOSS naming the file for a bad manifest or index, a missing file, a
  // size or (with verify_checksums) SHA-256 mismatch, or a bad safetensors
  // file.
  static absl::StatusOr<std::unique_ptr<Checkpoint>> Open(
      const std::string& checkpoint_dir, bool verify_checksums = true,
      FileSystem& file_system = PosixFileSystem());
  ~Checkpoint();

  int64_t step() const { return step_; }
  int64_t version() const { return version_; }
  const TensorSource& weights() const { return *weights_; }
  const TensorSource& optimizer_state() const { return *optimizer_; }
  const TensorSource& part(CheckpointPart which) const {
    return which == CheckpointPart::kWeights ? weights() : optimizer_state();
  }
  // Every file the manifest lists, and its bytes.
  const std::map<std::string, int64_t>& files() const { return file_bytes_; }
  const std::string& state_json() const { return state_json_; }
  const std::string& directory() const { return directory_; }

 private:
  Checkpoint() = default;

  std::string directory_;
  int64_t step_ = 0;
  int64_t version_ = 0;
  std::map<std::string, int64_t> file_bytes_;
  std::map<std::string, std::unique_ptr<MappedFile>> mapped_;
  std::unique_ptr<LazyFileMaps> shard_files_;          // version 2
  std::unique_ptr<SafetensorsReader> weights_file_;    // version 1
  std::unique_ptr<SafetensorsReader> optimizer_file_;  // version 1
  ShardedIndex index_;                                 // version 2
  std::unique_ptr<TensorSource> weights_;
  std::unique_ptr<TensorSource> optimizer_;
  std::string state_json_;
};

// The intact checkpoint with the highest step below `below_step`, open:
// complete, and every file of the size (and, where listed, the SHA-256) its
// manifest lists; a version-2 checkpoint's chunks are checked as they are
// read, not here. A newer one
// that is damaged (incomplete, or DATA_LOSS) is skipped, its reason appended
// to `skipped` if given; one that cannot be read (an I/O error) fails the
// search with that error instead. NOT_FOUND, saying what was skipped and
// why, when there is none.
absl::StatusOr<std::unique_ptr<Checkpoint>> OpenLatestCheckpoint(
    const std::string& run_dir, std::vector<std::string>* skipped = nullptr,
    FileSystem& file_system = PosixFileSystem(),
    int64_t below_step = std::numeric_limits<int64_t>::max());

}  // namespace plateau::engine

#endif  // PLATEAU_ENGINE_CHECKPOINT_CHECKPOINT_H_
