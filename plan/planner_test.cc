#include "plan/planner.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "common/byte_size.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "plan/memory_ledger.h"
#include "plan/memory_model.h"
#include "proto/job_spec.h"

namespace plateau::plan {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr int64_t kMiB = int64_t{1} << 20;

// A model whose vocabulary projection dominates: 16k vocabulary, 2k tokens
// a rank.
v1::JobSpec Spec(const std::string& schedules, int ep = 1) {
  absl::StatusOr<v1::JobSpec> spec = ParseJobSpecYaml(absl::StrCat(
      "name: plan-test\n"
      "resources: {nodes: 1, devices_per_node: ",
      ep,
      "}\n"
      "model: {layers: 4, d_model: 128, heads: 4, experts: 8, top_k: 2, "
      "ffn_hidden: 256, vocab: 16384, seq_len: 2048}\n"
      "parallel: {ep: ",
      ep,
      ", pp: 1, dp: 1}\n"
      "schedules: ",
      schedules,
      "\n"
      "data: {path: data/none, batch_tokens: ",
      2048 * ep,
      "}\n"
      "train: {steps: 10}\n"));
  EXPECT_TRUE(spec.ok()) << spec.status();
  return *spec;
}

int64_t DevicePeak(const v1::MemoryPrediction& prediction,
                   v1::MemoryComponent component) {
  int64_t most = 0;
  for (const v1::RankPrediction& rank : prediction.ranks()) {
    for (const v1::PredictedPeak& peak : rank.peaks()) {
      if (peak.pool() == v1::MEMORY_POOL_DEVICE &&
          peak.component() == component) {
        most = std::max(most, peak.peak_bytes());
      }
    }
  }
  return most;
}

PlanOptions Memory(int64_t bytes) {
  PlanOptions options;
  options.device_memory_bytes = bytes;
  return options;
}

TEST(PlannerTest, UnscheduledSpecBindsOnTheVocabularyProjection) {
  absl::StatusOr<JobPlan> plan = PlanJob(Spec("{}"), Memory(4096 * kMiB));
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_TRUE(plan->memory.fits());
  EXPECT_EQ(plan->memory.planned().binding_component(),
            v1::MEMORY_COMPONENT_VOCAB_PROJECTION);
  EXPECT_EQ(plan->memory.planned().schedules(), "none");
  // 2048 tokens x 16384 logits of 2 bytes (bf16), held from forward to
  // backward.
  EXPECT_GE(
      DevicePeak(plan->memory.planned(), v1::MEMORY_COMPONENT_VOCAB_PROJECTION),
      2048 * 16384 * 2);
  EXPECT_EQ(plan->memory.explanation().rfind("fits: ", 0), 0u)
      << plan->memory.explanation();
  EXPECT_FALSE(plan->memory.schedules_chosen());
}

// A spec is bf16 unless it says fp32; bf16 products hold the backend's
// staging (its largest weight, the 16384 x 128 head, four times in bf16:
// 16 MiB) under `other`, fp32 ones none.
TEST(PlannerTest, ThePlanSaysItsPrecisionAndHoldsTheBf16Staging) {
  absl::StatusOr<JobPlan> bf16 = PlanJob(Spec("{}"), Memory(4096 * kMiB));
  v1::JobSpec fp32_spec = Spec("{}");
  fp32_spec.set_precision(v1::PRECISION_FP32);
  absl::StatusOr<JobPlan> fp32 = PlanJob(fp32_spec, Memory(4096 * kMiB));
  ASSERT_TRUE(bf16.ok() && fp32.ok());
  EXPECT_EQ(bf16->memory.precision(), "bf16");
  EXPECT_EQ(fp32->memory.precision(), "fp32");
  // Without optimizer offload the weights stay float32 on the device; with
  // it they are stored in bf16, and the planned weights are smaller.
  EXPECT_FALSE(bf16->memory.bf16_weight_storage());
  absl::StatusOr<JobPlan> offloaded =
      PlanJob(Spec("{optimizer_offload: stream}"), Memory(4096 * kMiB));
  ASSERT_TRUE(offloaded.ok()) << offloaded.status();
  EXPECT_TRUE(offloaded->memory.bf16_weight_storage());
  EXPECT_LT(
      DevicePeak(offloaded->memory.planned(), v1::MEMORY_COMPONENT_WEIGHTS),
      0.6 * DevicePeak(bf16->memory.planned(), v1::MEMORY_COMPONENT_WEIGHTS));
  EXPECT_FALSE(fp32->memory.bf16_weight_storage());
  EXPECT_FALSE(offloaded->memory.bf16_gradients());
  // gradient_accumulation: bf16 halves the product weights' gradients, but
  // for the float32 window of one layer's or the head's: with 16 layers
  // and a vocabulary small beside them, their bytes fall by over 40%.
  v1::JobSpec small_vocab = Spec("{optimizer_offload: stream}");
  small_vocab.mutable_model()->set_vocab(1024);
  small_vocab.mutable_model()->set_layers(16);
  v1::JobSpec bf16_gradients_spec = small_vocab;
  bf16_gradients_spec.set_gradient_accumulation(v1::GRADIENT_ACCUMULATION_BF16);
  absl::StatusOr<JobPlan> float32_gradients =
      PlanJob(small_vocab, Memory(4096 * kMiB));
  absl::StatusOr<JobPlan> bf16_gradients =
      PlanJob(bf16_gradients_spec, Memory(4096 * kMiB));
  ASSERT_TRUE(float32_gradients.ok()) << float32_gradients.status();
  ASSERT_TRUE(bf16_gradients.ok()) << bf16_gradients.status();
  EXPECT_TRUE(bf16_gradients->memory.bf16_gradients());
  // The baseline, without schedules, has no offload and so float32
  // gradients: the same as the float32 plan's, and its reach too.
  EXPECT_EQ(bf16_gradients->memory.baseline().device_peak_bytes(),
            float32_gradients->memory.baseline().device_peak_bytes());
  EXPECT_GT(bf16_gradients->memory.baseline_max_seq_len(), 0);
  EXPECT_EQ(bf16_gradients->memory.baseline_max_seq_len(),
            float32_gradients->memory.baseline_max_seq_len());
  EXPECT_LT(DevicePeak(bf16_gradients->memory.planned(),
                       v1::MEMORY_COMPONENT_GRADIENTS),
            0.6 * DevicePeak(float32_gradients->memory.planned(),
                             v1::MEMORY_COMPONENT_GRADIENTS));
  EXPECT_EQ(DevicePeak(bf16->memory.planned(), v1::MEMORY_COMPONENT_OTHER) -
                DevicePeak(fp32->memory.planned(), v1::MEMORY_COMPONENT_OTHER),
            16 * kMiB);
}

TEST(PlannerTest, TooSmallDevicesAreExplainedWithTheBindingComponent) {
  absl::StatusOr<JobPlan> plan = PlanJob(Spec("{}"), Memory(48 * kMiB));
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_FALSE(plan->memory.fits());
  const std::string& explanation = plan->memory.explanation();
  EXPECT_NE(explanation.find("vocab_projection"), std::string::npos)
      << explanation;
  EXPECT_NE(explanation.find("schedules.ring_dtp: true"), std::string::npos)
      << explanation;
  EXPECT_NE(explanation.find("schedules: auto"), std::string::npos)
      << explanation;
}

// A spec that fits with a precision lever it leaves unused is told which,
// and the peak it would then have: bf16 gradients (with the optimizer
// offloaded, pinned beside auto) for a bf16 spec, bf16 for an fp32 one.
TEST(PlannerTest, ThePrecisionLeverThatMakesAJobFitIsNamed) {
  const auto lowest_peak = [](const v1::JobSpec& spec) {
    return PlanJob(spec, Memory(kMiB))->memory.planned().device_peak_bytes();
  };
  PlanOptions options = Memory(0);
  options.margin = 0.0;
  options.search_reach = false;

  const v1::JobSpec automatic = Spec("auto");
  v1::JobSpec gradients = Spec("{auto: true, optimizer_offload: stream}");
  gradients.set_gradient_accumulation(v1::GRADIENT_ACCUMULATION_BF16);
  const int64_t with_gradients = lowest_peak(gradients);
  ASSERT_LT(with_gradients, lowest_peak(automatic));
  options.device_memory_bytes = (with_gradients + lowest_peak(automatic)) / 2;
  absl::StatusOr<JobPlan> plan = PlanJob(automatic, options);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_FALSE(plan->memory.fits());
  const std::string& explanation = plan->memory.explanation();
  EXPECT_NE(explanation.find(
                "; or keep the product weights' gradients in bf16 "
                "(gradient_accumulation: bf16, with "
                "schedules.optimizer_offload: stream): the planned device "
                "peak is then "),
            std::string::npos)
      << explanation;
  EXPECT_TRUE(PlanJob(gradients, options)->memory.fits());

  v1::JobSpec fp32 = Spec("{}");
  fp32.set_precision(v1::PRECISION_FP32);
  v1::JobSpec bf16 = fp32;
  bf16.set_precision(v1::PRECISION_BF16);
  options.device_memory_bytes = (lowest_peak(bf16) + lowest_peak(fp32)) / 2;
  plan = PlanJob(fp32, options);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_FALSE(plan->memory.fits());
  EXPECT_NE(plan->memory.explanation().find(absl::StrCat(
                "; or compute in bf16 (precision: bf16): the planned device "
                "peak is then ",
                FormatBytes(lowest_peak(bf16)))),
            std::string::npos)
      << plan->memory.explanation();

  // Where no lever makes room, nothing is promised.
  options.device_memory_bytes = kMiB;
  plan = PlanJob(fp32, options);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->memory.explanation().find("; or compute in bf16"),
            std::string::npos)
      << plan->memory.explanation();
}

