#include <cmath>
#include <random>
#include <set>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/adamw.h"
#include "kernels/cpu/cpu_ops.h"
#include "worker/engine/optim/adamw_optimizer.h"
#include "worker/engine/optim/gradient_clipping.h"
#include "worker/engine/optim/learning_rate.h"

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
  auto optimizer = AdamWOptimizer::Create(settings, &layout, &weights,
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
  for (const OptimizerStateTensor& state : (*optimizer)->StateTensors()) {
    names.insert(state.name);
    state_elements += state.elements;
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

TEST_F(OptimizerTest, ClipsOnlyAboveTheLimit) {
  Tensor gradients = RandomTensor(1000, 3);
  double squares = 0;
  for (int64_t i = 0; i < 1000; ++i)
    squares += double{gradients.f32()[i]} * gradients.f32()[i];
  const double norm = std::sqrt(squares);
  EXPECT_NEAR(ClipGradientNorm(ops_, gradients, 2 * norm), norm, 1e-6 * norm);
  EXPECT_NEAR(ClipGradientNorm(ops_, gradients, 0.0), norm, 1e-6 * norm);
  EXPECT_NEAR(ClipGradientNorm(ops_, gradients, norm / 4), norm, 1e-6 * norm);
  EXPECT_NEAR(std::sqrt(ops_.SumOfSquares(1000, gradients.f32())), norm / 4,
              1e-5 * norm);
}

}  // namespace
}  // namespace plateau::engine
