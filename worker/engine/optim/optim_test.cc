#include <cmath>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "absl/time/time.h"
#include "gloo/rendezvous/hash_store.h"
#include "gtest/gtest.h"
#include "kernels/cpu/adamw.h"
#include "kernels/cpu/cpu_ops.h"
#include "worker/engine/optim/adamw_optimizer.h"
#include "worker/engine/optim/gradient_clipping.h"
#include "worker/engine/optim/learning_rate.h"
#include "worker/engine/optim/zero_shards.h"
#include "worker/engine/parallel/gloo_communicator.h"

namespace plateau::engine {
namespace {

TEST(LearningRateTest, WarmsUpLinearlyThenDecaysByCosineToATenth) {
  EXPECT_FLOAT_EQ(LearningRateAt(1, 100, 1.0f, 10), 0.1f);
  EXPECT_FLOAT_EQ(LearningRateAt(5, 100, 1.0f, 10), 0.5f);
  EXPECT_FLOAT_EQ(LearningRateAt(10, 100, 1.0f, 10), 1.0f);
  EXPECT_NEAR(LearningRateAt(55, 100, 1.0f, 10), 0.55f, 1e-6);  // halfway
  EXPECT_FLOAT_EQ(LearningRateAt(100, 100, 1.0f, 10), 0.1f);
  float previous = 2.0f;
  for (int64_t step = 10; step <= 100; ++step) {
    const float rate = LearningRateAt(step, 100, 1.0f, 10);
    EXPECT_LE(rate, previous);
    previous = rate;
  }
  // No warmup: the first step is at the peak.
  EXPECT_FLOAT_EQ(
      LearningRateAt(1, 50, 3e-3f, 0),
      3e-3f * 0.1f + 3e-3f * 0.9f * 0.5f * (1 + std::cos(M_PI / 50)));
}

class OptimizerTest : public ::testing::Test {
 protected:
  OptimizerTest() : ops_(2), allocator_(Options()) {
    config_.layers = 1;
    config_.d_model = 8;
    config_.heads = 2;
    config_.experts = 2;
    config_.top_k = 1;
    config_.ffn_hidden = 4;
    config_.vocab = 5;
    config_.seq_len = 4;
  }
  AccountedAllocator::Options Options() {
    AccountedAllocator::Options options;
    options.device_source = &source_;
    options.host_source = &source_;
    return options;
  }
  Tensor RandomTensor(int64_t elements, int seed) {
    Tensor tensor = Tensor::Create(allocator_, MemoryPool::kDevice,
                                   MemoryComponent::kWeights, {elements})
                        .value();
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (int64_t i = 0; i < elements; ++i) tensor.f32()[i] = normal(rng);
    return tensor;
  }