TEST(PlannerTest, RingDtpBoundsTheVocabularyProjection) {
  absl::StatusOr<JobPlan> plain = PlanJob(Spec("{}"), Memory(4096 * kMiB));
  absl::StatusOr<JobPlan> ring =
      PlanJob(Spec("{ring_dtp: true}"), Memory(4096 * kMiB));
  ASSERT_TRUE(plain.ok() && ring.ok());
  EXPECT_LT(DevicePeak(ring->memory.planned(),
                       v1::MEMORY_COMPONENT_VOCAB_PROJECTION) *
                8,
            DevicePeak(plain->memory.planned(),
                       v1::MEMORY_COMPONENT_VOCAB_PROJECTION));
  // The baseline is the same step without any schedule.
  EXPECT_EQ(ring->memory.baseline().device_peak_bytes(),
            plain->memory.planned().device_peak_bytes());
  EXPECT_GT(ring->memory.max_seq_len(), ring->memory.baseline_max_seq_len());
}

TEST(PlannerTest, AutoChoosesTheCheapestSchedulesThatFit) {
  const int64_t unscheduled = PlanJob(Spec("{}"), Memory(4096 * kMiB))
                                  ->memory.planned()
                                  .device_peak_bytes();
  // Room for everything but most of the unscheduled logits.
  // The optimizer pinned on the device: Ring-DTP is what makes room.
  absl::StatusOr<JobPlan> plan =
      PlanJob(Spec("{auto: true, optimizer_offload: none}"),
              Memory(unscheduled * 4 / 5));
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_TRUE(plan->memory.fits()) << plan->memory.explanation();
  EXPECT_TRUE(plan->memory.schedules_chosen());
  const v1::ScheduleSpec& chosen = plan->spec.schedules();
  EXPECT_TRUE(chosen.auto_());
  ASSERT_TRUE(chosen.has_ring_dtp() && chosen.has_sco() &&
              chosen.has_dispatch_chunk_tokens());
  EXPECT_TRUE(chosen.ring_dtp());
  // Ring-DTP alone is enough: nothing else is paid for.
  EXPECT_FALSE(chosen.sco());
  EXPECT_EQ(chosen.dispatch_chunk_tokens(), 0);
  EXPECT_EQ(chosen.optimizer_offload(), v1::OPTIMIZER_OFFLOAD_NONE);
  EXPECT_EQ(plan->memory.planned().schedules(), "ring_dtp");
  EXPECT_TRUE(ValidateJobSpec(plan->spec).ok());
}

