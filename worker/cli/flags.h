// Command-line flags of plateau-worker (docs/ARCHITECTURE.md section 6), shared
// by its subcommands.
#ifndef PLATEAU_WORKER_CLI_FLAGS_H_
#define PLATEAU_WORKER_CLI_FLAGS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/flags/declare.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

ABSL_DECLARE_FLAG(std::string, device_memory);
ABSL_DECLARE_FLAG(std::string, backend);
ABSL_DECLARE_FLAG(std::string, cuda_devices);
ABSL_DECLARE_FLAG(std::string, cuda_matmul);
ABSL_DECLARE_FLAG(int32_t, threads);
ABSL_DECLARE_FLAG(std::vector<std::string>, read_roots);
ABSL_DECLARE_FLAG(int32_t, world);
ABSL_DECLARE_FLAG(absl::Duration, comm_timeout);
ABSL_DECLARE_FLAG(std::string, run_dir);
ABSL_DECLARE_FLAG(int64_t, attempt);
ABSL_DECLARE_FLAG(bool, resume);
ABSL_DECLARE_FLAG(std::string, precision);
ABSL_DECLARE_FLAG(std::string, precision_reason);
ABSL_DECLARE_FLAG(std::string, summary_json);
ABSL_DECLARE_FLAG(int64_t, log_every);
ABSL_DECLARE_FLAG(int32_t, keep_checkpoints);
ABSL_DECLARE_FLAG(std::string, exit_during_checkpoint);
ABSL_DECLARE_FLAG(std::string, weights);
ABSL_DECLARE_FLAG(std::string, output);
ABSL_DECLARE_FLAG(bool, overwrite);
ABSL_DECLARE_FLAG(std::string, tokens);
ABSL_DECLARE_FLAG(int64_t, batch_sequences);
ABSL_DECLARE_FLAG(std::string, coordinator);
ABSL_DECLARE_FLAG(std::string, name);
ABSL_DECLARE_FLAG(double, bf16_product_speedup);
ABSL_DECLARE_FLAG(std::string, devices);
ABSL_DECLARE_FLAG(std::string, metrics_listen);
ABSL_DECLARE_FLAG(std::string, metrics_token_file);
ABSL_DECLARE_FLAG(std::string, rank_address);
ABSL_DECLARE_FLAG(std::string, work_dir);
ABSL_DECLARE_FLAG(std::string, token_file);
ABSL_DECLARE_FLAG(std::string, ca_cert);
ABSL_DECLARE_FLAG(std::string, client_cert);
ABSL_DECLARE_FLAG(std::string, client_key);
ABSL_DECLARE_FLAG(bool, allow_plaintext_token);

namespace plateau::worker {

inline constexpr int64_t kDefaultCpuDeviceMemoryBytes = int64_t{4} << 30;

// --device_memory in bytes, or `unset_bytes` when it is empty;
// INVALID_ARGUMENT naming the flag when it does not parse.
absl::StatusOr<int64_t> DeviceMemoryFlagBytes(int64_t unset_bytes);

// --threads, or when it is 0 this machine's cores divided among
// `local_ranks` (at least 1).
int ThreadsPerRank(int local_ranks);

}  // namespace plateau::worker

#endif  // PLATEAU_WORKER_CLI_FLAGS_H_
