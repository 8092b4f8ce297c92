// plateaud over real gRPC on loopback, with simulated workers: the job
// lifecycle, gangs, node loss, failures, cancel, drain, wait reasons, auth,
// spec errors, rendezvous and metrics.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/test_files.h"
#include "daemon/server/daemon_server.h"
#include "daemon/service/auth.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "gtest/gtest.h"
#include "proto/rendezvous.grpc.pb.h"
#include "tests/daemon/daemon_client.h"
#include "tests/daemon/simulated_worker.h"

namespace plateau::testing {
namespace {

using daemon::DaemonConfig;
using daemon::DaemonServer;

constexpr absl::Duration kWait = absl::Seconds(10);

// plateaud on loopback ports of its choosing, its state in data_dir.
DaemonConfig LocalDaemonConfig(const std::string& data_dir) {
  DaemonConfig config;
  config.listen = "127.0.0.1:0";
  config.metrics_listen = "127.0.0.1:0";
  config.data_dir = data_dir;
  return config;
}

// The body of a plain HTTP GET of 127.0.0.1:port (headers included), with
// "Authorization: Bearer <token>" when a token is given; "" when it cannot
// connect.
std::string HttpGet(int port, const std::string& path,
                    const std::string& token = "") {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, "127.0.0.1", &address.sin_addr);
  if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) !=
      0) {
    close(fd);
    return "";
  }
  const std::string request = absl::StrCat(
      "GET ", path, " HTTP/1.0\r\nHost: 127.0.0.1\r\n",
      token.empty() ? ""
                    : absl::StrCat("Authorization: Bearer ", token, "\r\n"),
      "\r\n");
  if (write(fd, request.data(), request.size()) < 0) {
    close(fd);
    return "";
  }
  std::string response;
  char buffer[4096];
  ssize_t got;
  while ((got = read(fd, buffer, sizeof(buffer))) > 0) {
    response.append(buffer, static_cast<size_t>(got));
  }
  close(fd);
  return response;
}

class DaemonTest : public ::testing::Test {
 protected:
  void StartDaemon(const std::string& tokens_file = "") {
    DaemonConfig config =
        LocalDaemonConfig(MakeTestDirectory("plateaud") + "/data");
    config.node_timeout = absl::Seconds(1);
    config.heartbeat_interval = absl::Milliseconds(200);
    config.scheduler_tick = absl::Milliseconds(50);
    config.stop_grace_period = absl::Seconds(5);
    config.stop_margin = absl::Seconds(1);
    config.tokens_file = tokens_file;
    config.preemption_priority_gap = preemption_priority_gap_;
    auto server = DaemonServer::Start(config);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(server).value();
    channel_ = LocalChannel(server_->port());
    stub_ = v1::Coordinator::NewStub(channel_);
  }

  void SetUp() override { StartDaemon(); }

  std::unique_ptr<SimulatedWorker> AttachWorker(const std::string& name,
                                                int devices,
                                                const std::string& token = "") {
    SimulatedWorkerOptions options;
    options.name = name;
    options.devices = devices;
    options.token = token;
    auto worker = SimulatedWorker::Attach(channel_, options);
    EXPECT_TRUE(worker.ok()) << worker.status();
    return worker.ok() ? std::move(worker).value() : nullptr;
  }

  std::vector<v1::JobEventKind> History(const std::string& job_id) {
    v1::StreamLogsRequest request;
    request.set_job_id(job_id);
    auto context = CallContext("");
    auto reader = stub_->StreamLogs(context.get(), request);
    std::vector<v1::JobEventKind> kinds;
    v1::LogEntry entry;
    while (reader->Read(&entry)) {
      if (entry.has_event()) kinds.push_back(entry.event().kind());
    }
    EXPECT_TRUE(reader->Finish().ok());
    return kinds;
  }

  // The messages of the job's events, as `token`'s holder reads them.
  std::string EventText(const std::string& job_id, const std::string& token) {
    v1::StreamLogsRequest request;
    request.set_job_id(job_id);
    auto context = CallContext(token);
    auto reader = stub_->StreamLogs(context.get(), request);
    std::string text;
    v1::LogEntry entry;
    while (reader->Read(&entry)) {
      if (entry.has_event())
        absl::StrAppend(&text, entry.event().message(), "\n");
    }
    EXPECT_TRUE(reader->Finish().ok());
    return text;
  }

  std::unique_ptr<DaemonServer> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Coordinator::Stub> stub_;
  int preemption_priority_gap_ = 0;
};

TEST_F(DaemonTest, JobRunsToSuccessThroughTheWorkerProtocol) {
  auto worker = AttachWorker("node-a", 2);
  auto job = Submit(*stub_, SpecYaml({.name = "ok", .devices_per_node = 2}));
  ASSERT_TRUE(job.ok()) << job.status();
  auto start = worker->WaitForStart(job->id(), kWait);
  ASSERT_TRUE(start.ok()) << start.status();
  EXPECT_EQ(start->attempt().attempt(), 1);
  EXPECT_EQ(start->world_size(), 2);
  EXPECT_EQ(start->first_rank(), 0);
  EXPECT_EQ(start->device_indices_size(), 2);
  EXPECT_EQ(start->spec().name(), "ok");
  EXPECT_EQ(start->rendezvous_key(), job->id() + "/1");

  worker->ReportPhase(start->attempt(), v1::ATTEMPT_PHASE_RUNNING);
  ASSERT_TRUE(
      WaitForState(*stub_, job->id(), v1::JOB_STATE_RUNNING, kWait).ok());
  v1::JobProgress progress;
  progress.set_step(5);
  progress.set_loss(4.5);
  progress.set_checkpoint_step(5);
  progress.set_checkpoint_location("checkpoints/x/step-5");
  worker->ReportProgress(start->attempt(), progress);
  worker->SendLogLine(start->attempt(), "step 5 loss 4.5");
  worker->ReportPhase(start->attempt(), v1::ATTEMPT_PHASE_SUCCEEDED);
  auto done = WaitForState(*stub_, job->id(), v1::JOB_STATE_SUCCEEDED, kWait);
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_EQ(done->progress().step(), 5);
  EXPECT_EQ(done->progress().checkpoint_step(), 5);
  EXPECT_EQ(History(job->id()),
            (std::vector<v1::JobEventKind>{
                v1::JOB_EVENT_KIND_SUBMITTED, v1::JOB_EVENT_KIND_SCHEDULED,
                v1::JOB_EVENT_KIND_STARTED, v1::JOB_EVENT_KIND_CHECKPOINTED,
                v1::JOB_EVENT_KIND_SUCCEEDED}));
  // The worker's log line is in the job's log, tagged with its node.
  v1::StreamLogsRequest request;
  request.set_job_id(job->id());
  auto context = CallContext("");
  auto reader = stub_->StreamLogs(context.get(), request);
  v1::LogEntry entry;
  bool found_line = false;
  while (reader->Read(&entry)) {
    if (entry.has_line() && entry.line().text() == "step 5 loss 4.5") {
      found_line = entry.line().node() == "node-a";
    }
  }
  EXPECT_TRUE(found_line);
}

TEST_F(DaemonTest, GangStartsOnDistinctNodesAndNeedsEveryNodeToFinish) {
  auto a = AttachWorker("node-a", 2);
  auto b = AttachWorker("node-b", 2);
  auto job = Submit(*stub_, SpecYaml({.nodes = 2, .devices_per_node = 2}));
  ASSERT_TRUE(job.ok()) << job.status();
  auto start_a = a->WaitForStart(job->id(), kWait);
  auto start_b = b->WaitForStart(job->id(), kWait);
  ASSERT_TRUE(start_a.ok() && start_b.ok());
  EXPECT_EQ(start_a->world_size(), 4);
  EXPECT_EQ(start_a->first_rank() + start_b->first_rank(), 2);
  a->ReportPhase(start_a->attempt(), v1::ATTEMPT_PHASE_SUCCEEDED);
  // Once plateaud has taken a's report, the job still waits for b.
  auto half = WaitForJob(
      *stub_, job->id(),
      [](const v1::Job& job) { return job.finished_nodes_size() == 1; }, kWait);
  ASSERT_TRUE(half.ok()) << half.status();
  EXPECT_EQ(half->finished_nodes(0), "node-a");
  EXPECT_EQ(half->state(), v1::JOB_STATE_SCHEDULED);
  b->ReportPhase(start_b->attempt(), v1::ATTEMPT_PHASE_SUCCEEDED);
  EXPECT_TRUE(
      WaitForState(*stub_, job->id(), v1::JOB_STATE_SUCCEEDED, kWait).ok());
}

TEST_F(DaemonTest, LostNodeRequeuesTheJobToResumeFromItsCheckpoint) {
  auto a = AttachWorker("node-a", 1);
  auto job = Submit(*stub_, SpecYaml({.max_restarts = 1}));
  auto start = a->WaitForStart(job->id(), kWait);
  ASSERT_TRUE(start.ok());
  v1::JobProgress progress;
  progress.set_checkpoint_step(7);
  progress.set_checkpoint_location("ck/step-7");
  a->ReportProgress(start->attempt(), progress);
  ASSERT_TRUE(
      WaitForState(*stub_, job->id(), v1::JOB_STATE_RUNNING, kWait).ok());
  a->StopHeartbeats();
  auto b = AttachWorker("node-b", 1);
  auto restart = b->WaitForStart(job->id(), kWait);
  ASSERT_TRUE(restart.ok()) << restart.status();
  EXPECT_EQ(restart->attempt().attempt(), 2);
  EXPECT_EQ(restart->checkpoint_location(), "ck/step-7");
  const v1::Job requeued = GetJob(*stub_, job->id()).value();
  EXPECT_EQ(requeued.restarts(), 1);
  EXPECT_NE(requeued.last_error().find("node node-a lost"), std::string::npos)
      << requeued.last_error();
  v1::ListNodesResponse nodes;
  auto context = CallContext("");
  ASSERT_TRUE(stub_->ListNodes(context.get(), {}, &nodes).ok());
  for (const v1::Node& node : nodes.nodes()) {
    EXPECT_EQ(node.state(), node.name() == "node-a" ? v1::NODE_STATE_LOST
                                                    : v1::NODE_STATE_READY);
  }
}

