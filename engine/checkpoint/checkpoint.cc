#include "engine/checkpoint/checkpoint.h"

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <system_error>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "common/file_util.h"
#include "common/status_macros.h"

namespace plateau::engine {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

constexpr const char* kRequiredFiles[] = {kModelFileName, kOptimizerFileName,
                                          kStateFileName};
constexpr char kStepPrefix[] = "step-";
// OpenLatestCheckpoint's NOT_FOUND message lists at most this many reasons.
constexpr size_t kMaxSkippedReasons = 5;

struct ManifestFile {
  std::string name;
  uint64_t bytes = 0;
  std::string sha256;
};

struct Manifest {
  int64_t version = 0;
  int64_t step = 0;
  std::vector<ManifestFile> files;
  Json json;  // all of it: version 2's index is read from it
};

std::string JoinPath(const std::string& directory, const std::string& name) {
  return absl::StrCat(directory, "/", name);
}

// The step of a canonical directory name ("step-00000050"), else -1.
int64_t ParseStepDirectoryName(absl::string_view name) {
  absl::string_view digits = name;
  if (!absl::ConsumePrefix(&digits, kStepPrefix) || digits.empty()) return -1;
  for (const char c : digits) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) return -1;
  }
  int64_t step = 0;
  if (!absl::SimpleAtoi(digits, &step)) return -1;
  return CheckpointDirectoryName(step) == name ? step : -1;
}

// Our temporary and moved-aside directories (MakeSiblingDirectory names).
bool IsTemporaryDirectoryName(absl::string_view name) {
  return absl::StartsWith(name, ".step-") &&
         (absl::StrContains(name, ".tmp-") || absl::StrContains(name, ".old-"));
}

absl::Status WithContext(const absl::Status& status, absl::string_view prefix) {
  return absl::Status(status.code(), absl::StrCat(prefix, status.message()));
}

std::string EncodeManifest(const Manifest& manifest) {
  nlohmann::ordered_json files = nlohmann::ordered_json::array();
  for (const ManifestFile& file : manifest.files) {
    files.push_back(
        {{"name", file.name}, {"bytes", file.bytes}, {"sha256", file.sha256}});
  }
  const nlohmann::ordered_json json = {{"format", kCheckpointFormatName},
                                       {"version", kCheckpointVersion},
                                       {"step", manifest.step},
                                       {"files", std::move(files)}};
  return json.dump(2) + "\n";  // ASCII only: cannot throw
}

bool IsSha256Hex(const std::string& text) {
  return text.size() == 64 && std::all_of(text.begin(), text.end(), [](char c) {
           return absl::ascii_isdigit(static_cast<unsigned char>(c)) ||
                  (c >= 'a' && c <= 'f');
         });
}

bool IsPlainFileName(const std::string& name) {
  return !name.empty() && name != "." && name != ".." &&
         name.find('/') == std::string::npos && name != kManifestFileName;
}

// Version 1 lists every file's SHA-256; version 2 only state.json's (its
// chunks have block checksums in the index).
absl::StatusOr<ManifestFile> ParseManifestFile(const Json& json,
                                               int64_t version) {
  ManifestFile file;
  if (!json.is_object()) return absl::DataLossError("a file is not an object");
  const auto name = json.find("name");
  const auto bytes = json.find("bytes");
  const auto sha256 = json.find("sha256");
  if (name == json.end() || !name->is_string() ||
      !IsPlainFileName(name->get<std::string>())) {
    return absl::DataLossError(
        absl::StrCat("bad file name ", json.value("name", Json()).dump()));
  }
  file.name = name->get<std::string>();
  if (bytes == json.end() || !bytes->is_number_unsigned()) {
    return absl::DataLossError(absl::StrCat("no byte count for ", file.name));
  }
  file.bytes = bytes->get<uint64_t>();
  const bool needs_sha256 = version == 1 || file.name == kStateFileName;
  if (sha256 == json.end() && !needs_sha256) return file;
  if (sha256 == json.end() || !sha256->is_string() ||
      !IsSha256Hex(sha256->get<std::string>())) {
    return absl::DataLossError(absl::StrCat("no SHA-256 for ", file.name));
  }
  file.sha256 = sha256->get<std::string>();
  return file;
}

