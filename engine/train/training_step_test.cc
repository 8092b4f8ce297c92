// The distributed step against the one-rank step: the same batches on every
// parallel layout give the same loss, gradient norm and expert load, and
// every parameter the same gradient, per step, and the same weights after
// the steps, up to float rounding. Ranks are
// threads of this process, talking over loopback Gloo through one
// in-memory store. Built once per backend (test_backend.h): the CPU's, and
// the CUDA one's, on a GPU (one rank) and emulated (every layout), where it
// also trains against the CPU backend.
#include "engine/train/training_step.h"

#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "engine/backend.h"
#include "engine/optim/adamw_optimizer.h"
#include "engine/optim/tiered_optimizer.h"
#include "engine/parallel/parallel_layout.h"
#include "engine/parallel/rank_groups.h"
#include "engine/parallel/rank_threads.h"
#include "engine/train/model_io.h"
#include "engine/train/test_backend.h"
#include "gtest/gtest.h"

namespace plateau::engine {
namespace {

constexpr int kSteps = 4;
// Between backends, whose reductions add in other orders and whose exp and
// log differ in the last bits, over kSteps of AdamW: loss to this relative
// precision, gradient norms and weights to ten times it.
constexpr double kCrossBackendTolerance = 1e-4;
constexpr int64_t kSequences = 8;

ModelConfig TinyConfig() {
  ModelConfig config;
  config.layers = 4;
  config.d_model = 16;
  config.heads = 2;
  config.kv_heads = 2;
  config.experts = 4;
  config.top_k = 2;
  config.ffn_hidden = 12;
  config.vocab = 29;
  config.seq_len = 6;
  return config;
}

std::vector<int32_t> Batch(int step) {
  std::mt19937 generator(1000 + step);
  std::vector<int32_t> tokens(kSequences * (TinyConfig().seq_len + 1));
  for (int32_t& token : tokens) token = generator() % TinyConfig().vocab;
  return tokens;
}

// Elements of one whole-model tensor: `values` from element `offset`.
struct Elements {
  std::string name;
  int64_t offset = 0;
  std::vector<float> values;
};

// What a rank saw: its step results, the gradients of every step (after
// the reduction over replicas and the clip, for the elements whose ZeRO-1
// shard it owns), and its weights after the last step.
struct RankRun {
  std::vector<StepResult> steps;
  std::vector<std::vector<Elements>> gradients;
  std::vector<Elements> weights;
  absl::Status status;
};

// The elements of `buffers` (laid out as `layout`; bf16 ones widened) in
// `ranges`, by the whole-model tensors they belong to.
std::vector<Elements> ElementsOf(const ParameterLayout& layout,
                                 const SplitBuffers& buffers,
                                 const std::vector<OwnedRange>& ranges,
                                 kernels::Ops& ops) {
  std::vector<Elements> pieces;
  for (const ParameterInfo& info : layout.parameters()) {
    for (const OwnedRange& range : ranges) {
      const int64_t begin = std::max(range.begin, info.offset);
      const int64_t end = std::min(range.end, info.offset + info.elements);
      if (begin >= end) continue;
      Elements piece{info.name, info.global_offset + (begin - info.offset),
                     std::vector<float>(end - begin)};
      if (buffers.InBf16(begin)) {
        std::vector<uint16_t> bits(end - begin);
        ops.CopyToHost((end - begin) * int64_t{sizeof(uint16_t)},
                       buffers.Bf16At(begin), bits.data());
        for (size_t i = 0; i < bits.size(); ++i) {
          piece.values[i] = kernels::Bfloat16ToFloat(bits[i]);
        }
      } else {
        ops.CopyToHost((end - begin) * int64_t{sizeof(float)},
                       buffers.Float32At(begin), piece.values.data());
      }
      pieces.push_back(std::move(piece));
    }
  }
  return pieces;
}

// The memory schedules a run switches on (none: the unscheduled step).
// See Schedules::bf16.
constexpr double kBf16Tolerance = 1e-3;

// The model options a case may turn on (TinyConfig has none).
struct ModelOptions {
  // Grouped-query attention: four query heads sharing two key and value
  // heads.
  bool grouped_query = false;
  bool z_loss = false;  // the router z-loss at coefficient 0.05
  bool qk_norm = false;
  // Aux-loss-free balancing, its bias moved fast enough (0.02 a step) to
  // change the choice of experts within the test's steps.
  bool expert_bias = false;
  bool sigmoid_router = false;
  // Two shared experts of hidden width 10 (TinyConfig's routed ones have
  // 12).
  bool shared_experts = false;
  bool tie_embeddings = false;
};

void ApplyModelOptions(const ModelOptions& options, ModelConfig* config) {
  if (options.grouped_query) {
    config->heads = 4;
    config->kv_heads = 2;
  }
  if (options.z_loss) config->z_loss_coefficient = 0.05f;
  config->qk_norm = options.qk_norm;
  config->tie_embeddings = options.tie_embeddings;
  if (options.sigmoid_router) {
    config->router_score = kernels::RouterScore::kSigmoid;
  }
  if (options.shared_experts) {
    config->shared_experts = 2;
    config->shared_ffn_hidden = 10;
  }
  if (options.expert_bias) {
    config->expert_bias = true;
    config->load_balancing_coefficient = 0.0f;
    config->expert_bias_update_rate = 0.02f;
  }
}

struct Schedules {
  int64_t dispatch_chunk_tokens = 0;  // PipelinedLLEP's cap
  int64_t vocab_block = 0;            // Ring-DTP's vocabulary block
  bool offload_checkpoints = false;   // SCO
  OptimizerOffload optimizer_offload = OptimizerOffload::kNone;
  // SkewAdam in place of AdamW, in the reference too, its expert momentum
  // stored so. bf16 momentum rounds each element once a step: a float32
  // last-bit difference between layouts' gradients can round an element
  // the other way, and later steps carry that 2^-8 apart.
  bool skewadam = false;
  MomentumStorage expert_momentum = MomentumStorage::kBfloat16;
  // bf16 products (precision: bf16), in the reference too. bf16 rounds each
  // product input element by element, the same on every layout, so a step
  // from the same weights differs only in float32 accumulation; but once
  // the layouts' (or the backends') weights differ in their last float32
  // bits, an element next to a bf16 rounding boundary rounds the other way,
  // a bf16 ulp (2^-8) in every product that reads it and in every stored
  // activation rounded from it: later steps are compared at
  // kBf16Tolerance.
  bool bf16 = false;
  // bf16 products with optimizer offload store the product weights in bf16
  // (ModelConfig::bf16_weight_storage), as a job spec's do; this keeps them
  // in float32, the baseline bf16 storage must match bit for bit.
  bool float32_weights = false;
  // bf16 gradient accumulation (ModelConfig::bf16_gradients): the product
  // weights' gradients rounded to bf16 once a pass and a micro-batch, and
  // again when summed over replicas or clipped (Bf16GradientsTest).
  bool bf16_gradients = false;
  // Not schedules: the model's options, in the reference too.
  ModelOptions model;
};

// Trains kSteps on one rank of `sizes` (groups null for one rank), on the
// backend under test or the CPU one.
RankRun TrainRank(const ParallelLayout& layout, int rank, RankGroups* groups,
                  int64_t micro_batches, const Schedules& schedules,
                  bool skewed, bool on_cpu = false) {
  RankRun run;
  ModelConfig config = TinyConfig();
  config.dispatch_chunk_tokens = schedules.dispatch_chunk_tokens;
  config.vocab_block = schedules.vocab_block;
  config.offload_checkpoints = schedules.offload_checkpoints;
  if (schedules.bf16) config.matmul_precision = kernels::GemmPrecision::kBf16;
  config.bf16_weight_storage =
      schedules.bf16 &&
      schedules.optimizer_offload != OptimizerOffload::kNone &&
      !schedules.float32_weights;
  config.bf16_gradients = schedules.bf16_gradients;
  ApplyModelOptions(schedules.model, &config);
  const RankContext ranks(layout, rank, groups);
  absl::StatusOr<std::unique_ptr<Backend>> made =
      on_cpu ? Backend::CreateCpu(1, int64_t{1} << 30) : MakeTestBackend();
  if (!made.ok()) {
    run.status = made.status();
    return run;
  }
  std::unique_ptr<Backend> backend = *std::move(made);
  ModelShard shard = ModelShard::For(config, ranks.pp_index, ranks.sizes.pp,
                                     ranks.ep_index, ranks.sizes.ep);
  shard.dense_alignment = ranks.batch_ranks();
  shard.expert_alignment = ranks.sizes.dp;
  auto model = Model::Create(config, shard, &backend->ops(),
                             &backend->allocator(), ranks.model_groups());
  if (!model.ok()) {
    run.status = model.status();
    return run;
  }
  if (absl::Status status = (*model)->InitializeWeights(7); !status.ok()) {
    run.status = status;
    return run;
  }
  if (skewed) {
    // Every router row but expert 0's zero: each token picks experts 0 and
    // 1, or 1 and 2, so expert 1 (on expert rank 0) takes every token.
    const ParameterLayout& parameters = (*model)->layout();
    for (int64_t l = 0; l < parameters.shard().layer_count; ++l) {
      float* router = (*model)->weights().f32() + parameters.layer(l).router;
      backend->ops().Fill((config.experts - 1) * config.d_model, 0.0f,
                          router + config.d_model);
    }
  }
  ZeroShards shards((*model)->layout(), ranks.batch, ranks.data);
  absl::StatusOr<std::unique_ptr<Optimizer>> optimizer;
  if (schedules.skewadam) {
    TieredSettings settings;
    settings.expert_momentum = schedules.expert_momentum;
    settings.offload = schedules.optimizer_offload;
    optimizer = TieredOptimizer::Create(
        settings, &(*model)->layout(), shards.owned(), ranks.batch, ranks.data,
        (*model)->weight_buffers(), (*model)->gradient_buffers(),
        &backend->ops(), &backend->allocator());
  } else {
    AdamWSettings settings;
    settings.offload = schedules.optimizer_offload;
    // Buckets that cut through parameters.
    settings.bucket_elements = 1000;
    optimizer = AdamWOptimizer::Create(
        settings, &(*model)->layout(), shards.owned(),
        (*model)->weight_buffers(), (*model)->gradient_buffers(),
        &backend->ops(), &backend->allocator());
  }
  if (!optimizer.ok()) {
    run.status = optimizer.status();
    return run;
  }
  // As the trainer does: the masters of bf16-stored weights exactly.
  InitializeMasters(7, (*model)->layout(), (*optimizer)->MasterPieces());
  TrainingStep step(ranks, model->get(), &shards, optimizer->get(),
                    micro_batches, &backend->allocator());
  for (int i = 1; i <= kSteps; ++i) {
    const std::vector<int32_t> tokens = Batch(i);
    // A small clipping norm, so clipping (by the global norm) happens.
    auto result = step.Run(tokens.data(), kSequences, 3e-3f, i, 0.5);
    if (!result.ok()) {
      run.status = result.status();
      return run;
    }
    run.steps.push_back(*result);
    run.gradients.push_back(ElementsOf((*model)->layout(),
                                       (*model)->gradient_buffers(),
                                       shards.owned(), backend->ops()));
  }
  run.weights =
      ElementsOf((*model)->layout(), (*model)->weight_buffers(),
                 {{0, (*model)->layout().total_elements()}}, backend->ops());
  run.status = backend->ops().status();
  return run;
}

// Every rank of `sizes`, one thread each.
std::vector<RankRun> TrainAllRanks(ParallelSizes sizes, int64_t micro_batches,
                                   const Schedules& schedules, bool skewed,
                                   bool on_cpu = false) {
  const ParallelLayout layout(sizes);
  std::vector<RankRun> runs(layout.world());
  RunEveryRank(layout, absl::Seconds(60),
               [&](int rank, absl::StatusOr<RankGroups*> groups) {
                 if (!groups.ok()) {
                   runs[rank].status = groups.status();
                   return;
                 }
                 runs[rank] = TrainRank(layout, rank, *groups, micro_batches,
                                        schedules, skewed, on_cpu);
               });
  return runs;
}

struct LayoutCase {
  std::string name;
  ParallelSizes sizes;
  int64_t micro_batches;
  // The reference is always the unscheduled one-rank step (with the same
  // optimizer).
  Schedules schedules;
  // Routing skewed onto one expert (in the reference too).
  bool skewed = false;
};

void PrintTo(const LayoutCase& layout_case, std::ostream* out) {
  *out << layout_case.name;
}

class TrainingStepTest : public testing::TestWithParam<LayoutCase> {};

// The largest difference between `piece` and the same elements of the
// whole tensor in `whole`, relative to the largest magnitude of those
// elements there (at least 1e-3, for tensors whose values are all near 0).
double WorstRelativeDifference(const Elements& piece,
                               const std::vector<Elements>& whole) {
  const Elements* reference = nullptr;
  for (const Elements& candidate : whole) {
    if (candidate.name == piece.name) reference = &candidate;
  }
  if (reference == nullptr) return INFINITY;
  double worst = 0.0, largest = 1e-3;
  for (size_t i = 0; i < piece.values.size(); ++i) {
    const float expected =
        reference->values[piece.offset - reference->offset + i];
    worst = std::max(worst, double{std::abs(piece.values[i] - expected)});
    largest = std::max(largest, double{std::abs(expected)});
  }
  return worst / largest;
}

// Every step's results and gradients and the weights of `runs` against the
// one-rank run.
void ExpectSameTraining(const RankRun& one, const std::vector<RankRun>& runs,
                        double tolerance) {
  for (size_t rank = 0; rank < runs.size(); ++rank) {
    const RankRun& run = runs[rank];
    ASSERT_TRUE(run.status.ok()) << "rank " << rank << ": " << run.status;
    ASSERT_EQ(run.steps.size(), one.steps.size());
    for (size_t i = 0; i < one.steps.size(); ++i) {
      const StepResult& expected = one.steps[i];
      const StepResult& actual = run.steps[i];
      EXPECT_NEAR(actual.cross_entropy, expected.cross_entropy,
                  tolerance * expected.cross_entropy)
          << "rank " << rank << " step " << i + 1;
      EXPECT_NEAR(actual.load_balancing, expected.load_balancing,
                  tolerance * expected.load_balancing)
          << "rank " << rank << " step " << i + 1;
      EXPECT_NEAR(actual.gradient_norm, expected.gradient_norm,
                  10 * tolerance * expected.gradient_norm)
          << "rank " << rank << " step " << i + 1;
      EXPECT_EQ(actual.expert_tokens, expected.expert_tokens)
          << "rank " << rank << " step " << i + 1;
      // Each parameter's gradient, as one rank computes it: AdamW's
      // normalised update would hide a wrong gradient in the weights.
      for (const Elements& piece : run.gradients[i]) {
        EXPECT_LT(WorstRelativeDifference(piece, one.gradients[i]),
                  10 * tolerance)
            << "rank " << rank << " step " << i + 1 << " gradient of "
            << piece.name << " from element " << piece.offset;
      }
    }
    // Every piece this rank holds equals the same elements of the one-rank
    // model's tensor.
    for (const Elements& piece : run.weights) {
      const Elements* whole = nullptr;
      for (const Elements& candidate : one.weights) {
        if (candidate.name == piece.name) whole = &candidate;
      }
      ASSERT_NE(whole, nullptr) << piece.name;
      float worst = 0.0f;
      for (size_t i = 0; i < piece.values.size(); ++i) {
        worst = std::max(
            worst, std::abs(piece.values[i] - whole->values[piece.offset + i]));
      }
      EXPECT_LT(worst, 10 * tolerance) << "rank " << rank << " " << piece.name;
    }
  }
}

TEST_P(TrainingStepTest, MatchesTheOneRankStep) {
  const LayoutCase& layout_case = GetParam();
  const absl::Status supported =
      PrepareTestBackend(ParallelLayout(layout_case.sizes).world());
  if (!supported.ok()) GTEST_SKIP() << supported;
  Schedules unscheduled;
  unscheduled.skewadam = layout_case.schedules.skewadam;
  unscheduled.expert_momentum = layout_case.schedules.expert_momentum;
  unscheduled.bf16 = layout_case.schedules.bf16;
  unscheduled.model = layout_case.schedules.model;
  const std::vector<RankRun> reference =
      TrainAllRanks(ParallelSizes(), layout_case.micro_batches, unscheduled,
                    layout_case.skewed);
  ASSERT_TRUE(reference[0].status.ok()) << reference[0].status;
  const std::vector<RankRun> runs =
      TrainAllRanks(layout_case.sizes, layout_case.micro_batches,
                    layout_case.schedules, layout_case.skewed);

  ExpectSameTraining(reference[0], runs,
                     layout_case.schedules.bf16 ? kBf16Tolerance : 1e-5);
}

// The backend under test trains as the CPU backend does: one rank, every
// schedule and both optimizers.
TEST_P(TrainingStepTest, MatchesTheCpuBackend) {
  const LayoutCase& layout_case = GetParam();
  if (ParallelLayout(layout_case.sizes).world() > 1) {
    GTEST_SKIP() << "one rank suffices to compare backends";
  }
  if (std::string(TestBackendName()) == "cpu") {
    GTEST_SKIP() << "the backend under test is the CPU backend";
  }
  const absl::Status supported = PrepareTestBackend(1);
  if (!supported.ok()) GTEST_SKIP() << supported;
  const std::vector<RankRun> cpu =
      TrainAllRanks(layout_case.sizes, layout_case.micro_batches,
                    layout_case.schedules, layout_case.skewed,
                    /*on_cpu=*/true);
  ASSERT_TRUE(cpu[0].status.ok()) << cpu[0].status;
  const std::vector<RankRun> runs =
      TrainAllRanks(layout_case.sizes, layout_case.micro_batches,
                    layout_case.schedules, layout_case.skewed);
  ExpectSameTraining(
      cpu[0], runs,
      layout_case.schedules.bf16 ? kBf16Tolerance : kCrossBackendTolerance);
}

ParallelSizes Sizes(int ep, int pp, int dp) {
  ParallelSizes sizes;
  sizes.ep = ep;
  sizes.pp = pp;
  sizes.dp = dp;
  return sizes;
}

// PipelinedLLEP with at most 7 token copies per source and destination in
// a chunk: several chunks per layer at every layout here.
Schedules Llep() {
  Schedules schedules;
  schedules.dispatch_chunk_tokens = 7;
  return schedules;
}

// Ring-DTP in blocks of 8 of the 29 vocabulary columns.
Schedules RingDtp() {
  Schedules schedules;
  schedules.vocab_block = 8;
  return schedules;
}

Schedules Sco() {
  Schedules schedules;
  schedules.offload_checkpoints = true;
  return schedules;
}

Schedules Offload(OptimizerOffload offload) {
  Schedules schedules;
  schedules.optimizer_offload = offload;
  return schedules;
}

// SkewAdam, with its statistics summed over the groups that share a tensor.
Schedules SkewAdam(Schedules schedules = Schedules()) {
  schedules.skewadam = true;
  return schedules;
}

Schedules Fp32ExpertMomentum(Schedules schedules) {
  schedules.expert_momentum = MomentumStorage::kFloat32;
  return schedules;
}

Schedules Bf16(Schedules schedules = Schedules()) {
  schedules.bf16 = true;
  return schedules;
}

// bf16 products with bf16 gradient accumulation, which needs the optimizer
// offloaded (stream unless the schedules say).
Schedules Bf16Gradients(Schedules schedules) {
  schedules.bf16 = true;
  schedules.bf16_gradients = true;
  if (schedules.optimizer_offload == OptimizerOffload::kNone) {
    schedules.optimizer_offload = OptimizerOffload::kStream;
  }
  return schedules;
}

Schedules GroupedQuery(Schedules schedules = Schedules()) {
  schedules.model.grouped_query = true;
  return schedules;
}

Schedules ZLoss(Schedules schedules = Schedules()) {
  schedules.model.z_loss = true;
  return schedules;
}

Schedules QkNorm(Schedules schedules = Schedules()) {
  schedules.model.qk_norm = true;
  return schedules;
}

Schedules ExpertBias(Schedules schedules = Schedules()) {
  schedules.model.expert_bias = true;
  return schedules;
}

Schedules SigmoidRouter(Schedules schedules = Schedules()) {
  schedules.model.sigmoid_router = true;
  return schedules;
}

Schedules SharedExperts(Schedules schedules = Schedules()) {
  schedules.model.shared_experts = true;
  return schedules;
}

Schedules TiedEmbeddings(Schedules schedules = Schedules()) {
  schedules.model.tie_embeddings = true;
  return schedules;
}

// The four schedules together.
Schedules AllSchedules() {
  Schedules schedules = RingDtp();
  schedules.dispatch_chunk_tokens = 7;
  schedules.offload_checkpoints = true;
  schedules.optimizer_offload = OptimizerOffload::kStream;
  return schedules;
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, TrainingStepTest,
    testing::Values(
        LayoutCase{"ep2", Sizes(2, 1, 1), 1, Schedules()},
        LayoutCase{"dp2", Sizes(1, 1, 2), 1, Schedules()},
        LayoutCase{"pp2", Sizes(1, 2, 1), 4, Schedules()},
        LayoutCase{"ep2dp2", Sizes(2, 1, 2), 2, Schedules()},
        LayoutCase{"ep2pp2", Sizes(2, 2, 1), 2, Schedules()},
        // More stages than micro-batches in flight: the 1F1B
        // warmup and cooldown of every stage differ.
        LayoutCase{"pp4", Sizes(1, 4, 1), 2, Schedules()},
        LayoutCase{"oneRankAccumulating", Sizes(1, 1, 1), 4, Schedules()},
        // Each schedule alone and with expert and pipeline
        // parallelism, then all together.
        LayoutCase{"llep", Sizes(1, 1, 1), 1, Llep()},
        LayoutCase{"ep2Llep", Sizes(2, 1, 1), 1, Llep()},
        LayoutCase{"pp2Llep", Sizes(1, 2, 1), 2, Llep()},
        LayoutCase{"ep2dp2Llep", Sizes(2, 1, 2), 2, Llep()},
        LayoutCase{"skewedLlep", Sizes(1, 1, 1), 1, Llep(), true},
        LayoutCase{"skewedEp2Llep", Sizes(2, 1, 1), 1, Llep(), true},
        LayoutCase{"ringDtp", Sizes(1, 1, 1), 1, RingDtp()},
        // Ring-DTP over two expert ranks: 24 tokens a rank against shards
        // of 14 and 15 rows move the weight shards; 6 tokens a rank (ep2dp2,
        // two micro-batches) move the token blocks.
        LayoutCase{"ep2RingDtp", Sizes(2, 1, 1), 1, RingDtp()},
        LayoutCase{"ep2dp2RingDtp", Sizes(2, 1, 2), 2, RingDtp()},
        LayoutCase{"pp2RingDtp", Sizes(1, 2, 1), 2, RingDtp()},
        LayoutCase{"sco", Sizes(1, 1, 1), 1, Sco()},
        LayoutCase{"ep2Sco", Sizes(2, 1, 1), 1, Sco()},
        LayoutCase{"pp2Sco", Sizes(1, 2, 1), 2, Sco()},
        LayoutCase{"offloadSerial", Sizes(1, 1, 1), 1,
                   Offload(OptimizerOffload::kSerial)},
        LayoutCase{"offloadStream", Sizes(1, 1, 1), 1,
                   Offload(OptimizerOffload::kStream)},
        LayoutCase{"ep2dp2OffloadStream", Sizes(2, 1, 2), 2,
                   Offload(OptimizerOffload::kStream)},
        LayoutCase{"pp2OffloadStream", Sizes(1, 2, 1), 2,
                   Offload(OptimizerOffload::kStream)},
        LayoutCase{"allSchedules", Sizes(1, 1, 1), 1, AllSchedules()},
        LayoutCase{"ep2AllSchedules", Sizes(2, 1, 1), 1, AllSchedules()},
        LayoutCase{"pp2AllSchedules", Sizes(1, 2, 1), 2, AllSchedules()},
        LayoutCase{"skewedEp2AllSchedules", Sizes(2, 1, 1), 1, AllSchedules(),
                   true},
        // SkewAdam over ZeRO shards of both regions, over pipeline stages,
        // with the lm_head split over the expert ranks (its statistics
        // summed over the whole batch group) and in host memory.
        LayoutCase{"skewadamEp2dp2", Sizes(2, 1, 2), 2, SkewAdam()},
        LayoutCase{"skewadamPp2", Sizes(1, 2, 1), 2, SkewAdam()},
        LayoutCase{"skewadamEp2dp2RingDtp", Sizes(2, 1, 2), 2,
                   SkewAdam(RingDtp())},
        LayoutCase{"skewadamEp2AllSchedules", Sizes(2, 1, 1), 1,
                   SkewAdam(AllSchedules())},
        // bf16 products over the layouts and with every schedule.
        LayoutCase{"bf16Ep2dp2", Sizes(2, 1, 2), 2, Bf16()},
        LayoutCase{"bf16Pp2", Sizes(1, 2, 1), 2, Bf16()},
        LayoutCase{"bf16AllSchedules", Sizes(1, 1, 1), 1, Bf16(AllSchedules())},
        LayoutCase{"bf16SkewedEp2AllSchedules", Sizes(2, 1, 1), 1,
                   Bf16(AllSchedules()), true},
        LayoutCase{"bf16SkewadamEp2dp2RingDtp", Sizes(2, 1, 2), 2,
                   Bf16(SkewAdam(RingDtp()))},
        // Grouped-query attention over the layouts and with every schedule.
        LayoutCase{"groupedQueryEp2pp2", Sizes(2, 2, 1), 2, GroupedQuery()},
        LayoutCase{"groupedQueryAllSchedules", Sizes(1, 1, 1), 1,
                   GroupedQuery(AllSchedules())},
        LayoutCase{"groupedQueryEp2AllSchedules", Sizes(2, 1, 1), 1,
                   GroupedQuery(AllSchedules())},
        LayoutCase{"bf16GroupedQueryDp2AllSchedules", Sizes(1, 1, 2), 1,
                   Bf16(GroupedQuery(AllSchedules()))},
        // The router z-loss: its mean over the batch group's tokens across
        // expert and data ranks and micro-batches, and every schedule.
        LayoutCase{"zLossEp2dp2", Sizes(2, 1, 2), 2, ZLoss()},
        LayoutCase{"zLossPp2", Sizes(1, 2, 1), 4, ZLoss()},
        LayoutCase{"zLossAllSchedules", Sizes(1, 1, 1), 1,
                   ZLoss(AllSchedules())},
        LayoutCase{"zLossEp2AllSchedules", Sizes(2, 1, 1), 1,
                   ZLoss(AllSchedules())},
        // QK-norm, with grouped-query attention as Qwen3 has it, over the
        // layouts and with every schedule.
        LayoutCase{"qkNormEp2pp2", Sizes(2, 2, 1), 2, QkNorm(GroupedQuery())},
        LayoutCase{"qkNormEp2dp2AllSchedules", Sizes(2, 1, 2), 2,
                   QkNorm(GroupedQuery(AllSchedules()))},
        LayoutCase{"bf16QkNormPp2AllSchedules", Sizes(1, 2, 1), 2,
                   Bf16(QkNorm(AllSchedules()))},
        // Aux-loss-free balancing: every rank of the batch group moves its
        // bias by the same group-wide load, over the layouts, with skewed
        // routing (whose bias then moves), SkewAdam over ZeRO shards that
        // leaves it alone, and every schedule.
        LayoutCase{"expertBiasEp2dp2", Sizes(2, 1, 2), 2, ExpertBias()},
        LayoutCase{"expertBiasPp2", Sizes(1, 2, 1), 4, ExpertBias()},
        LayoutCase{"skewedExpertBiasEp2AllSchedules", Sizes(2, 1, 1), 1,
                   ExpertBias(AllSchedules()), true},
        LayoutCase{"expertBiasSkewadamEp2dp2", Sizes(2, 1, 2), 2,
                   ExpertBias(SkewAdam())},
        // The sigmoid router, with the load-balancing loss and, as
        // DeepSeek-V3 has it, with the expert bias.
        LayoutCase{"sigmoidRouterEp2dp2", Sizes(2, 1, 2), 2, SigmoidRouter()},
        LayoutCase{"sigmoidRouterExpertBiasPp2AllSchedules", Sizes(1, 2, 1), 2,
                   SigmoidRouter(ExpertBias(AllSchedules()))},
        LayoutCase{"bf16SigmoidRouterExpertBiasEp2AllSchedules", Sizes(2, 1, 1),
                   1, Bf16(SigmoidRouter(ExpertBias(AllSchedules())))},
        // Shared experts: with every schedule on one rank (and so on the
        // CUDA backend), dense weights reduced over the expert ranks too,
        // over the layouts, with skewed routing (the LLEP spill beside
        // them), SkewAdam over ZeRO shards, every schedule, and the whole
        // qwen-like model (GQA, QK-norm, sigmoid routing with the bias).
        LayoutCase{"sharedExpertsAllSchedules", Sizes(1, 1, 1), 1,
                   SharedExperts(AllSchedules())},
        LayoutCase{"sharedExpertsEp2dp2", Sizes(2, 1, 2), 2, SharedExperts()},
        LayoutCase{"sharedExpertsPp2", Sizes(1, 2, 1), 4, SharedExperts()},
        LayoutCase{"skewedSharedExpertsEp2AllSchedules", Sizes(2, 1, 1), 1,
                   SharedExperts(AllSchedules()), true},
        // (float32 expert momentum: bf16's rounding carried this case's
        // 3e-7 step-1 gradient differences to 2e-4 by step 4.)
        LayoutCase{"sharedExpertsSkewadamFp32MomentumEp2dp2", Sizes(2, 1, 2), 2,
                   SharedExperts(Fp32ExpertMomentum(SkewAdam()))},
        LayoutCase{"bf16QwenLikeEp2pp2AllSchedules", Sizes(2, 2, 1), 2,
                   Bf16(SharedExperts(QkNorm(GroupedQuery(
                       SigmoidRouter(ExpertBias(AllSchedules()))))))},
        // Tied embeddings: the table takes the head's gradient. With every
        // schedule on one rank (and so on the CUDA backend); the whole
        // head on every expert rank, reduced with the dense weights;
        // Ring-DTP's shards of the head as rows of the replicated table,
        // each rank's head gradient in its own rows only, with SkewAdam
        // over ZeRO shards; and in bf16, whose head copy is the table's
        // rows. Over pipeline stages the last stage's copy of the head
        // rows: its gradient added to the first stage's table, the updated
        // rows sent back, through stages between them (pp4) and with
        // replicas (dp2), Ring-DTP shards, SkewAdam and every schedule.
        LayoutCase{"tiedEmbeddingsAllSchedules", Sizes(1, 1, 1), 1,
                   TiedEmbeddings(AllSchedules())},
        LayoutCase{"tiedEmbeddingsPp2", Sizes(1, 2, 1), 4, TiedEmbeddings()},
        LayoutCase{"tiedEmbeddingsPp4", Sizes(1, 4, 1), 2, TiedEmbeddings()},
        LayoutCase{"tiedEmbeddingsPp2dp2", Sizes(1, 2, 2), 2, TiedEmbeddings()},
        LayoutCase{"tiedEmbeddingsSkewadamEp2pp2RingDtp", Sizes(2, 2, 1), 2,
                   TiedEmbeddings(SkewAdam(RingDtp()))},
        LayoutCase{"bf16TiedEmbeddingsEp2pp2AllSchedules", Sizes(2, 2, 1), 2,
                   Bf16(TiedEmbeddings(AllSchedules()))},
        LayoutCase{"tiedEmbeddingsEp2dp2", Sizes(2, 1, 2), 2, TiedEmbeddings()},
        LayoutCase{"tiedEmbeddingsEp2RingDtp", Sizes(2, 1, 1), 1,
                   TiedEmbeddings(RingDtp())},
        LayoutCase{"tiedEmbeddingsSkewadamEp2dp2RingDtp", Sizes(2, 1, 2), 2,
                   TiedEmbeddings(SkewAdam(RingDtp()))},
        LayoutCase{"skewedTiedEmbeddingsEp2AllSchedules", Sizes(2, 1, 1), 1,
                   TiedEmbeddings(AllSchedules()), true},
        LayoutCase{"bf16TiedEmbeddingsEp2dp2AllSchedules", Sizes(2, 1, 2), 2,
                   Bf16(TiedEmbeddings(AllSchedules()))}),
    [](const testing::TestParamInfo<LayoutCase>& info) {
      return info.param.name;
    });

// bf16 weight storage against float32 device weights (with the passes'
// bf16 copies), both under bf16 products with the optimizer offloaded: the
// products read the same rounded weights and the masters update the same,
// so every step's losses, gradient norm, expert loads and gradients are
// bit for bit the same, and the stored weights are the float32 run's
// rounded. On one rank, over ZeRO shards (the product regions gather
// bf16), over pipeline stages with tied embeddings (the head's rows stay
// float32), with serial and stream AdamW and SkewAdam.
TEST(Bf16WeightStorageTest, TrainsBitForBitAsAllFloat32) {
  struct Case {
    const char* name;
    ParallelSizes sizes;
    int64_t micro_batches;
    Schedules schedules;
  };
  for (const Case& test_case :
       {Case{"allSchedules", Sizes(1, 1, 1), 1, Bf16(AllSchedules())},
        Case{"ep2dp2OffloadSerial", Sizes(2, 1, 2), 2,
             Bf16(Offload(OptimizerOffload::kSerial))},
        Case{"skewadamEp2dp2AllSchedules", Sizes(2, 1, 2), 2,
             Bf16(SkewAdam(AllSchedules()))},
        Case{"tiedEmbeddingsPp2AllSchedules", Sizes(1, 2, 1), 2,
             Bf16(TiedEmbeddings(AllSchedules()))}}) {
    SCOPED_TRACE(test_case.name);
    const absl::Status supported =
        PrepareTestBackend(ParallelLayout(test_case.sizes).world());
    if (!supported.ok()) GTEST_SKIP() << supported;
    Schedules float32_weights = test_case.schedules;
    float32_weights.float32_weights = true;
    const std::vector<RankRun> stored =
        TrainAllRanks(test_case.sizes, test_case.micro_batches,
                      test_case.schedules, /*skewed=*/false);
    const std::vector<RankRun> plain =
        TrainAllRanks(test_case.sizes, test_case.micro_batches, float32_weights,
                      /*skewed=*/false);
    for (size_t rank = 0; rank < stored.size(); ++rank) {
      SCOPED_TRACE(absl::StrCat("rank ", rank));
      ASSERT_TRUE(stored[rank].status.ok()) << stored[rank].status;
      ASSERT_TRUE(plain[rank].status.ok()) << plain[rank].status;
      ASSERT_EQ(stored[rank].steps.size(), plain[rank].steps.size());
      for (size_t i = 0; i < plain[rank].steps.size(); ++i) {
        const StepResult& a = stored[rank].steps[i];
        const StepResult& b = plain[rank].steps[i];
        EXPECT_EQ(a.cross_entropy, b.cross_entropy) << "step " << i + 1;
        EXPECT_EQ(a.load_balancing, b.load_balancing) << "step " << i + 1;
        EXPECT_EQ(a.gradient_norm, b.gradient_norm) << "step " << i + 1;
        EXPECT_EQ(a.expert_tokens, b.expert_tokens) << "step " << i + 1;
        ASSERT_EQ(stored[rank].gradients[i].size(),
                  plain[rank].gradients[i].size());
        for (size_t p = 0; p < plain[rank].gradients[i].size(); ++p) {
          EXPECT_EQ(stored[rank].gradients[i][p].values,
                    plain[rank].gradients[i][p].values)
              << "step " << i + 1 << " gradient of "
              << plain[rank].gradients[i][p].name;
        }
      }
      ASSERT_EQ(stored[rank].weights.size(), plain[rank].weights.size());
      int64_t rounded = 0;
      for (size_t p = 0; p < plain[rank].weights.size(); ++p) {
        const Elements& a = stored[rank].weights[p];
        const Elements& b = plain[rank].weights[p];
        for (size_t i = 0; i < b.values.size(); ++i) {
          if (a.values[i] == b.values[i]) continue;
          ++rounded;
          ASSERT_EQ(a.values[i], kernels::Bfloat16ToFloat(
                                     kernels::FloatToBfloat16(b.values[i])))
              << b.name << " element " << b.offset + i;
        }
      }
      // The product weights really are stored rounded.
      EXPECT_GT(rounded, 0);
    }
  }
}

// bf16 gradient accumulation against float32 gradients, both with bf16
// weight storage, on the same layout. The first step reads the same weights:
// the same losses and expert loads, and gradients a few bf16 roundings
// apart (one a pass and micro-batch, one for the sum over replicas, one for
// the clip: within 2^-7 of each tensor's largest gradient); the norm within
// 2^-8. Later steps start from weights the rounded gradients moved
// slightly differently, and stay within 1e-2 of the float32 run's loss. On
// one rank with every schedule (the layers' and the Ring-DTP head's
// windows, PipelinedLLEP's chunks), over two expert ranks with routing
// skewed onto one expert (LLEP's borrowers return their gradients into
// the owner's window), over replicas and two micro-batches with
// serial AdamW, SkewAdam over stages, and the qwen-like model (shared experts
// in the layer window) with a tied head over stages and replicas.
TEST(Bf16GradientsTest, FirstStepIsTheFloat32StepRoundedAndTrainingTracksIt) {
  struct Case {
    const char* name;
    ParallelSizes sizes;
    int64_t micro_batches;
    Schedules schedules;
    bool skewed = false;
  };
  for (const Case& test_case :
       {Case{"allSchedules", Sizes(1, 1, 1), 1, Bf16Gradients(AllSchedules())},
        Case{"ep2dp2OffloadSerial", Sizes(2, 1, 2), 2,
             Bf16Gradients(Offload(OptimizerOffload::kSerial))},
        Case{"skewedEp2AllSchedules", Sizes(2, 1, 1), 1,
             Bf16Gradients(AllSchedules()), true},
        Case{"skewadamEp2pp2AllSchedules", Sizes(2, 2, 1), 2,
             Bf16Gradients(SkewAdam(AllSchedules()))},
        Case{"qwenLikeTiedPp2dp2AllSchedules", Sizes(1, 2, 2), 2,
             Bf16Gradients(TiedEmbeddings(SharedExperts(
                 QkNorm(GroupedQuery(SigmoidRouter(AllSchedules()))))))}}) {
    SCOPED_TRACE(test_case.name);
    const absl::Status supported =
        PrepareTestBackend(ParallelLayout(test_case.sizes).world());
    if (!supported.ok()) GTEST_SKIP() << supported;
    Schedules float32_gradients = test_case.schedules;
    float32_gradients.bf16_gradients = false;
    const std::vector<RankRun> bf16 =
        TrainAllRanks(test_case.sizes, test_case.micro_batches,
                      test_case.schedules, test_case.skewed);
    const std::vector<RankRun> float32 =
        TrainAllRanks(test_case.sizes, test_case.micro_batches,
                      float32_gradients, test_case.skewed);
    for (size_t rank = 0; rank < bf16.size(); ++rank) {
      SCOPED_TRACE(absl::StrCat("rank ", rank));
      ASSERT_TRUE(bf16[rank].status.ok()) << bf16[rank].status;
      ASSERT_TRUE(float32[rank].status.ok()) << float32[rank].status;
      ASSERT_EQ(bf16[rank].steps.size(), float32[rank].steps.size());
      const StepResult& a = bf16[rank].steps[0];
      const StepResult& b = float32[rank].steps[0];
      EXPECT_EQ(a.cross_entropy, b.cross_entropy);
      EXPECT_EQ(a.load_balancing, b.load_balancing);
      EXPECT_EQ(a.expert_tokens, b.expert_tokens);
      EXPECT_NEAR(a.gradient_norm, b.gradient_norm,
                  std::ldexp(b.gradient_norm, -8));
      double worst = 0.0;
      for (const Elements& piece : bf16[rank].gradients[0]) {
        const double difference =
            WorstRelativeDifference(piece, float32[rank].gradients[0]);
        worst = std::max(worst, difference);
        EXPECT_LT(difference, std::ldexp(1.0, -7))
            << "gradient of " << piece.name << " from element " << piece.offset;
      }
      // The gradients really are rounded.
      EXPECT_GT(worst, 0.0);
      for (size_t i = 1; i < float32[rank].steps.size(); ++i) {
        EXPECT_NEAR(bf16[rank].steps[i].cross_entropy,
                    float32[rank].steps[i].cross_entropy,
                    1e-2 * float32[rank].steps[i].cross_entropy)
            << "step " << i + 1;
      }
    }
  }
}

}  // namespace
}  // namespace plateau::engine
