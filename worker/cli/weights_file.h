// The --weights of eval and export: a checkpoint directory (opened as a
// checkpoint, so its manifest is checked), a bare safetensors file, or, for
// eval, a Hugging Face model directory (one holding config.json, checked
// against the spec's model as init_from is).
#ifndef PLATEAU_WORKER_CLI_WEIGHTS_FILE_H_
#define PLATEAU_WORKER_CLI_WEIGHTS_FILE_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/checkpoint/checkpoint.h"
#include "engine/checkpoint/safetensors.h"
#include "engine/model/model.h"
#include "engine/train/hf_model_directory.h"

namespace plateau::worker {

bool IsDirectory(const std::string& path);

class WeightsFile {
 public:
  static absl::StatusOr<WeightsFile> Open(const std::string& path,
                                          const engine::ModelConfig& config);

  // Null for a Hugging Face directory, which holds no Plateau tensors.
  const engine::TensorSource* plateau_weights() const {
    if (checkpoint_ != nullptr) return &checkpoint_->weights();
    return file_source_.get();
  }
  // Copies every weight into the whole-model `model`.
  absl::Status LoadInto(engine::Model& model) const;
  // The checkpoint directory, the file, or the Hugging Face directory.
  const std::string& source() const { return source_; }

 private:
  std::unique_ptr<engine::Checkpoint> checkpoint_;
  std::unique_ptr<engine::SafetensorsReader> file_;
  std::unique_ptr<engine::SafetensorsTensorSource> file_source_;
  std::unique_ptr<engine::HfModelDirectory> hf_directory_;
  std::string source_;
};

}  // namespace plateau::worker

#endif  // PLATEAU_WORKER_CLI_WEIGHTS_FILE_H_