absl::StatusOr<Manifest> ParseManifest(const std::string& text) {
  Json json;
  try {
    json = Json::parse(text);
  } catch (const Json::exception& error) {
    return absl::DataLossError(absl::StrCat("not valid JSON: ", error.what()));
  }
  if (!json.is_object()) return absl::DataLossError("not a JSON object");
  if (json.value("format", Json()) != kCheckpointFormatName) {
    return absl::DataLossError(
        absl::StrCat("\"format\" is not \"", kCheckpointFormatName, "\""));
  }
  const Json version = json.value("version", Json());
  if (version != kCheckpointVersion && version != kShardedCheckpointVersion) {
    return absl::DataLossError(absl::StrCat(
        "unsupported \"version\" ", version.dump(), " (this build reads ",
        kCheckpointVersion, " and ", kShardedCheckpointVersion, ")"));
  }
  Manifest manifest;
  manifest.version = version.get<int64_t>();
  const Json step = json.value("step", Json());
  if (!step.is_number_unsigned() ||
      step.get<uint64_t>() >
          static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return absl::DataLossError("\"step\" is not a non-negative integer");
  }
  manifest.step = step.get<int64_t>();
  const auto files = json.find("files");
  if (files == json.end() || !files->is_array()) {
    return absl::DataLossError("no \"files\" array");
  }
  absl::flat_hash_set<std::string> names;
  for (const Json& file_json : *files) {
    ASSIGN_OR_RETURN(ManifestFile file,
                     ParseManifestFile(file_json, manifest.version));
    if (!names.insert(file.name).second) {
      return absl::DataLossError(absl::StrCat("duplicate file ", file.name));
    }
    manifest.files.push_back(std::move(file));
  }
  for (const char* required : kRequiredFiles) {
    if ((manifest.version == 1 ||
         absl::string_view(required) == kStateFileName) &&
        !names.contains(required)) {
      return absl::DataLossError(absl::StrCat("does not list ", required));
    }
  }
  manifest.json = std::move(json);
  return manifest;
}

// The parsed manifest of `directory`, whose step must match the directory's
// name when that is canonical.
absl::StatusOr<Manifest> ReadManifest(const std::string& directory) {
  const std::string path = JoinPath(directory, kManifestFileName);
  absl::StatusOr<std::string> text = ReadFileToString(path);
  if (!text.ok()) {
    std::error_code error;
    if (absl::IsNotFound(text.status()) && fs::is_directory(directory, error)) {
      return absl::FailedPreconditionError(
          absl::StrCat("incomplete checkpoint ", directory, ": no ",
                       kManifestFileName, " (the write did not finish)"));
    }
    return text.status();
  }
  absl::StatusOr<Manifest> manifest = ParseManifest(*text);
  if (!manifest.ok()) {
    return WithContext(manifest.status(),
                       absl::StrCat("bad checkpoint manifest ", path, ": "));
  }
  const int64_t named_step =
      ParseStepDirectoryName(fs::path(directory).filename().string());
  if (named_step >= 0 && named_step != manifest->step) {
    return absl::DataLossError(absl::StrCat("checkpoint manifest ", path,
                                            " is for step ", manifest->step,
                                            ", not ", named_step));
  }
  return manifest;
}

absl::Status CheckListedSize(const std::string& path, const ManifestFile& file,
                             uint64_t actual_bytes) {
  if (actual_bytes == file.bytes) return absl::OkStatus();
  return absl::DataLossError(absl::StrCat(path, " has ", actual_bytes,
                                          " bytes but ", kManifestFileName,
                                          " lists ", file.bytes));
}

