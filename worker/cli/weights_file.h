// The --weights of eval and export: a checkpoint directory (opened as a
// checkpoint, so its manifest is checked) or a bare safetensors file.
#ifndef PLATEAU_WORKER_CLI_WEIGHTS_FILE_H_
#define PLATEAU_WORKER_CLI_WEIGHTS_FILE_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "engine/checkpoint/checkpoint.h"
#include "engine/checkpoint/safetensors.h"

namespace plateau::worker {

bool IsDirectory(const std::string& path);

class WeightsFile {
 public:
  static absl::StatusOr<WeightsFile> Open(const std::string& path);

  const engine::SafetensorsReader& weights() const {
    return checkpoint_ != nullptr ? checkpoint_->weights() : *file_;
  }
  // The checkpoint directory, or the file.
  const std::string& source() const { return source_; }

 private:
  std::unique_ptr<engine::Checkpoint> checkpoint_;
  std::unique_ptr<engine::SafetensorsReader> file_;
  std::string source_;
};

}  // namespace plateau::worker

#endif  // PLATEAU_WORKER_CLI_WEIGHTS_FILE_H_
