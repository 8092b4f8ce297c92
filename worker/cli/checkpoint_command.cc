#include <algorithm>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <system_error>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/byte_size.h"
#include "common/file_util.h"
#include "common/status_macros.h"
#include "engine/checkpoint/checkpoint.h"
#include "engine/memory/tensor.h"
#include "worker/cli/commands.h"
#include "worker/cli/flags.h"

namespace plateau::worker {
namespace {

// Values read and checked at a time by verify.
constexpr int64_t kVerifyElements = int64_t{1} << 20;

absl::Status Verify(const std::string& directory) {
  // Version 1's files are checked whole when opened.
  ASSIGN_OR_RETURN(std::unique_ptr<engine::Checkpoint> checkpoint,
                   engine::Checkpoint::Open(directory));
  std::vector<float> values(static_cast<size_t>(kVerifyElements));
  int64_t tensors = 0;
  if (checkpoint->version() >= engine::kShardedCheckpointVersion) {
    for (const engine::CheckpointPart part : engine::kCheckpointParts) {
      const engine::TensorSource& source = checkpoint->part(part);
      for (const auto& [name, info] : source.Tensors()) {
        const int64_t elements = engine::ShapeElements(info.shape);
        for (int64_t done = 0; done < elements; done += kVerifyElements) {
          RETURN_IF_ERROR(source.Read(
              name, done, std::min(kVerifyElements, elements - done),
              values.data()));
        }
        ++tensors;
      }
    }
  } else {
    tensors =
        static_cast<int64_t>(checkpoint->weights().Tensors().size() +
                             checkpoint->optimizer_state().Tensors().size());
  }
  int64_t bytes = 0;
  for (const auto& [name, file_bytes] : checkpoint->files()) {
    bytes += file_bytes;
  }
  std::cout << checkpoint->directory() << ": version " << checkpoint->version()
            << ", step " << checkpoint->step() << ", " << tensors
            << " tensors in " << checkpoint->files().size() << " files ("
            << FormatBytes(bytes) << "): every "
            << (checkpoint->version() >= engine::kShardedCheckpointVersion
                    ? "block's CRC-32"
                    : "file's SHA-256")
            << " matches\n";
  return absl::OkStatus();
}

absl::Status Consolidate(const std::string& directory,
                         const std::string& output) {
  if (output.empty()) {
    return absl::InvalidArgumentError("--output FILE is required");
  }
  std::error_code error;
  if (!absl::GetFlag(FLAGS_overwrite) &&
      std::filesystem::exists(output, error)) {
    return absl::AlreadyExistsError(
        absl::StrCat(output, " exists; pass --overwrite to replace it"));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<engine::Checkpoint> checkpoint,
                   engine::Checkpoint::Open(directory));
  const engine::TensorSource& weights = checkpoint->weights();
  const std::map<std::string, engine::TensorInfo> tensors = weights.Tensors();
  // The whole model in host memory, as WriteSafetensors takes it.
  std::vector<std::vector<float>> values;
  values.reserve(tensors.size());
  std::vector<engine::TensorView> views;
  int64_t bytes = 0;
  for (const auto& [name, info] : tensors) {
    const int64_t elements = engine::ShapeElements(info.shape);
    values.emplace_back(static_cast<size_t>(elements));
    RETURN_IF_ERROR(weights.Read(name, 0, elements, values.back().data()));
    views.push_back({name, engine::SafetensorsDtype::kF32, info.shape,
                     values.back().data(),
                     static_cast<size_t>(elements) * sizeof(float)});
    bytes += elements * static_cast<int64_t>(sizeof(float));
  }
  RETURN_IF_ERROR(engine::WriteSafetensors(output, views, {{"format", "pt"}}));
  std::cout << output << ": the " << tensors.size() << " weights of "
            << checkpoint->directory() << " (" << FormatBytes(bytes) << ")\n";
  return absl::OkStatus();
}

}  // namespace

int RunCheckpointCommand(const std::vector<std::string>& arguments) {
  if (arguments.size() != 2 ||
      (arguments[0] != "verify" && arguments[0] != "consolidate")) {
    std::cerr << "usage: plateau-worker checkpoint verify DIR | checkpoint "
                 "consolidate DIR --output FILE\n";
    return 2;
  }
  const absl::Status status =
      arguments[0] == "verify"
          ? Verify(arguments[1])
          : Consolidate(arguments[1], absl::GetFlag(FLAGS_output));
  if (!status.ok()) {
    std::cerr << "plateau-worker checkpoint " << arguments[0] << ": "
              << status.message() << "\n";
    return 1;
  }
  return 0;
}

}  // namespace plateau::worker