// The manifest of a complete checkpoint: it parses and every listed file
// exists with its listed size. Checksums are not read.
absl::StatusOr<Manifest> InspectCheckpoint(const std::string& directory) {
  ASSIGN_OR_RETURN(Manifest manifest, ReadManifest(directory));
  for (const ManifestFile& file : manifest.files) {
    const std::string path = JoinPath(directory, file.name);
    std::error_code error;
    const uintmax_t actual_bytes = fs::file_size(path, error);
    if (error) {
      return absl::DataLossError(absl::StrCat(
          path, ", listed in ", kManifestFileName, ": ", error.message()));
    }
    RETURN_IF_ERROR(CheckListedSize(path, file, actual_bytes));
  }
  return manifest;
}

// Maps a listed file and checks its size and, if asked, its SHA-256.
absl::StatusOr<std::unique_ptr<MappedFile>> OpenListedFile(
    const std::string& directory, const ManifestFile& file,
    bool verify_checksum, FileSystem& file_system) {
  const std::string path = JoinPath(directory, file.name);
  absl::StatusOr<std::unique_ptr<MappedFile>> mapped =
      file_system.MapFile(path);
  if (!mapped.ok()) {
    // A listed file that is gone is damage; one that cannot be read now
    // (EIO, EACCES) is not, and keeps its code.
    const absl::StatusCode code = absl::IsNotFound(mapped.status())
                                      ? absl::StatusCode::kDataLoss
                                      : mapped.status().code();
    return absl::Status(
        code, absl::StrCat("cannot open ", path, ", listed in ",
                           kManifestFileName, ": ", mapped.status().message()));
  }
  RETURN_IF_ERROR(CheckListedSize(path, file, (*mapped)->size_bytes()));
  if (verify_checksum && !file.sha256.empty()) {
    const std::string sha256 =
        Sha256Hex((*mapped)->data(), (*mapped)->size_bytes());
    if (sha256 != file.sha256) {
      return absl::DataLossError(absl::StrCat(
          "checksum mismatch in ", path, ": the file's SHA-256 is ", sha256,
          ", ", kManifestFileName, " lists ", file.sha256));
    }
  }
  return mapped;
}

// Appends the size and SHA-256 of `directory`/`name`, as now on disk.
absl::Status AddToManifest(const std::string& directory,
                           const std::string& name, FileSystem& file_system,
                           Manifest& manifest) {
  const std::string path = JoinPath(directory, name);
  ASSIGN_OR_RETURN(std::unique_ptr<MappedFile> file, file_system.MapFile(path));
  std::string sha256 = Sha256Hex(file->data(), file->size_bytes());
  if (sha256.empty()) {
    return absl::InternalError(
        absl::StrCat("cannot compute SHA-256 of ", path));
  }
  manifest.files.push_back({name, file->size_bytes(), std::move(sha256)});
  return absl::OkStatus();
}

absl::Status WriteTensorFile(const std::string& directory,
                             const std::string& name,
                             absl::Span<const TensorView> tensors,
                             std::map<std::string, std::string> metadata,
                             FileSystem& file_system, Manifest& manifest) {
  metadata.emplace("format", "pt");  // unless the caller set it
  RETURN_IF_ERROR(WriteSafetensors(JoinPath(directory, name), tensors, metadata,
                                   file_system));
  return AddToManifest(directory, name, file_system, manifest);
}

