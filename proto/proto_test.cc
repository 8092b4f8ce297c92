#include <cctype>
#include <string>
#include <vector>

#include "google/protobuf/descriptor.h"
#include "google/protobuf/util/json_util.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "proto/coordinator.pb.h"
#include "proto/job.pb.h"
#include "proto/memory.pb.h"
#include "proto/node.pb.h"
#include "proto/rendezvous.pb.h"
#include "proto/worker.pb.h"

namespace plateau::v1 {
namespace {

using google::protobuf::util::MessageDifferencer;

Job ExampleJob() {
  Job job;
  job.set_id("j-000042");
  job.set_owner("ada");
  job.set_state(JOB_STATE_RUNNING);
  job.set_attempt(2);
  job.set_restarts(1);
  job.mutable_submit_time()->set_seconds(1796000000);
  job.set_last_error("rank 1 exited with status 137");
  JobSpec& spec = *job.mutable_spec();
  spec.set_name("tiny-moe");
  spec.set_priority(50);
  spec.mutable_resources()->set_nodes(1);
  spec.mutable_resources()->set_devices_per_node(2);
  ModelSpec& model = *spec.mutable_model();
  model.set_layers(4);
  model.set_d_model(256);
  model.set_heads(8);
  model.set_experts(8);
  model.set_top_k(2);
  model.set_ffn_hidden(512);
  model.set_vocab(8192);
  model.set_seq_len(256);
  spec.mutable_parallel()->set_ep(2);
  spec.mutable_parallel()->set_pp(1);
  spec.mutable_parallel()->set_dp(1);
  spec.mutable_schedules()->set_dispatch_chunk_tokens(1024);
  spec.mutable_schedules()->set_ring_dtp(true);
  spec.mutable_schedules()->set_sco(true);
  spec.mutable_schedules()->set_optimizer_offload(OPTIMIZER_OFFLOAD_STREAM);
  OptimizerSpec& optimizer = *spec.mutable_optimizer();
  optimizer.set_kind(OPTIMIZER_KIND_SKEWADAM);
  optimizer.set_lr(3.0e-4);
  optimizer.set_weight_decay(0.1);
  optimizer.add_betas(0.9);
  optimizer.add_betas(0.95);
  optimizer.set_warmup_steps(20);
  optimizer.set_grad_clip(1.0);
  spec.mutable_data()->set_path("data/brown");
  spec.mutable_data()->set_batch_tokens(8192);
  TrainSpec& train = *spec.mutable_train();
  train.set_steps(200);
  train.set_checkpoint_every(50);
  train.set_eval_every(50);
  train.set_seed(1);
  train.set_max_restarts(3);
  train.mutable_time_limit()->set_seconds(30 * 60);
  job.mutable_progress()->set_step(120);
  job.mutable_progress()->set_loss(4.25);
  NodeAllocation& node = *job.mutable_allocation()->add_nodes();
  node.set_node("node-a");
  node.add_device_indices(0);
  node.add_device_indices(1);
  job.mutable_allocation()->set_world_size(2);
  return job;
}

TEST(ProtoTest, JobSurvivesBinaryRoundTrip) {
  const Job job = ExampleJob();
  std::string bytes;
  ASSERT_TRUE(job.SerializeToString(&bytes));
  Job parsed;
  ASSERT_TRUE(parsed.ParseFromString(bytes));
  EXPECT_TRUE(MessageDifferencer::Equals(job, parsed));
  EXPECT_EQ(parsed.spec().optimizer().betas(1), 0.95);
}

// `plateau ... -o json` prints these messages as JSON; it must read back.
TEST(ProtoTest, JobSurvivesJsonRoundTrip) {
  const Job job = ExampleJob();
  std::string json;
  ASSERT_TRUE(google::protobuf::util::MessageToJsonString(job, &json).ok());
  EXPECT_NE(json.find("\"JOB_STATE_RUNNING\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"1800s\""), std::string::npos) << json;
  Job parsed;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(json, &parsed).ok());
  EXPECT_TRUE(MessageDifferencer::Equals(job, parsed));
}

TEST(ProtoTest, AttachMessagesCarryOneBodyEach) {
  WorkerMessage message;
  message.mutable_hello()->set_node_name("node-a");
  Device& device = *message.mutable_hello()->add_devices();
  device.set_kind(DEVICE_KIND_CPU);
  device.set_memory_bytes(int64_t{2} << 30);
  EXPECT_EQ(message.body_case(), WorkerMessage::kHello);
  RankMemory& rank = *message.mutable_memory()->add_ranks();
  rank.set_rank(1);
  MemoryUsage& usage = *rank.add_usage();
  usage.set_pool(MEMORY_POOL_DEVICE);
  usage.set_component(MEMORY_COMPONENT_DISPATCH);
  usage.set_peak_bytes(12345);
  EXPECT_EQ(message.body_case(), WorkerMessage::kMemory);
  EXPECT_FALSE(message.has_hello());

  std::string bytes;
  ASSERT_TRUE(message.SerializeToString(&bytes));
  WorkerMessage parsed;
  ASSERT_TRUE(parsed.ParseFromString(bytes));
  EXPECT_EQ(parsed.memory().ranks(0).usage(0).peak_bytes(), 12345);
}

// An old reader keeps fields it does not know, so a newer worker's reports
// pass through an older daemon's store unharmed.
TEST(ProtoTest, UnknownFieldsArePreserved) {
  JobProgress progress;
  progress.set_step(7);
  std::string bytes;
  ASSERT_TRUE(progress.SerializeToString(&bytes));
  // Field 1000, varint 5: a field this version does not define.
  bytes.append("\xc0\x3e\x05", 3);
  JobProgress parsed;
  ASSERT_TRUE(parsed.ParseFromString(bytes));
  std::string reserialized;
  ASSERT_TRUE(parsed.SerializeToString(&reserialized));
  EXPECT_EQ(reserialized, bytes);
}

// Growth rule: every enum's zero value is <ENUM>_UNSPECIFIED, so an unset
// field never reads as a real value.
void CollectEnums(const google::protobuf::Descriptor& message,
                  std::vector<const google::protobuf::EnumDescriptor*>* enums) {
  for (int i = 0; i < message.enum_type_count(); ++i) {
    enums->push_back(message.enum_type(i));
  }
  for (int i = 0; i < message.nested_type_count(); ++i) {
    CollectEnums(*message.nested_type(i), enums);
  }
}

std::string UpperSnakeCase(const std::string& camel) {
  std::string out;
  for (char c : camel) {
    if (std::isupper(static_cast<unsigned char>(c)) && !out.empty()) {
      out += '_';
    }
    out += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  }
  return out;
}

TEST(ProtoTest, EveryEnumStartsWithUnspecified) {
  const google::protobuf::FileDescriptor* files[] = {
      Job::descriptor()->file(),
      Node::descriptor()->file(),
      MemoryUsage::descriptor()->file(),
      SubmitJobRequest::descriptor()->file(),
      WorkerMessage::descriptor()->file(),
      RendezvousSetRequest::descriptor()->file(),
  };
  std::vector<const google::protobuf::EnumDescriptor*> enums;
  for (const google::protobuf::FileDescriptor* file : files) {
    ASSERT_EQ(file->package(), "plateau.v1") << file->name();
    for (int i = 0; i < file->enum_type_count(); ++i) {
      enums.push_back(file->enum_type(i));
    }
    for (int i = 0; i < file->message_type_count(); ++i) {
      CollectEnums(*file->message_type(i), &enums);
    }
  }
  ASSERT_GE(enums.size(), 9u);
  for (const google::protobuf::EnumDescriptor* type : enums) {
    const google::protobuf::EnumValueDescriptor* zero =
        type->FindValueByNumber(0);
    ASSERT_NE(zero, nullptr) << type->full_name() << " has no zero value";
    EXPECT_EQ(zero->name(), UpperSnakeCase(type->name()) + "_UNSPECIFIED")
        << type->full_name();
  }
}

}  // namespace
}  // namespace plateau::v1