  ModelConfig config_;
  HostMemorySource source_;
  kernels::cpu::CpuOps ops_;
  AccountedAllocator allocator_;
};

TEST_F(OptimizerTest, AdamWDecaysEverythingButNormsAndNamesItsState) {
  const ParameterLayout layout(config_);
  const int64_t count = layout.total_elements();
  Tensor weights = RandomTensor(count, 1);
  Tensor gradients = RandomTensor(count, 2);
  std::vector<float> expected(weights.f32(), weights.f32() + count);
  AdamWSettings settings;
  settings.weight_decay = 0.5f;
  auto optimizer = AdamWOptimizer::Create(settings, &layout, {}, &weights,
                                          &gradients, &ops_, &allocator_);
  ASSERT_TRUE(optimizer.ok()) << optimizer.status();
  EXPECT_EQ(allocator_.Usage(MemoryPool::kDevice, MemoryComponent::kOptimizer)
                .current_bytes,
            count * 8);
  (*optimizer)->Step(0.01f, 1);

  for (const ParameterInfo& info : layout.parameters()) {
    kernels::AdamWHyperparameters hyper;
    hyper.learning_rate = 0.01f;
    hyper.beta1 = settings.beta1;
    hyper.beta2 = settings.beta2;
    hyper.weight_decay = info.role == ParameterRole::kNorm ? 0.0f : 0.5f;
    std::vector<float> m(info.elements, 0.0f), v(info.elements, 0.0f);
    kernels::cpu::AdamWUpdate(kernels::ComputeAdamWCoefficients(hyper),
                              info.elements, expected.data() + info.offset,
                              gradients.f32() + info.offset, m.data(),
                              v.data());
    for (int64_t i = 0; i < info.elements; ++i) {
      ASSERT_FLOAT_EQ(weights.f32()[info.offset + i], expected[info.offset + i])
          << info.name;
    }
  }

  std::set<std::string> names;
  int64_t state_elements = 0;
  for (const TensorPiece& piece : (*optimizer)->StatePieces()) {
    names.insert(piece.name);
    EXPECT_EQ(piece.offset, 0) << piece.name;
    state_elements += piece.elements;
  }
  EXPECT_EQ(state_elements, 2 * count);
  EXPECT_TRUE(names.count("layers.0.moe.experts.w1.exp_avg_sq"));
  EXPECT_TRUE(names.count("embed.weight.exp_avg"));
  const auto tiers = (*optimizer)->StateBytesByTier();
  EXPECT_EQ(tiers.at("expert"), 3 * 2 * 4 * 8 * 8);
  EXPECT_EQ(tiers.at("router"), 2 * 8 * 8);
  EXPECT_EQ(tiers.at("dense") + tiers.at("expert") + tiers.at("router"),
            count * 8);
}

// OffloadStreamAdamW and its serial baseline compute bitwise what AdamW on
// the device computes, over owned ranges cut into buckets that split
// parameters, with their state in the host pool and bounded staging.
TEST_F(OptimizerTest, OffloadedAdamWMatchesTheDeviceBitwise) {
  const ParameterLayout layout(config_);
  const int64_t count = layout.total_elements();
  const std::vector<OwnedRange> owned = {{3, count / 2},
                                         {count / 2 + 5, count}};
  const int64_t owned_elements = count - 8;
  Tensor gradients = RandomTensor(count, 2);
  Tensor device_weights = RandomTensor(count, 1);
  AdamWSettings settings;
  auto device =
      AdamWOptimizer::Create(settings, &layout, owned, &device_weights,
                             &gradients, &ops_, &allocator_);
  ASSERT_TRUE(device.ok()) << device.status();
  for (int step = 1; step <= 3; ++step) (*device)->Step(0.01f, step);

  for (const OptimizerOffload offload :
       {OptimizerOffload::kSerial, OptimizerOffload::kStream}) {
    settings.offload = offload;
    settings.bucket_elements = 7;
    settings.host_threads = 2;
    Tensor weights = RandomTensor(count, 1);
    const MemoryUsage device_optimizer_before =
        allocator_.Usage(MemoryPool::kDevice, MemoryComponent::kOptimizer);
    auto offloaded = AdamWOptimizer::Create(settings, &layout, owned, &weights,
                                            &gradients, &ops_, &allocator_);
    ASSERT_TRUE(offloaded.ok()) << offloaded.status();
    EXPECT_EQ(allocator_.Usage(MemoryPool::kDevice, MemoryComponent::kOptimizer)
                  .current_bytes,
              device_optimizer_before.current_bytes);
    EXPECT_EQ(allocator_.Usage(MemoryPool::kHost, MemoryComponent::kOptimizer)
                  .current_bytes,
              owned_elements * 8);
    EXPECT_EQ(allocator_.Usage(MemoryPool::kHost, MemoryComponent::kWeights)
                  .current_bytes,
              owned_elements * 4);
    EXPECT_EQ(
        allocator_.Usage(MemoryPool::kHost, MemoryComponent::kStaging)
            .current_bytes,
        offload == OptimizerOffload::kSerial ? owned_elements * 4 : 2 * 7 * 4);
    for (int step = 1; step <= 3; ++step) (*offloaded)->Step(0.01f, step);
    EXPECT_TRUE(
        std::equal(weights.f32(), weights.f32() + count, device_weights.f32()));
    const std::vector<TensorPiece> expected = (*device)->StatePieces();
    const std::vector<TensorPiece> actual = (*offloaded)->StatePieces();
    ASSERT_EQ(actual.size(), expected.size());
    for (size_t i = 0; i < actual.size(); ++i) {
      EXPECT_EQ(actual[i].pool, MemoryPool::kHost);
      EXPECT_TRUE(std::equal(actual[i].data,
                             actual[i].data + actual[i].elements,
                             expected[i].data))
          << actual[i].name;
    }
    // Weights written behind the optimizer's back (a checkpoint loaded)
    // are what the next step starts from once reloaded.
    std::fill_n(weights.f32(), count, 0.5f);
    (*offloaded)->ReloadWeights();
    (*offloaded)->Step(0.0f, 4);
    EXPECT_EQ(weights.f32()[4], 0.5f);
  }
}

// Two optimizers owning the two halves of the buffers (a ZeRO-1 split that
// cuts through a parameter) update exactly as one owning everything, and
// their state pieces tile every whole-model tensor once.
TEST_F(OptimizerTest, AdamWOverOwnedRangesMatchesTheWhole) {
  const ParameterLayout layout(config_);
  const int64_t count = layout.total_elements();
  const int64_t half = count / 2 + 3;
  Tensor whole_weights = RandomTensor(count, 1);
  Tensor split_weights = RandomTensor(count, 1);
  Tensor gradients = RandomTensor(count, 2);
  AdamWSettings settings;
  auto whole = AdamWOptimizer::Create(settings, &layout, {}, &whole_weights,
                                      &gradients, &ops_, &allocator_);
  auto low =
      AdamWOptimizer::Create(settings, &layout, {{0, half}}, &split_weights,
                             &gradients, &ops_, &allocator_);
  auto high =
      AdamWOptimizer::Create(settings, &layout, {{half, count}}, &split_weights,
                             &gradients, &ops_, &allocator_);
  ASSERT_TRUE(whole.ok() && low.ok() && high.ok());
  for (int64_t step = 1; step <= 3; ++step) {
    (*whole)->Step(0.01f, step);
    (*low)->Step(0.01f, step);
    (*high)->Step(0.01f, step);
  }
  for (int64_t i = 0; i < count; ++i) {
    ASSERT_EQ(whole_weights.f32()[i], split_weights.f32()[i]) << i;
  }

  std::map<std::string, std::vector<const TensorPiece*>> by_name;
  std::vector<TensorPiece> whole_pieces = (*whole)->StatePieces();
  std::vector<TensorPiece> pieces = (*low)->StatePieces();
  for (const TensorPiece& piece : (*high)->StatePieces()) {
    pieces.push_back(piece);
  }
  for (const TensorPiece& piece : pieces) by_name[piece.name].push_back(&piece);
  ASSERT_EQ(by_name.size(), whole_pieces.size());
  for (const TensorPiece& expected : whole_pieces) {
    int64_t covered = 0;
    for (const TensorPiece* piece : by_name[expected.name]) {
      EXPECT_EQ(piece->global_shape, expected.global_shape);
      EXPECT_EQ(piece->offset, covered) << expected.name;
      for (int64_t i = 0; i < piece->elements; ++i) {
        ASSERT_EQ(piece->data[i], expected.data[covered + i]) << expected.name;
      }
      covered += piece->elements;
    }
    EXPECT_EQ(covered, expected.elements) << expected.name;
  }
}

// Two ranks (threads over one in-memory store) with regions padded for
// them: ReduceGradients leaves each rank's shards holding the sums, and
// GatherWeights gives both ranks every updated shard.
TEST_F(OptimizerTest, ZeroShardsReduceAndGatherOverTwoRanks) {
  ModelShard shard = ModelShard::Whole(config_);
  shard.dense_alignment = 2;
  shard.expert_alignment = 2;
  const ParameterLayout layout(config_, shard);
  const int64_t count = layout.total_elements();
  ASSERT_EQ(layout.dense_elements() % 2, 0);
  ASSERT_EQ(count % 2, 0);

  auto store = std::make_shared<gloo::rendezvous::HashStore>();
  std::vector<Tensor> gradients, weights;
  for (int rank = 0; rank < 2; ++rank) {
    gradients.push_back(RandomTensor(count, 10 + rank));
    weights.push_back(RandomTensor(count, 20 + rank));
  }
  std::vector<float> sums(count);
  for (int64_t i = 0; i < count; ++i) {
    sums[i] = gradients[0].f32()[i] + gradients[1].f32()[i];
  }
  std::vector<std::vector<OwnedRange>> owned(2);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 2; ++rank) {
    threads.emplace_back([&, rank] {
      auto dense =
          GlooCommunicator::Create(store, "dense", rank, 2, absl::Seconds(20));
      auto expert =
          GlooCommunicator::Create(store, "expert", rank, 2, absl::Seconds(20));
      ASSERT_TRUE(dense.ok() && expert.ok());
      kernels::cpu::CpuOps ops(1);
      ZeroShards shards(layout, dense->get(), expert->get());
      owned[rank] = shards.owned();
      ASSERT_TRUE(
          shards.ReduceGradients(gradients[rank], ops, allocator_).ok());
      ASSERT_TRUE(shards.GatherWeights(weights[rank], ops, allocator_).ok());
    });
  }
  for (std::thread& thread : threads) thread.join();

