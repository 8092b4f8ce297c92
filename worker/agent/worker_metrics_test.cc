#include "worker/agent/worker_metrics.h"

#include <sstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "prometheus/text_serializer.h"

namespace plateau::worker {
namespace {

using testing::HasSubstr;
using testing::Not;

std::string Render(const WorkerMetrics& metrics) {
  std::ostringstream out;
  prometheus::TextSerializer().Serialize(out, metrics.registry()->Collect());
  return out.str();
}

v1::RankStatus Rank(int rank, int64_t step, int64_t tokens,
                    std::vector<int64_t> expert_tokens) {
  v1::RankStatus status;
  status.set_rank(rank);
  status.mutable_progress()->set_step(step);
  status.mutable_progress()->set_loss(2.5);
  status.mutable_progress()->set_tokens_total(tokens);
  status.mutable_progress()->set_tokens_per_second(1000);
  v1::RankMemory& memory = *status.mutable_memory();
  memory.set_rank(rank);
  memory.set_device_capacity_bytes(1 << 30);
  memory.set_device_peak_bytes(1000 + rank);
  memory.set_device_current_bytes(900);
  status.mutable_progress()->set_validation_loss(3.25);
  v1::MemoryUsage& usage = *memory.add_usage();
  usage.set_pool(v1::MEMORY_POOL_DEVICE);
  usage.set_component(v1::MEMORY_COMPONENT_VOCAB_PROJECTION);
  usage.set_current_bytes(10);
  usage.set_peak_bytes(20 + rank);
  v1::ExpertLoad& layer = *status.add_expert_tokens();
  layer.set_layer(0);
  for (const int64_t count : expert_tokens) layer.add_tokens(count);
  (*status.mutable_optimizer_state_bytes())["dense"] = 100;
  status.mutable_progress()->set_checkpoint_stall_seconds(0.25);
  status.mutable_progress()->set_checkpoint_write_seconds(1.5);
  status.mutable_progress()->set_checkpoint_bytes_written(4000 + rank);
  return status;
}

TEST(WorkerMetricsTest, ExportsRanksAndTheJobFromRankZero) {
  WorkerMetrics metrics;
  metrics.Update("j-1", {Rank(0, 5, 500, {30, 10}), Rank(1, 5, 500, {30, 10})});
  const std::string text = Render(metrics);
  EXPECT_THAT(text, HasSubstr("plateau_memory_peak_bytes{component=\""
                              "vocab_projection\",job=\"j-1\",pool=\"device\","
                              "rank=\"1\"} 21"));
  EXPECT_THAT(text, HasSubstr("plateau_memory_current_bytes{component=\""
                              "vocab_projection\",job=\"j-1\",pool=\"device\","
                              "rank=\"0\"} 10"));
  EXPECT_THAT(text, HasSubstr("plateau_device_memory_capacity_bytes{job=\"j-1\""
                              ",rank=\"1\"} 1073741824"));
  EXPECT_THAT(text, HasSubstr("plateau_device_memory_peak_bytes{job=\"j-1\","
                              "rank=\"1\"} 1001"));
  EXPECT_THAT(text, HasSubstr("plateau_device_memory_current_bytes{job=\"j-1\","
                              "rank=\"0\"} 900"));
  EXPECT_THAT(text,
              HasSubstr("plateau_train_validation_loss{job=\"j-1\"} 3.25"));
  EXPECT_THAT(text, HasSubstr("plateau_train_tokens_total{job=\"j-1\"} 500"));
  EXPECT_THAT(text, HasSubstr("plateau_train_step{job=\"j-1\"} 5"));
  EXPECT_THAT(text, HasSubstr("plateau_train_loss{job=\"j-1\"} 2.5"));
  EXPECT_THAT(text, HasSubstr("plateau_expert_tokens_total{expert=\"0\","
                              "job=\"j-1\",layer=\"0\"} 30"));
  // 30 of 40 copies to one of two experts: max/mean = 30/20.
  EXPECT_THAT(text, HasSubstr("plateau_expert_load_imbalance_ratio{job=\"j-1\""
                              ",layer=\"0\"} 1.5"));
  // Summed over this node's ranks.
  EXPECT_THAT(text, HasSubstr("plateau_optimizer_state_bytes{job=\"j-1\","
                              "tier=\"dense\"} 200"));
  // Each rank's shards of the latest checkpoint, and the job's stall.
  EXPECT_THAT(text, HasSubstr("plateau_checkpoint_bytes_written{job=\"j-1\","
                              "rank=\"1\"} 4001"));
  EXPECT_THAT(text,
              HasSubstr("plateau_checkpoint_stall_seconds{job=\"j-1\"} 0.25"));
  EXPECT_THAT(text,
              HasSubstr("plateau_checkpoint_write_seconds{job=\"j-1\"} 1.5"));
}

TEST(WorkerMetricsTest, OnlyRankZerosNodeExportsTheJob) {
  WorkerMetrics metrics;
  metrics.Update("j-1", {Rank(1, 5, 500, {30, 10})});
  const std::string text = Render(metrics);
  EXPECT_THAT(text, HasSubstr("rank=\"1\""));
  EXPECT_THAT(text, Not(HasSubstr("plateau_train_step{")));
  EXPECT_THAT(text, Not(HasSubstr("plateau_expert_tokens_total{")));
}

TEST(WorkerMetricsTest, ImbalanceIsOfTheLoadSinceTheLastUpdate) {
  WorkerMetrics metrics;
  metrics.Update("j-1", {Rank(0, 5, 500, {30, 10})});
  metrics.Update("j-1", {Rank(0, 6, 600, {40, 40})});  // +10, +30
  EXPECT_THAT(Render(metrics),
              HasSubstr("plateau_expert_load_imbalance_ratio{job=\"j-1\","
                        "layer=\"0\"} 1.5"));
  EXPECT_THAT(Render(metrics),
              HasSubstr("plateau_train_tokens_total{job=\"j-1\"} 600"));
}

TEST(WorkerMetricsTest, ACounterThatWouldGoDownIsReset) {
  WorkerMetrics metrics;
  metrics.Update("j-1", {Rank(0, 50, 5000, {30, 10})});
  // Resumed from an earlier checkpoint.
  metrics.Update("j-1", {Rank(0, 40, 4000, {20, 10})});
  const std::string text = Render(metrics);
  EXPECT_THAT(text, HasSubstr("plateau_train_tokens_total{job=\"j-1\"} 4000"));
  EXPECT_THAT(text, HasSubstr("plateau_expert_tokens_total{expert=\"0\","
                              "job=\"j-1\",layer=\"0\"} 20"));
}

TEST(WorkerMetricsTest, RemoveDropsEverySeriesOfTheJob) {
  WorkerMetrics metrics;
  metrics.Update("j-1", {Rank(0, 5, 500, {30, 10})});
  metrics.Update("j-2", {Rank(0, 5, 500, {30, 10})});
  metrics.Update("j-1", {Rank(0, 1, 100, {3, 1})});  // a reset counter too
  metrics.Remove("j-1");
  const std::string text = Render(metrics);
  EXPECT_THAT(text, Not(HasSubstr("job=\"j-1\"")));
  EXPECT_THAT(text, HasSubstr("plateau_train_step{job=\"j-2\"} 5"));
}

}  // namespace
}  // namespace plateau::worker
