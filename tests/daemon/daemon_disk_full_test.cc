// A real full disk under a live plateaud: --data_dir on a small tmpfs (in a
// mount namespace this test creates) that another file already half fills,
// filled by submissions until the space guard refuses them, then to the
// last byte by a third file. plateaud never exits; it refuses writes with
// RESOURCE_EXHAUSTED naming the directory while it serves reads; once the
// other files are removed submissions succeed again without a restart; and
// after a SIGKILL and a restart every acknowledged job is there.
//
// Needs root (a mount namespace and a tmpfs); Bazel runs it unsandboxed.
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/test_files.h"
#include "gtest/gtest.h"
#include "tests/daemon/daemon_client.h"
#include "tests/daemon/daemon_process.h"

namespace plateau::testing {
namespace {

constexpr int64_t kDiskBytes = int64_t{128} << 20;
// What another process already holds on the disk.
constexpr int64_t kBallastBytes = int64_t{64} << 20;
constexpr int kSpecPaddingBytes = 60000;

// A spec of about 60 KB that no compression shrinks: random hex comments.
std::string LargeSpec(const std::string& name, std::mt19937_64& random) {
  std::string spec = SpecYaml({.name = name});
  static constexpr char kHex[] = "0123456789abcdef";
  for (int line = 0; line < kSpecPaddingBytes / 100; ++line) {
    spec += "# ";
    for (int i = 0; i < 97; ++i) spec += kHex[random() % 16];
    spec += "\n";
  }
  return spec;
}

// Writes zeros into `path` until the file system is full or `bytes` are
// written.
void FillDisk(const std::string& path, int64_t bytes = INT64_MAX) {
  std::ofstream file(path, std::ios::binary);
  const std::string block(1 << 16, '\0');
  for (int64_t written = 0;
       written < bytes && file.write(block.data(), block.size()) &&
       file.flush();
       written += block.size()) {
  }
}

int64_t FreeBytes(const std::string& directory) {
  std::error_code error;
  return static_cast<int64_t>(
      std::filesystem::space(directory, error).available);
}

TEST(DaemonDiskFullTest, AFullDiskRefusesWritesServesReadsAndLosesNothing) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root for a mount namespace";
  // Before any thread starts: a mount namespace is per process here.
  ASSERT_EQ(unshare(CLONE_NEWNS), 0) << std::strerror(errno);
  ASSERT_EQ(mount("none", "/", nullptr, MS_REC | MS_PRIVATE, nullptr), 0)
      << std::strerror(errno);
  const std::string disk = MakeTestDirectory("disk-full") + "/disk";
  std::filesystem::create_directories(disk);
  ASSERT_EQ(mount("tmpfs", disk.c_str(), "tmpfs", 0,
                  absl::StrCat("size=", kDiskBytes).c_str()),
            0)
      << std::strerror(errno);
  const std::string data_dir = disk + "/plateaud-data";
  const std::vector<std::string> flags = {"--store_headroom=16MiB"};
  std::mt19937_64 random(11);
  std::vector<std::string> acknowledged;
  FillDisk(disk + "/ballast", kBallastBytes);
  {
    DaemonProcess daemon(data_dir, flags);
    auto stub = v1::Coordinator::NewStub(LocalChannel(daemon.port()));

    // Submissions fill the disk until the guard refuses them.
    absl::Status refused;
    for (int i = 0; i < 2000 && refused.ok(); ++i) {
      absl::StatusOr<v1::Job> job =
          Submit(*stub, LargeSpec(absl::StrCat("fill-", i), random));
      if (job.ok()) {
        acknowledged.push_back(job->id());
      } else {
        refused = job.status();
      }
    }
    ASSERT_TRUE(absl::IsResourceExhausted(refused)) << refused;
    EXPECT_TRUE(absl::StrContains(refused.message(), data_dir)) << refused;
    EXPECT_TRUE(absl::StrContains(refused.message(), "free space there"))
        << refused;
    const int64_t free_when_refused = FreeBytes(disk);
    std::cout << "guard: " << acknowledged.size()
              << " submissions of 60 KB acknowledged beside "
              << kBallastBytes / 1024 << " KiB of another file, then refused "
              << "with " << free_when_refused / 1024 << " KiB of "
              << kDiskBytes / 1024 << " KiB free: " << refused.message()
              << "\n";
    ASSERT_GT(acknowledged.size(), 50u);

    // Let the flush of the last memtable, if one started, finish; then the
    // disk fills to its last byte.
    absl::SleepFor(absl::Seconds(1));
    FillDisk(disk + "/filler");
    EXPECT_LT(FreeBytes(disk), 64 << 10);
    const absl::StatusOr<v1::Job> while_full =
        Submit(*stub, LargeSpec("while-full", random));
    EXPECT_TRUE(absl::IsResourceExhausted(while_full.status()))
        << while_full.status();
    // Reads are served, and the daemon stays up through its passes.
    for (const std::string& id : {acknowledged.front(), acknowledged.back()}) {
      absl::StatusOr<v1::Job> job = GetJob(*stub, id);
      EXPECT_TRUE(job.ok()) << id << ": " << job.status();
    }
    v1::ListJobsRequest list_request;
    v1::ListJobsResponse listed;
    auto context = CallContext("");
    EXPECT_TRUE(stub->ListJobs(context.get(), list_request, &listed).ok());
    EXPECT_GT(listed.jobs_size(), 0);
    absl::SleepFor(absl::Seconds(3));
    ASSERT_TRUE(daemon.Running());

    // Space back: the next submission succeeds, same process.
    std::filesystem::remove(disk + "/filler");
    std::filesystem::remove(disk + "/ballast");
    const absl::Time freed = absl::Now();
    absl::StatusOr<v1::Job> after = Submit(*stub, SpecYaml({.name = "after"}));
    ASSERT_TRUE(after.ok()) << after.status();
    acknowledged.push_back(after->id());
    std::cout << "space freed: a submission succeeded after "
              << absl::FormatDuration(absl::Now() - freed) << "\n";
    ASSERT_TRUE(daemon.Running());
    daemon.Kill(SIGKILL);
  }

  // Restarted: every acknowledged job is there.
  DaemonProcess daemon(data_dir, flags);
  auto stub = v1::Coordinator::NewStub(LocalChannel(daemon.port()));
  for (const std::string& id : acknowledged) {
    absl::StatusOr<v1::Job> job = GetJob(*stub, id);
    EXPECT_TRUE(job.ok()) << id << ": " << job.status();
  }
  EXPECT_TRUE(Submit(*stub, SpecYaml({.name = "restarted"})).ok());
  daemon.Kill(SIGTERM);
  umount2(disk.c_str(), MNT_DETACH);
}

}  // namespace
}  // namespace plateau::testing