  // Rank 0 owns the first half of each region, rank 1 the second.
  ASSERT_EQ(owned[0].size(), 2u);
  EXPECT_EQ(owned[0][0].begin, 0);
  EXPECT_EQ(owned[0][0].end, layout.dense_elements() / 2);
  EXPECT_EQ(owned[1][0].begin, layout.dense_elements() / 2);
  EXPECT_EQ(owned[1][1].end, count);
  for (int rank = 0; rank < 2; ++rank) {
    for (const OwnedRange& range : owned[rank]) {
      for (int64_t i = range.begin; i < range.end; ++i) {
        ASSERT_FLOAT_EQ(gradients[rank].f32()[i], sums[i]) << i;
        // Both ranks now hold the owner's weights.
        ASSERT_EQ(weights[1 - rank].f32()[i], weights[rank].f32()[i]) << i;
      }
    }
  }
}

TEST(GradientClippingTest, ScalesOnlyAboveTheLimit) {
  EXPECT_EQ(GradientClipFactor(3.0, 4.0), 1.0f);
  EXPECT_EQ(GradientClipFactor(3.0, 0.0), 1.0f);
  EXPECT_FLOAT_EQ(GradientClipFactor(8.0, 2.0), 0.25f);
  // A non-finite norm is not clipped to a finite factor that hides it.
  EXPECT_EQ(GradientClipFactor(std::nan(""), 1.0), 1.0f);
}

}  // namespace
}  // namespace plateau::engine