TEST_F(DaemonTest, RankFailuresExhaustRestartsThenTheJobFails) {
  auto a = AttachWorker("node-a", 1);
  auto job = Submit(*stub_, SpecYaml({.max_restarts = 1}));
  for (int attempt = 1; attempt <= 2; ++attempt) {
    auto start = a->WaitForStart(job->id(), kWait);
    ASSERT_TRUE(start.ok()) << start.status();
    EXPECT_EQ(start->attempt().attempt(), attempt);
    a->ReportPhase(start->attempt(), v1::ATTEMPT_PHASE_FAILED,
                   "CUDA error: out of memory");
  }
  auto failed = WaitForState(*stub_, job->id(), v1::JOB_STATE_FAILED, kWait);
  ASSERT_TRUE(failed.ok()) << failed.status();
  EXPECT_NE(failed->last_error().find("out of memory"), std::string::npos);
  EXPECT_EQ(History(job->id()).back(), v1::JOB_EVENT_KIND_FAILED);
}

TEST_F(DaemonTest, CancelStopsRanksAndEndsCancelled) {
  auto a = AttachWorker("node-a", 1);
  auto running = Submit(*stub_, SpecYaml({}));
  auto start = a->WaitForStart(running->id(), kWait);
  ASSERT_TRUE(start.ok());
  auto queued = Submit(*stub_, SpecYaml({}));  // no device left for it

  v1::CancelJobRequest request;
  request.set_job_id(queued->id());
  v1::Job response;
  auto context = CallContext("");
  ASSERT_TRUE(stub_->CancelJob(context.get(), request, &response).ok());
  EXPECT_EQ(response.state(), v1::JOB_STATE_CANCELLED);

  request.set_job_id(running->id());
  context = CallContext("");
  ASSERT_TRUE(stub_->CancelJob(context.get(), request, &response).ok());
  EXPECT_EQ(response.state(), v1::JOB_STATE_CANCELLING);
  auto stop = a->WaitForStop(running->id(), kWait);
  ASSERT_TRUE(stop.ok()) << stop.status();
  EXPECT_GT(stop->grace_period().seconds(), 0);
  a->ReportPhase(start->attempt(), v1::ATTEMPT_PHASE_STOPPED);
  EXPECT_TRUE(
      WaitForState(*stub_, running->id(), v1::JOB_STATE_CANCELLED, kWait).ok());
}

