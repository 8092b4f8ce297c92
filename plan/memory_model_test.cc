// The worst-case routing that plans assume (Routing::WorstCase) against
// 1000 routings drawn at random for each layout: none may give the job a
// device or host peak above the worst case's, with the whole dispatch and
// with PipelinedLLEP (chunks smaller and larger than a pair's list), over 2
// to 16 expert ranks (past 8, the replayed ranks are 0, 1 and the last, as
// for every prediction), top 1 to 8; nor, with the whole dispatch, any
// replayed rank a device peak above its own row.
#include "plan/memory_model.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/substitute.h"
#include "gtest/gtest.h"
#include "proto/job_spec.h"

namespace plateau::plan {
namespace {

struct Case {
  std::string name;
  int ep;
  int experts;
  int top_k;
  int64_t chunk_tokens;  // 0: the whole dispatch
};

void PrintTo(const Case& test, std::ostream* out) { *out << test.name; }

v1::JobSpec Spec(const Case& test) {
  // 256 tokens a rank: up to 1024 copies, in chunks of 24 (many) or 4096
  // (one, larger than any pair's list).
  absl::StatusOr<v1::JobSpec> spec = ParseJobSpecYaml(absl::Substitute(
      "name: routing-test\n"
      "resources: {nodes: 1, devices_per_node: $0}\n"
      "model: {layers: 2, d_model: 32, heads: 2, experts: $1, top_k: $2, "
      "ffn_hidden: 48, vocab: 128, seq_len: 64}\n"
      "parallel: {ep: $0, pp: 1, dp: 1}\n"
      "schedules: {dispatch_chunk_tokens: $3, ring_dtp: true}\n"
      "data: {path: data/none, batch_tokens: $4}\n"
      "train: {steps: 1}\n",
      test.ep, test.experts, test.top_k, test.chunk_tokens, 256 * test.ep));
  EXPECT_TRUE(spec.ok()) << spec.status();
  return *spec;
}

// A share of the copies for each expert, none above 1 / top_k (an expert
// takes at most one copy of each token): random weights, sharpened by a
// random power, over a random subset of at least top_k experts, clipped to
// the cap with the excess spread over the others in proportion.
std::vector<double> RandomLoad(int experts, int top_k, std::mt19937& random) {
  std::vector<int> order(experts);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), random);
  const int used = std::uniform_int_distribution<int>(top_k, experts)(random);
  const double power = std::uniform_real_distribution<double>(0.0, 6.0)(random);
  std::vector<double> load(experts, 0.0);
  for (int i = 0; i < used; ++i) {
    load[order[i]] = std::pow(
        std::uniform_real_distribution<double>(0.01, 1.0)(random), power);
  }
  const double cap = 1.0 / top_k;
  std::vector<bool> capped(experts, false);
  while (true) {
    double free_total = 0.0, capped_total = 0.0;
    for (int e = 0; e < experts; ++e) {
      (capped[e] ? capped_total : free_total) += load[e];
    }
    // Every expert with weight is at the cap: the shares sum to 1.
    if (free_total == 0.0) return load;
    bool clipped = false;
    for (int e = 0; e < experts; ++e) {
      if (capped[e]) continue;
      load[e] *= (1.0 - capped_total) / free_total;
      if (load[e] > cap) {
        load[e] = cap;
        capped[e] = true;
        clipped = true;
      }
    }
    if (!clipped) return load;
  }
}

class WorstRoutingTest : public ::testing::TestWithParam<Case> {};