// Writes every file into `staged`, MANIFEST.json last, and syncs it.
absl::Status WriteStagedCheckpoint(const std::string& staged, int64_t step,
                                   const CheckpointContents& contents,
                                   FileSystem& file_system) {
  Manifest manifest;
  manifest.step = step;
  RETURN_IF_ERROR(WriteTensorFile(staged, kModelFileName, contents.weights,
                                  contents.weights_metadata, file_system,
                                  manifest));
  RETURN_IF_ERROR(WriteTensorFile(staged, kOptimizerFileName,
                                  contents.optimizer_state, {}, file_system,
                                  manifest));
  RETURN_IF_ERROR(WriteFileSynced(JoinPath(staged, kStateFileName),
                                  contents.state_json.data(),
                                  contents.state_json.size(), file_system));
  RETURN_IF_ERROR(AddToManifest(staged, kStateFileName, file_system, manifest));
  const std::string manifest_text = EncodeManifest(manifest);
  RETURN_IF_ERROR(WriteFileSynced(JoinPath(staged, kManifestFileName),
                                  manifest_text.data(), manifest_text.size(),
                                  file_system));
  return file_system.SyncDirectory(staged);
}

// Best effort: deletes temporary directories and complete checkpoints beyond
// keep_last (the one named `written` always stays). A checkpoint loses its
// manifest first, so a crash mid-delete leaves it incomplete, never damaged
// yet complete-looking.
void PruneCheckpoints(const std::string& checkpoints_dir,
                      const std::string& written, int keep_last,
                      FileSystem& file_system) {
  std::error_code error;
  std::vector<std::string> temporary;
  std::vector<std::pair<int64_t, std::string>> complete;  // (step, path)
  for (fs::directory_iterator it(checkpoints_dir, error), end;
       !error && it != end; it.increment(error)) {
    const std::string name = it->path().filename().string();
    if (IsTemporaryDirectoryName(name)) {
      temporary.push_back(it->path().string());
      continue;
    }
    const int64_t step = ParseStepDirectoryName(name);
    if (step < 0 || name == written) continue;
    if (InspectCheckpoint(it->path().string()).ok()) {
      complete.emplace_back(step, it->path().string());
    }
  }
  for (const std::string& path : temporary) {
    file_system.RemoveAll(path).IgnoreError();
  }
  if (keep_last == 0) return;
  std::sort(complete.begin(), complete.end(), std::greater<>());
  for (size_t i = static_cast<size_t>(keep_last) - 1; i < complete.size();
       ++i) {
    const std::string& directory = complete[i].second;
    if (file_system.RemoveAll(JoinPath(directory, kManifestFileName)).ok()) {
      file_system.RemoveAll(directory).IgnoreError();
    }
  }
}

// The last stage of both writers: once `staged` holds a whole checkpoint
// of `step` (`staged_status` OK), renames it to the step's directory under
// `fence` (if any), syncs the run directory where asked (a new checkpoints
// directory in it) and prunes; returns the directory. On any failure
// removes `staged` and returns the error, prefixed with `context`.
absl::StatusOr<std::string> CommitStagedDirectory(
    const std::string& run_dir, int64_t step, const std::string& staged,
    absl::Status staged_status, bool sync_run_directory, int keep_last,
    const RunFence* fence, FileSystem& file_system,
    const std::string& context) {
  const std::string run_path = TrimTrailingSlashes(run_dir);
  const std::string final_dir = CheckpointDirectory(run_dir, step);
  const auto commit = [&]() -> absl::Status {
    RETURN_IF_ERROR(ReplaceDirectory(staged, final_dir, true, file_system));
    if (sync_run_directory) {
      RETURN_IF_ERROR(file_system.SyncDirectory(run_path));
    }
    PruneCheckpoints(JoinPath(run_path, kCheckpointsDirectoryName),
                     CheckpointDirectoryName(step), keep_last, file_system);
    return absl::OkStatus();
  };
  absl::Status status = std::move(staged_status);
  if (status.ok()) status = fence != nullptr ? fence->Guard(commit) : commit();
  if (!status.ok()) {
    // Gone already once renamed.
    file_system.RemoveAll(staged).IgnoreError();
    return WithContext(status, context);
  }
  return final_dir;
}

}  // namespace

std::string CheckpointDirectoryName(int64_t step) {
  return absl::StrFormat("%s%08d", kStepPrefix, step);
}