TEST(PlannerTest, AutoWithRoomToSpareChoosesNothing) {
  absl::StatusOr<JobPlan> plan =
      PlanJob(Spec("auto"), Memory(int64_t{1} << 40));
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->memory.planned().schedules(), "none");
}

TEST(PlannerTest, AutoKeepsPinnedFields) {
  const int64_t unscheduled = PlanJob(Spec("{}"), Memory(4096 * kMiB))
                                  ->memory.planned()
                                  .device_peak_bytes();
  absl::StatusOr<JobPlan> plan =
      PlanJob(Spec("{auto: true, ring_dtp: false, optimizer_offload: none}"),
              Memory(unscheduled * 4 / 5));
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_FALSE(plan->spec.schedules().ring_dtp());
  EXPECT_EQ(plan->spec.schedules().optimizer_offload(),
            v1::OPTIMIZER_OFFLOAD_NONE);
  // Without Ring-DTP or the optimizer's offload nothing makes enough room.
  EXPECT_FALSE(plan->memory.fits()) << plan->memory.explanation();
  EXPECT_NE(plan->memory.explanation().find("vocab_projection"),
            std::string::npos);
}

// When nothing fits, auto keeps the lowest peak of all its candidates,
// though it stops replaying one as soon as it peaks above the best so far:
// no combination of the four schedules, with the chunk sizes auto tries
// over two expert ranks (2048 copies a rank, halved ten times), peaks
// lower, and one peaks as low.
TEST(PlannerTest, AutoThatFitsNothingKeepsTheLowestPeakOfAll) {
  absl::StatusOr<JobPlan> plan = PlanJob(
      Spec("{auto: true, activation_checkpointing: true}", 2), Memory(kMiB));
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_FALSE(plan->memory.fits());
  const int64_t lowest = plan->memory.planned().device_peak_bytes();
  int as_low = 0;
  for (int64_t cap : {0, 2048, 1024, 512, 256, 128, 64, 32, 16, 8, 4, 2}) {
    for (const char* ring : {"false", "true"}) {
      for (const char* sco : {"false", "true"}) {
        for (const char* offload : {"none", "stream"}) {
          const v1::JobSpec pinned =
              Spec(absl::StrCat("{dispatch_chunk_tokens: ", cap,
                                ", ring_dtp: ", ring, ", sco: ", sco,
                                ", activation_checkpointing: true, "
                                "optimizer_offload: ",
                                offload, "}"),
                   2);
          absl::StatusOr<v1::MemoryPrediction> prediction =
              PredictMemory(pinned, Routing::WorstCase());
          ASSERT_TRUE(prediction.ok()) << prediction.status();
          EXPECT_GE(prediction->device_peak_bytes(), lowest)
              << DescribeSchedules(pinned.schedules());
          if (prediction->device_peak_bytes() == lowest) ++as_low;
        }
      }
    }
  }
  EXPECT_GE(as_low, 1);
}

