#include "worker/cli/flags.h"

#include "absl/flags/flag.h"

ABSL_FLAG(std::string, device_memory, "4GiB",
          "capacity of each CPU device's memory pool, e.g. 2GiB");
ABSL_FLAG(int32_t, threads, 2, "kernel threads per rank");
ABSL_FLAG(std::string, run_dir, "",
          "train: where checkpoints go (default runs/<spec name>)");
ABSL_FLAG(bool, resume, false,
          "train: continue from the newest complete checkpoint in --run_dir");
ABSL_FLAG(std::string, summary_json, "",
          "train, eval: write a machine-readable summary to this file");
ABSL_FLAG(int64_t, log_every, 10, "train: print progress every N steps");
ABSL_FLAG(int32_t, keep_checkpoints, 3,
          "train: complete checkpoints kept in --run_dir (0 keeps all)");
ABSL_FLAG(std::string, weights, "",
          "eval: a checkpoint directory or a safetensors file");
ABSL_FLAG(std::string, tokens, "",
          "eval: a raw little-endian uint32 token file, or a prepared data "
          "directory (its validation split)");
ABSL_FLAG(int64_t, batch_sequences, 8, "eval: windows per forward pass");
