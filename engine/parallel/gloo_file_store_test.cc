// Two ranks as two processes rendezvousing through a FileStore, as
// standalone multi-process runs do.
#include <signal.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "engine/parallel/gloo_communicator.h"
#include "gloo/rendezvous/file_store.h"
#include "gtest/gtest.h"

namespace plateau::engine {
namespace {

constexpr int kSize = 2;

bool Check(bool condition, const char* what, int rank) {
  if (!condition) std::fprintf(stderr, "rank %d: %s failed\n", rank, what);
  return condition;
}

bool CheckOk(const absl::Status& status, const char* what, int rank) {
  if (!status.ok()) {
    std::fprintf(stderr, "rank %d: %s: %s\n", rank, what,
                 status.ToString().c_str());
  }
  return status.ok();
}

// One rank's whole run; true when every op gave the expected result.
bool RunRank(const std::string& store_dir, int rank) {
  auto store = std::make_shared<gloo::rendezvous::FileStore>(store_dir);
  auto created = GlooCommunicator::Create(store, "file-store-group", rank,
                                          kSize, absl::Seconds(20));
  if (!CheckOk(created.status(), "Create", rank)) return false;
  Communicator& communicator = **created;

  std::vector<float> sum = {1.0f + rank, 10.0f * rank};
  if (!CheckOk(communicator.AllReduceSum(sum.data(), 2), "AllReduceSum",
               rank) ||
      !Check(sum == std::vector<float>{3.0f, 10.0f}, "sum", rank)) {
    return false;
  }
  const float mine = 100.0f + rank;
  std::vector<float> gathered(kSize);
  if (!CheckOk(communicator.AllGather(&mine, gathered.data(), 1), "AllGather",
               rank) ||
      !Check(gathered == std::vector<float>{100.0f, 101.0f}, "gather", rank)) {
    return false;
  }
  // Rank 0 sends 3 bytes to rank 1 and nothing to itself; rank 1 sends 1.
  const std::vector<int64_t> send_bytes =
      rank == 0 ? std::vector<int64_t>{0, 3} : std::vector<int64_t>{1, 0};
  const std::vector<int64_t> recv_bytes =
      rank == 0 ? std::vector<int64_t>{0, 1} : std::vector<int64_t>{3, 0};
  const std::string send = rank == 0 ? "abc" : "z";
  std::string receive(rank == 0 ? 1 : 3, '\0');
  if (!CheckOk(communicator.AllToAllV(send.data(), send_bytes, receive.data(),
                                      recv_bytes),
               "AllToAllV", rank) ||
      !Check(receive == (rank == 0 ? "z" : "abc"), "all-to-all", rank)) {
    return false;
  }
  int64_t message = 0;
  if (rank == 0) {
    message = 424242;
    if (!CheckOk(communicator.Send(&message, 8, 1, 9), "Send", rank)) {
      return false;
    }
  } else if (!CheckOk(communicator.Receive(&message, 8, 0, 9), "Receive",
                      rank) ||
             !Check(message == 424242, "message", rank)) {
    return false;
  }
  return CheckOk(communicator.Barrier(), "Barrier", rank);
}

TEST(GlooFileStoreTest, TwoProcessesRunEveryOp) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string store_dir =
      absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/gloo-store-", getpid());
  ASSERT_EQ(mkdir(store_dir.c_str(), 0700), 0);

  std::vector<pid_t> children;
  for (int rank = 0; rank < kSize; ++rank) {
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) _exit(RunRank(store_dir, rank) ? 0 : 1);
    children.push_back(pid);
  }
  // Reap both, killing any rank still running after the deadline.
  const absl::Time deadline = absl::Now() + absl::Seconds(40);
  for (int rank = 0; rank < kSize; ++rank) {
    int status = 0;
    pid_t reaped = 0;
    while ((reaped = waitpid(children[rank], &status, WNOHANG)) == 0 &&
           absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(10));
    }
    if (reaped == 0) {
      kill(children[rank], SIGKILL);
      waitpid(children[rank], &status, 0);
      ADD_FAILURE() << "rank " << rank << " hung";
      continue;
    }
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << "rank " << rank << " status " << status;
  }
}

}  // namespace
}  // namespace plateau::engine