TEST(PlannerTest, PlansTheWorstRoutingUnlessToldASkew) {
  // 8 experts, top 2, over 2 expert ranks: the worst routing sends every
  // token's two copies to two experts of the same rank (each rank's row:
  // its own), which receives both ranks' copies, twice the mean rank's.
  // Even the busiest expert's cap (skew 4, a copy of every token) leaves
  // it 1.43x the mean.
  const v1::JobSpec spec = Spec("{ring_dtp: true}", 2);
  absl::StatusOr<JobPlan> worst = PlanJob(spec, Memory(4096 * kMiB));
  PlanOptions uniform = Memory(4096 * kMiB);
  uniform.routing_skew = 1.0;
  PlanOptions capped = uniform;
  capped.routing_skew = 4.0;
  absl::StatusOr<JobPlan> even = PlanJob(spec, uniform);
  absl::StatusOr<JobPlan> hot = PlanJob(spec, capped);
  ASSERT_TRUE(worst.ok() && even.ok() && hot.ok());
  EXPECT_EQ(worst->memory.routing_skew(), 0.0);
  EXPECT_EQ(hot->memory.routing_skew(), 4.0);
  const int64_t worst_dispatch =
      DevicePeak(worst->memory.planned(), v1::MEMORY_COMPONENT_DISPATCH);
  const int64_t even_dispatch =
      DevicePeak(even->memory.planned(), v1::MEMORY_COMPONENT_DISPATCH);
  const int64_t hot_dispatch =
      DevicePeak(hot->memory.planned(), v1::MEMORY_COMPONENT_DISPATCH);
  EXPECT_GT(hot_dispatch, even_dispatch * 5 / 4);
  EXPECT_GT(worst_dispatch, hot_dispatch);
  EXPECT_GT(worst_dispatch, even_dispatch * 3 / 2);
  EXPECT_GE(worst->memory.planned().device_peak_bytes(),
            hot->memory.planned().device_peak_bytes());
  // Chunking bounds it whatever the routing.
  absl::StatusOr<JobPlan> chunked =
      PlanJob(Spec("{ring_dtp: true, dispatch_chunk_tokens: 64}", 2),
              Memory(4096 * kMiB));
  ASSERT_TRUE(chunked.ok());
  EXPECT_LT(
      DevicePeak(chunked->memory.planned(), v1::MEMORY_COMPONENT_DISPATCH),
      even_dispatch / 2);
}

