#include "engine/model/expert_spill.h"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "engine/memory/accounted_allocator.h"
#include "engine/memory/memory_source.h"
#include "engine/model/bf16_testing.h"
#include "engine/model/moe_footprint.h"
#include "engine/model/tiny_model_config.h"
#include "engine/parallel/gloo_communicator.h"
#include "gloo/rendezvous/hash_store.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_ops.h"

namespace plateau::engine {
namespace {

// Copies each expert rank receives once the spills are applied.
std::vector<int64_t> RankLoads(const std::vector<int64_t>& counts, int ranks,
                               int64_t experts,
                               const std::vector<ExpertSpill>& spills) {
  const int64_t local = experts / ranks;
  std::vector<int64_t> loads(ranks, 0);
  for (int s = 0; s < ranks; ++s) {
    for (int64_t e = 0; e < experts; ++e) {
      loads[e / local] += counts[s * experts + e];
    }
  }
  for (const ExpertSpill& spill : spills) {
    for (int s = 0; s < ranks; ++s) {
      EXPECT_LE(spill.copies[s], counts[s * experts + spill.expert]);
      loads[spill.owner] -= spill.copies[s];
      loads[spill.borrower] += spill.copies[s];
    }
  }
  return loads;
}

TEST(ExpertSpillTest, BalancedRoutingSpillsNothing) {
  EXPECT_TRUE(PlanExpertSpill({10, 12, 11, 9, 10, 11, 12, 10}, 2, 4).empty());
  EXPECT_TRUE(PlanExpertSpill({500, 0, 3}, 1, 3).empty());  // one rank
}

TEST(ExpertSpillTest, SkewedRoutingMovesTheExcessToTheIdlestRank) {
  // Both sources send 40 copies to expert 1: rank 0 would receive 100 of
  // the 120 copies, rank 1 only 20.
  const std::vector<int64_t> counts = {10, 40, 10, 0, 10, 40, 10, 0};
  const std::vector<ExpertSpill> spills = PlanExpertSpill(counts, 2, 4);
  ASSERT_EQ(spills.size(), 1u);
  EXPECT_EQ(spills[0].expert, 1);
  EXPECT_EQ(spills[0].owner, 0);
  EXPECT_EQ(spills[0].borrower, 1);
  EXPECT_EQ(spills[0].copies, (std::vector<int64_t>{20, 20}));
  EXPECT_EQ(RankLoads(counts, 2, 4, spills), (std::vector<int64_t>{60, 60}));
  EXPECT_EQ(SpillsBorrowedBy(spills, 1).size(), 1u);
  EXPECT_TRUE(SpillsBorrowedBy(spills, 0).empty());
  EXPECT_EQ(SpilledCopies(spills, 2, 4),
            (std::vector<int64_t>{0, 20, 0, 0, 0, 20, 0, 0}));
  // Each source's list for rank 0 keeps 10 + 20 of experts 0 and 1; rank
  // 1's list has its own 10 + 0 and the 20 spilled copies of expert 1.
  EXPECT_EQ(DispatchListLengths(counts, spills, 2, 4),
            (std::vector<int64_t>{30, 30, 30, 30}));
  EXPECT_EQ(DispatchListLengths(counts, {}, 2, 4),
            (std::vector<int64_t>{50, 10, 50, 10}));
}

TEST(ExpertSpillTest, EveryCopyGoesToOneRankAndTheBusiestEndsNearTheMean) {
  // Four ranks of two experts; every source sends nearly everything to
  // rank 0's experts, unevenly (the rounding remainder must be placed).
  const int ranks = 4;
  const int64_t experts = 8;
  std::vector<int64_t> counts(ranks * experts, 1);
  for (int s = 0; s < ranks; ++s) {
    counts[s * experts + 0] = 97 + 13 * s;
    counts[s * experts + 1] = 41 + 7 * s;
  }
  const std::vector<ExpertSpill> spills =
      PlanExpertSpill(counts, ranks, experts);
  ASSERT_FALSE(spills.empty());
  const std::vector<int64_t> loads = RankLoads(counts, ranks, experts, spills);
  int64_t total = 0;
  for (int64_t count : counts) total += count;
  int64_t sum = 0;
  for (int64_t load : loads) sum += load;
  EXPECT_EQ(sum, total);
  // Each expert is lent once at most, so rank 0 (two experts) can shed at
  // most two experts' excess: it ends well below where it started.
  EXPECT_LT(loads[0], counts[0] + counts[1] + counts[8] + counts[9] +
                          counts[16] + counts[17] + counts[24] + counts[25]);
  std::vector<bool> lent(experts, false);
  for (const ExpertSpill& spill : spills) {
    EXPECT_FALSE(lent[spill.expert]) << "expert " << spill.expert;
    lent[spill.expert] = true;
    EXPECT_NE(spill.owner, spill.borrower);
  }
  // The same counts give the same spills (every rank computes them).
  const std::vector<ExpertSpill> again =
      PlanExpertSpill(counts, ranks, experts);
  ASSERT_EQ(again.size(), spills.size());
  for (size_t i = 0; i < spills.size(); ++i) {
    EXPECT_EQ(again[i].expert, spills[i].expert);
    EXPECT_EQ(again[i].borrower, spills[i].borrower);
    EXPECT_EQ(again[i].copies, spills[i].copies);
  }
}

// Two expert ranks of TinyModelConfig (two experts each); rank 0 lends its
// second expert (expert 1) to rank 1. Each rank's own matrices are
// (2, F, D) float32 values of its own, with the pass's bf16 copy under
// bf16 products.
class SpillExchangeTest : public ::testing::TestWithParam<bool> {
 protected:
  struct Rank {
    Rank() : ops(1), allocator(Options(&source)) {}
    static AccountedAllocator::Options Options(MemorySource* source) {
      AccountedAllocator::Options options;
      options.device_source = source;
      options.host_source = source;
      return options;
    }
    HostMemorySource source;
    kernels::cpu::CpuOps ops;
    AccountedAllocator allocator;
    std::unique_ptr<GlooCommunicator> communicator;
    std::vector<float> w1, w3, w2;  // own weights
    testing::Bf16Bits w1_copy, w3_copy, w2_copy;
    std::vector<float> g1, g3, g2;  // own gradients
  };

