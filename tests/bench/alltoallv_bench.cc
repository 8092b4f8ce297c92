// All-to-all-v bandwidth of the Gloo communicator over loopback TCP: two
// rank processes (forked before anything else starts) exchange equal blocks
// with each other, as expert-parallel dispatch does every layer, for block
// sizes from 16 KiB to 16 MiB. Bandwidth counts the bytes each rank sends
// to its peer per second; the baseline, measured in the same run by the same
// process, is memcpy of the same bytes (what moving tokens costs when the
// expert is local).
//
// Usage: alltoallv_bench [--repeats N] [--json FILE]
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/time/time.h"
#include "engine/parallel/gloo_communicator.h"
#include "gloo/rendezvous/file_store.h"
#include "nlohmann/json.hpp"
#include "tests/bench/bench_main.h"

ABSL_FLAG(int32_t, repeats, 20, "exchanges per size (the best one counts)");

namespace plateau {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int kRanks = 2;

template <typename Body>
double BestSeconds(int repeats, Body body) {
  double best = 1e30;
  for (int i = 0; i < repeats; ++i) {
    const auto start = Clock::now();
    body();
    best = std::min(
        best, std::chrono::duration<double>(Clock::now() - start).count());
  }
  return best;
}

int RunRank(const std::string& store_directory, int rank) {
  auto store = std::make_shared<gloo::rendezvous::FileStore>(store_directory);
  auto created = engine::GlooCommunicator::Create(store, "bench", rank, kRanks,
                                                  absl::Seconds(60));
  if (!created.ok()) {
    std::fprintf(stderr, "rank %d: %s\n", rank,
                 std::string(created.status().message()).c_str());
    return 1;
  }
  engine::Communicator& communicator = **created;
  const int repeats = absl::GetFlag(FLAGS_repeats);
  nlohmann::json results = nlohmann::json::array();
  for (int64_t block_bytes = int64_t{16} << 10;
       block_bytes <= int64_t{32} << 20; block_bytes *= 4) {
    std::vector<char> send(kRanks * block_bytes, static_cast<char>(rank));
    std::vector<char> receive(kRanks * block_bytes);
    const std::vector<int64_t> sizes(kRanks, block_bytes);
    absl::Status status;
    double exchange_seconds = 1e30;
    for (int i = 0; i < repeats && status.ok(); ++i) {
      // Every exchange starts together, so the peer's lateness is not timed.
      status.Update(communicator.Barrier());
      const auto start = Clock::now();
      status.Update(
          communicator.AllToAllV(send.data(), sizes, receive.data(), sizes));
      exchange_seconds =
          std::min(exchange_seconds,
                   std::chrono::duration<double>(Clock::now() - start).count());
    }
    std::vector<char> copy(block_bytes);
    const double copy_seconds = BestSeconds(
        repeats, [&] { std::memcpy(copy.data(), send.data(), block_bytes); });
    if (!status.ok() || receive[0] != 0 || receive[block_bytes] != 1) {
      std::fprintf(stderr, "rank %d: exchange of %lld bytes failed: %s\n", rank,
                   static_cast<long long>(block_bytes),
                   std::string(status.message()).c_str());
      return 1;
    }
    const double exchange_rate = block_bytes / exchange_seconds;
    const double copy_rate = block_bytes / copy_seconds;
    if (rank == 0) {
      std::printf(
          "block %8lld KiB: all-to-all-v %6.2f GB/s to the peer "
          "(%.1f us), memcpy %6.2f GB/s -> %.1f%%\n",
          static_cast<long long>(block_bytes >> 10), exchange_rate / 1e9,
          exchange_seconds * 1e6, copy_rate / 1e9,
          100 * exchange_rate / copy_rate);
    }
    results.push_back({{"block_bytes", block_bytes},
                       {"alltoallv_bytes_per_second", exchange_rate},
                       {"alltoallv_seconds", exchange_seconds},
                       {"memcpy_bytes_per_second", copy_rate}});
  }
  if (rank == 0) {
    bench::WriteJsonResults({{"ranks", kRanks}, {"results", results}});
  }
  return 0;
}

int Run() {
  char directory[] = "/tmp/plateau-alltoallv-bench-XXXXXX";
  if (mkdtemp(directory) == nullptr) {
    std::perror("mkdtemp");
    return 1;
  }
  std::vector<pid_t> children;
  for (int rank = 0; rank < kRanks; ++rank) {
    const pid_t pid = fork();
    if (pid < 0) {
      std::perror("fork");
      return 1;
    }
    if (pid == 0) {
      const int exit_code = RunRank(directory, rank);
      std::fflush(stdout);
      _exit(exit_code);
    }
    children.push_back(pid);
  }
  int failures = 0;
  for (const pid_t child : children) {
    int status = 0;
    waitpid(child, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) ++failures;
  }
  std::filesystem::remove_all(directory);
  return failures == 0 ? 0 : 1;
}

}  // namespace
}  // namespace plateau

int main(int argc, char** argv) {
  return plateau::bench::BenchmarkMain(argc, argv, plateau::Run);
}