TEST(PlannerTest, DevicesScaleDataParallelism) {
  PlanOptions options = Memory(4096 * kMiB);
  options.devices = 4;
  v1::JobSpec spec = Spec("{}", 2);
  spec.mutable_data()->set_batch_tokens(4 * 2048);
  absl::StatusOr<JobPlan> plan = PlanJob(spec, options);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->spec.parallel().dp(), 2);
  EXPECT_EQ(plan->memory.devices(), 4);
  EXPECT_EQ(plan->spec.resources().nodes() *
                plan->spec.resources().devices_per_node(),
            4);
  options.devices = 3;
  absl::StatusOr<JobPlan> odd = PlanJob(spec, options);
  EXPECT_EQ(odd.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(odd.status().message().find("--devices 3"), std::string::npos);
}

// 4 sequences on 4 nodes of one device (dp 4), or on as few as 1 (dp 1):
// each rank's tokens grow as dp shrinks.
v1::JobSpec ElasticSpec(const std::string& schedules) {
  v1::JobSpec spec = Spec(schedules);
  spec.mutable_resources()->set_nodes(4);
  spec.mutable_resources()->set_min_nodes(1);
  spec.mutable_parallel()->set_dp(4);
  spec.mutable_data()->set_batch_tokens(4 * 2048);
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
  return spec;
}