std::string CheckpointDirectory(const std::string& run_dir, int64_t step) {
  return JoinPath(
      JoinPath(TrimTrailingSlashes(run_dir), kCheckpointsDirectoryName),
      CheckpointDirectoryName(step));
}

absl::StatusOr<std::string> WriteCheckpoint(
    const std::string& run_dir, int64_t step,
    const CheckpointContents& contents, const CheckpointWriteOptions& options) {
  const int keep_last = options.keep_last;
  FileSystem& file_system = *options.file_system;
  const std::string context = absl::StrCat("cannot write checkpoint of step ",
                                           step, " in ", run_dir, ": ");
  if (step < 0) return absl::InvalidArgumentError(context + "negative step");
  if (keep_last < 0) {
    return absl::InvalidArgumentError(context + "negative keep_last");
  }
  if (!Json::accept(contents.state_json)) {
    return absl::InvalidArgumentError(context + "state_json is not valid JSON");
  }
  std::error_code error;
  const bool creates_checkpoints_dir = !fs::exists(
      JoinPath(TrimTrailingSlashes(run_dir), kCheckpointsDirectoryName), error);
  absl::StatusOr<std::string> staged = MakeSiblingDirectory(
      CheckpointDirectory(run_dir, step), "tmp", file_system);
  if (!staged.ok()) return WithContext(staged.status(), context);
  return CommitStagedDirectory(
      run_dir, step, *staged,
      WriteStagedCheckpoint(*staged, step, contents, file_system),
      creates_checkpoints_dir, keep_last, options.fence, file_system, context);
}

std::string ShardStagingDirectory(const std::string& run_dir, int64_t step,
                                  const std::string& write_id) {
  return JoinPath(
      JoinPath(TrimTrailingSlashes(run_dir), kCheckpointsDirectoryName),
      absl::StrCat(".", CheckpointDirectoryName(step), ".tmp-", write_id));
}

absl::StatusOr<std::string> CommitShardedCheckpoint(
    const std::string& run_dir, int64_t step, const std::string& staging,
    int world, const CheckpointShapes& expected, const std::string& state_json,
    const ShardedCommitOptions& options) {
  FileSystem& file_system = *options.file_system;
  const std::string context = absl::StrCat("cannot commit checkpoint of step ",
                                           step, " in ", run_dir, ": ");
  if (step < 0 || options.keep_last < 0 || world < 1) {
    return absl::InvalidArgumentError(
        context + "negative step or keep_last, or no ranks");
  }
  if (!Json::accept(state_json)) {
    return absl::InvalidArgumentError(context + "state_json is not valid JSON");
  }
  const auto stage = [&]() -> absl::Status {
    ASSIGN_OR_RETURN(MergedShards merged,
                     MergeShardFragments(staging, world, expected));
    for (const nlohmann::ordered_json& file : merged.files) {
      const std::string path =
          JoinPath(staging, file.at("name").get<std::string>());
      std::error_code error;
      const uintmax_t bytes = fs::file_size(path, error);
      if (error || bytes != file.at("bytes").get<uint64_t>()) {
        return absl::DataLossError(absl::StrCat(
            path, " is missing or not of the size its rank wrote"));
      }
    }
    RETURN_IF_ERROR(WriteFileSynced(JoinPath(staging, kStateFileName),
                                    state_json.data(), state_json.size(),
                                    file_system));
    Manifest state;
    RETURN_IF_ERROR(AddToManifest(staging, kStateFileName, file_system, state));
    nlohmann::ordered_json files = std::move(merged.files);
    files.push_back({{"name", state.files[0].name},
                     {"bytes", state.files[0].bytes},
                     {"sha256", state.files[0].sha256}});
    nlohmann::ordered_json manifest = {{"format", kCheckpointFormatName},
                                       {"version", kShardedCheckpointVersion},
                                       {"step", step},
                                       {"block_bytes", merged.block_bytes},
                                       {"files", std::move(files)}};
    for (const CheckpointPart part : kCheckpointParts) {
      manifest[CheckpointPartName(part)] =
          std::move(merged.parts[CheckpointPartName(part)]);
    }
    // The index replaces the fragments.
    for (const std::string& fragment : merged.fragments) {
      RETURN_IF_ERROR(file_system.RemoveAll(fragment));
    }
    const std::string text = manifest.dump() + "\n";
    RETURN_IF_ERROR(WriteFileSynced(JoinPath(staging, kManifestFileName),
                                    text.data(), text.size(), file_system));
    return file_system.SyncDirectory(staging);
  };
  // The ranks made the checkpoints directory without syncing the run
  // directory.
  return CommitStagedDirectory(run_dir, step, staging, stage(),
                               /*sync_run_directory=*/true, options.keep_last,
                               options.fence, file_system, context);
}