TEST_P(WorstRoutingTest, NoRandomRoutingPeaksHigher) {
  const Case& test = GetParam();
  const v1::JobSpec spec = Spec(test);
  absl::StatusOr<v1::MemoryPrediction> worst =
      PredictMemory(spec, Routing::WorstCase());
  ASSERT_TRUE(worst.ok()) << worst.status();
  std::mt19937 random(11);
  for (int trial = 0; trial < 1000; ++trial) {
    Routing routing;
    // Half the trials route both layers alike, half each its own way.
    routing.layer_expert_load.push_back(
        RandomLoad(test.experts, test.top_k, random));
    routing.layer_expert_load.push_back(
        trial % 2 == 0 ? routing.layer_expert_load[0]
                       : RandomLoad(test.experts, test.top_k, random));
    absl::StatusOr<v1::MemoryPrediction> drawn = PredictMemory(spec, routing);
    ASSERT_TRUE(drawn.ok()) << drawn.status();
    ASSERT_LE(drawn->device_peak_bytes(), worst->device_peak_bytes())
        << "trial " << trial << ", rank " << drawn->worst_rank();
    ASSERT_LE(drawn->host_peak_bytes(), worst->host_peak_bytes())
        << "trial " << trial;
    if (test.chunk_tokens > 0) continue;
    // The whole dispatch's rows too: each rank's is the collapse onto its
    // own experts, which no routing exceeds on that rank.
    ASSERT_EQ(drawn->ranks_size(), worst->ranks_size());
    for (int r = 0; r < drawn->ranks_size(); ++r) {
      ASSERT_LE(drawn->ranks(r).device_peak_bytes(),
                worst->ranks(r).device_peak_bytes())
          << "trial " << trial << ", rank " << drawn->ranks(r).rank();
    }
  }
}

// PredictMemoryWithin stops early, but never where PredictMemory's peak is
// within the ceiling, nor gives a different prediction there: at the peak
// itself it is PredictMemory's, a byte below it and at nothing it is none.
// The highest routing is not the first replayed for every rank of these
// layouts, so a ceiling held after the first routing alone would fail here.
TEST_P(WorstRoutingTest, PredictMemoryWithinIsPredictMemoryUpToTheCeiling) {
  const v1::JobSpec spec = Spec(GetParam());
  for (const Routing& routing : {Routing::WorstCase(), Routing::OfSkew(2.0)}) {
    absl::StatusOr<v1::MemoryPrediction> whole = PredictMemory(spec, routing);
    ASSERT_TRUE(whole.ok()) << whole.status();
    const int64_t peak_bytes = whole->device_peak_bytes();
    for (const int64_t ceiling :
         {peak_bytes, peak_bytes + 1, std::numeric_limits<int64_t>::max()}) {
      absl::StatusOr<std::optional<v1::MemoryPrediction>> within =
          PredictMemoryWithin(spec, routing, ceiling);
      ASSERT_TRUE(within.ok()) << within.status();
      ASSERT_TRUE(within->has_value()) << "ceiling " << ceiling;
      EXPECT_EQ((*within)->SerializeAsString(), whole->SerializeAsString());
    }
    for (const int64_t ceiling : {peak_bytes - 1, int64_t{0}}) {
      absl::StatusOr<std::optional<v1::MemoryPrediction>> within =
          PredictMemoryWithin(spec, routing, ceiling);
      ASSERT_TRUE(within.ok()) << within.status();
      EXPECT_FALSE(within->has_value()) << "ceiling " << ceiling;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, WorstRoutingTest,
    ::testing::Values(Case{"ep2_whole", 2, 8, 2, 0},
                      Case{"ep4_whole_top1", 4, 8, 1, 0},
                      Case{"ep2_chunks", 2, 8, 2, 24},
                      Case{"ep2_one_chunk", 2, 8, 2, 4096},
                      Case{"ep4_chunks", 4, 16, 2, 24},
                      Case{"ep4_one_chunk_top4", 4, 16, 4, 4096},
                      Case{"ep8_chunks_top4", 8, 8, 4, 24},
                      Case{"ep8_one_chunk", 8, 32, 2, 4096},
                      Case{"ep16_whole_top8", 16, 32, 8, 0},
                      Case{"ep16_chunks_top4", 16, 32, 4, 24},
                      Case{"ep16_one_chunk", 16, 64, 2, 4096}),
    [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace plateau::plan
