#include "worker/cli/weights_file.h"

#include <sys/stat.h>

#include <utility>

#include "common/status_macros.h"

namespace plateau::worker {

bool IsDirectory(const std::string& path) {
  struct stat info;
  return stat(path.c_str(), &info) == 0 && S_ISDIR(info.st_mode);
}

absl::StatusOr<WeightsFile> WeightsFile::Open(const std::string& path) {
  WeightsFile opened;
  if (IsDirectory(path)) {
    ASSIGN_OR_RETURN(opened.checkpoint_, engine::Checkpoint::Open(path));
    opened.source_ = opened.checkpoint_->directory();
  } else {
    ASSIGN_OR_RETURN(opened.file_, engine::SafetensorsReader::Open(path));
    opened.source_ = path;
  }
  return opened;
}

}  // namespace plateau::worker