absl::StatusOr<std::unique_ptr<Checkpoint>> OpenLatestCheckpoint(
    const std::string& run_dir, std::vector<std::string>* skipped_newer,
    FileSystem& file_system, int64_t below_step) {
  const std::string checkpoints_dir =
      JoinPath(TrimTrailingSlashes(run_dir), kCheckpointsDirectoryName);
  std::error_code error;
  std::vector<std::pair<int64_t, std::string>> candidates;  // (step, name)
  for (fs::directory_iterator it(checkpoints_dir, error), end;
       !error && it != end; it.increment(error)) {
    const std::string name = it->path().filename().string();
    const int64_t step = ParseStepDirectoryName(name);
    if (step >= 0 && step < below_step) candidates.emplace_back(step, name);
  }
  if (error == std::errc::no_such_file_or_directory) {
    return absl::NotFoundError(absl::StrCat("no checkpoint in ", run_dir, ": ",
                                            checkpoints_dir,
                                            " does not exist"));
  }
  if (error) {
    return absl::ErrnoToStatus(error.value(),
                               absl::StrCat("cannot list ", checkpoints_dir));
  }
  std::sort(candidates.begin(), candidates.end(), std::greater<>());
  std::vector<std::string> skipped;
  for (const auto& [step, name] : candidates) {
    const std::string directory = JoinPath(checkpoints_dir, name);
    absl::Status status = InspectCheckpoint(directory).status();
    if (status.ok()) {
      absl::StatusOr<std::unique_ptr<Checkpoint>> checkpoint =
          Checkpoint::Open(directory, /*verify_checksums=*/true, file_system);
      if (checkpoint.ok()) return checkpoint;
      status = checkpoint.status();
    }
    // Only damage is passed over: a checkpoint that cannot be read now (an
    // I/O error) may be whole, and starting from an older one would lose it.
    if (!absl::IsDataLoss(status) && !absl::IsFailedPrecondition(status) &&
        !absl::IsNotFound(status)) {
      return status;
    }
    const std::string reason = absl::StrCat(name, ": ", status.message());
    if (skipped_newer != nullptr) skipped_newer->push_back(reason);
    if (skipped.size() < kMaxSkippedReasons) skipped.push_back(reason);
  }
  std::string message =
      absl::StrCat("no complete checkpoint in ", checkpoints_dir);
  if (!candidates.empty()) {
    absl::StrAppend(&message, "; skipped ", candidates.size(), " (",
                    absl::StrJoin(skipped, "; "), ")");
  }
  return absl::NotFoundError(message);
}

Checkpoint::~Checkpoint() = default;