TEST(PlannerTest, AnElasticSpecIsPlannedAtBothEndsOfItsRange) {
  const v1::JobSpec spec = ElasticSpec("{}");
  // A rank holds the most at the fewest nodes: the peak never falls as dp
  // shrinks.
  int64_t previous_peak = 0;
  for (const int nodes : {4, 2, 1}) {
    absl::StatusOr<v1::JobSpec> sized = SpecForNodes(spec, nodes);
    ASSERT_TRUE(sized.ok()) << sized.status();
    absl::StatusOr<JobPlan> plan = PlanJob(*sized, Memory(4096 * kMiB));
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_GE(plan->memory.planned().device_peak_bytes(), previous_peak);
    EXPECT_GE(plan->memory.node_host_bytes(), 0);
    previous_peak = plan->memory.planned().device_peak_bytes();
  }
  const int64_t fewest_peak = previous_peak;

  absl::StatusOr<JobPlan> plan = PlanJob(spec, Memory(4096 * kMiB));
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_TRUE(plan->memory.fits()) << plan->memory.explanation();
  EXPECT_EQ(plan->spec.resources().min_nodes(), 1);
  EXPECT_EQ(plan->memory.devices(), 4);
  EXPECT_EQ(plan->memory.min_nodes(), 1);
  EXPECT_EQ(plan->memory.min_nodes_device_peak_bytes(), fewest_peak);
  EXPECT_GT(plan->memory.min_nodes_device_peak_bytes(),
            plan->memory.planned().device_peak_bytes());
  EXPECT_GT(plan->memory.min_nodes_node_host_bytes(), 0);
  EXPECT_THAT(plan->memory.explanation(),
              HasSubstr("; at resources.min_nodes 1 (parallel.dp 1), rank 0's "
                        "device peak is "));
  // The reach is what fits at the fewest nodes.
  absl::StatusOr<v1::JobSpec> fewest = SpecForNodes(spec, 1);
  absl::StatusOr<JobPlan> fewest_plan = PlanJob(*fewest, Memory(4096 * kMiB));
  ASSERT_TRUE(fewest_plan.ok());
  EXPECT_EQ(plan->memory.max_seq_len(), fewest_plan->memory.max_seq_len());
  // So is a node's checkpoint, and the time a stop spends writing it.
  EXPECT_GT(fewest_plan->memory.node_checkpoint_bytes(),
            PlanJob(*SpecForNodes(spec, 4), Memory(4096 * kMiB))
                ->memory.node_checkpoint_bytes());
  EXPECT_EQ(plan->memory.node_checkpoint_bytes(),
            fewest_plan->memory.node_checkpoint_bytes());
  EXPECT_EQ(plan->memory.stop_checkpoint_write_seconds(),
            fewest_plan->memory.stop_checkpoint_write_seconds());

  // Devices that hold dp 4's ranks but not dp 1's: it does not fit, and
  // the explanation says where.
  const int64_t between =
      (plan->memory.planned().device_peak_bytes() + fewest_peak) / 2 * 100 / 95;
  absl::StatusOr<JobPlan> tight = PlanJob(spec, Memory(between));
  ASSERT_TRUE(tight.ok()) << tight.status();
  EXPECT_FALSE(tight->memory.fits());
  EXPECT_THAT(tight->memory.explanation(),
              StartsWith("at resources.min_nodes 1 (parallel.dp 1): rank 0's "
                         "device peak would be"));
  EXPECT_THAT(tight->memory.explanation(),
              HasSubstr("; or raise resources.min_nodes"));
  // Not elastic, the same devices hold it.
  v1::JobSpec fixed = spec;
  fixed.mutable_resources()->clear_min_nodes();
  absl::StatusOr<JobPlan> fixed_plan = PlanJob(fixed, Memory(between));
  ASSERT_TRUE(fixed_plan.ok());
  EXPECT_TRUE(fixed_plan->memory.fits());
  EXPECT_EQ(fixed_plan->memory.min_nodes(), 0);

  // With schedules: auto they are chosen where a rank holds the most, and
  // every attempt runs them.
  absl::StatusOr<JobPlan> chosen =
      PlanJob(ElasticSpec("auto"), Memory(between));
  ASSERT_TRUE(chosen.ok()) << chosen.status();
  EXPECT_TRUE(chosen->memory.fits()) << chosen->memory.explanation();
  EXPECT_TRUE(chosen->memory.schedules_chosen());
  v1::JobSpec fixed_auto = ElasticSpec("auto");
  fixed_auto.mutable_resources()->clear_min_nodes();
  absl::StatusOr<JobPlan> fixed_chosen = PlanJob(fixed_auto, Memory(between));
  ASSERT_TRUE(fixed_chosen.ok());
  EXPECT_EQ(fixed_chosen->memory.planned().schedules(), "none");
  EXPECT_NE(chosen->memory.planned().schedules(), "none");
  EXPECT_LE(chosen->memory.min_nodes_device_peak_bytes(),
            UsableBytes(between, 0.05));
}

TEST(PlannerTest, ReachIsTheLongestSequenceThatFits) {
  const PlanOptions options = Memory(256 * kMiB);
  absl::StatusOr<JobPlan> plan = PlanJob(Spec("{ring_dtp: true}"), options);
  ASSERT_TRUE(plan.ok()) << plan.status();
  const int64_t reach = plan->memory.max_seq_len();
  ASSERT_GT(reach, 2048);
  const int64_t usable = static_cast<int64_t>(256 * kMiB * 0.95);
  auto peak_at = [&](int64_t seq_len) {
    v1::JobSpec longer = Spec("{ring_dtp: true}");
    longer.mutable_model()->set_seq_len(seq_len);
    longer.mutable_data()->set_batch_tokens(seq_len);
    return PredictMemory(longer, Routing::WorstCase())->device_peak_bytes();
  };
  EXPECT_LE(peak_at(reach), usable);
  EXPECT_GT(peak_at(reach + reach / 32), usable);
  EXPECT_GT(plan->memory.max_batch_tokens(), 2048);
}

