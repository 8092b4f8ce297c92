#include "worker/cli/weights_file.h"

#include <sys/stat.h>

#include <utility>

#include "common/status_macros.h"
#include "engine/train/model_io.h"

namespace plateau::worker {

bool IsDirectory(const std::string& path) {
  struct stat info;
  return stat(path.c_str(), &info) == 0 && S_ISDIR(info.st_mode);
}

absl::StatusOr<WeightsFile> WeightsFile::Open(
    const std::string& path, const engine::ModelConfig& config) {
  WeightsFile opened;
  if (IsDirectory(path) && engine::HfModelDirectory::IsHfModelDirectory(path)) {
    ASSIGN_OR_RETURN(opened.hf_directory_,
                     engine::HfModelDirectory::Open(path, config));
    opened.source_ = opened.hf_directory_->directory();
  } else if (IsDirectory(path)) {
    ASSIGN_OR_RETURN(opened.checkpoint_, engine::Checkpoint::Open(path));
    opened.source_ = opened.checkpoint_->directory();
  } else {
    ASSIGN_OR_RETURN(opened.file_, engine::SafetensorsReader::Open(path));
    opened.file_source_ =
        std::make_unique<engine::SafetensorsTensorSource>(*opened.file_);
    opened.source_ = path;
  }
  return opened;
}

absl::Status WeightsFile::LoadInto(engine::Model& model) const {
  if (hf_directory_ == nullptr) {
    return engine::LoadWeights(*plateau_weights(), model);
  }
  engine::LoadHfWeights(*hf_directory_, model);
  return model.ops().status();
}

}  // namespace plateau::worker