absl::StatusOr<std::unique_ptr<Checkpoint>> Checkpoint::Open(
    const std::string& checkpoint_dir, bool verify_checksums,
    FileSystem& file_system) {
  const std::string directory = TrimTrailingSlashes(checkpoint_dir);
  ASSIGN_OR_RETURN(const Manifest manifest, ReadManifest(directory));
  std::unique_ptr<Checkpoint> checkpoint(new Checkpoint());
  checkpoint->directory_ = directory;
  checkpoint->step_ = manifest.step;
  checkpoint->version_ = manifest.version;
  for (const ManifestFile& file : manifest.files) {
    // Version 2's shard files are mapped when a read needs them.
    if (manifest.version == 1 || file.name == kStateFileName) {
      ASSIGN_OR_RETURN(
          checkpoint->mapped_[file.name],
          OpenListedFile(directory, file, verify_checksums, file_system));
    }
    if (file.bytes >
        static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return absl::DataLossError(absl::StrCat(
          "bad checkpoint manifest ", JoinPath(directory, kManifestFileName),
          ": ", file.name, " is listed with ", file.bytes, " bytes"));
    }
    checkpoint->file_bytes_[file.name] = static_cast<int64_t>(file.bytes);
  }
  const MappedFile& state = *checkpoint->mapped_[kStateFileName];
  checkpoint->state_json_.assign(reinterpret_cast<const char*>(state.data()),
                                 state.size_bytes());
  if (manifest.version == 1) {
    ASSIGN_OR_RETURN(checkpoint->weights_file_,
                     SafetensorsReader::FromMappedFile(
                         JoinPath(directory, kModelFileName),
                         std::move(checkpoint->mapped_[kModelFileName])));
    ASSIGN_OR_RETURN(checkpoint->optimizer_file_,
                     SafetensorsReader::FromMappedFile(
                         JoinPath(directory, kOptimizerFileName),
                         std::move(checkpoint->mapped_[kOptimizerFileName])));
    checkpoint->weights_ =
        std::make_unique<SafetensorsTensorSource>(*checkpoint->weights_file_);
    checkpoint->optimizer_ =
        std::make_unique<SafetensorsTensorSource>(*checkpoint->optimizer_file_);
    return checkpoint;
  }
  const std::string index_path = JoinPath(directory, kManifestFileName);
  absl::StatusOr<ShardedIndex> index = ParseShardedIndex(manifest.json);
  if (!index.ok()) {
    return WithContext(index.status(),
                       absl::StrCat("bad checkpoint index ", index_path, ": "));
  }
  checkpoint->index_ = *std::move(index);
  // Every chunk must lie within its file as listed, so that a read of a
  // file of that size stays within it.
  for (const CheckpointPart part : kCheckpointParts) {
    for (const auto& [name, tensor] : checkpoint->index_.part(part)) {
      for (const StoredChunk& chunk : tensor.chunks) {
        const auto listed = checkpoint->file_bytes_.find(chunk.file);
        const int64_t chunk_bytes =
            (chunk.end - chunk.begin) * static_cast<int64_t>(sizeof(float));
        if (listed == checkpoint->file_bytes_.end() ||
            chunk.file == kStateFileName ||
            chunk.offset_bytes > listed->second ||
            chunk_bytes > listed->second - chunk.offset_bytes) {
          return absl::DataLossError(absl::StrCat(
              "bad checkpoint index ", index_path, ": ", name, " elements [",
              chunk.begin, ", ", chunk.end, ") are stored in ", chunk.file,
              " at byte ", chunk.offset_bytes, ", outside the files it lists"));
        }
      }
    }
  }
  checkpoint->shard_files_ = std::make_unique<LazyFileMaps>(
      directory, checkpoint->file_bytes_, file_system);
  checkpoint->weights_ = std::make_unique<ShardedTensorSource>(
      directory, checkpoint->index_.block_bytes, &checkpoint->index_.weights,
      checkpoint->shard_files_.get());
  checkpoint->optimizer_ = std::make_unique<ShardedTensorSource>(
      directory, checkpoint->index_.block_bytes,
      &checkpoint->index_.optimizer_state, checkpoint->shard_files_.get());
  return checkpoint;
}

}  // namespace plateau::engine