  SpillExchangeTest() {
    config_ = TinyModelConfig();
    if (bf16()) config_.matmul_precision = kernels::GemmPrecision::kBf16;
    spill_.expert = 1;
    spill_.owner = 0;
    spill_.borrower = 1;
    spill_.copies = {3, 4};
    auto store = std::make_shared<gloo::rendezvous::HashStore>();
    OnEveryRank([&](int rank, Rank& state) {
      auto communicator =
          GlooCommunicator::Create(store, "spill", rank, 2, absl::Seconds(20));
      ASSERT_TRUE(communicator.ok()) << communicator.status();
      state.communicator = std::move(*communicator);
      const int64_t elements = 2 * MatrixElements();
      int seed = 10 * rank;
      for (std::vector<float>* own : {&state.w1, &state.w3, &state.w2}) {
        *own = testing::RandomFloats(elements, ++seed, 0.5f);
      }
      state.w1_copy = testing::RoundedToBf16(state.w1);
      state.w3_copy = testing::RoundedToBf16(state.w3);
      state.w2_copy = testing::RoundedToBf16(state.w2);
      for (std::vector<float>* own : {&state.g1, &state.g3, &state.g2}) {
        *own = testing::RandomFloats(elements, ++seed, 1.0f);
      }
    });
  }

  bool bf16() const { return GetParam(); }
  int64_t MatrixElements() const {
    return config_.ffn_hidden * config_.d_model;
  }

  void OnEveryRank(const std::function<void(int, Rank&)>& body) {
    std::vector<std::thread> threads;
    for (int rank = 0; rank < 2; ++rank) {
      threads.emplace_back([&, rank] { body(rank, ranks_[rank]); });
    }
    for (std::thread& thread : threads) thread.join();
  }

  LayerContext ContextOf(int rank, Rank& state) const {
    LayerContext context;
    context.config = &config_;
    context.shard = ModelShard::For(config_, 0, 1, rank, 2);
    context.ops = &state.ops;
    context.allocator = &state.allocator;
    context.groups.experts = state.communicator.get();
    context.groups.batch = state.communicator.get();
    return context;
  }

  static LinearOperand Own(const std::vector<float>& values,
                           const testing::Bf16Bits& copy, bool bf16) {
    return {values.data(), bf16 ? copy.data() : nullptr};
  }

