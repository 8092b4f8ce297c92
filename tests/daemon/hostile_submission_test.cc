// Hostile and broken submissions against a live plateaud (in process, real
// gRPC on loopback, a simulated worker attached so that every submission is
// planned): sizes past every bound, products that overflow int64, oversized
// requests, YAML bombs, and every input the spec fuzzer keeps. Each gets a
// clear error naming what was wrong within a second, no handler fails with
// UNKNOWN or INTERNAL, and another client is served throughout, also while
// plateaud plans the largest spec it accepts.
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/synchronization/mutex.h"
#include "common/test_files.h"
#include "daemon/server/daemon_server.h"
#include "gtest/gtest.h"
#include "tests/daemon/daemon_client.h"
#include "tests/daemon/simulated_worker.h"

namespace plateau::testing {
namespace {

constexpr absl::Duration kAnswerWithin = absl::Seconds(1);

// The valid spec the hostile ones are made from.
std::string BaseSpec() {
  return SpecYaml({.name = "base", .devices_per_node = 2});
}

// Asks GetJob and ListJobs in a loop from its own connection until stopped,
// keeping the slowest answer and any failure.
class Bystander {
 public:
  Bystander(int port, std::string job_id)
      : stub_(v1::Coordinator::NewStub(LocalChannel(port))),
        job_id_(std::move(job_id)),
        thread_([this] { Loop(); }) {}
  ~Bystander() { Stop(); }

  void Stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  absl::Duration slowest() {
    absl::MutexLock lock(&mutex_);
    return slowest_;
  }
  int calls() {
    absl::MutexLock lock(&mutex_);
    return calls_;
  }
  // Blocks until its first call has been answered (or failed), so that a
  // test's flood starts with the bystander already served.
  void WaitForFirstCall() {
    absl::MutexLock lock(&mutex_);
    mutex_.Await(absl::Condition(
        +[](int* calls) { return *calls > 0; }, &calls_));
  }
  std::string failure() {
    absl::MutexLock lock(&mutex_);
    return failure_;
  }

 private:
  void Loop() {
    while (!stop_) {
      const absl::Time start = absl::Now();
      absl::Status status = GetJob(*stub_, job_id_).status();
      if (status.ok()) {
        v1::ListJobsRequest request;
        v1::ListJobsResponse response;
        auto context = CallContext("", absl::Seconds(5));
        const grpc::Status listed =
            stub_->ListJobs(context.get(), request, &response);
        if (!listed.ok()) status = absl::UnknownError(listed.error_message());
      }
      const absl::Duration took = absl::Now() - start;
      absl::MutexLock lock(&mutex_);
      ++calls_;
      slowest_ = std::max(slowest_, took);
      if (!status.ok() && failure_.empty()) failure_ = status.ToString();
    }
  }

  std::unique_ptr<v1::Coordinator::Stub> stub_;
  const std::string job_id_;
  std::atomic<bool> stop_{false};
  absl::Mutex mutex_;
  absl::Duration slowest_ ABSL_GUARDED_BY(mutex_);
  int calls_ ABSL_GUARDED_BY(mutex_) = 0;
  std::string failure_ ABSL_GUARDED_BY(mutex_);
  std::thread thread_;
};

class HostileSubmissionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    daemon::DaemonConfig config;
    config.listen = "127.0.0.1:0";
    config.metrics_listen = "127.0.0.1:0";
    config.data_dir = MakeTestDirectory("plateaud") + "/data";
    config.heartbeat_interval = absl::Milliseconds(200);
    config.scheduler_tick = absl::Milliseconds(50);
    auto server = daemon::DaemonServer::Start(config);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    channel_ = LocalChannel(server_->port());
    stub_ = v1::Coordinator::NewStub(channel_);
    SimulatedWorkerOptions options;
    options.name = "node-a";
    options.devices = 2;
    auto worker = SimulatedWorker::Attach(channel_, options);
    ASSERT_TRUE(worker.ok()) << worker.status();
    worker_ = *std::move(worker);
    // A job the bystander reads; it runs on node-a, which never reports.
    auto job = Submit(*stub_, BaseSpec());
    ASSERT_TRUE(job.ok()) << job.status();
    bystander_ = std::make_unique<Bystander>(server_->port(), job->id());
    bystander_->WaitForFirstCall();
    calls_before_test_ = bystander_->calls();
  }

  void TearDown() override {
    if (bystander_ == nullptr) return;
    bystander_->Stop();
    EXPECT_EQ(bystander_->failure(), "");
    // Served while the test ran, not only before it.
    EXPECT_GT(bystander_->calls(), calls_before_test_);
    EXPECT_LT(bystander_->slowest(), kAnswerWithin)
        << "another client waited while plateaud handled the submissions";
  }

