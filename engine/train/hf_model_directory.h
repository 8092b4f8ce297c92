// A Hugging Face model directory as weights to start from: what
// hf_export.h writes, or what transformers' save_pretrained writes for a
// MixtralForCausalLM or Qwen3MoeForCausalLM (the job spec's `init_from`,
// and `plateau-worker eval --weights DIR`). Opening checks all of it
// against the spec's model before a weight is read:
//   config.json   the architecture the model is laid out as (hf_layout.h),
//                 and every key that sets a shape or changes what the model
//                 computes equal to the spec's; each mismatch names the
//                 spec's field or what Plateau cannot do.
//   weights       model.safetensors.index.json and the shards it names, or
//                 one model.safetensors: exactly HfTensorNames' tensors
//                 (the rotary inv_freq buffers that older exports carry are
//                 passed over, and with tied embeddings a copy of the table
//                 as lm_head.weight, equal byte for byte), each F32 or BF16
//                 at its shape.
// The problems found are listed (the first 20, then how many more) in one
// INVALID_ARGUMENT. The shards are mapped, not read, so a rank reads only
// the pieces it holds; BF16 values widen to float32 exactly. The expert bias
// of `balancing: bias` has no values here (it starts at zero).
#ifndef PLATEAU_ENGINE_TRAIN_HF_MODEL_DIRECTORY_H_
#define PLATEAU_ENGINE_TRAIN_HF_MODEL_DIRECTORY_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/checkpoint/safetensors.h"
#include "engine/model/model_config.h"

namespace plateau::engine {

class HfModelDirectory {
 public:
  // Whether `directory` holds a config.json: a Hugging Face directory
  // rather than a Plateau checkpoint.
  static bool IsHfModelDirectory(const std::string& directory);

  // NOT_FOUND when there is no config.json or no weights; INVALID_ARGUMENT
  // as above; DATA_LOSS for a damaged shard.
  static absl::StatusOr<std::unique_ptr<HfModelDirectory>> Open(
      const std::string& directory, const ModelConfig& config);

  // Whether the whole-model weight `plateau_name` has values here.
  bool HasValues(const std::string& plateau_name) const;
  // Elements [begin, begin + count) of Plateau's whole tensor
  // `plateau_name`, as float32. REQUIRES: HasValues, and the range in it.
  void Read(const std::string& plateau_name, int64_t begin, int64_t count,
            float* values) const;

  const std::string& directory() const { return directory_; }
  // The tensors' element types, e.g. "BF16" or "BF16, F32".
  const std::string& dtypes() const { return dtypes_; }
  // The tokenizer.model beside the weights; "" when there is none.
  std::string TokenizerModelPath() const;

 private:
  explicit HfModelDirectory(std::string directory)
      : directory_(std::move(directory)) {}

  std::string directory_;
  std::string dtypes_;
  std::vector<std::unique_ptr<SafetensorsReader>> shards_;
  // By Plateau name: the whole tensor, or a bank's experts in order.
  std::map<std::string, std::vector<const TensorEntry*>> sources_;
};

}  // namespace plateau::engine

#endif  // PLATEAU_ENGINE_TRAIN_HF_MODEL_DIRECTORY_H_