  ModelConfig config_;
  ExpertSpill spill_;
  Rank ranks_[2];
};

INSTANTIATE_TEST_SUITE_P(Precisions, SpillExchangeTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "bf16" : "fp32";
                         });

// The borrower receives the lent expert's matrices as the owner's products
// read them: under bf16 products the owner's copy, bit for bit, in half the
// bytes; under fp32 the float32 values. The borrower's gradients go back
// and add to the owner's, in float32.
TEST_P(SpillExchangeTest, BorrowedExpertsTravelAsTheProductsReadThem) {
  const int64_t matrix = MatrixElements();
  const std::vector<ExpertSpill> spills = {spill_};
  std::vector<float> lent_gradient;  // what the borrower returns
  const std::vector<float> owner_g1 = ranks_[0].g1;
  OnEveryRank([&](int rank, Rank& state) {
    const LayerContext context = ContextOf(rank, state);
    const ExpertParameters<const float> own{
        Own(state.w1, state.w1_copy, bf16()),
        Own(state.w3, state.w3_copy, bf16()),
        Own(state.w2, state.w2_copy, bf16())};
    auto borrowed = BorrowExperts(context, spills, own);
    ASSERT_TRUE(borrowed.ok()) << borrowed.status();
    const ExpertParameters<const float> weights = borrowed->weights();
    if (rank == 1) {
      ASSERT_EQ(borrowed->w1.elements(), matrix);
      EXPECT_EQ(borrowed->w1.bytes(),
                BorrowedWeightsBuffer(config_, 1).bytes());
      const Rank& owner = ranks_[0];
      for (const auto& [got, values, copy] :
           {std::tuple{weights.w1, &owner.w1, &owner.w1_copy},
            std::tuple{weights.w3, &owner.w3, &owner.w3_copy},
            std::tuple{weights.w2, &owner.w2, &owner.w2_copy}}) {
        if (bf16()) {
          ASSERT_EQ(got.f32, nullptr);
          EXPECT_EQ(testing::Bf16Bits(got.bf16, got.bf16 + matrix),
                    testing::Bf16Bits(copy->begin() + matrix, copy->end()));
        } else {
          ASSERT_EQ(got.bf16, nullptr);
          EXPECT_EQ(
              std::vector<float>(got.f32, got.f32 + matrix),
              std::vector<float>(values->begin() + matrix, values->end()));
        }
      }
    } else {
      EXPECT_EQ(borrowed->w1.elements(), 0);
    }

    auto gradients = ZeroBorrowedGradients(context, spills);
    ASSERT_TRUE(gradients.ok()) << gradients.status();
    EXPECT_EQ(gradients->w1.dtype(), DType::kFloat32);
    if (rank == 1) {
      lent_gradient = testing::RandomFloats(matrix, 99, 1.0f);
      std::copy(lent_gradient.begin(), lent_gradient.end(),
                gradients->w1.f32());
    }
    const ExpertParameters<float> own_gradients{
        state.g1.data(), state.g3.data(), state.g2.data()};
    ASSERT_TRUE(ReturnBorrowedGradients(context, spills, std::move(*gradients),
                                        own_gradients)
                    .ok());
  });
  // Expert 1 is the owner's second: its w1 gradient gained the borrower's.
  std::vector<float> expected = owner_g1;
  for (int64_t i = 0; i < matrix; ++i) expected[matrix + i] += lent_gradient[i];
  EXPECT_EQ(ranks_[0].g1, expected);
}

// Under bf16 products an owner whose pass has no bf16 copy cannot lend.
TEST_P(SpillExchangeTest, LendingWithoutThePassCopyIsAnError) {
  if (!bf16()) GTEST_SKIP() << "float32 products read the float32 weights";
  Rank& owner = ranks_[0];
  const LayerContext context = ContextOf(0, owner);
  const ExpertParameters<const float> own{FloatOperand(owner.w1.data()),
                                          FloatOperand(owner.w3.data()),
                                          FloatOperand(owner.w2.data())};
  const auto borrowed = BorrowExperts(context, {spill_}, own);
  EXPECT_EQ(borrowed.status().code(), absl::StatusCode::kInternal);
  EXPECT_NE(borrowed.status().message().find("bf16 copy"), std::string::npos);
}

}  // namespace
}  // namespace plateau::engine