  // Submits `request` and expects INVALID_ARGUMENT containing `expected`,
  // within a second.
  void ExpectRefused(const v1::SubmitJobRequest& request,
                     const std::string& expected, const std::string& label) {
    v1::SubmitJobResponse response;
    auto context = CallContext("", absl::Seconds(30));
    const absl::Time start = absl::Now();
    const grpc::Status status =
        stub_->SubmitJob(context.get(), request, &response);
    const absl::Duration took = absl::Now() - start;
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
        << label << ": " << status.error_message();
    EXPECT_NE(status.error_message().find(expected), std::string::npos)
        << label << ": " << status.error_message();
    EXPECT_LT(took, kAnswerWithin) << label;
  }

  void ExpectRefused(const std::string& yaml, const std::string& expected,
                     const std::string& label) {
    v1::SubmitJobRequest request;
    request.set_spec_yaml(yaml);
    ExpectRefused(request, expected, label);
  }

  std::unique_ptr<daemon::DaemonServer> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Coordinator::Stub> stub_;
  std::unique_ptr<SimulatedWorker> worker_;
  std::unique_ptr<Bystander> bystander_;
  int calls_before_test_ = 0;
};

// BaseSpec with `from` replaced by `to` (which must occur).
std::string Edited(const std::string& from, const std::string& to) {
  const std::string base = BaseSpec();
  EXPECT_NE(base.find(from), std::string::npos) << from;
  return absl::StrReplaceAll(base, {{from, to}});
}

TEST_F(HostileSubmissionTest, SizesPastTheirBoundsAreRefusedByName) {
  struct Case {
    std::string label, yaml, expected;
  };
  const std::string max_model =
      "model: {layers: 1024, d_model: 65536, heads: 8, experts: 4096, top_k: "
      "4096, ffn_hidden: 1048576, vocab: 4194304, seq_len: 1048576}";
  const std::vector<Case> cases = {
      {"2^62 tokens a step, one expert",
       absl::StrReplaceAll(
           Edited("batch_tokens: 512", "batch_tokens: 4611686018427387904"),
           {{"experts: 4", "experts: 2"}}),
       "data.batch_tokens: 4611686018427387904 is not in 1..1073741824"},
      {"tokens past int64",
       Edited("batch_tokens: 512", "batch_tokens: 9223372036854775808"),
       "data.batch_tokens"},
      {"a billion micro-batches",
       Edited("steps: 10", "steps: 10, micro_batches: 1000000000"),
       "train.micro_batches: 1000000000 is not in 0..4096"},
      {"2^62 steps", Edited("steps: 10", "steps: 4611686018427387904"),
       "train.steps: 4611686018427387904 is not in 1..1000000000"},
      {"one-token chunks of a large batch",
       Edited("data: {path: data/brown, batch_tokens: 512}",
              "schedules: {dispatch_chunk_tokens: 1}\n"
              "data: {path: data/brown, batch_tokens: 1048576}"),
       "schedules.dispatch_chunk_tokens: 1 splits the"},
      {"every model size at its bound, whose products overflow int64",
       "name: max\nresources: {nodes: 1, devices_per_node: 2}\n" + max_model +
           "\nparallel: {ep: 2, pp: 1, dp: 1}\n"
           "data: {path: data/brown, batch_tokens: 1073741824}\n"
           "train: {steps: 10, micro_batches: 4}\n",
       "model: has "},
      {"a rank's logits past 2^40 elements",
       absl::StrReplaceAll(Edited("vocab: 512", "vocab: 4194304"),
                           {{"batch_tokens: 512", "batch_tokens: 1048576"}}),
       "data.batch_tokens: 1048576 gives each rank 524288 tokens a "
       "micro-batch"},
      {"a 10,000-character data path",
       Edited("path: data/brown", "path: " + std::string(10000, 'p')),
       "data.path: is 10000 characters long; at most 4096 are allowed"},
      {"a YAML alias bomb",
       BaseSpec() + "a0: &a0 [x, x, x, x, x, x, x, x, x]\n" +
           [] {
             std::string lines;
             for (int i = 1; i < 10; ++i) {
               std::string row;
               for (int j = 0; j < 9; ++j) {
                 absl::StrAppend(&row, j == 0 ? "" : ", ", "*a", i - 1);
               }
               absl::StrAppend(&lines, "a", i, ": &a", i, " [", row, "]\n");
             }
             return lines;
           }(),
       "a9: unknown key"},
      {"nesting 30,000 deep",
       "name: deep\nmodel: " + std::string(30000, '[') +
           std::string(30000, ']') + "\n",
       "YAML syntax error"},
  };
  for (const Case& c : cases) ExpectRefused(c.yaml, c.expected, c.label);
}

