#include <limits.h>
#include <poll.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/byte_size.h"
#include "common/read_roots.h"
#include "common/status_macros.h"
#include "engine/checkpoint/checkpoint.h"
#include "engine/parallel/parallel_layout.h"
#include "engine/parallel/rank_groups.h"
#include "engine/train/run_summary.h"
#include "engine/train/trainer.h"
#include "gloo/rendezvous/file_store.h"
#include "plan/memory_model.h"
#include "plan/planner.h"
#include "plan/precision_choice.h"
#include "proto/job_spec.h"
#include "worker/agent/coordinator_channel.h"
#include "worker/agent/rank_environment.h"
#include "worker/agent/rank_lease.h"
#include "worker/agent/rank_status.h"
#include "worker/cli/checkpoint_crash.h"
#include "worker/cli/commands.h"
#include "worker/cli/flags.h"
#include "worker/cli/local_precision.h"
#include "worker/cli/rank_backend.h"
#include "worker/launch/rank_launcher.h"
#include "worker/rendezvous/coordinator_store.h"

namespace plateau::worker {
namespace {

// How often a rank launched by the agent publishes its status, at most.
constexpr std::chrono::milliseconds kStatusInterval(500);
// How often a rank on a lease checks it.
constexpr absl::Duration kLeasePollInterval = absl::Milliseconds(100);

std::atomic<bool> stop_requested{false};

extern "C" void RequestStop(int /*signal*/) { stop_requested.store(true); }

// Writes the summary if asked; reports `status` and turns it into an exit
// status.
int Finish(const engine::RunSummary& summary, bool write_summary = true) {
  const std::string path = absl::GetFlag(FLAGS_summary_json);
  if (!path.empty() && write_summary) {
    const absl::Status written = engine::WriteRunSummary(path, summary);
    if (!written.ok()) std::cerr << "plateau-worker: " << written << "\n";
  }
  if (!summary.status.ok()) {
    std::cerr << "plateau-worker train: " << summary.status.message() << "\n";
    return 1;
  }
  return 0;
}

// A rank started by a launcher: where it is, its rendezvous (a directory, or
// plateaud's scope) and where it publishes its status ("" for nowhere).
struct LaunchedRank {
  int rank = 0;
  int local_rank = 0;  // among its launcher's ranks
  int world_size = 1;
  std::string rendezvous_directory;
  std::string coordinator;
  std::string rendezvous_scope;
  std::string node_token;
  CoordinatorTls tls;
  std::string status_directory;
  std::string address = "127.0.0.1";  // where it listens for its peers
  std::string lease_path;             // "" without a lease
};

std::string Environment(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr ? value : "";
}

// Set when this process is a launched rank; an error for a malformed
// environment.
absl::StatusOr<std::optional<LaunchedRank>> LaunchedRankFromEnvironment() {
  const char* rank = std::getenv(kRankVariable);
  if (rank == nullptr) return std::nullopt;
  LaunchedRank launched;
  launched.rendezvous_directory = Environment(kRendezvousDirectoryVariable);
  launched.coordinator = Environment(kCoordinatorVariable);
  launched.rendezvous_scope = Environment(kRendezvousScopeVariable);
  launched.node_token = Environment(kNodeTokenVariable);
  launched.tls.ca_cert_path = Environment(kCaCertVariable);
  launched.tls.client_cert_path = Environment(kClientCertVariable);
  launched.tls.client_key_path = Environment(kClientKeyVariable);
  launched.status_directory = Environment(kStatusDirectoryVariable);
  launched.lease_path = Environment(kRankLeaseVariable);
  if (!Environment(kRankAddressVariable).empty()) {
    launched.address = Environment(kRankAddressVariable);
  }
  const bool has_rendezvous =
      !launched.rendezvous_directory.empty() ||
      (!launched.coordinator.empty() && !launched.rendezvous_scope.empty());
  if (!absl::SimpleAtoi(rank, &launched.rank) ||
      !absl::SimpleAtoi(Environment(kWorldSizeVariable),
                        &launched.world_size) ||
      !absl::SimpleAtoi(Environment(kLocalRankVariable),
                        &launched.local_rank) ||
      !has_rendezvous) {
    return absl::InvalidArgumentError(absl::StrCat(
        kRankVariable, ", ", kWorldSizeVariable, ", ", kLocalRankVariable,
        " and either ", kRendezvousDirectoryVariable, " or ",
        kCoordinatorVariable, " with ", kRendezvousScopeVariable,
        " must all be set (by the launcher), got ", kRankVariable, "=", rank));
  }
  return launched;
}

absl::StatusOr<std::shared_ptr<gloo::rendezvous::Store>> RendezvousStoreOf(
    const LaunchedRank& launched) {
  if (launched.coordinator.empty()) {
    return std::make_shared<gloo::rendezvous::FileStore>(
        launched.rendezvous_directory);
  }
  ASSIGN_OR_RETURN(
      std::shared_ptr<grpc::Channel> channel,
      CreateCoordinatorChannel(launched.coordinator, launched.tls));
  return std::make_shared<CoordinatorStore>(
      channel, launched.rendezvous_scope, launched.node_token,
      absl::ToChronoMilliseconds(absl::GetFlag(FLAGS_comm_timeout)));
}

// Ends this rank at once on an expired lease (rank_lease.h): a checkpoint
// write cut short is never committed, and a newer attempt's fence keeps an
// older one out anyway. Says why on stderr only if that cannot block: a
// frozen agent reads nothing, and a full pipe must not keep the rank alive.
void EndOnExpiredLease(const std::string& why) {
  const std::string line =
      absl::StrCat("plateau-worker train: stopping this rank: ", why, "\n");
  pollfd error_output = {STDERR_FILENO, POLLOUT, 0};
  if (poll(&error_output, 1, 0) == 1 && (error_output.revents & POLLOUT)) {
    // Up to PIPE_BUF bytes go into a pipe whole or not at all.
    [[maybe_unused]] const ssize_t written = write(
        STDERR_FILENO, line.data(), std::min<size_t>(line.size(), PIPE_BUF));
  }
  _exit(kLeaseExpiredExitCode);
}

// Trains as one rank: the whole job, or one of a launched group.
int RunRank(const v1::JobSpec& spec, engine::TrainerOptions options,
            const RankBackend& backend,
            const std::optional<LaunchedRank>& launched) {
  engine::RunSummary summary;
  summary.command = "train";
  const engine::ParallelLayout layout(engine::ParallelSizesOf(spec));
  const bool writes_summary = options.rank == 0;
  engine::RankGroups groups;
  std::optional<RankLeaseWatchdog> lease;
  if (launched.has_value() && !launched->lease_path.empty()) {
    lease.emplace(launched->lease_path, kLeasePollInterval, EndOnExpiredLease);
  }
  // A rank plateaud started reads only beneath the roots it was given; a
  // standalone run is its user's own process, and reads what they can.
  if (const std::vector<std::string> roots = absl::GetFlag(FLAGS_read_roots);
      !roots.empty()) {
    summary.status =
        ResolveUnderReadRoots("data.path", spec.data().path(), roots);
    if (summary.status.ok() && !spec.init_from().empty()) {
      summary.status =
          ResolveUnderReadRoots("init_from", spec.init_from(), roots);
    }
    if (!summary.status.ok()) return Finish(summary, writes_summary);
  }
  if (launched.has_value()) {
    if (launched->world_size != layout.world()) {
      summary.status = absl::InvalidArgumentError(
          absl::StrCat("launched as one of ", launched->world_size,
                       " ranks, but the spec asks for ", layout.world()));
      return Finish(summary, writes_summary);
    }
    absl::StatusOr<std::shared_ptr<gloo::rendezvous::Store>> store =
        RendezvousStoreOf(*launched);
    if (!store.ok()) {
      summary.status = store.status();
      return Finish(summary, writes_summary);
    }
    absl::StatusOr<engine::RankGroups> connected = engine::ConnectRankGroups(
        layout, options.rank,
        GroupConnectorOf(backend, *store, absl::GetFlag(FLAGS_comm_timeout),
                         launched->address));
    if (!connected.ok()) {
      summary.status = connected.status();
      return Finish(summary, writes_summary);
    }
    groups = std::move(*connected);
    options.groups = &groups;
  }
  std::optional<RankStatusPublisher> publisher;
  if (launched.has_value() && !launched->status_directory.empty()) {
    publisher.emplace(RankStatusPath(launched->status_directory, options.rank),
                      options.rank, kStatusInterval);
    options.on_progress = [&publisher](engine::Trainer& trainer) {
      publisher->OnProgress(trainer);
    };
  }
  absl::StatusOr<std::unique_ptr<engine::Trainer>> trainer =
      engine::Trainer::Create(spec, options, &std::cout);
  if (!trainer.ok()) {
    summary.status = trainer.status();
    return Finish(summary, writes_summary);
  }
  summary.status = (*trainer)->Run();
  if (publisher.has_value()) publisher->Publish(**trainer);
  summary.training = &(*trainer)->record();
  summary.allocator = &(*trainer)->backend().allocator();
  summary.optimizer_state_bytes = (*trainer)->optimizer().StateBytesByTier();
  summary.checkpoint = (*trainer)->last_checkpoint();
  return Finish(summary, writes_summary);
}

// Starts `world` ranks of this same command and waits for them (see
// rank_launcher.h). Rank 0 writes the summary; a failure of the group
// replaces its status with the launcher's account of which rank failed.
// --run_dir, by default runs/<spec name>.
std::string RunDirectoryOf(const v1::JobSpec& spec) {
  const std::string flag = absl::GetFlag(FLAGS_run_dir);
  return flag.empty() ? absl::StrCat("runs/", spec.name()) : flag;
}

// With --resume, the precision the newest checkpoint in the run directory
// was trained in; UNSPECIFIED where there is none, or it does not say.
absl::StatusOr<plan::PrecisionChoice> ResumedPrecision(
    const std::string& run_directory) {
  plan::PrecisionChoice none{v1::PRECISION_UNSPECIFIED, ""};
  if (!absl::GetFlag(FLAGS_resume)) return none;
  absl::StatusOr<std::unique_ptr<engine::Checkpoint>> latest =
      engine::OpenLatestCheckpoint(run_directory);
  if (absl::IsNotFound(latest.status())) return none;
  if (!latest.ok()) return latest.status();
  const std::optional<v1::Precision> trained = TrainedPrecision(**latest);
  if (!trained.has_value()) return none;
  return plan::PrecisionChoice{*trained,
                               "auto: as the run's checkpoints were trained"};
}

int LaunchLocalRanks(const std::vector<std::string>& command_line, int world) {
  engine::RunSummary summary;
  summary.command = "train";
  std::error_code error;
  const std::filesystem::path self =
      std::filesystem::read_symlink("/proc/self/exe", error);
  if (error) {
    summary.status = absl::InternalError(
        absl::StrCat("cannot find my own executable: ", error.message()));
    return Finish(summary);
  }
  const char* temporary = std::getenv("TMPDIR");
  std::string rendezvous = absl::StrCat(
      temporary != nullptr && *temporary != '\0' ? temporary : "/tmp",
      "/plateau-rendezvous-XXXXXX");
  if (mkdtemp(rendezvous.data()) == nullptr) {
    summary.status = absl::InternalError(
        absl::StrCat("cannot create the ranks' rendezvous directory ",
                     rendezvous, ": ", std::strerror(errno)));
    return Finish(summary);
  }
  // Rank 0 writes the summary; one left by an earlier run must not be
  // taken for it.
  const std::string path = absl::GetFlag(FLAGS_summary_json);
  if (!path.empty()) std::filesystem::remove(path, error);
  LaunchOptions launch;
  launch.argv = command_line;
  launch.argv[0] = self.string();
  launch.world_size = world;
  launch.env[kRendezvousDirectoryVariable] = rendezvous;
  std::cout << "launching " << world << " ranks (rendezvous in " << rendezvous
            << ")\n";
  std::cout.flush();
  summary.status = LaunchRanks(launch, &stop_requested);
  std::filesystem::remove_all(rendezvous, error);
  if (!summary.status.ok() && !path.empty()) {
    const absl::Status written = engine::ReplaceRunSummaryStatus(path, summary);
    if (!written.ok()) std::cerr << "plateau-worker: " << written << "\n";
  }
  return Finish(summary, /*write_summary=*/false);
}

}  // namespace

int RunTrainCommand(const std::vector<std::string>& arguments,
                    const std::vector<std::string>& command_line) {
  if (arguments.size() != 1) {
    std::cerr << "usage: plateau-worker train SPEC [--world N] [--run_dir DIR] "
                 "[--resume] [--backend cpu|cuda] [--device_memory SIZE] "
                 "[--threads N] "
                 "[--summary_json FILE]\n";
    return 2;
  }
  std::signal(SIGINT, RequestStop);
  std::signal(SIGTERM, RequestStop);
  engine::RunSummary summary;
  summary.command = "train";
  absl::StatusOr<std::optional<LaunchedRank>> launched =
      LaunchedRankFromEnvironment();
  if (!launched.ok()) {
    summary.status = launched.status();
    return Finish(summary);
  }
  absl::StatusOr<v1::JobSpec> spec = ReadJobSpecFile(arguments[0]);
  if (!spec.ok()) {
    summary.status = spec.status();
    return Finish(summary, !launched->has_value());
  }
  const absl::StatusOr<std::optional<CheckpointCrash>> crash =
      ParseCheckpointCrash(absl::GetFlag(FLAGS_exit_during_checkpoint));
  if (!crash.ok()) {
    summary.status = crash.status();
    return Finish(summary, !launched->has_value());
  }
  const int spec_world =
      engine::ParallelLayout(engine::ParallelSizesOf(*spec)).world();
  const int world = absl::GetFlag(FLAGS_world);
  if (!launched->has_value() && world != spec_world) {
    summary.status = absl::InvalidArgumentError(absl::StrCat(
        "--world ", world, " does not match the spec's parallel ep*pp*dp = ",
        spec->parallel().ep(), "*", spec->parallel().pp(), "*",
        spec->parallel().dp(), " = ", spec_world, " ranks; pass --world ",
        spec_world));
    return Finish(summary);
  }
  std::vector<std::string> rank_command_line = command_line;
  if (!launched->has_value() && plan::IsAutoPrecision(*spec) &&
      absl::GetFlag(FLAGS_precision).empty()) {
    // Chosen once, here, and given to every rank; a resumed run goes on in
    // its checkpoint's.
    absl::StatusOr<plan::PrecisionChoice> choice =
        ResumedPrecision(RunDirectoryOf(*spec));
    if (choice.ok() && choice->precision == v1::PRECISION_UNSPECIFIED) {
      absl::StatusOr<RankBackend> local =
          RankBackendFromFlags(/*local_rank=*/0, ThreadsPerRank(spec_world));
      choice =
          local.ok() ? ChooseLocalPrecision(*spec, *local) : local.status();
    }
    if (!choice.ok()) {
      summary.status = choice.status();
      return Finish(summary);
    }
    const std::string name =
        choice->precision == v1::PRECISION_FP32 ? "fp32" : "bf16";
    std::cout << "precision: auto chose " << name << " (" << choice->reason
              << ")\n";
    absl::SetFlag(&FLAGS_precision, name);
    absl::SetFlag(&FLAGS_precision_reason, choice->reason);
    rank_command_line.push_back("--precision=" + name);
    rank_command_line.push_back("--precision_reason=" + choice->reason);
  }
  if (!launched->has_value() && world > 1) {
    return LaunchLocalRanks(rank_command_line, world);
  }
  const absl::StatusOr<plan::PrecisionChoice> precision =
      ApplyPrecisionFlags(launched->has_value(), &*spec);
  if (!precision.ok()) {
    summary.status = precision.status();
    return Finish(summary, !launched->has_value());
  }
  absl::StatusOr<RankBackend> backend =
      RankBackendFromFlags(launched->has_value() ? (*launched)->local_rank : 0,
                           ThreadsPerRank(spec_world));
  if (!backend.ok()) {
    summary.status = backend.status();
    return Finish(summary, !launched->has_value());
  }
  if (spec->schedules().auto_()) {
    // As plateaud does at submit, for this run's devices. Every rank plans
    // alike: the planner is a function of the spec and the memory.
    absl::StatusOr<int64_t> device_memory = DevicePoolBytes(*backend);
    if (!device_memory.ok()) {
      summary.status = device_memory.status();
      return Finish(summary, !launched->has_value());
    }
    plan::PlanOptions planning;
    planning.device_memory_bytes = *device_memory;
    planning.search_reach = false;
    absl::StatusOr<plan::JobPlan> planned = plan::PlanJob(*spec, planning);
    if (!planned.ok() || !planned->memory.fits()) {
      summary.status = planned.ok() ? absl::ResourceExhaustedError(absl::StrCat(
                                          "schedules: auto: no choice of "
                                          "schedules fits a device pool of ",
                                          FormatBytes(*device_memory), ": ",
                                          planned->memory.explanation()))
                                    : planned.status();
      return Finish(summary, !launched->has_value());
    }
    *spec = planned->spec;
    if (!launched->has_value() || (*launched)->rank == 0) {
      std::cout << "schedules: auto chose "
                << plan::DescribeSchedules(spec->schedules()) << " ("
                << planned->memory.explanation() << ")\n";
    }
  }
  engine::TrainerOptions options;
  options.run_directory = RunDirectoryOf(*spec);
  options.create_backend = BackendFactoryOf(*backend);
  options.threads = backend->threads;
  options.resume = absl::GetFlag(FLAGS_resume);
  options.attempt = absl::GetFlag(FLAGS_attempt);
  options.log_every_steps =
      std::max<int64_t>(1, absl::GetFlag(FLAGS_log_every));
  options.keep_checkpoints = std::max(0, absl::GetFlag(FLAGS_keep_checkpoints));
  options.stop_requested = &stop_requested;
  options.precision_reason = precision->reason;
  if (launched->has_value()) options.rank = (*launched)->rank;
  std::unique_ptr<FileSystem> crashing;
  if (crash->has_value() && (*crash)->rank == options.rank) {
    crashing = CrashingCheckpointFileSystem(**crash);
    options.checkpoint_file_system = crashing.get();
  }
  return RunRank(*spec, options, *backend, *launched);
}

}  // namespace plateau::worker
