#include "worker/cli/flags.h"

#include <algorithm>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/byte_size.h"

ABSL_FLAG(std::string, device_memory, "",
          "capacity of each device's memory pool, e.g. 2GiB (default: 4GiB "
          "for CPU devices; for CUDA devices the card's memory less 4GiB for "
          "the CUDA context, cuBLAS and NCCL)");
ABSL_FLAG(std::string, backend, "cpu",
          "train and eval: the compute backend of each rank: cpu or cuda");
ABSL_FLAG(std::string, cuda_devices, "",
          "train and eval: with --backend cuda, the CUDA device of each local "
          "rank, in order (e.g. 2,3); default: local rank i on device i");
ABSL_FLAG(std::string, cuda_matmul, "fp32",
          "train and eval: with --backend cuda, how cuBLAS computes float32 "
          "products in a precision: fp32 job: fp32 (exact, as the spec says) "
          "or tf32 (tensor cores, 10-bit mantissa inputs)");
ABSL_FLAG(int32_t, threads, 0,
          "kernel threads per rank (0: this machine's cores divided among "
          "its ranks)");
ABSL_FLAG(int32_t, world, 1,
          "train: local rank processes to launch; must equal the spec's "
          "parallel ep*pp*dp");
ABSL_FLAG(absl::Duration, comm_timeout, absl::Minutes(5),
          "train: how long a rank waits for its peers in any one collective "
          "or rendezvous before failing; must cover rank 0 writing a "
          "checkpoint, which the other ranks wait for");
ABSL_FLAG(std::vector<std::string>, read_roots, {},
          "train: read data.path and init_from only beneath these "
          "directories (relative ones under the current directory), "
          "symlinks included; plateaud's workers pass the job's roots; "
          "empty: not confined");
ABSL_FLAG(std::string, run_dir, "",
          "train: where checkpoints go (default runs/<spec name>)");
ABSL_FLAG(int64_t, attempt, 0,
          "train: the plateaud attempt these ranks are (the worker agent "
          "sets it): rank 0 claims --run_dir for it, and once a newer "
          "attempt has claimed the directory this one can neither commit "
          "nor delete a checkpoint there; 0 (a run outside plateaud) is "
          "refused a directory an attempt has claimed");
ABSL_FLAG(bool, resume, false,
          "train: continue from the newest intact checkpoint in --run_dir "
          "(damaged newer ones are passed over, and named)");
ABSL_FLAG(std::string, precision, "",
          "train and eval: bf16 or fp32 for a spec of precision: auto "
          "(what its launcher chose; default: choose here, as plateaud "
          "would for this machine)");
ABSL_FLAG(std::string, precision_reason, "",
          "train: why the precision runs, for the log (the agent passes "
          "plateaud's reason)");
ABSL_FLAG(std::string, summary_json, "",
          "train, eval: write a machine-readable summary to this file");
ABSL_FLAG(int64_t, log_every, 10, "train: print progress every N steps");
ABSL_FLAG(int32_t, keep_checkpoints, 3,
          "train: complete checkpoints kept in --run_dir (0 keeps all)");
ABSL_FLAG(std::string, exit_during_checkpoint, "",
          "train, for fault tests: RANK:STEP:CHUNKS ends rank RANK (exit "
          "status 86) once it has written CHUNKS chunks of its shard of "
          "step STEP's checkpoint, as a killed rank ends");
ABSL_FLAG(std::string, weights, "",
          "eval, export: a checkpoint directory or a safetensors file; for "
          "eval also a Hugging Face model directory");
ABSL_FLAG(std::string, output, "",
          "export: the directory to create; checkpoint consolidate: the "
          "safetensors file to write");
ABSL_FLAG(bool, overwrite, false,
          "export, checkpoint consolidate: replace an existing output");
ABSL_FLAG(std::string, tokens, "",
          "eval: a raw little-endian uint32 token file, or a prepared data "
          "directory (its validation split)");
ABSL_FLAG(int64_t, batch_sequences, 8, "eval: windows per forward pass");
ABSL_FLAG(std::string, coordinator, "",
          "agent: plateaud's gRPC address (host:port); runs this worker as "
          "the node's agent");
ABSL_FLAG(std::string, name, "", "agent: this node's name (default: hostname)");
ABSL_FLAG(double, bf16_product_speedup, 0,
          "agent: how many times faster this CPU's bf16 matrix products run "
          "than its fp32 ones, reported to plateaud for precision: auto "
          "(default 0: measured when the agent starts, about half a second "
          "of one core)");
ABSL_FLAG(std::string, devices, "auto",
          "agent: devices to offer: auto, cuda, or cpu:N (N CPU devices of "
          "--device_memory each)");
ABSL_FLAG(std::string, metrics_listen, "127.0.0.1:9401",
          "agent: Prometheus /metrics address (port 0 picks a free one)");
ABSL_FLAG(std::string, metrics_token_file, "",
          "agent: file holding the bearer token /metrics asks for (the "
          "scrape credential Prometheus presents); empty: /metrics answers "
          "whoever reaches --metrics_listen");
ABSL_FLAG(std::string, rank_address, "",
          "agent: the address this node's ranks listen on for their peers "
          "on other nodes (default: this host's address on its route to "
          "--coordinator, 127.0.0.1 for a plateaud on loopback)");
ABSL_FLAG(std::string, work_dir, ".",
          "agent: working directory: attempts/ (per node) and runs/ (the "
          "checkpoints, to be shared by every node); relative data paths of "
          "job specs resolve here");
ABSL_FLAG(std::string, token_file, "",
          "agent: file holding this node's plateaud token (or set "
          "PLATEAU_TOKEN); none without auth");
ABSL_FLAG(std::string, ca_cert, "",
          "agent: CA certificate (PEM) to verify plateaud's TLS certificate; "
          "empty for plaintext");
ABSL_FLAG(std::string, client_cert, "",
          "agent: this node's client certificate (PEM; needs --ca_cert and "
          "--client_key): plateaud with --tls_client_ca takes it, without a "
          "token, for the node it names");
ABSL_FLAG(std::string, client_key, "",
          "agent: the private key (PEM) of --client_cert");
ABSL_FLAG(bool, allow_plaintext_token, false,
          "agent: send the node's token to a non-loopback --coordinator "
          "without TLS (a network you trust); refused otherwise");

namespace plateau::worker {

absl::StatusOr<int64_t> DeviceMemoryFlagBytes(int64_t unset_bytes) {
  const std::string value = absl::GetFlag(FLAGS_device_memory);
  if (value.empty()) return unset_bytes;
  absl::StatusOr<int64_t> bytes = ParseByteSize(value);
  if (!bytes.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--device_memory: ", bytes.status().message()));
  }
  return bytes;
}

int ThreadsPerRank(int local_ranks) {
  const int threads = absl::GetFlag(FLAGS_threads);
  if (threads > 0) return threads;
  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  return std::max(1, cores / std::max(1, local_ranks));
}

}  // namespace plateau::worker
