// A child process that writes batches to a store and reports each batch it
// had acknowledged as its number, 8 native bytes on stdout
// (rocksdb_store_crash_child, rocksdb_store_fault_child). Its stderr goes to
// a file when one is named; an abort leaves no core file. Test-only.
#ifndef PLATEAU_DAEMON_STORE_BATCH_WRITER_CHILD_H_
#define PLATEAU_DAEMON_STORE_BATCH_WRITER_CHILD_H_

#include <sys/types.h>

#include <csignal>
#include <cstdint>
#include <string>
#include <vector>

namespace plateau::daemon {

class BatchWriterChild {
 public:
  // Starts `argv` (argv[0] the binary's path).
  explicit BatchWriterChild(std::vector<std::string> argv,
                            const std::string& stderr_path = "");
  // Kills (SIGKILL) and waits for a child still running.
  ~BatchWriterChild();
  BatchWriterChild(const BatchWriterChild&) = delete;
  BatchWriterChild& operator=(const BatchWriterChild&) = delete;

  // Reads acknowledgements until `count` in all or the pipe closes.
  void ReadAcknowledgements(size_t count);
  // Kills the child with `signal`, then reads the acknowledgements it left in
  // the pipe. Returns the wait status.
  int KillAndWait(int signal = SIGKILL);
  // Reads every acknowledgement until the child ends by itself; returns the
  // wait status.
  int Wait();

  const std::vector<int64_t>& acknowledged() const { return acknowledged_; }

 private:
  int Reap();

  pid_t pid_ = -1;
  int acknowledgements_fd_ = -1;
  std::vector<int64_t> acknowledged_;
};

// The path of a test binary of this package, from the test's runfiles.
std::string StoreTestBinaryPath(const std::string& name);

}  // namespace plateau::daemon

#endif  // PLATEAU_DAEMON_STORE_BATCH_WRITER_CHILD_H_