// Without the reach search (admission's), the same plan, minus the reach.
TEST(PlannerTest, WithoutTheReachSearchThePlanIsTheSame) {
  PlanOptions options = Memory(256 * kMiB);
  absl::StatusOr<JobPlan> searched = PlanJob(Spec("{ring_dtp: true}"), options);
  options.search_reach = false;
  absl::StatusOr<JobPlan> unsearched =
      PlanJob(Spec("{ring_dtp: true}"), options);
  ASSERT_TRUE(searched.ok() && unsearched.ok());
  EXPECT_EQ(unsearched->memory.max_seq_len(), 0);
  EXPECT_EQ(unsearched->memory.baseline_max_batch_tokens(), 0);
  EXPECT_NE(searched->memory.explanation().find("The longest model.seq_len"),
            std::string::npos);
  EXPECT_EQ(unsearched->memory.explanation().find("The longest"),
            std::string::npos);
  v1::MemoryPlan without_reach = searched->memory;
  without_reach.clear_explanation();
  without_reach.clear_max_seq_len();
  without_reach.clear_max_batch_tokens();
  without_reach.clear_baseline_max_seq_len();
  without_reach.clear_baseline_max_batch_tokens();
  v1::MemoryPlan unsearched_plan = unsearched->memory;
  unsearched_plan.clear_explanation();
  EXPECT_EQ(without_reach.SerializeAsString(),
            unsearched_plan.SerializeAsString());
}

// A node writes its ranks' snapshots: on two devices, twice the larger
// one; at the stated rate, in bytes / rate seconds. plateaud's stop grace
// is passed on for `plateau plan`'s warning.
TEST(PlannerTest, ANodesCheckpointWriteIsItsRanksSnapshots) {
  PlanOptions options = Memory(4096 * kMiB);
  options.checkpoint_write_bytes_per_second = 1e6;
  options.stop_grace_seconds = 30;
  absl::StatusOr<JobPlan> pair = PlanJob(Spec("{}", 2), options);
  ASSERT_TRUE(pair.ok()) << pair.status();
  int64_t largest = 0;
  for (const v1::RankPrediction& rank : pair->memory.planned().ranks()) {
    for (const v1::PredictedPeak& peak : rank.peaks()) {
      if (peak.pool() == v1::MEMORY_POOL_HOST &&
          peak.component() == v1::MEMORY_COMPONENT_SNAPSHOT) {
        largest = std::max(largest, peak.peak_bytes());
      }
    }
  }
  EXPECT_GT(largest, 0);
  EXPECT_EQ(pair->memory.node_checkpoint_bytes(), 2 * largest);
  EXPECT_DOUBLE_EQ(pair->memory.node_checkpoint_write_seconds(),
                   2 * largest / 1e6);
  EXPECT_DOUBLE_EQ(pair->memory.checkpoint_write_bytes_per_second(), 1e6);
  EXPECT_DOUBLE_EQ(pair->memory.stop_grace_seconds(), 30);
  // A stop waits for the write in flight and writes its own; blocking, only
  // its own.
  EXPECT_DOUBLE_EQ(pair->memory.stop_checkpoint_write_seconds(),
                   2 * pair->memory.node_checkpoint_write_seconds());
  v1::JobSpec blocking = Spec("{}", 2);
  blocking.mutable_train()->set_checkpoint_write(v1::CHECKPOINT_WRITE_BLOCKING);
  absl::StatusOr<JobPlan> blocking_plan = PlanJob(blocking, options);
  ASSERT_TRUE(blocking_plan.ok()) << blocking_plan.status();
  EXPECT_DOUBLE_EQ(blocking_plan->memory.stop_checkpoint_write_seconds(),
                   blocking_plan->memory.node_checkpoint_write_seconds());
}

TEST(PlannerTest, RankZerosNodeHoldsItsCheckpointAndItsNeighbours) {
  // One device: rank 0 alone. Two on a node: rank 0 and rank 1.
  absl::StatusOr<JobPlan> alone = PlanJob(Spec("{}"), Memory(4096 * kMiB));
  ASSERT_TRUE(alone.ok());
  EXPECT_EQ(alone->memory.node_host_bytes(),
            alone->memory.planned().host_peak_bytes());
  absl::StatusOr<JobPlan> pair = PlanJob(Spec("{}", 2), Memory(4096 * kMiB));
  ASSERT_TRUE(pair.ok());
  int64_t sum = 0;
  for (const v1::RankPrediction& rank : pair->memory.planned().ranks()) {
    sum += rank.host_peak_bytes();
  }
  EXPECT_EQ(pair->memory.node_host_bytes(), sum);
}

