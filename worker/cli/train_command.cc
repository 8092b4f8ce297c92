#include <atomic>
#include <csignal>
#include <iostream>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "common/byte_size.h"
#include "proto/job_spec.h"
#include "worker/cli/commands.h"
#include "worker/cli/flags.h"
#include "worker/engine/train/run_summary.h"
#include "worker/engine/train/trainer.h"

namespace plateau::worker {
namespace {

std::atomic<bool> stop_requested{false};

extern "C" void RequestStop(int /*signal*/) { stop_requested.store(true); }

// Writes the summary if asked; reports `status` and turns it into an exit
// status.
int Finish(const engine::RunSummary& summary) {
  const std::string path = absl::GetFlag(FLAGS_summary_json);
  if (!path.empty()) {
    const absl::Status written = engine::WriteRunSummary(path, summary);
    if (!written.ok()) std::cerr << "plateau-worker: " << written << "\n";
  }
  if (!summary.status.ok()) {
    std::cerr << "plateau-worker train: " << summary.status.message() << "\n";
    return 1;
  }
  return 0;
}

}  // namespace

int RunTrainCommand(const std::vector<std::string>& arguments) {
  if (arguments.size() != 1) {
    std::cerr << "usage: plateau-worker train SPEC [--run_dir DIR] [--resume] "
                 "[--device_memory SIZE] [--threads N] [--summary_json FILE]\n";
    return 2;
  }
  engine::RunSummary summary;
  summary.command = "train";
  absl::StatusOr<v1::JobSpec> spec = ReadJobSpecFile(arguments[0]);
  if (!spec.ok()) {
    summary.status = spec.status();
    return Finish(summary);
  }
  absl::StatusOr<int64_t> device_memory =
      ParseByteSize(absl::GetFlag(FLAGS_device_memory));
  if (!device_memory.ok()) {
    summary.status = absl::InvalidArgumentError(
        absl::StrCat("--device_memory: ", device_memory.status().message()));
    return Finish(summary);
  }
  engine::TrainerOptions options;
  options.run_directory = absl::GetFlag(FLAGS_run_dir);
  if (options.run_directory.empty()) {
    options.run_directory = absl::StrCat("runs/", spec->name());
  }
  options.device_memory_bytes = *device_memory;
  options.threads = absl::GetFlag(FLAGS_threads);
  options.resume = absl::GetFlag(FLAGS_resume);
  options.log_every_steps =
      std::max<int64_t>(1, absl::GetFlag(FLAGS_log_every));
  options.keep_checkpoints = std::max(0, absl::GetFlag(FLAGS_keep_checkpoints));
  options.stop_requested = &stop_requested;
  std::signal(SIGINT, RequestStop);
  std::signal(SIGTERM, RequestStop);

  absl::StatusOr<std::unique_ptr<engine::Trainer>> trainer =
      engine::Trainer::Create(*spec, options, &std::cout);
  if (!trainer.ok()) {
    summary.status = trainer.status();
    return Finish(summary);
  }
  summary.status = (*trainer)->Run();
  summary.training = &(*trainer)->record();
  summary.allocator = &(*trainer)->backend().allocator();
  summary.optimizer_state_bytes = (*trainer)->optimizer().StateBytesByTier();
  summary.checkpoint = (*trainer)->last_checkpoint();
  return Finish(summary);
}

}  // namespace plateau::worker