TEST_F(DaemonTest, DrainedNodesTakeNoNewWork) {
  auto a = AttachWorker("node-a", 1);
  v1::SetNodeDrainRequest drain;
  drain.set_node("node-a");
  drain.set_drain(true);
  drain.set_reason("firmware update");
  v1::Node node;
  auto context = CallContext("");
  ASSERT_TRUE(stub_->SetNodeDrain(context.get(), drain, &node).ok());
  EXPECT_EQ(node.state(), v1::NODE_STATE_DRAINING);
  EXPECT_EQ(node.drain_reason(), "firmware update");
  v1::ListNodesResponse listed;
  context = CallContext("");
  ASSERT_TRUE(
      stub_->ListNodes(context.get(), v1::ListNodesRequest(), &listed).ok());
  ASSERT_EQ(listed.nodes_size(), 1);
  EXPECT_EQ(listed.nodes(0).drain_reason(), "firmware update");
  EXPECT_NE(HttpGet(server_->metrics_port(), "/metrics")
                .find("plateau_node_drained{node=\"node-a\",reason=\"firmware "
                      "update\"} 1"),
            std::string::npos);
  auto job = Submit(*stub_, SpecYaml({}));
  EXPECT_FALSE(a->WaitForStart(job->id(), absl::Milliseconds(400)).ok());
  // A reason belongs to a drain; undrained, the node has none.
  drain.set_drain(false);
  context = CallContext("");
  EXPECT_EQ(stub_->SetNodeDrain(context.get(), drain, &node).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  drain.clear_reason();
  // So does preempting its jobs.
  drain.set_preempt(true);
  context = CallContext("");
  EXPECT_EQ(stub_->SetNodeDrain(context.get(), drain, &node).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  drain.clear_preempt();
  context = CallContext("");
  ASSERT_TRUE(stub_->SetNodeDrain(context.get(), drain, &node).ok());
  EXPECT_EQ(node.state(), v1::NODE_STATE_READY);
  EXPECT_EQ(node.drain_reason(), "");
  EXPECT_EQ(HttpGet(server_->metrics_port(), "/metrics")
                .find("plateau_node_drained{"),
            std::string::npos);
  EXPECT_TRUE(a->WaitForStart(job->id(), kWait).ok());
}

TEST_F(DaemonTest, QueuedJobsSayWhyTheyWait) {
  auto a = AttachWorker("node-a", 2);
  auto too_big = Submit(*stub_, SpecYaml({.nodes = 3}));
  auto head = Submit(*stub_, SpecYaml({.devices_per_node = 2}));
  ASSERT_TRUE(a->WaitForStart(head->id(), kWait).ok());
  auto behind = Submit(*stub_, SpecYaml({.devices_per_node = 2}));
  auto never = WaitForWaitReason(*stub_, too_big->id(), "", kWait);
  ASSERT_TRUE(never.ok()) << never.status();
  EXPECT_EQ(never->state(), v1::JOB_STATE_QUEUED);
  auto waiting = WaitForWaitReason(*stub_, behind->id(), "", kWait);
  ASSERT_TRUE(waiting.ok()) << waiting.status();
  EXPECT_NE(waiting->wait_reason(), never->wait_reason());
  // In the scheduling order (same priority: the earlier first), the head
  // started and so has no place.
  EXPECT_EQ(waiting->queue_position(), 2);
  EXPECT_EQ(GetJob(*stub_, too_big->id())->queue_position(), 1);
  EXPECT_EQ(GetJob(*stub_, head->id())->queue_position(), 0);
}

TEST_F(DaemonTest, AJobNoNodeCanHoldWaitsUnplacedUntilOneAttachesAndIsPlanned) {
  auto small = AttachWorker("node-a", 1);
  auto job = Submit(*stub_, SpecYaml({.devices_per_node = 2}));
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_FALSE(job->has_plan());
  auto waiting = WaitForWaitReason(*stub_, job->id(),
                                   "waiting for a node with 2 devices", kWait);
  ASSERT_TRUE(waiting.ok()) << waiting.status();
  EXPECT_EQ(waiting->state(), v1::JOB_STATE_QUEUED);

  auto large = AttachWorker("node-b", 2);
  ASSERT_TRUE(large->WaitForStart(job->id(), kWait).ok());
  auto started = GetJob(*stub_, job->id());
  ASSERT_TRUE(started.ok());
  ASSERT_TRUE(started->has_plan());
  EXPECT_TRUE(started->plan().fits());
  EXPECT_EQ(started->plan().device_memory_bytes(), int64_t{2} << 30);
  const std::vector<v1::JobEventKind> history = History(job->id());
  ASSERT_GE(history.size(), 3);
  EXPECT_EQ(history[0], v1::JOB_EVENT_KIND_SUBMITTED);
  EXPECT_EQ(history[1], v1::JOB_EVENT_KIND_PLANNED);
  EXPECT_EQ(history[2], v1::JOB_EVENT_KIND_SCHEDULED);
}

TEST_F(DaemonTest, AJobThatDoesNotFitTheFirstNodeThatCanHoldItFails) {
  auto job = Submit(*stub_, SpecYaml({.devices_per_node = 2}));
  ASSERT_TRUE(job.ok()) << job.status();
  SimulatedWorkerOptions options;
  options.name = "node-tiny";
  options.devices = 2;
  options.device_memory_bytes = 64 << 10;
  auto tiny = SimulatedWorker::Attach(channel_, options);
  ASSERT_TRUE(tiny.ok()) << tiny.status();
  auto failed = WaitForState(*stub_, job->id(), v1::JOB_STATE_FAILED, kWait);
  ASSERT_TRUE(failed.ok()) << failed.status();
  EXPECT_NE(failed->last_error().find("the nodes that can hold it attached, "
                                      "and it does not fit them: job does "
                                      "not fit its devices: "),
            std::string::npos)
      << failed->last_error();
  EXPECT_TRUE((*tiny)->starts().empty());
}

TEST(DeclaredShapesTest, AJobNoDeclaredShapeCanHoldIsRefusedAtSubmit) {
  DaemonConfig config =
      LocalDaemonConfig(MakeTestDirectory("plateaud") + "/data");
  config.node_shapes = "2x1GiB";
  absl::StatusOr<std::unique_ptr<DaemonServer>> server =
      DaemonServer::Start(config);
  ASSERT_TRUE(server.ok()) << server.status();
  auto stub = v1::Coordinator::NewStub(LocalChannel((*server)->port()));
  auto refused = Submit(*stub, SpecYaml({.devices_per_node = 4}));
  ASSERT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.status().message().find("no node of the cluster's "
                                            "declared shapes (2 x 1.00 GiB) "
                                            "has that many; use at most 2"),
            std::string::npos)
      << refused.status();
  // One that a declared node can hold is planned for it before any
  // attaches.
  auto admitted = Submit(*stub, SpecYaml({.devices_per_node = 2}));
  ASSERT_TRUE(admitted.ok()) << admitted.status();
  ASSERT_TRUE(admitted->has_plan());
  EXPECT_EQ(admitted->plan().device_memory_bytes(), int64_t{1} << 30);

  config.node_shapes = "2xlots";
  config.data_dir = MakeTestDirectory("plateaud") + "/data";
  const absl::Status bad = DaemonServer::Start(config).status();
  EXPECT_TRUE(absl::IsInvalidArgument(bad));
  EXPECT_NE(bad.message().find("--node_shapes: node shape '2xlots'"),
            std::string::npos)
      << bad;
}

// PlanJob: `plateau plan` made by plateaud, for the devices admission would
// plan for (or those given), submitting nothing.
TEST_F(DaemonTest, PlanJobPlansForTheNodesAndSubmitsNothing) {
  const auto plan = [&](const v1::PlanJobRequest& request,
                        v1::PlanJobResponse* response) {
    auto context = CallContext("");
    return stub_->PlanJob(context.get(), request, response);
  };
  v1::PlanJobRequest request;
  request.set_spec_yaml(SpecYaml({.devices_per_node = 2}));
  v1::PlanJobResponse response;
  grpc::Status status = plan(request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(status.error_message().find(
                "no registered node with 2 devices reports its device memory"),
            std::string::npos)
      << status.error_message();

  request.set_device_memory_bytes(int64_t{1} << 30);
  status = plan(request, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_TRUE(response.plan().fits());
  EXPECT_EQ(response.plan().device_memory_bytes(), int64_t{1} << 30);
  EXPECT_GT(response.plan().max_seq_len(), 0);  // the reach is searched
  EXPECT_EQ(response.spec().resources().devices_per_node(), 2);

  auto node = AttachWorker("node-a", 2);
  request.set_device_memory_bytes(0);
  status = plan(request, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(response.plan().device_memory_bytes(), int64_t{2} << 30);

  request.set_device_memory_bytes(-1);
  status = plan(request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(status.error_message().find("device_memory_bytes: -1"),
            std::string::npos);
  request.set_device_memory_bytes(0);
  request.set_spec_yaml("name: Bad Name\n");
  status = plan(request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(status.error_message().find("name:"), std::string::npos);

  v1::ListJobsResponse jobs;
  auto context = CallContext("");
  ASSERT_TRUE(
      stub_->ListJobs(context.get(), v1::ListJobsRequest(), &jobs).ok());
  EXPECT_EQ(jobs.jobs_size(), 0);
}

TEST_F(DaemonTest, BadSpecsAreRejectedWithEveryFieldNamed) {
  const std::string yaml =
      absl::StrCat(SpecYaml({}), "schedules: {sco_x: true}\n");
  auto job =
      Submit(*stub_, "name: Bad Name\n" + yaml.substr(yaml.find('\n') + 1));
  ASSERT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(job.status().message().find("name:"), std::string::npos)
      << job.status();
  EXPECT_NE(job.status().message().find("schedules.sco_x"), std::string::npos)
      << job.status();
  // A spec sent as a proto is validated too.
  v1::SubmitJobRequest request;
  request.mutable_spec()->set_name("x");
  v1::SubmitJobResponse response;
  auto context = CallContext("");
  const grpc::Status status =
      stub_->SubmitJob(context.get(), request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(status.error_message().find("model"), std::string::npos);
}

TEST_F(DaemonTest, RendezvousIsScopedToTheLiveAttempt) {
  auto a = AttachWorker("node-a", 1);
  auto job = Submit(*stub_, SpecYaml({}));
  auto start = a->WaitForStart(job->id(), kWait);
  ASSERT_TRUE(start.ok());
  auto rendezvous = v1::Rendezvous::NewStub(channel_);
  v1::RendezvousSetRequest set;
  set.set_scope(start->rendezvous_key());
  set.set_key("gloo/rank0");
  set.set_value("127.0.0.1:4000");
  v1::RendezvousSetResponse set_response;
  auto context = CallContext("");
  ASSERT_TRUE(rendezvous->Set(context.get(), set, &set_response).ok());
  v1::RendezvousWaitRequest wait;
  wait.set_scope(start->rendezvous_key());
  wait.add_keys("gloo/rank0");
  wait.mutable_timeout()->set_seconds(5);
  v1::RendezvousWaitResponse wait_response;
  context = CallContext("");
  EXPECT_TRUE(rendezvous->Wait(context.get(), wait, &wait_response).ok());
  v1::RendezvousGetRequest get;
  get.set_scope(start->rendezvous_key());
  get.set_key("gloo/rank0");
  v1::RendezvousGetResponse get_response;
  context = CallContext("");
  ASSERT_TRUE(rendezvous->Get(context.get(), get, &get_response).ok());
  EXPECT_EQ(get_response.value(), "127.0.0.1:4000");
  a->ReportPhase(start->attempt(), v1::ATTEMPT_PHASE_SUCCEEDED);
  ASSERT_TRUE(
      WaitForState(*stub_, job->id(), v1::JOB_STATE_SUCCEEDED, kWait).ok());
  context = CallContext("");
  EXPECT_EQ(rendezvous->Get(context.get(), get, &get_response).error_code(),
            grpc::StatusCode::NOT_FOUND);
}

TEST_F(DaemonTest, WatchStreamsEveryTransitionUntilTheEnd) {
  auto a = AttachWorker("node-a", 1);
  auto job = Submit(*stub_, SpecYaml({}));
  v1::WatchJobRequest request;
  request.set_job_id(job->id());
  auto context = CallContext("", absl::Seconds(20));
  auto reader = stub_->WatchJob(context.get(), request);
  auto start = a->WaitForStart(job->id(), kWait);
  ASSERT_TRUE(start.ok());
  a->ReportPhase(start->attempt(), v1::ATTEMPT_PHASE_RUNNING);
  a->ReportPhase(start->attempt(), v1::ATTEMPT_PHASE_SUCCEEDED);
  std::vector<v1::JobState> states;
  v1::WatchJobResponse update;
  while (reader->Read(&update)) {
    if (update.has_event()) states.push_back(update.event().state());
  }
  EXPECT_TRUE(reader->Finish().ok());
  ASSERT_FALSE(states.empty());
  EXPECT_EQ(states.back(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_NE(std::find(states.begin(), states.end(), v1::JOB_STATE_RUNNING),
            states.end());
}

TEST_F(DaemonTest, FollowedLogsStreamUntilTheJobEnds) {
  auto a = AttachWorker("node-a", 1);
  auto job = Submit(*stub_, SpecYaml({}));
  auto start = a->WaitForStart(job->id(), kWait);
  ASSERT_TRUE(start.ok());
  std::vector<std::string> lines;
  std::thread follower([&] {
    v1::StreamLogsRequest request;
    request.set_job_id(job->id());
    request.set_follow(true);
    auto context = CallContext("", absl::Seconds(20));
    auto reader = stub_->StreamLogs(context.get(), request);
    v1::LogEntry entry;
    while (reader->Read(&entry)) {
      if (entry.has_line()) lines.push_back(entry.line().text());
    }
    EXPECT_TRUE(reader->Finish().ok());
  });
  for (int i = 0; i < 5; ++i) {
    a->SendLogLine(start->attempt(), absl::StrCat("line ", i));
    absl::SleepFor(absl::Milliseconds(30));
  }
  a->ReportPhase(start->attempt(), v1::ATTEMPT_PHASE_SUCCEEDED);
  follower.join();  // returns because the job ended
  EXPECT_EQ(lines, (std::vector<std::string>{"line 0", "line 1", "line 2",
                                             "line 3", "line 4"}));
}

// A node whose stream is dead (every send after the accept fails) is
// dropped at the first failed send: the job it was given is requeued
// without using a restart and runs elsewhere.
class DeadConnection : public daemon::NodeConnection {
 public:
  explicit DeadConnection(int sends_that_work) : working_(sends_that_work) {}
  bool Send(const v1::CoordinatorMessage&) override { return working_-- > 0; }
  void Close() override {}

 private:
  std::atomic<int> working_;
};

v1::WorkerHello OneDeviceHello(const std::string& name) {
  v1::WorkerHello hello;
  hello.set_node_name(name);
  v1::Device& device = *hello.add_devices();
  device.set_index(0);
  device.set_kind(v1::DEVICE_KIND_CPU);
  device.set_memory_bytes(int64_t{2} << 30);
  return hello;
}

TEST_F(DaemonTest, AStartThatCannotBeSentCostsNoRestart) {
  ASSERT_TRUE(server_->coordinator()
                  .OnAttach(OneDeviceHello("node-a"),
                            std::make_shared<DeadConnection>(1))
                  .ok());
  auto job = Submit(*stub_, SpecYaml({.max_restarts = 0}));
  ASSERT_TRUE(job.ok()) << job.status();
  auto requeued = WaitForJob(
      *stub_, job->id(),
      [](const v1::Job& job) {
        return job.attempt() == 1 && job.state() == v1::JOB_STATE_QUEUED;
      },
      kWait);
  ASSERT_TRUE(requeued.ok()) << requeued.status();
  EXPECT_EQ(requeued->restarts(), 0);
  auto b = AttachWorker("node-b", 1);
  auto start = b->WaitForStart(job->id(), kWait);
  ASSERT_TRUE(start.ok()) << start.status();
  EXPECT_EQ(start->attempt().attempt(), 2);
  b->ReportPhase(start->attempt(), v1::ATTEMPT_PHASE_SUCCEEDED);
  EXPECT_TRUE(
      WaitForState(*stub_, job->id(), v1::JOB_STATE_SUCCEEDED, kWait).ok());
}

TEST_F(DaemonTest, ANodeWhoseAttachFailedTakesNoWork) {
  EXPECT_FALSE(server_->coordinator()
                   .OnAttach(OneDeviceHello("node-a"),
                             std::make_shared<DeadConnection>(0))
                   .ok());
  auto job = Submit(*stub_, SpecYaml({.max_restarts = 0}));
  ASSERT_TRUE(job.ok()) << job.status();
  auto waiting = WaitForWaitReason(*stub_, job->id(), "", kWait);
  ASSERT_TRUE(waiting.ok()) << waiting.status();
  EXPECT_EQ(waiting->attempt(), 0);
  auto b = AttachWorker("node-b", 1);
  auto start = b->WaitForStart(job->id(), kWait);
  ASSERT_TRUE(start.ok()) << start.status();
  EXPECT_EQ(start->attempt().attempt(), 1);
}

std::map<std::string, v1::NodeState> NodeStates(v1::Coordinator::Stub& stub) {
  v1::ListNodesResponse nodes;
  auto context = CallContext("");
  EXPECT_TRUE(stub.ListNodes(context.get(), {}, &nodes).ok());
  std::map<std::string, v1::NodeState> states;
  for (const v1::Node& node : nodes.nodes()) states[node.name()] = node.state();
  return states;
}

// A worker that is alive but went silent keeps its stream open; when
// plateaud finds it lost it ends the stream, so the worker re-attaches. The
// drain set before survives all of it.
TEST_F(DaemonTest, ASilentNodesStreamIsEndedAndItComesBackDrained) {
  auto a = AttachWorker("node-a", 1);
  v1::SetNodeDrainRequest drain;
  drain.set_node("node-a");
  drain.set_drain(true);
  v1::Node node;
  auto context = CallContext("");
  ASSERT_TRUE(stub_->SetNodeDrain(context.get(), drain, &node).ok());
  a->StopHeartbeats();
  ASSERT_TRUE(a->WaitUntilClosed(kWait));
  EXPECT_EQ(NodeStates(*stub_)["node-a"], v1::NODE_STATE_LOST);
  a = AttachWorker("node-a", 1);
  EXPECT_EQ(NodeStates(*stub_)["node-a"], v1::NODE_STATE_DRAINING);
}

TEST_F(DaemonTest, NodesGetALeaseUnderTheNodeTimeoutAndEveryBeatAnswered) {
  auto worker = AttachWorker("node-a", 1);
  // 3/4 of the 1 s node timeout: the ranks stop before the node is lost.
  EXPECT_EQ(worker->accepted().rank_lease().seconds(), 0);
  EXPECT_EQ(worker->accepted().rank_lease().nanos(), 750'000'000);
  const absl::StatusOr<int64_t> acknowledged =
      worker->WaitForHeartbeatAck(3, kWait);
  ASSERT_TRUE(acknowledged.ok()) << acknowledged.status();
  EXPECT_GE(*acknowledged, 3);
  // A silent node gets no more acknowledgements, so its lease runs out.
  worker->StopHeartbeats();
  absl::SleepFor(absl::Milliseconds(300));
  const absl::StatusOr<int64_t> after_silence =
      worker->WaitForHeartbeatAck(*acknowledged + 5, absl::Milliseconds(500));
  EXPECT_TRUE(absl::IsDeadlineExceeded(after_silence.status()));
}

TEST(DaemonConfigTest, TheRankLeaseMustFitUnderTheNodeTimeout) {
  DaemonConfig config =
      LocalDaemonConfig(MakeTestDirectory("plateaud") + "/data");
  config.node_timeout = absl::Seconds(8);
  config.heartbeat_interval = absl::Seconds(1);
  config.rank_lease = absl::Seconds(7);
  absl::StatusOr<std::unique_ptr<DaemonServer>> server =
      DaemonServer::Start(config);
  ASSERT_TRUE(absl::IsInvalidArgument(server.status())) << server.status();
  EXPECT_TRUE(absl::StrContains(server.status().message(),
                                "--rank_lease 7s must be at most 3/4 of "
                                "--node_timeout (6s)"))
      << server.status();
  config.rank_lease = absl::Milliseconds(1500);
  server = DaemonServer::Start(config);
  ASSERT_TRUE(absl::IsInvalidArgument(server.status())) << server.status();
  EXPECT_TRUE(absl::StrContains(server.status().message(),
                                "at least two heartbeat intervals"))
      << server.status();
  config.rank_lease = absl::Seconds(5);
  server = DaemonServer::Start(config);
  ASSERT_TRUE(server.ok()) << server.status();
}

// Refused before anything binds: no address but loopback is used.
TEST(DaemonConfigTest, NoAuthOnlyOnLoopbackUnlessInsecureNoAuth) {
  const std::string directory = MakeTestDirectory("open");
  for (const bool metrics : {false, true}) {
    DaemonConfig config = LocalDaemonConfig(directory + "/data");
    (metrics ? config.metrics_listen : config.listen) = "0.0.0.0:0";
    absl::StatusOr<std::unique_ptr<DaemonServer>> server =
        DaemonServer::Start(config);
    ASSERT_TRUE(absl::IsInvalidArgument(server.status())) << metrics;
    EXPECT_TRUE(absl::StrContains(
        server.status().message(),
        absl::StrCat(metrics ? "--metrics_listen" : "--listen",
                     "=0.0.0.0:0 is not a loopback address and there is no "
                     "--tokens_file")))
        << server.status();
    EXPECT_TRUE(
        absl::StrContains(server.status().message(), "--insecure_no_auth"))
        << server.status();
  }
}

TEST(DaemonConfigTest, TokensInPlaintextOnlyOnLoopbackUnlessAllowed) {
  const std::string directory = MakeTestDirectory("plaintext");
  WriteTestFile(directory + "/tokens.yaml",
                "users:\n  - {name: ada, role: user, token_sha256: " +
                    daemon::TokenHash("ada-token") + "}\n");
  DaemonConfig config = LocalDaemonConfig(directory + "/data");
  config.tokens_file = directory + "/tokens.yaml";
  for (const char* listen : {"0.0.0.0:0", "[::]:0", "192.0.2.1:0"}) {
    config.listen = listen;
    absl::StatusOr<std::unique_ptr<DaemonServer>> server =
        DaemonServer::Start(config);
    ASSERT_TRUE(absl::IsInvalidArgument(server.status())) << listen;
    EXPECT_TRUE(absl::StrContains(
        server.status().message(),
        absl::StrCat("--tokens_file without TLS on --listen=", listen)))
        << server.status();
    EXPECT_TRUE(absl::StrContains(server.status().message(),
                                  "--allow_plaintext_tokens"))
        << server.status();
  }
  config.listen = "127.0.0.1:0";
  absl::StatusOr<std::unique_ptr<DaemonServer>> server =
      DaemonServer::Start(config);
  ASSERT_TRUE(server.ok()) << server.status();
}

TEST_F(DaemonTest, ACancelReachesAWorkerThatReattachesAndEndsWithoutAnswer) {
  auto a = AttachWorker("node-a", 1);
  auto job = Submit(*stub_, SpecYaml({}));
  auto start = a->WaitForStart(job->id(), kWait);
  ASSERT_TRUE(start.ok()) << start.status();
  a->ReportPhase(start->attempt(), v1::ATTEMPT_PHASE_RUNNING);
  ASSERT_TRUE(
      WaitForState(*stub_, job->id(), v1::JOB_STATE_RUNNING, kWait).ok());
  v1::CancelJobRequest cancel;
  cancel.set_job_id(job->id());
  v1::Job cancelling;
  auto context = CallContext("");
  ASSERT_TRUE(stub_->CancelJob(context.get(), cancel, &cancelling).ok());
  ASSERT_TRUE(a->WaitForStop(job->id(), kWait).ok());
  // The worker dies before acting on the stop and comes back still running
  // the attempt: it is told again.
  a.reset();
  SimulatedWorkerOptions options;
  options.name = "node-a";
  options.devices = 1;
  options.running_attempts = {start->attempt()};
  a = SimulatedWorker::Attach(channel_, options).value();
  auto again = a->WaitForStop(job->id(), kWait);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->attempt().attempt(), start->attempt().attempt());
  // It never confirms: after grace (5 s) + margin (1 s) the cancel ends.
  auto cancelled =
      WaitForState(*stub_, job->id(), v1::JOB_STATE_CANCELLED, kWait);
  ASSERT_TRUE(cancelled.ok()) << cancelled.status();
}

TEST_F(DaemonTest, ANodeThatFinishedItsPartMayGoAway) {
  auto a = AttachWorker("node-a", 1);
  auto b = AttachWorker("node-b", 1);
  auto job = Submit(*stub_, SpecYaml({.nodes = 2}));
  auto start_a = a->WaitForStart(job->id(), kWait);
  auto start_b = b->WaitForStart(job->id(), kWait);
  ASSERT_TRUE(start_a.ok() && start_b.ok());
  a->ReportPhase(start_a->attempt(), v1::ATTEMPT_PHASE_SUCCEEDED);
  ASSERT_TRUE(
      WaitForJob(
          *stub_, job->id(),
          [](const v1::Job& job) { return job.finished_nodes_size() == 1; },
          kWait)
          .ok());
  // a's worker restarts (no attempt to report: it finished), then goes
  // silent until it is lost.
  a.reset();
  a = AttachWorker("node-a", 1);
  a->StopHeartbeats();
  ASSERT_TRUE(a->WaitUntilClosed(kWait));
  auto live = GetJob(*stub_, job->id());
  ASSERT_TRUE(live.ok());
  EXPECT_EQ(live->state(), v1::JOB_STATE_SCHEDULED) << live->last_error();
  b->ReportPhase(start_b->attempt(), v1::ATTEMPT_PHASE_SUCCEEDED);
  EXPECT_TRUE(
      WaitForState(*stub_, job->id(), v1::JOB_STATE_SUCCEEDED, kWait).ok());
}

TEST_F(DaemonTest, DevicesOfAFailedAttemptStayBusyUntilItsRanksStop) {
  auto a = AttachWorker("node-a", 1);
  auto b = AttachWorker("node-b", 1);
  auto failing = Submit(*stub_, SpecYaml({.nodes = 2}));
  auto start_a = a->WaitForStart(failing->id(), kWait);
  auto start_b = b->WaitForStart(failing->id(), kWait);
  ASSERT_TRUE(start_a.ok() && start_b.ok());
  auto next = Submit(*stub_, SpecYaml({.nodes = 2}));
  a->ReportPhase(start_a->attempt(), v1::ATTEMPT_PHASE_FAILED, "boom");
  ASSERT_TRUE(
      WaitForState(*stub_, failing->id(), v1::JOB_STATE_FAILED, kWait).ok());
  ASSERT_TRUE(b->WaitForStop(failing->id(), kWait).ok());
  // node-a is free; node-b still runs the failed attempt's ranks.
  auto waiting = WaitForWaitReason(*stub_, next->id(), "; 1 free", kWait);
  ASSERT_TRUE(waiting.ok()) << waiting.status();
  EXPECT_EQ(waiting->state(), v1::JOB_STATE_QUEUED);
  b->ReportPhase(start_b->attempt(), v1::ATTEMPT_PHASE_STOPPED);
  EXPECT_TRUE(a->WaitForStart(next->id(), kWait).ok());
  EXPECT_TRUE(b->WaitForStart(next->id(), kWait).ok());
}

// However close the watch's start comes to the job's last transition (here
// a cancel racing each watch's first reads), the watch sees the final state
// and ends instead of waiting for a change that will not come.
TEST_F(DaemonTest, WatchesNeverMissTheFinalState) {
  constexpr int kJobs = 40;
  int missed = 0;
  for (int i = 0; i < kJobs; ++i) {
    auto job = Submit(*stub_, SpecYaml({}));  // no nodes: stays queued
    ASSERT_TRUE(job.ok()) << job.status();
    std::thread canceller([&] {
      // Spread over the watch's start, a little differently each time.
      absl::SleepFor(absl::Microseconds(50 * (i % 10)));
      v1::CancelJobRequest cancel;
      cancel.set_job_id(job->id());
      v1::Job cancelled;
      auto context = CallContext("");
      EXPECT_TRUE(stub_->CancelJob(context.get(), cancel, &cancelled).ok());
    });
    v1::WatchJobRequest request;
    request.set_job_id(job->id());
    auto context = CallContext("", absl::Seconds(3));
    auto reader = stub_->WatchJob(context.get(), request);
    v1::WatchJobResponse update;
    v1::JobState last = v1::JOB_STATE_UNSPECIFIED;
    while (reader->Read(&update)) last = update.job().state();
    missed += !reader->Finish().ok() || last != v1::JOB_STATE_CANCELLED;
    canceller.join();
  }
  EXPECT_EQ(missed, 0) << "watches that missed the final state";
}

TEST_F(DaemonTest, MetricsEndpointServesTheDaemonMetrics) {
  auto a = AttachWorker("node-a", 2);
  // Submitted twice with one idempotency key: one job, counted once.
  for (int i = 0; i < 2; ++i) {
    v1::SubmitJobRequest request;
    request.set_spec_yaml(SpecYaml({}));
    request.set_idempotency_key("once");
    v1::SubmitJobResponse response;
    auto context = CallContext("");
    ASSERT_TRUE(stub_->SubmitJob(context.get(), request, &response).ok());
  }
  const std::vector<std::string> metrics = {
      "plateau_jobs{state=\"queued\"}",
      "plateau_jobs{state=\"scheduled\"} 1",
      "plateau_jobs_submitted_total 1",
      "plateau_job_restarts_total",
      "plateau_job_queue_wait_seconds_bucket",
      "plateau_schedule_latency_seconds_count",
      "plateau_nodes{state=\"ready\"} 1",
      "plateau_devices{state=\"allocated\"} 1",
      "plateau_devices{state=\"free\"} 1",
      "plateau_grpc_requests_total{code=\"OK\",method=\"SubmitJob\"} 2",
      "plateau_grpc_request_duration_seconds_bucket"};
  // The gauges follow the loop's passes: poll until they show the job.
  std::string page;
  const absl::Time deadline = absl::Now() + kWait;
  auto complete = [&] {
    for (const std::string& metric : metrics) {
      if (page.find(metric) == std::string::npos) return false;
    }
    return true;
  };
  do {
    page = HttpGet(server_->metrics_port(), "/metrics");
  } while (!complete() && absl::Now() < deadline &&
           (absl::SleepFor(absl::Milliseconds(20)), true));
  for (const std::string& metric : metrics) {
    EXPECT_NE(page.find(metric), std::string::npos) << metric << "\n" << page;
  }
}

class AuthTest : public DaemonTest {
 protected:
  void SetUp() override {
    const std::string path = MakeTestDirectory("auth") + "/tokens.yaml";
    WriteTestFile(
        path,
        absl::StrCat("users:\n", "  - {name: ada, role: user, token_sha256: ",
                     daemon::TokenHash("ada-token"), ", quota_devices: 1}\n",
                     "  - {name: bob, role: user, token_sha256: ",
                     daemon::TokenHash("bob-token"), ", max_priority: 200}\n",
                     "  - {name: root, role: admin, token_sha256: ",
                     daemon::TokenHash("root-token"), "}\n",
                     "  - {name: prometheus, role: metrics, token_sha256: ",
                     daemon::TokenHash("scrape-token"), "}\n", "nodes:\n",
                     "  - {name: node-a, token_sha256: ",
                     daemon::TokenHash("node-a-token"), "}\n",
                     "  - {name: node-b, token_sha256: ",
                     daemon::TokenHash("node-b-token"), "}\n"));
    StartDaemon(path);
  }
};

// Fair share: ada has used the node, bob has not, so bob's job goes first
// although ada's was submitted earlier with the same priority.
TEST_F(AuthTest, AmongEqualPrioritiesTheUserWhoUsedLessGoesFirst) {
  auto node = AttachWorker("node-a", 1, "node-a-token");
  auto first = Submit(*stub_, SpecYaml({}), "ada-token");
  ASSERT_TRUE(first.ok()) << first.status();
  auto start = node->WaitForStart(first->id(), kWait);
  ASSERT_TRUE(start.ok()) << start.status();
  node->ReportPhase(start->attempt(), v1::ATTEMPT_PHASE_RUNNING);
  auto ada_next = Submit(*stub_, SpecYaml({}), "ada-token");
  absl::SleepFor(absl::Milliseconds(20));
  auto bob_job = Submit(*stub_, SpecYaml({}), "bob-token");
  ASSERT_TRUE(ada_next.ok() && bob_job.ok());
  absl::SleepFor(absl::Milliseconds(300));  // ada's use grows meanwhile
  node->ReportPhase(start->attempt(), v1::ATTEMPT_PHASE_SUCCEEDED);
  auto next = node->WaitForStart(bob_job->id(), kWait);
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ(GetJob(*stub_, ada_next->id(), "ada-token")->state(),
            v1::JOB_STATE_QUEUED);
}

TEST_F(AuthTest, UsersSeeAndCancelOnlyTheirOwnJobs) {
  auto job = Submit(*stub_, SpecYaml({}), "ada-token");
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->owner(), "ada");
  // Someone else's job reads exactly as a missing one.
  const absl::Status others = GetJob(*stub_, job->id(), "bob-token").status();
  EXPECT_EQ(others.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(others.message(), absl::StrCat("no job ", job->id()));
  const absl::Status missing =
      GetJob(*stub_, "j-99999999", "bob-token").status();
  EXPECT_EQ(missing.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(missing.message(), "no job j-99999999");
  EXPECT_TRUE(GetJob(*stub_, job->id(), "root-token").ok());
  EXPECT_EQ(GetJob(*stub_, job->id(), "").status().code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(GetJob(*stub_, job->id(), "wrong").status().code(),
            absl::StatusCode::kUnauthenticated);

  v1::CancelJobRequest cancel;
  cancel.set_job_id(job->id());
  v1::Job response;
  auto context = CallContext("bob-token");
  EXPECT_EQ(stub_->CancelJob(context.get(), cancel, &response).error_code(),
            grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(GetJob(*stub_, job->id(), "ada-token")->state(),
            v1::JOB_STATE_QUEUED);

  v1::ListJobsRequest list;
  v1::ListJobsResponse listed;
  context = CallContext("bob-token");
  ASSERT_TRUE(stub_->ListJobs(context.get(), list, &listed).ok());
  EXPECT_EQ(listed.jobs_size(), 0);
  list.set_owner("ada");
  context = CallContext("bob-token");
  EXPECT_EQ(stub_->ListJobs(context.get(), list, &listed).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);

  context = CallContext("ada-token");
  EXPECT_TRUE(stub_->CancelJob(context.get(), cancel, &response).ok());
}

TEST_F(AuthTest, OnlyNodesAttachAndOnlyAdminsDrain) {
  SimulatedWorkerOptions options;
  options.name = "node-a";
  options.token = "ada-token";
  EXPECT_EQ(SimulatedWorker::Attach(channel_, options).status().code(),
            absl::StatusCode::kPermissionDenied);
  options.token = "node-a-token";
  auto worker = SimulatedWorker::Attach(channel_, options);
  ASSERT_TRUE(worker.ok()) << worker.status();
  v1::SetNodeDrainRequest drain;
  drain.set_node("node-a");
  drain.set_drain(true);
  v1::Node node;
  auto context = CallContext("ada-token");
  EXPECT_EQ(stub_->SetNodeDrain(context.get(), drain, &node).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  context = CallContext("root-token");
  EXPECT_TRUE(stub_->SetNodeDrain(context.get(), drain, &node).ok());
}

TEST_F(AuthTest, PriorityAboveTheCeilingIsForAdmins) {
  // ada has plateaud's ceiling (100), bob his own (200), root none.
  auto refused = Submit(*stub_, SpecYaml({.priority = 101}), "ada-token");
  ASSERT_EQ(refused.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(refused.status().message(),
            "priority: 101 is above ada's ceiling of 100 (the tokens file's "
            "max_priority, else plateaud's --max_user_priority); use at most "
            "100 or ask an admin to submit it");
  EXPECT_TRUE(Submit(*stub_, SpecYaml({.priority = 100}), "ada-token").ok());
  EXPECT_TRUE(Submit(*stub_, SpecYaml({.priority = 200}), "bob-token").ok());
  EXPECT_EQ(
      Submit(*stub_, SpecYaml({.priority = 201}), "bob-token").status().code(),
      absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(Submit(*stub_, SpecYaml({.priority = 1000}), "root-token").ok());
}

TEST_F(AuthTest, UsersSeeThatDevicesAreTakenButNotByWhom) {
  SimulatedWorkerOptions options;
  options.name = "node-a";
  options.devices = 2;
  options.token = "node-a-token";
  auto worker = SimulatedWorker::Attach(channel_, options).value();
  auto job = Submit(*stub_, SpecYaml({}), "ada-token");
  ASSERT_TRUE(worker->WaitForStart(job->id(), kWait).ok());
  auto devices_seen_by = [&](const std::string& token) {
    v1::ListNodesResponse nodes;
    auto context = CallContext(token);
    EXPECT_TRUE(stub_->ListNodes(context.get(), {}, &nodes).ok());
    std::vector<std::pair<bool, std::string>> devices;
    for (const v1::Device& device : nodes.nodes(0).devices()) {
      devices.emplace_back(device.allocated(), device.allocated_job_id());
    }
    return devices;
  };
  using Seen = std::vector<std::pair<bool, std::string>>;
  EXPECT_EQ(devices_seen_by("ada-token"),
            (Seen{{true, job->id()}, {false, ""}}));
  EXPECT_EQ(devices_seen_by("root-token"),
            (Seen{{true, job->id()}, {false, ""}}));
  EXPECT_EQ(devices_seen_by("bob-token"), (Seen{{true, ""}, {false, ""}}));
}

TEST_F(AuthTest, AnAttachedNodeIsReplacedOnlyByItsOwnCredentials) {
  SimulatedWorkerOptions options;
  options.name = "node-a";
  options.token = "node-a-token";
  auto worker = SimulatedWorker::Attach(channel_, options);
  ASSERT_TRUE(worker.ok()) << worker.status();
  options.token = "root-token";
  const absl::Status takeover =
      SimulatedWorker::Attach(channel_, options).status();
  EXPECT_EQ(takeover.code(), absl::StatusCode::kAlreadyExists) << takeover;
  EXPECT_TRUE(absl::StrContains(
      takeover.message(),
      "node node-a is attached; only its own token or certificate may "
      "replace its connection"))
      << takeover;
  EXPECT_FALSE((*worker)->WaitUntilClosed(absl::Milliseconds(300)));
  // The node itself may (a worker re-attaching over a stream plateaud has
  // not yet seen break); an admin may attach a node that is not attached.
  options.token = "node-a-token";
  EXPECT_TRUE(SimulatedWorker::Attach(channel_, options).ok());
  options.name = "node-b";
  options.token = "root-token";
  EXPECT_TRUE(SimulatedWorker::Attach(channel_, options).ok());
}

class AuthPreemptionTest : public AuthTest {
 protected:
  void SetUp() override {
    preemption_priority_gap_ = 100;
    AuthTest::SetUp();
  }
};

// A user never reads another user's job id or name: not in a wait reason
// ("behind job J", "preempting job J"), not in a preemption's events
// ("job J (priority 200, user bob) needs ..."). An admin reads them all.
TEST_F(AuthPreemptionTest, AUserReadsAnotherUsersJobAsJustThat) {
  auto node = AttachWorker("node-a", 1, "node-a-token");
  auto ada_running = Submit(*stub_, SpecYaml({}), "ada-token");
  ASSERT_TRUE(ada_running.ok()) << ada_running.status();
  auto start = node->WaitForStart(ada_running->id(), kWait);
  ASSERT_TRUE(start.ok()) << start.status();
  node->ReportPhase(start->attempt(), v1::ATTEMPT_PHASE_RUNNING);
  auto bob_urgent = Submit(*stub_, SpecYaml({.priority = 200}), "bob-token");
  ASSERT_TRUE(bob_urgent.ok()) << bob_urgent.status();
  ASSERT_TRUE(WaitForState(*stub_, ada_running->id(), v1::JOB_STATE_PREEMPTING,
                           kWait, "root-token")
                  .ok());
  // ada's job, requeued, waits behind bob's next, of a higher priority.
  ASSERT_TRUE(WaitForState(*stub_, ada_running->id(), v1::JOB_STATE_QUEUED,
                           kWait, "root-token")
                  .ok());
  auto bob_next = Submit(*stub_, SpecYaml({.priority = 60}), "bob-token");
  ASSERT_TRUE(bob_next.ok()) << bob_next.status();
  auto behind = WaitForWaitReason(*stub_, ada_running->id(), "behind", kWait,
                                  "root-token");
  ASSERT_TRUE(behind.ok()) << behind.status();
  ASSERT_TRUE(absl::StrContains(behind->wait_reason(), bob_next->id()))
      << "the admin reads whose job: " << behind->wait_reason();
  behind = GetJob(*stub_, ada_running->id(), "ada-token");
  ASSERT_TRUE(behind.ok()) << behind.status();

  const std::string bob_id = bob_urgent->id(), ada_id = ada_running->id();
  // ada's view.
  EXPECT_EQ(behind->wait_reason().find(bob_next->id()), std::string::npos)
      << behind->wait_reason();
  EXPECT_TRUE(
      absl::StrContains(behind->wait_reason(), "behind another user's job"))
      << behind->wait_reason();
  v1::ListJobsResponse listed;
  auto context = CallContext("ada-token");
  ASSERT_TRUE(stub_->ListJobs(context.get(), {}, &listed).ok());
  for (const v1::Job& job : listed.jobs()) {
    EXPECT_EQ(job.wait_reason().find(bob_next->id()), std::string::npos);
  }
  const std::string ada_events = EventText(ada_id, "ada-token");
  EXPECT_TRUE(absl::StrContains(ada_events,
                                "preempted: another user's job (priority 200)"))
      << ada_events;
  EXPECT_EQ(ada_events.find(bob_id), std::string::npos) << ada_events;
  EXPECT_EQ(ada_events.find("bob"), std::string::npos) << ada_events;
  // bob's view: his job preempts "another user's job".
  const std::string bob_events = EventText(bob_id, "bob-token");
  EXPECT_TRUE(absl::StrContains(bob_events, "preempting another user's job"))
      << bob_events;
  EXPECT_EQ(bob_events.find(ada_id), std::string::npos) << bob_events;
  EXPECT_EQ(bob_events.find("ada"), std::string::npos) << bob_events;
  auto bob_waiting = GetJob(*stub_, bob_id, "bob-token");
  ASSERT_TRUE(bob_waiting.ok());
  EXPECT_EQ(bob_waiting->wait_reason().find(ada_id), std::string::npos)
      << bob_waiting->wait_reason();
  // The admin's view names both.
  EXPECT_TRUE(absl::StrContains(EventText(ada_id, "root-token"), bob_id));
  EXPECT_TRUE(absl::StrContains(EventText(bob_id, "root-token"), ada_id));
}

// The series name users and jobs, and /sd/workers every node's address: a
// scraper's token or an admin's reads them, nobody else. A scraper's token
// is good for nothing else.
TEST_F(AuthTest, MetricsAreForScrapersAndAdmins) {
  auto node = AttachWorker("node-a", 1, "node-a-token");
  ASSERT_TRUE(Submit(*stub_, SpecYaml({}), "ada-token").ok());
  const int port = server_->metrics_port();
  for (const char* path : {"/metrics", "/sd/workers"}) {
    for (const char* token : {"", "ada-token", "node-a-token", "wrong"}) {
      const std::string refused = HttpGet(port, path, token);
      EXPECT_TRUE(absl::StrContains(refused, "401 Unauthorized"))
          << path << " with '" << token << "':\n"
          << refused;
      EXPECT_FALSE(absl::StrContains(refused, "ada")) << path;
    }
    for (const char* token : {"scrape-token", "root-token"}) {
      EXPECT_TRUE(absl::StrContains(HttpGet(port, path, token), "200 OK"))
          << path << " with " << token;
    }
  }
  EXPECT_TRUE(absl::StrContains(HttpGet(port, "/metrics", "scrape-token"),
                                "plateau_grpc_requests_total"));
  // Not a user: no API, no web page.
  EXPECT_EQ(GetJob(*stub_, "j-00000001", "scrape-token").status().code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_FALSE(
      absl::StrContains(HttpGet(port, "/jobs", "scrape-token"), "200 OK"));
}

TEST_F(AuthTest, QuotaHoldsAUsersJobsBack) {
  SimulatedWorkerOptions options;
  options.name = "node-a";
  options.devices = 4;
  options.token = "node-a-token";
  auto worker = SimulatedWorker::Attach(channel_, options).value();
  auto first = Submit(*stub_, SpecYaml({}), "ada-token");
  auto second = Submit(*stub_, SpecYaml({}), "ada-token");
  auto other = Submit(*stub_, SpecYaml({}), "bob-token");
  ASSERT_TRUE(worker->WaitForStart(first->id(), kWait).ok());
  ASSERT_TRUE(worker->WaitForStart(other->id(), kWait).ok());
  auto held =
      WaitForWaitReason(*stub_, second->id(), "quota", kWait, "ada-token");
  ASSERT_TRUE(held.ok()) << held.status();
  EXPECT_EQ(held->state(), v1::JOB_STATE_QUEUED);
}

TEST_F(AuthTest, NodeTokensAreGoodForTheirOwnNodeOnly) {
  SimulatedWorkerOptions options;
  options.name = "node-a";
  options.token = "node-b-token";
  EXPECT_EQ(SimulatedWorker::Attach(channel_, options).status().code(),
            absl::StatusCode::kPermissionDenied);
  options.token = "node-a-token";
  EXPECT_TRUE(SimulatedWorker::Attach(channel_, options).ok());
}

TEST_F(AuthTest, NodesMayNotCallTheCoordinatorApi) {
  auto job = Submit(*stub_, SpecYaml({}), "ada-token");
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(Submit(*stub_, SpecYaml({}), "node-a-token").status().code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(GetJob(*stub_, job->id(), "node-a-token").status().code(),
            absl::StatusCode::kPermissionDenied);
  v1::ListNodesResponse nodes;
  auto context = CallContext("node-a-token");
  EXPECT_EQ(stub_->ListNodes(context.get(), {}, &nodes).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  v1::ListJobsResponse jobs;
  context = CallContext("node-a-token");
  EXPECT_EQ(stub_->ListJobs(context.get(), {}, &jobs).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  v1::StreamLogsRequest logs;
  logs.set_job_id(job->id());
  context = CallContext("node-a-token");
  auto reader = stub_->StreamLogs(context.get(), logs);
  v1::LogEntry entry;
  while (reader->Read(&entry)) {
  }
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::PERMISSION_DENIED);
}

TEST_F(AuthTest, NodesSpeakOnlyForTheAttemptsTheyRun) {
  SimulatedWorkerOptions options;
  options.name = "node-a";
  options.token = "node-a-token";
  options.devices = 1;
  auto a = SimulatedWorker::Attach(channel_, options).value();
  options.name = "node-b";
  options.token = "node-b-token";
  auto b = SimulatedWorker::Attach(channel_, options).value();
  auto job = Submit(*stub_, SpecYaml({}), "ada-token");
  ASSERT_TRUE(job.ok()) << job.status();
  auto start_a = a->WaitForStart(job->id(), absl::Seconds(2));
  auto start_b = b->WaitForStart(job->id(), absl::Seconds(2));
  ASSERT_NE(start_a.ok(), start_b.ok());
  SimulatedWorker& runner = start_a.ok() ? *a : *b;
  SimulatedWorker& other = start_a.ok() ? *b : *a;
  const std::string other_token =
      start_a.ok() ? "node-b-token" : "node-a-token";
  const std::string runner_token =
      start_a.ok() ? "node-a-token" : "node-b-token";
  const v1::StartAttempt start = start_a.ok() ? *start_a : *start_b;

  // The other node claims progress, a log line and success: all ignored.
  v1::JobProgress progress;
  progress.set_step(9);
  other.ReportProgress(start.attempt(), progress);
  other.SendLogLine(start.attempt(), "forged");
  other.ReportPhase(start.attempt(), v1::ATTEMPT_PHASE_SUCCEEDED);
  // ...and may not touch the attempt's rendezvous keys.
  auto rendezvous = v1::Rendezvous::NewStub(channel_);
  v1::RendezvousSetRequest set;
  set.set_scope(start.rendezvous_key());
  set.set_key("rank0");
  set.set_value("addr");
  v1::RendezvousSetResponse set_response;
  auto context = CallContext(other_token);
  EXPECT_EQ(rendezvous->Set(context.get(), set, &set_response).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  context = CallContext(runner_token);
  EXPECT_TRUE(rendezvous->Set(context.get(), set, &set_response).ok());

  // The runner's own reports count; the other's change nothing, whichever
  // stream is handled first.
  runner.ReportPhase(start.attempt(), v1::ATTEMPT_PHASE_RUNNING);
  auto running = WaitForState(*stub_, job->id(), v1::JOB_STATE_RUNNING, kWait,
                              "ada-token");
  ASSERT_TRUE(running.ok()) << running.status();
  runner.ReportPhase(start.attempt(), v1::ATTEMPT_PHASE_SUCCEEDED);
  auto done = WaitForState(*stub_, job->id(), v1::JOB_STATE_SUCCEEDED, kWait,
                           "ada-token");
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_EQ(done->progress().step(), 0);
  EXPECT_EQ(done->log_lines(), 0);
}

// What one user keeps is bounded: jobs not ended by
// --max_active_jobs_per_user, ended ones by --keep_ended_jobs, which the
// scheduling passes prune, record and log.
TEST(JobLimitsTest, ActiveJobsAreCappedAndEndedOnesPruned) {
  DaemonConfig config =
      LocalDaemonConfig(MakeTestDirectory("plateaud") + "/data");
  config.scheduler_tick = absl::Milliseconds(50);
  config.max_active_jobs_per_user = 2;
  config.keep_ended_jobs_per_user = 1;
  auto server = DaemonServer::Start(config);
  ASSERT_TRUE(server.ok()) << server.status();
  auto stub = v1::Coordinator::NewStub(LocalChannel((*server)->port()));
  std::vector<std::string> ids;
  for (int i = 0; i < 2; ++i) {
    auto job = Submit(*stub, SpecYaml({.name = absl::StrCat("kept-", i)}));
    ASSERT_TRUE(job.ok()) << job.status();
    ids.push_back(job->id());
  }
  const auto refused = Submit(*stub, SpecYaml({.name = "third"}));
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(refused.status().message().find("--max_active_jobs_per_user"),
            std::string::npos)
      << refused.status();
  for (const std::string& id : ids) {
    v1::CancelJobRequest request;
    request.set_job_id(id);
    v1::Job cancelled;
    auto context = CallContext("");
    ASSERT_TRUE(stub->CancelJob(context.get(), request, &cancelled).ok());
  }
  // The older ended job goes within a few passes; the newer one stays.
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (GetJob(*stub, ids[0]).ok() && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_EQ(GetJob(*stub, ids[0]).status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(GetJob(*stub, ids[1]).ok());
  EXPECT_TRUE(Submit(*stub, SpecYaml({.name = "after"})).ok());
  (*server)->Shutdown();
}

TEST(TokensFileTest, NodesNeedNamesAndNoUserIsCalledNode) {
  const std::string directory = MakeTestDirectory("tokens");
  const std::string hash = daemon::TokenHash("t");
  const std::string nameless = directory + "/nameless.yaml";
  WriteTestFile(nameless,
                absl::StrCat("nodes:\n  - {token_sha256: ", hash, "}\n"));
  auto loaded = daemon::Authenticator::FromFile(nameless);
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(loaded.status().message().find("nodes[0].name"), std::string::npos)
      << loaded.status();
  const std::string reserved = directory + "/reserved.yaml";
  WriteTestFile(reserved, absl::StrCat("users:\n  - {name: node, role: user, "
                                       "token_sha256: ",
                                       hash, "}\n"));
  loaded = daemon::Authenticator::FromFile(reserved);
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(loaded.status().message().find("users[0].name"), std::string::npos)
      << loaded.status();
}

TEST(TokensFileTest, SharesArePositive) {
  const std::string directory = MakeTestDirectory("tokens");
  const std::string path = directory + "/shares.yaml";
  const auto user = [](const std::string& name, const std::string& share) {
    return absl::StrCat("  - {name: ", name,
                        ", role: user, token_sha256: ", daemon::TokenHash(name),
                        share, "}\n");
  };
  WriteTestFile(path, absl::StrCat("users:\n", user("ada", ", share: 2.5"),
                                   user("bob", "")));
  auto loaded = daemon::Authenticator::FromFile(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ((*loaded)->shares(), (std::map<std::string, double>{{"ada", 2.5}}));
  WriteTestFile(path, absl::StrCat("users:\n", user("ada", ", share: 0")));
  loaded = daemon::Authenticator::FromFile(path);
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(
      loaded.status().message().find("users[0].share: must be in (0, 1000000]"),
      std::string::npos)
      << loaded.status();
}

TEST(TokensFileTest, ReadRootsAreAbsoluteDirectories) {
  const std::string path = MakeTestDirectory("tokens") + "/roots.yaml";
  const auto user = [](const std::string& roots) {
    return absl::StrCat("users:\n  - {name: ada, role: user, token_sha256: ",
                        daemon::TokenHash("ada"), ", read_roots: ", roots,
                        "}\n");
  };
  WriteTestFile(path, user("[/datasets/ada, /scratch/ada]"));
  auto loaded = daemon::Authenticator::FromFile(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ((*loaded)->read_roots(),
            (std::map<std::string, std::vector<std::string>>{
                {"ada", {"/datasets/ada", "/scratch/ada"}}}));
  for (const char* bad : {"[data]", "[/]", "[/a/../etc]", "/datasets"}) {
    WriteTestFile(path, user(bad));
    loaded = daemon::Authenticator::FromFile(path);
    EXPECT_EQ(loaded.status().code(), absl::StatusCode::kInvalidArgument)
        << bad;
    EXPECT_NE(loaded.status().message().find("users[0].read_roots"),
              std::string::npos)
        << loaded.status();
  }
  DaemonConfig config =
      LocalDaemonConfig(MakeTestDirectory("plateaud") + "/data");
  config.read_roots = {"datasets"};
  const auto started = DaemonServer::Start(config);
  EXPECT_EQ(started.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(started.status().message().find("--read_roots: 'datasets'"),
            std::string::npos)
      << started.status();
}

TEST(DaemonConfigTest, ANegativeFairShareHalfLifeIsRefused) {
  DaemonConfig config =
      LocalDaemonConfig(MakeTestDirectory("plateaud") + "/data");
  config.fair_share_half_life = -absl::Hours(1);
  const absl::Status refused = DaemonServer::Start(config).status();
  EXPECT_TRUE(absl::IsInvalidArgument(refused)) << refused;
  EXPECT_NE(refused.message().find("--fair_share_half_life -1h is negative"),
            std::string::npos)
      << refused;
}

TEST(DaemonConfigTest, PreemptionSettingsAreChecked) {
  DaemonConfig config =
      LocalDaemonConfig(MakeTestDirectory("plateaud") + "/data");
  config.preemption_priority_gap = -1;
  absl::Status refused = DaemonServer::Start(config).status();
  EXPECT_TRUE(absl::IsInvalidArgument(refused)) << refused;
  EXPECT_NE(refused.message().find("--preemption_priority_gap -1 is negative"),
            std::string::npos)
      << refused;
  config.preemption_priority_gap = 100;
  config.max_preemptions_per_hour = 0;
  refused = DaemonServer::Start(config).status();
  EXPECT_TRUE(absl::IsInvalidArgument(refused)) << refused;
  EXPECT_NE(refused.message().find("--max_preemptions_per_hour 0 must be at "
                                   "least 1"),
            std::string::npos)
      << refused;
}

}  // namespace
}  // namespace plateau::testing

namespace plateau::testing {
namespace {

// plateaud with a server certificate: TLS clients that trust it get in,
// plaintext ones do not.
TEST(TlsTest, ServesOverTlsOnly) {
  const std::string directory = MakeTestDirectory("tls");
  const std::string key = directory + "/server.key";
  const std::string cert = directory + "/server.crt";
  const std::string command = absl::StrCat(
      "openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=localhost "
      "-addext subjectAltName=DNS:localhost,IP:127.0.0.1 -keyout ",
      key, " -out ", cert, " 2>/dev/null");
  ASSERT_EQ(std::system(command.c_str()), 0);
  DaemonConfig config = LocalDaemonConfig(directory + "/data");
  config.tls_cert_file = cert;
  config.tls_key_file = key;
  auto server = daemon::DaemonServer::Start(config);
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string address = absl::StrCat("127.0.0.1:", (*server)->port());

  grpc::SslCredentialsOptions options;
  options.pem_root_certs = ReadTestFile(cert);
  auto secure = v1::Coordinator::NewStub(
      grpc::CreateChannel(address, grpc::SslCredentials(options)));
  auto job = Submit(*secure, SpecYaml({}));
  ASSERT_TRUE(job.ok()) << job.status();

  auto plaintext = v1::Coordinator::NewStub(
      grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  v1::GetJobRequest request;
  request.set_job_id(job->id());
  v1::Job response;
  auto context = CallContext("", absl::Seconds(2));
  EXPECT_FALSE(plaintext->GetJob(context.get(), request, &response).ok());

  // A missing key file is a clear error, not a crash.
  config.tls_key_file = directory + "/missing.key";
  config.data_dir = directory + "/data2";
  auto broken = daemon::DaemonServer::Start(config);
  ASSERT_FALSE(broken.ok());
  EXPECT_NE(broken.status().message().find("missing.key"), std::string::npos)
      << broken.status();
}

// In `d`: a server certificate for localhost, a client CA, a node
// certificate it signed (CN=node-a) and a self-signed "rogue" one.
void MakeCertificates(const std::string& d) {
  const std::string openssl = "openssl ";
  const std::string quiet = " 2>/dev/null";
  for (const std::string& step :
       {std::string("req -x509 -newkey rsa:2048 -nodes -days 1 -subj "
                    "/CN=localhost -addext "
                    "subjectAltName=DNS:localhost,IP:127.0.0.1 -keyout ") +
            d + "/server.key -out " + d + "/server.crt",
        "req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=plateau-ca "
        "-keyout " +
            d + "/ca.key -out " + d + "/ca.crt",
        "req -newkey rsa:2048 -nodes -subj /CN=node-a -keyout " + d +
            "/node.key -out " + d + "/node.csr",
        "x509 -req -days 1 -in " + d + "/node.csr -CA " + d +
            "/ca.crt -CAkey " + d + "/ca.key -CAcreateserial -out " + d +
            "/node.crt",
        "req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=rogue "
        "-keyout " +
            d + "/rogue.key -out " + d + "/rogue.crt"}) {
    ASSERT_EQ(std::system((openssl + step + quiet).c_str()), 0) << step;
  }
}

// plateaud over TLS with client certificates (MakeCertificates' files in
// d), and auth from tokens_file when given.
DaemonConfig MutualTlsConfig(const std::string& d,
                             const std::string& tokens_file = "") {
  DaemonConfig config = LocalDaemonConfig(d + "/data");
  config.tls_cert_file = d + "/server.crt";
  config.tls_key_file = d + "/server.key";
  config.tls_client_ca_file = d + "/ca.crt";
  config.tokens_file = tokens_file;
  return config;
}

// A channel to `address` trusting the server certificate in `d`, presenting
// `d`/`client`.crt when `client` is set.
std::shared_ptr<grpc::Channel> TlsChannel(const std::string& address,
                                          const std::string& d,
                                          const std::string& client) {
  grpc::SslCredentialsOptions options;
  options.pem_root_certs = ReadTestFile(d + "/server.crt");
  if (!client.empty()) {
    options.pem_private_key = ReadTestFile(d + "/" + client + ".key");
    options.pem_cert_chain = ReadTestFile(d + "/" + client + ".crt");
  }
  return grpc::CreateChannel(address, grpc::SslCredentials(options));
}

// With --tls_client_ca, a client certificate is optional but, when
// presented, must be signed by that CA.
TEST(TlsTest, ClientCertificatesMustChainToTheClientCa) {
  const std::string d = MakeTestDirectory("mtls");
  ASSERT_NO_FATAL_FAILURE(MakeCertificates(d));
  auto server = daemon::DaemonServer::Start(MutualTlsConfig(d));
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string address = absl::StrCat("127.0.0.1:", (*server)->port());
  auto call = [&](const std::string& client) {
    auto stub = v1::Coordinator::NewStub(TlsChannel(address, d, client));
    v1::ListNodesResponse response;
    auto context = CallContext("", absl::Seconds(3));
    return stub->ListNodes(context.get(), {}, &response).ok();
  };
  EXPECT_TRUE(call(""));        // users need no certificate
  EXPECT_TRUE(call("node"));    // signed by the client CA
  EXPECT_FALSE(call("rogue"));  // presented, but not signed by it
}

// With auth on, a verified client certificate and no token make the caller
// the node the certificate names: it attaches as that node only, and may
// not call the Coordinator API.
TEST(TlsTest, AClientCertificateNamesTheNodeWhenNoTokenIsSent) {
  const std::string d = MakeTestDirectory("mtls-auth");
  ASSERT_NO_FATAL_FAILURE(MakeCertificates(d));
  WriteTestFile(d + "/tokens.yaml",
                absl::StrCat("users:\n  - {name: ada, role: user, "
                             "token_sha256: ",
                             daemon::TokenHash("ada-token"),
                             "}\nnodes:\n  - {name: node-a}\n"));
  auto server =
      daemon::DaemonServer::Start(MutualTlsConfig(d, d + "/tokens.yaml"));
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string address = absl::StrCat("127.0.0.1:", (*server)->port());

  SimulatedWorkerOptions options;
  options.name = "node-a";
  auto worker =
      SimulatedWorker::Attach(TlsChannel(address, d, "node"), options);
  ASSERT_TRUE(worker.ok()) << worker.status();
  options.name = "node-b";
  EXPECT_EQ(SimulatedWorker::Attach(TlsChannel(address, d, "node"), options)
                .status()
                .code(),
            absl::StatusCode::kPermissionDenied);
  // No certificate and no token: nobody.
  EXPECT_EQ(SimulatedWorker::Attach(TlsChannel(address, d, ""), options)
                .status()
                .code(),
            absl::StatusCode::kUnauthenticated);

  auto as_node = v1::Coordinator::NewStub(TlsChannel(address, d, "node"));
  v1::ListNodesResponse nodes;
  auto context = CallContext("", absl::Seconds(3));
  EXPECT_EQ(as_node->ListNodes(context.get(), {}, &nodes).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  // A token wins over the certificate.
  context = CallContext("ada-token", absl::Seconds(3));
  ASSERT_TRUE(as_node->ListNodes(context.get(), {}, &nodes).ok());
  ASSERT_EQ(nodes.nodes_size(), 1);
  EXPECT_EQ(nodes.nodes(0).name(), "node-a");
}

TEST(TlsTest, ACertificateOfANodeTheTokensFileDoesNotListIsRefused) {
  const std::string d = MakeTestDirectory("mtls-unlisted");
  ASSERT_NO_FATAL_FAILURE(MakeCertificates(d));
  WriteTestFile(d + "/tokens.yaml", "nodes:\n  - {name: node-b}\n");
  auto server =
      daemon::DaemonServer::Start(MutualTlsConfig(d, d + "/tokens.yaml"));
  ASSERT_TRUE(server.ok()) << server.status();
  SimulatedWorkerOptions options;
  options.name = "node-a";
  const absl::Status refused =
      SimulatedWorker::Attach(
          TlsChannel(absl::StrCat("127.0.0.1:", (*server)->port()), d, "node"),
          options)
          .status();
  EXPECT_EQ(refused.code(), absl::StatusCode::kUnauthenticated) << refused;
  EXPECT_TRUE(absl::StrContains(
      refused.message(),
      "the client certificate names node 'node-a', which the tokens file "
      "does not list under nodes"))
      << refused;
}

}  // namespace
}  // namespace plateau::testing
