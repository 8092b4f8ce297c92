// A model's weights in the Hugging Face layout (hf_layout.h), so that
// transformers and the tools built on it load what Plateau trained. The
// directory holds
//   config.json                          MixtralConfig's or Qwen3MoeConfig's
//                                        keys
//   model-00001-of-0000N.safetensors     the state dict, float32, in shards
//   model.safetensors.index.json         {"metadata": {"total_size": B},
//                                         "weight_map": {tensor: shard}}
// with the values of Plateau's weights bit for bit. The training-only
// options (the load-balancing and z-loss coefficients) change no inference;
// the first goes to router_aux_loss_coef.
//
// With a tokenizer, its files go beside the weights
// (engine/data/hf_tokenizer.h, written by plateau-data since only it links
// SentencePiece) and its bos_token_id and eos_token_id into config.json.
//
// The directory appears atomically, as a prepared dataset does
// (common/file_util.h): written beside the output, then renamed into place.
#ifndef PLATEAU_ENGINE_TRAIN_HF_EXPORT_H_
#define PLATEAU_ENGINE_TRAIN_HF_EXPORT_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/checkpoint/safetensors.h"
#include "engine/checkpoint/tensor_source.h"
#include "engine/model/model_config.h"
#include "engine/train/hf_layout.h"

namespace plateau::engine {

struct HfExportOptions {
  std::string output_directory;
  // A shard is closed before a tensor would take it past this (a larger
  // tensor gets a shard of its own); transformers' default is 5 GB.
  int64_t max_shard_bytes = int64_t{5} * 1000 * 1000 * 1000;
  // Replace an existing non-empty output directory.
  bool overwrite = false;
  // Unset: no tokenizer. Else writes a tokenizer's files into the given
  // (staged) directory and returns its ids. It may have fewer ids than
  // model.vocab (the embedding rows past them are never used), not more.
  std::function<absl::StatusOr<HfTokenizerIds>(const std::string& directory)>
      write_tokenizer;
};

// A model without an architecture (WhyNoHfArchitecture) is refused.
// `weights` must hold exactly the whole model's float32 tensors of
// `config` (a checkpoint's weights, or a safetensors file of them; read
// into host memory, the whole model at once): INVALID_ARGUMENT naming each
// missing, unexpected or mis-shaped one, and nothing written; so too when
// write_tokenizer fails or gives more ids than the model has.
absl::Status ExportHuggingFace(const ModelConfig& config,
                               const TensorSource& weights,
                               const HfExportOptions& options);

}  // namespace plateau::engine

#endif  // PLATEAU_ENGINE_TRAIN_HF_EXPORT_H_