TEST(PlannerTest, ASingleExpertPlans) {
  // The worst routing and a stated skew alike give the one expert every
  // token (a skew is capped at experts / top_k = 1).
  v1::JobSpec spec = Spec("{}");
  spec.mutable_model()->set_experts(1);
  spec.mutable_model()->set_top_k(1);
  ASSERT_TRUE(ValidateJobSpec(spec).ok());
  absl::StatusOr<JobPlan> plan = PlanJob(spec, Memory(4096 * kMiB));
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_TRUE(plan->memory.fits());
  PlanOptions skewed = Memory(4096 * kMiB);
  skewed.routing_skew = 2.0;
  absl::StatusOr<JobPlan> stated = PlanJob(spec, skewed);
  ASSERT_TRUE(stated.ok()) << stated.status();
  EXPECT_EQ(stated->memory.planned().device_peak_bytes(),
            plan->memory.planned().device_peak_bytes());
}

TEST(PlannerTest, RejectsBadOptions) {
  EXPECT_EQ(PlanJob(Spec("{}"), Memory(0)).status().code(),
            absl::StatusCode::kInvalidArgument);
  PlanOptions margin = Memory(kMiB);
  margin.margin = 1.0;
  EXPECT_EQ(PlanJob(Spec("{}"), margin).status().code(),
            absl::StatusCode::kInvalidArgument);
  PlanOptions skew = Memory(kMiB);
  skew.routing_skew = 0.5;
  EXPECT_EQ(PlanJob(Spec("{}"), skew).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(PlannerTest, ANodesDeviceMemoryIsItsSmallestKnownDevice) {
  v1::Node node;
  node.add_devices()->set_memory_bytes(4 * kMiB);
  node.add_devices()->set_memory_bytes(2 * kMiB);
  EXPECT_EQ(NodeDeviceMemoryBytes(node), 2 * kMiB);
  node.mutable_devices(1)->set_memory_bytes(0);  // unknown
  EXPECT_EQ(NodeDeviceMemoryBytes(node), 4 * kMiB);
  EXPECT_EQ(NodeDeviceMemoryBytes(v1::Node()), 0);
}

TEST(MemoryLedgerTest, KeepsPeaksAndWhatThePoolHeldAtItsPeak) {
  MemoryLedger ledger;
  ledger.SetPhase("first");
  MemoryLedger::Handle weights = ledger.Allocate(
      v1::MEMORY_POOL_DEVICE, v1::MEMORY_COMPONENT_WEIGHTS, 100);
  MemoryLedger::Handle logits = ledger.Allocate(
      v1::MEMORY_POOL_DEVICE, v1::MEMORY_COMPONENT_VOCAB_PROJECTION, 300);
  ledger.Free(&logits);
  ledger.SetPhase("second");
  MemoryLedger::Handle dispatch = ledger.Allocate(
      v1::MEMORY_POOL_DEVICE, v1::MEMORY_COMPONENT_DISPATCH, 250);
  ledger.Allocate(v1::MEMORY_POOL_HOST, v1::MEMORY_COMPONENT_STAGING, 7);
  EXPECT_EQ(ledger.pool_peak_bytes(v1::MEMORY_POOL_DEVICE), 400);
  EXPECT_EQ(ledger.pool_current_bytes(v1::MEMORY_POOL_DEVICE), 350);
  EXPECT_EQ(
      ledger.peak_bytes(v1::MEMORY_POOL_DEVICE, v1::MEMORY_COMPONENT_DISPATCH),
      250);
  EXPECT_EQ(ledger.device_bytes_at_peak(v1::MEMORY_COMPONENT_VOCAB_PROJECTION),
            300);
  EXPECT_EQ(ledger.device_bytes_at_peak(v1::MEMORY_COMPONENT_DISPATCH), 0);
  EXPECT_EQ(ledger.device_peak_phase(), "first");
  EXPECT_EQ(ledger.pool_peak_bytes(v1::MEMORY_POOL_HOST), 7);
  ledger.Free(&dispatch);
  ledger.Free(&weights);
  MemoryLedger::Handle none = 0;
  ledger.Free(&none);
  EXPECT_EQ(ledger.pool_current_bytes(v1::MEMORY_POOL_DEVICE), 0);
}

}  // namespace
}  // namespace plateau::plan
