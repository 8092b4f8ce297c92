#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "engine/optim/adamw_optimizer.h"
#include "engine/optim/gradient_clipping.h"
#include "engine/optim/learning_rate.h"
#include "engine/optim/tiered_optimizer.h"
#include "engine/optim/zero_shards.h"
#include "engine/parallel/gloo_communicator.h"
#include "gloo/rendezvous/hash_store.h"
#include "gtest/gtest.h"
#include "kernels/cpu/adamw.h"
#include "kernels/cpu/cpu_ops.h"

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
    config_.kv_heads = 2;
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
  // The whole model, its regions padded to split over groups of two.
  static ParameterLayout WholeModelOverTwoRanks(const ModelConfig& config) {
    ModelShard shard = ModelShard::Whole(config);
    shard.dense_alignment = 2;
    shard.expert_alignment = 2;
    return ParameterLayout(config, shard);
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

  // Where a master piece's values lie in the model's buffer.
  static const float* ModelValuesOf(const ParameterLayout& layout,
                                    const Tensor& weights,
                                    const TensorPiece& piece) {
    const ParameterInfo& info = *layout.Find(piece.name);
    return weights.f32() + info.offset + (piece.offset - info.global_offset);
  }
  void ExpectMastersAreTheSourceOfTruth(const ParameterLayout& layout,
                                        const std::vector<OwnedRange>& owned,
                                        Tensor& weights, Optimizer& optimizer);

  // Runs body(rank, dense group, expert group, ops) on two ranks: threads
  // over one in-memory store.
  template <typename Body>
  static void OnTwoRanks(Body body) {
    auto store = std::make_shared<gloo::rendezvous::HashStore>();
    std::vector<std::thread> threads;
    for (int rank = 0; rank < 2; ++rank) {
      threads.emplace_back([&, rank] {
        auto dense = GlooCommunicator::Create(store, "dense", rank, 2,
                                              absl::Seconds(20));
        auto expert = GlooCommunicator::Create(store, "expert", rank, 2,
                                               absl::Seconds(20));
        ASSERT_TRUE(dense.ok()) << dense.status();
        ASSERT_TRUE(expert.ok()) << expert.status();
        kernels::cpu::CpuOps ops(1);
        body(rank, dense->get(), expert->get(), ops);
        // A body may use no collective of a group (Lion has no expert
        // statistics): without these, one rank could close its connections
        // while the other is still completing Gloo's connect handshake.
        EXPECT_TRUE((*dense)->Barrier().ok());
        EXPECT_TRUE((*expert)->Barrier().ok());
      });
    }
    for (std::thread& thread : threads) thread.join();
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
  auto optimizer =
      AdamWOptimizer::Create(settings, &layout, {}, AllFloat32(&weights),
                             AllFloat32(&gradients), &ops_, &allocator_);
  ASSERT_TRUE(optimizer.ok()) << optimizer.status();
  EXPECT_EQ(allocator_.Usage(MemoryPool::kDevice, MemoryComponent::kOptimizer)
                .current_bytes,
            count * 8);
  ASSERT_TRUE((*optimizer)->Step(0.01f, 1).ok());

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
  auto device = AdamWOptimizer::Create(
      settings, &layout, owned, AllFloat32(&device_weights),
      AllFloat32(&gradients), &ops_, &allocator_);
  ASSERT_TRUE(device.ok()) << device.status();
  for (int step = 1; step <= 3; ++step)
    ASSERT_TRUE((*device)->Step(0.01f, step).ok());

  for (const OptimizerOffload offload :
       {OptimizerOffload::kSerial, OptimizerOffload::kStream}) {
    settings.offload = offload;
    settings.bucket_elements = 7;
    settings.host_threads = 2;
    Tensor weights = RandomTensor(count, 1);
    const MemoryUsage device_optimizer_before =
        allocator_.Usage(MemoryPool::kDevice, MemoryComponent::kOptimizer);
    auto offloaded =
        AdamWOptimizer::Create(settings, &layout, owned, AllFloat32(&weights),
                               AllFloat32(&gradients), &ops_, &allocator_);
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
    for (int step = 1; step <= 3; ++step)
      ASSERT_TRUE((*offloaded)->Step(0.01f, step).ok());
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
    EXPECT_TRUE((*device)->MasterPieces().empty());
    ExpectMastersAreTheSourceOfTruth(layout, owned, weights, **offloaded);
  }
}

// With bf16 weight storage the device keeps the product weights in bf16
// only: an offloaded optimizer's masters (set exactly, as the trainer does)
// update bitwise as they do over float32 weights, and each step leaves the
// device the masters, rounded where it stores bf16; given the product
// weights' gradients in bf16 (bf16 gradient accumulation) it updates as
// from their float32 values. Without offload there would be no float32
// weights to update: an error.
TEST_F(OptimizerTest, Bf16WeightStorageGetsTheMastersRounded) {
  ModelConfig stored_config = config_;
  stored_config.matmul_precision = kernels::GemmPrecision::kBf16;
  stored_config.bf16_weight_storage = true;
  const ParameterLayout plain_layout(config_);
  const ParameterLayout layout(stored_config);
  const int64_t count = layout.total_elements();
  const int64_t begin = layout.bf16_begin();
  ASSERT_EQ(plain_layout.total_elements(), count);
  ASSERT_EQ(plain_layout.bf16_begin(), begin);
  const Tensor initial = RandomTensor(count, 1);
  // The product weights' gradients bf16 values, as float32 and as bf16
  // gradient accumulation stores them (GradientCopies widens those).
  Tensor gradients = RandomTensor(count, 2);
  Tensor gradient_bits = Tensor::Create(allocator_, MemoryPool::kDevice,
                                        MemoryComponent::kGradients,
                                        {count - begin}, DType::kBfloat16)
                             .value();
  for (int64_t i = begin; i < count; ++i) {
    gradient_bits.bf16()[i - begin] =
        kernels::FloatToBfloat16(gradients.f32()[i]);
    gradients.f32()[i] =
        kernels::Bfloat16ToFloat(gradient_bits.bf16()[i - begin]);
  }
  const SplitBuffers bf16_gradients{&gradients, &gradient_bits, begin};
  auto stored_weights = [&](Tensor* float32, Tensor* bf16) {
    *float32 = Tensor::Create(allocator_, MemoryPool::kDevice,
                              MemoryComponent::kWeights, {begin})
                   .value();
    *bf16 = Tensor::Create(allocator_, MemoryPool::kDevice,
                           MemoryComponent::kWeights, {count - begin},
                           DType::kBfloat16)
                .value();
    std::copy_n(initial.f32(), begin, float32->f32());
    for (int64_t i = begin; i < count; ++i) {
      bf16->bf16()[i - begin] = kernels::FloatToBfloat16(initial.f32()[i]);
    }
    return SplitBuffers{float32, bf16, begin};
  };
  // Sets the masters to `initial`'s values, where they lie in the layout.
  auto set_masters = [&](Optimizer& optimizer) {
    for (const TensorPiece& piece : optimizer.MasterPieces()) {
      std::copy_n(ModelValuesOf(layout, initial, piece), piece.elements,
                  piece.data);
    }
  };

  struct Case {
    const char* name;
    std::function<absl::StatusOr<std::unique_ptr<Optimizer>>(
        const ParameterLayout&, const SplitBuffers&, const SplitBuffers&)>
        create;
  };
  auto adamw = [&](OptimizerOffload offload) {
    return [&, offload](const ParameterLayout& on, const SplitBuffers& weights,
                        const SplitBuffers& gradients)
               -> absl::StatusOr<std::unique_ptr<Optimizer>> {
      AdamWSettings settings;
      settings.offload = offload;
      settings.bucket_elements = 7;
      settings.host_threads = 2;
      return AdamWOptimizer::Create(settings, &on, {}, weights, gradients,
                                    &ops_, &allocator_);
    };
  };
  auto skewadam = [&](const ParameterLayout& on, const SplitBuffers& weights,
                      const SplitBuffers& gradients)
      -> absl::StatusOr<std::unique_ptr<Optimizer>> {
    TieredSettings settings;
    settings.kind = TieredKind::kSkewAdam;
    settings.offload = OptimizerOffload::kStream;
    settings.bucket_elements = 7;
    settings.host_threads = 2;
    return TieredOptimizer::Create(settings, &on, {}, nullptr, nullptr, weights,
                                   gradients, &ops_, &allocator_);
  };
  for (const Case& test_case :
       {Case{"adamw serial", adamw(OptimizerOffload::kSerial)},
        Case{"adamw stream", adamw(OptimizerOffload::kStream)},
        Case{"skewadam stream", skewadam}}) {
    for (const bool with_bf16_gradients : {false, true}) {
      SCOPED_TRACE(absl::StrCat(test_case.name,
                                with_bf16_gradients ? ", bf16 gradients" : ""));
      const SplitBuffers given =
          with_bf16_gradients ? bf16_gradients : AllFloat32(&gradients);
      Tensor reference_weights = RandomTensor(count, 1);
      auto reference = test_case.create(
          plain_layout, AllFloat32(&reference_weights), AllFloat32(&gradients));
      ASSERT_TRUE(reference.ok()) << reference.status();
      Tensor float32, bf16;
      const SplitBuffers weights = stored_weights(&float32, &bf16);
      const int64_t staging_before =
          allocator_.Usage(MemoryPool::kHost, MemoryComponent::kStaging)
              .current_bytes;
      auto optimizer = test_case.create(layout, weights, given);
      ASSERT_TRUE(optimizer.ok()) << optimizer.status();
      // Its write-back's two slots of bf16, besides the gradients' staging.
      EXPECT_GE(allocator_.Usage(MemoryPool::kHost, MemoryComponent::kStaging)
                        .current_bytes -
                    staging_before,
                2 * kWriteBackSlotElements * 2);
      set_masters(**optimizer);
      for (int step = 1; step <= 3; ++step) {
        ASSERT_TRUE((*reference)->Step(0.01f, step).ok());
        ASSERT_TRUE((*optimizer)->Step(0.01f, step).ok());
      }
      const std::vector<TensorPiece> expected = (*reference)->MasterPieces();
      const std::vector<TensorPiece> actual = (*optimizer)->MasterPieces();
      ASSERT_EQ(actual.size(), expected.size());
      for (size_t i = 0; i < actual.size(); ++i) {
        ASSERT_TRUE(std::equal(actual[i].data,
                               actual[i].data + actual[i].elements,
                               expected[i].data))
            << actual[i].name;
      }
      EXPECT_TRUE(std::equal(float32.f32(), float32.f32() + begin,
                             reference_weights.f32()));
      for (int64_t i = begin; i < count; ++i) {
        ASSERT_EQ(bf16.bf16()[i - begin],
                  kernels::FloatToBfloat16(reference_weights.f32()[i]))
            << "element " << i;
      }
      // Masters made from the stored weights take them widened.
      Tensor float32_again, bf16_again;
      auto fetched = test_case.create(
          layout, stored_weights(&float32_again, &bf16_again), given);
      ASSERT_TRUE(fetched.ok()) << fetched.status();
      for (const TensorPiece& piece : (*fetched)->MasterPieces()) {
        const float* values = ModelValuesOf(layout, initial, piece);
        for (int64_t i = 0; i < piece.elements; ++i) {
          ASSERT_EQ(piece.data[i],
                    layout.Find(piece.name)->offset >= begin
                        ? kernels::Bfloat16ToFloat(
                              kernels::FloatToBfloat16(values[i]))
                        : values[i])
              << piece.name << " element " << i;
        }
      }
    }
  }

  Tensor float32, bf16;
  auto device = AdamWOptimizer::Create(
      AdamWSettings(), &layout, {}, stored_weights(&float32, &bf16),
      AllFloat32(&gradients), &ops_, &allocator_);
  EXPECT_EQ(device.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(device.status().message(), "offload"))
      << device.status();
}

// With offload the masters are the weights' source of truth: their pieces
// tile the owned trained elements, each holding the model's values where it
// lies, and what is written to them (a checkpoint loaded) is what the next
// step (here of learning rate 0) writes to the model.
void OptimizerTest::ExpectMastersAreTheSourceOfTruth(
    const ParameterLayout& layout, const std::vector<OwnedRange>& owned,
    Tensor& weights, Optimizer& optimizer) {
  const std::vector<TensorPiece> masters = optimizer.MasterPieces();
  int64_t covered = 0;
  for (const TensorPiece& piece : masters) {
    ASSERT_NE(layout.Find(piece.name), nullptr) << piece.name;
    EXPECT_EQ(piece.pool, MemoryPool::kHost);
    EXPECT_EQ(piece.global_shape, layout.Find(piece.name)->global_shape);
    const float* model = ModelValuesOf(layout, weights, piece);
    EXPECT_TRUE(std::equal(piece.data, piece.data + piece.elements, model))
        << piece.name;
    covered += piece.elements;
  }
  EXPECT_EQ(covered, OwnedTrainedElements(layout, owned));
  for (const TensorPiece& piece : masters) {
    std::fill_n(piece.data, piece.elements, 0.5f);
  }
  ASSERT_TRUE(optimizer.Step(0.0f, 4).ok());
  for (const TensorPiece& piece : masters) {
    const float* model = ModelValuesOf(layout, weights, piece);
    EXPECT_EQ(std::count(model, model + piece.elements, 0.5f), piece.elements)
        << piece.name;
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
  auto whole =
      AdamWOptimizer::Create(settings, &layout, {}, AllFloat32(&whole_weights),
                             AllFloat32(&gradients), &ops_, &allocator_);
  auto low = AdamWOptimizer::Create(settings, &layout, {{0, half}},
                                    AllFloat32(&split_weights),
                                    AllFloat32(&gradients), &ops_, &allocator_);
  auto high = AdamWOptimizer::Create(
      settings, &layout, {{half, count}}, AllFloat32(&split_weights),
      AllFloat32(&gradients), &ops_, &allocator_);
  ASSERT_TRUE(whole.ok() && low.ok() && high.ok());
  for (int64_t step = 1; step <= 3; ++step) {
    ASSERT_TRUE((*whole)->Step(0.01f, step).ok());
    ASSERT_TRUE((*low)->Step(0.01f, step).ok());
    ASSERT_TRUE((*high)->Step(0.01f, step).ok());
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
  const ParameterLayout layout = WholeModelOverTwoRanks(config_);
  const int64_t count = layout.total_elements();
  ASSERT_EQ(layout.dense_elements() % 2, 0);
  ASSERT_EQ(count % 2, 0);

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
  OnTwoRanks([&](int rank, Communicator* dense, Communicator* expert,
                 kernels::cpu::CpuOps& ops) {
    ZeroShards shards(layout, dense, expert);
    owned[rank] = shards.owned();
    ASSERT_TRUE(
        shards.ReduceGradients(AllFloat32(&gradients[rank]), ops, allocator_)
            .ok());
    ASSERT_TRUE(
        shards.GatherWeights(AllFloat32(&weights[rank]), ops, allocator_).ok());
  });

  // Rank 0 owns the first half of each region (the dense float32-only
  // parameters, the embedding, the dense product weights, the experts),
  // rank 1 the second.
  const int64_t bf16_begin = layout.bf16_begin();
  const int64_t products = layout.dense_products_begin();
  const int64_t dense = layout.dense_elements();
  ASSERT_GT(bf16_begin, 0);
  ASSERT_GT(products, bf16_begin);
  ASSERT_EQ(owned[0].size(), 4u);
  EXPECT_EQ(owned[0][0].begin, 0);
  EXPECT_EQ(owned[0][0].end, bf16_begin / 2);
  EXPECT_EQ(owned[1][0].begin, bf16_begin / 2);
  EXPECT_EQ(owned[1][0].end, bf16_begin);
  EXPECT_EQ(owned[0][1].begin, bf16_begin);
  EXPECT_EQ(owned[0][1].end, bf16_begin + (products - bf16_begin) / 2);
  EXPECT_EQ(owned[1][1].end, products);
  EXPECT_EQ(owned[0][2].begin, products);
  EXPECT_EQ(owned[0][2].end, products + (dense - products) / 2);
  EXPECT_EQ(owned[1][2].end, dense);
  EXPECT_EQ(owned[0][3].begin, dense);
  EXPECT_EQ(owned[1][3].end, count);
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

// With bf16 weight storage the embedding's and product weights' regions
// gather their bf16 bits (half the bytes), the float32 region its floats.
TEST_F(OptimizerTest, ZeroShardsGatherBf16StoredWeightsOverTwoRanks) {
  ModelConfig config = config_;
  config.matmul_precision = kernels::GemmPrecision::kBf16;
  config.bf16_weight_storage = true;
  const ParameterLayout layout = WholeModelOverTwoRanks(config);
  const int64_t count = layout.total_elements();
  const int64_t begin = layout.bf16_begin();
  std::vector<Tensor> float32, bf16;
  for (int rank = 0; rank < 2; ++rank) {
    float32.push_back(RandomTensor(begin, 20 + rank));
    bf16.push_back(Tensor::Create(allocator_, MemoryPool::kDevice,
                                  MemoryComponent::kWeights, {count - begin},
                                  DType::kBfloat16)
                       .value());
    for (int64_t i = 0; i < count - begin; ++i) {
      bf16[rank].bf16()[i] = static_cast<uint16_t>(rank * 40000 + i);
    }
  }
  std::vector<std::vector<OwnedRange>> owned(2);
  OnTwoRanks([&](int rank, Communicator* dense, Communicator* expert,
                 kernels::cpu::CpuOps& ops) {
    ZeroShards shards(layout, dense, expert);
    owned[rank] = shards.owned();
    ASSERT_TRUE(
        shards
            .GatherWeights(SplitBuffers{&float32[rank], &bf16[rank], begin},
                           ops, allocator_)
            .ok());
  });
  ASSERT_EQ(owned[0].size(), 4u);
  for (int rank = 0; rank < 2; ++rank) {
    for (const OwnedRange& range : owned[rank]) {
      for (int64_t i = range.begin; i < range.end; ++i) {
        if (i < begin) {
          ASSERT_EQ(float32[1 - rank].f32()[i], float32[rank].f32()[i]) << i;
        } else {
          ASSERT_EQ(bf16[1 - rank].bf16()[i - begin],
                    static_cast<uint16_t>(rank * 40000 + i - begin))
              << i;
          ASSERT_EQ(bf16[rank].bf16()[i - begin],
                    static_cast<uint16_t>(rank * 40000 + i - begin))
              << i;
        }
      }
    }
  }
}

// With bf16 gradients the product regions are summed in float32, a chunk
// of the shard at a time, and rounded once: each owned element is the
// rounded sum of the two ranks' widened values (the expert region's shard,
// over 1.5M elements here, takes two chunks), the float32 region the
// plain sum. The norm reads the widened values, and clipping rounds the
// scaled ones.
TEST_F(OptimizerTest, ZeroShardsReduceBf16GradientsInFloat32OverTwoRanks) {
  ModelConfig config = config_;
  config.d_model = 512;
  config.ffn_hidden = 1024;
  config.matmul_precision = kernels::GemmPrecision::kBf16;
  config.bf16_weight_storage = true;
  config.bf16_gradients = true;
  const ParameterLayout layout = WholeModelOverTwoRanks(config);
  const int64_t count = layout.total_elements();
  const int64_t begin = layout.bf16_begin();
  ASSERT_GT((count - layout.dense_elements()) / 2, kGradientChunkElements);
  std::vector<Tensor> float32, bf16;
  std::vector<std::vector<float>> widened(2);
  for (int rank = 0; rank < 2; ++rank) {
    float32.push_back(RandomTensor(begin, 30 + rank));
    Tensor values = RandomTensor(count - begin, 40 + rank);
    bf16.push_back(Tensor::Create(allocator_, MemoryPool::kDevice,
                                  MemoryComponent::kGradients, {count - begin},
                                  DType::kBfloat16)
                       .value());
    for (int64_t i = 0; i < count - begin; ++i) {
      bf16[rank].bf16()[i] = kernels::FloatToBfloat16(values.f32()[i]);
      widened[rank].push_back(kernels::Bfloat16ToFloat(bf16[rank].bf16()[i]));
    }
  }
  const std::vector<float> float32_before[2] = {
      {float32[0].f32(), float32[0].f32() + begin},
      {float32[1].f32(), float32[1].f32() + begin}};
  constexpr float kClip = 0.3f;
  std::vector<std::vector<OwnedRange>> owned(2);
  double squares[2] = {0.0, 0.0};
  std::vector<uint16_t> reduced[2];
  OnTwoRanks([&](int rank, Communicator* dense, Communicator* expert,
                 kernels::cpu::CpuOps& ops) {
    ZeroShards shards(layout, dense, expert);
    owned[rank] = shards.owned();
    const SplitBuffers gradients{&float32[rank], &bf16[rank], begin};
    ASSERT_TRUE(shards.ReduceGradients(gradients, ops, allocator_).ok());
    reduced[rank].assign(bf16[rank].bf16(),
                         bf16[rank].bf16() + (count - begin));
    auto sum = shards.OwnedSumOfSquares(gradients, ops, allocator_);
    ASSERT_TRUE(sum.ok()) << sum.status();
    squares[rank] = *sum;
    ASSERT_TRUE(shards.ScaleOwned(gradients, kClip, ops, allocator_).ok());
  });
  for (int rank = 0; rank < 2; ++rank) {
    SCOPED_TRACE(absl::StrCat("rank ", rank));
    ASSERT_EQ(owned[rank].size(), 4u);
    double expected_squares = 0.0;
    for (const OwnedRange& range : owned[rank]) {
      for (int64_t i = range.begin; i < range.end; ++i) {
        if (i < begin) {
          const float sum = float32_before[0][i] + float32_before[1][i];
          expected_squares += double{sum} * sum;
          ASSERT_EQ(float32[rank].f32()[i], sum * kClip) << i;
          continue;
        }
        const float sum = widened[0][i - begin] + widened[1][i - begin];
        const uint16_t rounded = kernels::FloatToBfloat16(sum);
        ASSERT_EQ(reduced[rank][i - begin], rounded) << i;
        const float value = kernels::Bfloat16ToFloat(rounded);
        expected_squares += double{value} * value;
        ASSERT_EQ(bf16[rank].bf16()[i - begin],
                  kernels::FloatToBfloat16(value * kClip))
            << i;
      }
    }
    EXPECT_NEAR(squares[rank], expected_squares, 1e-6 * expected_squares);
  }
  // The reduction's and the norm's float32 chunks are what the planner
  // counts: the expert region's (three chunks of 1M) at most.
  EXPECT_EQ(allocator_.Usage(MemoryPool::kDevice, MemoryComponent::kGradients)
                .peak_bytes,
            2 * (count - begin) * 2 + 3 * kGradientChunkElements * 4 * 2);
}

// ---- The tiered optimizers ----

struct TieredCase {
  const char* name;
  TieredKind kind;
  MomentumStorage expert_momentum;
};

class TieredOptimizerTest : public OptimizerTest,
                            public ::testing::WithParamInterface<TieredCase> {
 protected:
  // Four steps of an optimizer of `settings` against ReferenceUnit.
  void ExpectTheFloat64Reference(const TieredSettings& settings);

  TieredSettings Settings() const {
    TieredSettings settings;
    settings.kind = GetParam().kind;
    settings.expert_momentum = GetParam().expert_momentum;
    settings.weight_decay = 0.5f;
    return settings;
  }
};

// The float64 reference of one unit (a whole tensor, or one expert's
// matrix) of kernels/tiered_update.h.
struct ReferenceUnit {
  TierRule rule;
  bool decay = false;
  int64_t rows = 1;
  int64_t columns = 1;
  std::vector<double> weights, momentum, second_moment, row_statistics,
      column_statistics;

  void Step(const TieredSettings& s, double learning_rate, int64_t t,
            const float* gradients) {
    const int64_t n = rows * columns;
    const double beta1 = s.beta1, beta2 = s.beta2;
    const double decay =
        1.0 - learning_rate * (this->decay ? s.weight_decay : 0.0);
    if (!rule.second_moment) {  // Lion
      for (int64_t i = 0; i < n; ++i) {
        const double mixed = beta1 * momentum[i] + (1 - beta1) * gradients[i];
        const double sign = (mixed > 0) - (mixed < 0);
        weights[i] = weights[i] * decay - learning_rate * sign;
        momentum[i] = beta2 * momentum[i] + (1 - beta2) * gradients[i];
      }
      return;
    }
    std::vector<double> numerator(n), v(n);
    for (int64_t i = 0; i < n; ++i) {
      const double g = gradients[i];
      switch (rule.momentum) {
        case MomentumStorage::kNone:
          numerator[i] = g;
          continue;
        case MomentumStorage::kFloat32:
          momentum[i] = beta1 * momentum[i] + (1 - beta1) * g;
          break;
        case MomentumStorage::kBfloat16:
          // Stored rounded, from the float arithmetic of the kernel.
          momentum[i] = kernels::Bfloat16ToFloat(kernels::FloatToBfloat16(
              s.beta1 * static_cast<float>(momentum[i]) +
              (1.0f - s.beta1) * gradients[i]));
          break;
      }
      numerator[i] = momentum[i] / (1 - std::pow(beta1, t));
    }
    const double correction = 1 / (1 - std::pow(beta2, t));
    if (rule.factored) {
      std::vector<double> row_sums(rows, 0.0), column_sums(columns, 0.0);
      for (int64_t i = 0; i < n; ++i) {
        const double square = double{gradients[i]} * gradients[i] + 1e-30;
        row_sums[i / columns] += square;
        column_sums[i % columns] += square;
      }
      double row_total = 0;
      for (int64_t r = 0; r < rows; ++r) {
        row_statistics[r] =
            beta2 * row_statistics[r] + (1 - beta2) * row_sums[r];
        row_total += row_statistics[r];
      }
      for (int64_t c = 0; c < columns; ++c) {
        column_statistics[c] =
            beta2 * column_statistics[c] + (1 - beta2) * column_sums[c];
      }
      for (int64_t i = 0; i < n; ++i) {
        v[i] = row_statistics[i / columns] * column_statistics[i % columns] /
               row_total * correction;
      }
    } else {
      for (int64_t i = 0; i < n; ++i) {
        second_moment[i] = beta2 * second_moment[i] +
                           (1 - beta2) * double{gradients[i]} * gradients[i];
        v[i] = second_moment[i] * correction;
      }
    }
    std::vector<double> u(n);
    double squares = 0;
    for (int64_t i = 0; i < n; ++i) {
      u[i] = numerator[i] / (std::sqrt(v[i]) + s.epsilon);
      squares += u[i] * u[i];
    }
    const double scale =
        1 / std::max(1.0, std::sqrt(squares / n) / s.clip_threshold);
    for (int64_t i = 0; i < n; ++i) {
      weights[i] = weights[i] * decay - learning_rate * scale * u[i];
    }
  }
};

// Copies the piece's values (as float32) into its whole tensor in `tensors`.
void CopyPieceInto(const TensorPiece& piece,
                   std::map<std::string, std::vector<float>>& tensors) {
  std::vector<float>& values = tensors[piece.name];
  values.resize(ShapeElements(piece.global_shape));
  for (int64_t i = 0; i < piece.elements; ++i) {
    values[piece.offset + i] =
        piece.bfloat16_data != nullptr
            ? kernels::Bfloat16ToFloat(piece.bfloat16_data[i])
            : piece.data[i];
  }
}

// Both ways to update a tensor: in one go while it is in cache (all of
// them here), and in separate passes (none of them).
TEST_P(TieredOptimizerTest, EachTierMatchesAFloat64Reference) {
  for (const int64_t whole_update_elements : {int64_t{1} << 20, int64_t{0}}) {
    SCOPED_TRACE(whole_update_elements);
    TieredSettings settings = Settings();
    settings.whole_update_elements = whole_update_elements;
    ExpectTheFloat64Reference(settings);
  }
}

void TieredOptimizerTest::ExpectTheFloat64Reference(
    const TieredSettings& settings) {
  const ParameterLayout layout(config_);
  const int64_t count = layout.total_elements();
  Tensor weights = RandomTensor(count, 1);
  Tensor gradients = RandomTensor(count, 2);
  auto optimizer = TieredOptimizer::Create(
      settings, &layout, {}, nullptr, nullptr, AllFloat32(&weights),
      AllFloat32(&gradients), &ops_, &allocator_);
  ASSERT_TRUE(optimizer.ok()) << optimizer.status();

  // One reference per unit, at its offset in the buffers.
  std::vector<std::pair<int64_t, ReferenceUnit>> units;
  for (const ParameterInfo& info : layout.parameters()) {
    const std::vector<int64_t>& shape = info.global_shape;
    ReferenceUnit unit;
    unit.rule =
        TierRuleOf(settings.kind, settings.expert_momentum, info.role, shape);
    unit.decay = info.role != ParameterRole::kNorm;
    unit.rows = shape.size() >= 2 ? shape[shape.size() - 2] : 1;
    unit.columns = shape.back();
    const int64_t n = unit.rows * unit.columns;
    unit.momentum.assign(n, 0.0);
    unit.second_moment.assign(n, 0.0);
    unit.row_statistics.assign(unit.rows, 0.0);
    unit.column_statistics.assign(unit.columns, 0.0);
    for (int64_t first = 0; first < info.elements; first += n) {
      unit.weights.assign(weights.f32() + info.offset + first,
                          weights.f32() + info.offset + first + n);
      units.push_back({info.offset + first, unit});
    }
  }
  // A gradient with whole zero rows, as the embedding of unseen tokens has.
  const ParameterInfo& embedding = *layout.Find("embed.weight");
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int64_t step = 1; step <= 4; ++step) {
    for (int64_t i = 0; i < count; ++i) gradients.f32()[i] = normal(rng);
    std::fill_n(gradients.f32() + embedding.offset, config_.d_model, 0.0f);
    const float learning_rate = 0.01f * static_cast<float>(step);
    const std::vector<float> before(gradients.f32(), gradients.f32() + count);
    ASSERT_TRUE((*optimizer)->Step(learning_rate, step).ok());
    ASSERT_TRUE(std::equal(before.begin(), before.end(), gradients.f32()))
        << "the step changed its gradients";
    for (auto& [offset, unit] : units) {
      unit.Step(settings, learning_rate, step, gradients.f32() + offset);
    }
  }
  for (const auto& [offset, unit] : units) {
    for (size_t i = 0; i < unit.weights.size(); ++i) {
      ASSERT_NEAR(weights.f32()[offset + i], unit.weights[i],
                  2e-6 + 2e-6 * std::abs(unit.weights[i]))
          << GetParam().name << " element " << offset + i;
    }
  }
}

// The ZeRO-1 split over two ranks (threads over one in-memory store; a
// split through matrices, with the row and column sums completed over the
// group) updates as one rank owning everything, and the two ranks' state
// pieces, replicas left out, tile every whole-model tensor once.
TEST_P(TieredOptimizerTest, OverTwoRanksMatchesOneRank) {
  const TieredSettings settings = Settings();
  const ParameterLayout layout = WholeModelOverTwoRanks(config_);
  const int64_t count = layout.total_elements();
  Tensor gradients = RandomTensor(count, 2);
  Tensor whole_weights = RandomTensor(count, 1);
  auto whole = TieredOptimizer::Create(
      settings, &layout, {}, nullptr, nullptr, AllFloat32(&whole_weights),
      AllFloat32(&gradients), &ops_, &allocator_);
  ASSERT_TRUE(whole.ok()) << whole.status();
  for (int64_t step = 1; step <= 3; ++step) {
    ASSERT_TRUE((*whole)->Step(0.01f, step).ok());
  }
  std::map<std::string, std::vector<float>> whole_state;
  for (const TensorPiece& piece : (*whole)->StatePieces()) {
    CopyPieceInto(piece, whole_state);
  }

  std::vector<Tensor> weights;
  for (int rank = 0; rank < 2; ++rank) {
    weights.push_back(RandomTensor(count, 1));
  }
  std::vector<std::vector<OwnedRange>> owned(2);
  std::map<std::string, std::vector<float>> split_state;
  std::map<std::string, int64_t> covered;
  absl::Mutex mutex;
  OnTwoRanks([&](int rank, Communicator* dense, Communicator* expert,
                 kernels::cpu::CpuOps& ops) {
    ZeroShards shards(layout, dense, expert);
    owned[rank] = shards.owned();
    auto optimizer = TieredOptimizer::Create(
        settings, &layout, shards.owned(), dense, expert,
        AllFloat32(&weights[rank]), AllFloat32(&gradients), &ops, &allocator_);
    ASSERT_TRUE(optimizer.ok()) << optimizer.status();
    for (int64_t step = 1; step <= 3; ++step) {
      ASSERT_TRUE((*optimizer)->Step(0.01f, step).ok());
    }
    absl::MutexLock lock(&mutex);
    for (const TensorPiece& piece : (*optimizer)->StatePieces()) {
      // Only rank 1 holds replicas: rank 0 of each group saves.
      EXPECT_EQ(piece.replica,
                rank == 1 && piece.name.find("_sq_") != std::string::npos)
          << piece.name;
      if (piece.replica) continue;
      CopyPieceInto(piece, split_state);
      covered[piece.name] += piece.elements;
    }
  });
  for (int rank = 0; rank < 2; ++rank) {
    for (const OwnedRange& range : owned[rank]) {
      for (int64_t i = range.begin; i < range.end; ++i) {
        ASSERT_NEAR(weights[rank].f32()[i], whole_weights.f32()[i],
                    1e-6 + 1e-5 * std::abs(whole_weights.f32()[i]))
            << GetParam().name << " element " << i;
      }
    }
  }
  ASSERT_EQ(split_state.size(), whole_state.size());
  for (const auto& [name, values] : whole_state) {
    EXPECT_EQ(covered[name], static_cast<int64_t>(values.size())) << name;
    for (size_t i = 0; i < values.size(); ++i) {
      ASSERT_NEAR(split_state[name][i], values[i],
                  1e-7 + 1e-2 * std::abs(values[i]))
          << name << " " << i;
    }
  }
}

// Host placement computes bitwise what the device does, and leaves no
// optimizer state in device memory.
TEST_P(TieredOptimizerTest, OffloadMatchesTheDevice) {
  const ParameterLayout layout(config_);
  const int64_t count = layout.total_elements();
  Tensor gradients = RandomTensor(count, 2);
  Tensor expected = RandomTensor(count, 1);
  TieredSettings settings = Settings();
  auto device = TieredOptimizer::Create(
      settings, &layout, {}, nullptr, nullptr, AllFloat32(&expected),
      AllFloat32(&gradients), &ops_, &allocator_);
  ASSERT_TRUE(device.ok());
  for (int64_t step = 1; step <= 3; ++step) {
    ASSERT_TRUE((*device)->Step(0.01f, step).ok());
  }
  for (OptimizerOffload offload :
       {OptimizerOffload::kSerial, OptimizerOffload::kStream}) {
    HostMemorySource source;
    AccountedAllocator::Options options;
    options.device_source = &source;
    options.host_source = &source;
    AccountedAllocator allocator(options);
    Tensor weights = RandomTensor(count, 1);
    settings.offload = offload;
    settings.host_threads = ops_.threads();
    // Buckets of a few slices: the stream waits and sends bucket by bucket.
    settings.bucket_elements = 100;
    auto offloaded = TieredOptimizer::Create(
        settings, &layout, {}, nullptr, nullptr, AllFloat32(&weights),
        AllFloat32(&gradients), &ops_, &allocator);
    ASSERT_TRUE(offloaded.ok()) << offloaded.status();
    EXPECT_EQ(allocator.Usage(MemoryPool::kDevice, MemoryComponent::kOptimizer)
                  .current_bytes,
              0);
    for (int64_t step = 1; step <= 3; ++step) {
      ASSERT_TRUE((*offloaded)->Step(0.01f, step).ok());
    }
    for (int64_t i = 0; i < count; ++i) {
      ASSERT_EQ(weights.f32()[i], expected.f32()[i]) << GetParam().name << i;
    }
    EXPECT_TRUE((*device)->MasterPieces().empty());
    ExpectMastersAreTheSourceOfTruth(layout, {{0, count}}, weights,
                                     **offloaded);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Kinds, TieredOptimizerTest,
    ::testing::Values(
        TieredCase{"skewadamNone", TieredKind::kSkewAdam,
                   MomentumStorage::kNone},
        TieredCase{"skewadamBf16", TieredKind::kSkewAdam,
                   MomentumStorage::kBfloat16},
        TieredCase{"skewadamFp32", TieredKind::kSkewAdam,
                   MomentumStorage::kFloat32},
        TieredCase{"adafactor", TieredKind::kAdafactor, MomentumStorage::kNone},
        TieredCase{"lion", TieredKind::kLion, MomentumStorage::kNone}),
    [](const ::testing::TestParamInfo<TieredCase>& info) {
      return std::string(info.param.name);
    });

// The state of the small model counted by hand (layers 1, d 8, experts 2,
// ffn 4, vocab 5): what StateBytesByTier reports and the allocator holds.
TEST_F(OptimizerTest, SkewAdamStateBytesFollowTheTiers) {
  const ParameterLayout layout(config_);
  Tensor weights = RandomTensor(layout.total_elements(), 1);
  Tensor gradients = RandomTensor(layout.total_elements(), 2);
  // Dense: fp32 momentum on its 360 elements (embedding and head 40 each,
  // four 64-element attention matrices, three norms of 8); factored
  // statistics of the six matrices (13 + 4 x 16 + 13 floats); exact second
  // moments of the three norms (24 floats). Router: momentum and second
  // moment of 16 elements. Experts: statistics of 2 experts x 3 matrices
  // (2 x (12 + 12 + 12) floats), plus 192 elements of momentum.
  const std::map<MomentumStorage, int64_t> expert_bytes = {
      {MomentumStorage::kNone, 288},
      {MomentumStorage::kBfloat16, 288 + 192 * 2},
      {MomentumStorage::kFloat32, 288 + 192 * 4}};
  for (const auto& [momentum, expert] : expert_bytes) {
    HostMemorySource source;
    AccountedAllocator::Options options;
    options.device_source = &source;
    options.host_source = &source;
    AccountedAllocator allocator(options);
    TieredSettings settings;
    settings.expert_momentum = momentum;
    auto optimizer = TieredOptimizer::Create(
        settings, &layout, {}, nullptr, nullptr, AllFloat32(&weights),
        AllFloat32(&gradients), &ops_, &allocator);
    ASSERT_TRUE(optimizer.ok());
    const std::map<std::string, int64_t> expected = {
        {"dense", 360 * 4 + 90 * 4 + 24 * 4},
        {"router", 16 * 8},
        {"expert", expert}};
    EXPECT_EQ((*optimizer)->StateBytesByTier(), expected);
    EXPECT_EQ(TieredStateBytesByTier(config_, settings), expected);
    // Plus one step's row and column sums (90 + 72 floats).
    EXPECT_EQ(allocator.Usage(MemoryPool::kDevice, MemoryComponent::kOptimizer)
                  .current_bytes,
              1896 + 128 + expert + 162 * 4);
  }
  // AdamW holds 568 x 8 bytes: 46% of it without expert momentum here,
  // where the embedding and head are most of the model.
}

// Every state tensor the optimizer keeps is named with its whole shape, so
// a checkpoint of one layout loads into any other.
TEST_F(OptimizerTest, TieredStateShapesNameEveryStateTensor) {
  TieredSettings settings;
  const TensorShapes shapes = TieredStateShapes(config_, settings);
  EXPECT_EQ(shapes.at("layers.0.moe.experts.w1.exp_avg_sq_row"),
            (std::vector<int64_t>{2, 4}));
  EXPECT_EQ(shapes.at("layers.0.moe.experts.w2.exp_avg_sq_col"),
            (std::vector<int64_t>{2, 4}));
  EXPECT_EQ(shapes.at("embed.weight.exp_avg_sq_row"),
            (std::vector<int64_t>{5}));
  EXPECT_EQ(shapes.at("layers.0.moe.router.weight.exp_avg_sq"),
            (std::vector<int64_t>{2, 8}));
  EXPECT_EQ(shapes.count("layers.0.moe.experts.w1.exp_avg"), 0u);
  EXPECT_EQ(shapes.at("final_norm.weight.exp_avg_sq"),
            (std::vector<int64_t>{8}));
  settings.kind = TieredKind::kLion;
  for (const auto& [name, shape] : TieredStateShapes(config_, settings)) {
    EXPECT_TRUE(absl::EndsWith(name, ".exp_avg")) << name;
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