TEST_F(HostileSubmissionTest, OversizedRequestsAreRefusedBeforeParsing) {
  v1::SubmitJobRequest large_yaml;
  large_yaml.set_spec_yaml(BaseSpec() + "# " + std::string(1 << 20, 'x'));
  ExpectRefused(large_yaml,
                absl::StrCat("spec_yaml: ", large_yaml.spec_yaml().size(),
                             " bytes; at most 65536 are accepted"),
                "a 1 MB spec");
  // Past gRPC's 4 MB, gRPC refuses the message before any handler runs.
  v1::SubmitJobRequest huge_yaml;
  huge_yaml.set_spec_yaml(BaseSpec() + "# " + std::string(5 << 20, 'x'));
  v1::SubmitJobResponse response;
  auto huge_context = CallContext("");
  EXPECT_EQ(
      stub_->SubmitJob(huge_context.get(), huge_yaml, &response).error_code(),
      grpc::StatusCode::RESOURCE_EXHAUSTED);
  v1::SubmitJobRequest long_key;
  long_key.set_spec_yaml(BaseSpec());
  long_key.set_idempotency_key(std::string(1 << 20, 'k'));
  ExpectRefused(long_key, "idempotency_key: 1048576 bytes; at most 256",
                "a 1 MB idempotency key");

  auto context = CallContext("");
  v1::GetJobRequest get;
  get.set_job_id(std::string(1 << 20, 'j'));
  v1::Job job;
  const grpc::Status got = stub_->GetJob(context.get(), get, &job);
  EXPECT_EQ(got.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(got.error_message(),
            "job_id: 1048576 bytes; at most 256 are accepted");

  auto cancel_context = CallContext("");
  v1::CancelJobRequest cancel;
  cancel.set_job_id("job-1");
  cancel.set_reason(std::string(1 << 20, 'r'));
  const grpc::Status cancelled =
      stub_->CancelJob(cancel_context.get(), cancel, &job);
  EXPECT_EQ(cancelled.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(cancelled.error_message(),
            "reason: 1048576 bytes; at most 1024 are accepted");
}

// Every input the spec fuzzer keeps, as a submission: an answer within a
// second, and never UNKNOWN or INTERNAL (a handler that threw or failed).
TEST_F(HostileSubmissionTest, TheFuzzersInputsGetAnAnswerEach) {
  const std::string root =
      absl::StrCat(std::getenv("TEST_SRCDIR"), "/",
                   std::getenv("TEST_WORKSPACE"), "/tests/fuzz/");
  std::map<std::string, int> inputs;
  for (const char* folder : {"job_spec_corpus", "job_spec_regressions"}) {
    for (const auto& entry :
         std::filesystem::directory_iterator(root + folder)) {
      if (entry.path().filename() == "README.md") continue;
      std::ifstream file(entry.path());
      std::stringstream text;
      text << file.rdbuf();
      v1::SubmitJobRequest request;
      request.set_spec_yaml(text.str());
      v1::SubmitJobResponse response;
      auto context = CallContext("", absl::Seconds(30));
      const absl::Time start = absl::Now();
      const grpc::Status status =
          stub_->SubmitJob(context.get(), request, &response);
      EXPECT_LT(absl::Now() - start, kAnswerWithin) << entry.path();
      EXPECT_NE(status.error_code(), grpc::StatusCode::UNKNOWN)
          << entry.path() << ": " << status.error_message();
      EXPECT_NE(status.error_code(), grpc::StatusCode::INTERNAL)
          << entry.path() << ": " << status.error_message();
      ++inputs[folder];
    }
  }
  EXPECT_GE(inputs["job_spec_corpus"], 6);
  EXPECT_GE(inputs["job_spec_regressions"], 1);
}

// The largest layout the rules accept (4096 ranks in 1024 stages, 1024
// layers, 4096 micro-batches, 4096 dispatch chunks) is planned inside the
// submission, outside every lock the other RPCs take, to its answer: its
// checkpoints need more host memory than the node has.
TEST_F(HostileSubmissionTest,
       TheLargestValidSpecIsPlannedWhileOthersAreServed) {
  SimulatedWorkerOptions options;
  options.name = "node-wide";
  options.devices = 64;
  options.device_memory_bytes = int64_t{80} << 30;
  auto wide = SimulatedWorker::Attach(channel_, options);
  ASSERT_TRUE(wide.ok()) << wide.status();
  const std::string spec =
      "name: largest\n"
      "resources: {nodes: 64, devices_per_node: 64}\n"
      "model: {layers: 1024, d_model: 256, heads: 8, experts: 4096, top_k: "
      "64, ffn_hidden: 512, vocab: 4096, seq_len: 64}\n"
      "parallel: {ep: 4, pp: 1024, dp: 1}\n"
      "schedules: {dispatch_chunk_tokens: 1, ring_dtp: true, sco: true, "
      "optimizer_offload: stream}\n"
      "optimizer: {kind: skewadam}\n"
      "data: {path: data/brown, batch_tokens: 1048576}\n"
      "train: {steps: 300, eval_every: 10, micro_batches: 4096}\n";
  const absl::Time start = absl::Now();
  auto job = Submit(*stub_, spec);
  const absl::Duration took = absl::Now() - start;
  EXPECT_EQ(job.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(
      job.status().message().find("job does not fit its nodes' host memory"),
      std::string::npos)
      << job.status();
  EXPECT_LT(took, absl::Seconds(30));
  std::cout << "planning the largest valid spec took " << took << "\n";
}

}  // namespace
}  // namespace plateau::testing
