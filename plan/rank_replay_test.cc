// The replay of the representative micro-batches and chunks reaches, on
// every distinct rank, exactly the peaks (per pool and component, the pool's
// own, what the device held at its peak, and where) that the replay of all
// of them reaches: over pipeline depths, micro-batch counts below, at and
// past the pipeline's, and chunk counts below and far past three. And the
// stages DistinctRanks leaves out peak no higher than stage 1.
#include "plan/rank_replay.h"

#include <string>

#include "absl/strings/substitute.h"
#include "gtest/gtest.h"
#include "plan/memory_ledger.h"
#include "plan/memory_model.h"
#include "proto/job_spec.h"

namespace plateau::plan {
namespace {

struct Layout {
  int ep, pp, dp, micro_batches;
};

v1::JobSpec Spec(const Layout& layout, int64_t chunk_tokens, bool ring_dtp,
                 bool sco) {
  const int ranks = layout.ep * layout.pp * layout.dp;
  // Two layers a stage. Two sequences of 16 tokens per rank and
  // micro-batch: 64 copies a rank routes, in up to 16 chunks of 4.
  const int64_t batch_tokens =
      int64_t{2} * 16 * layout.micro_batches * layout.ep * layout.dp;
  absl::StatusOr<v1::JobSpec> spec = ParseJobSpecYaml(absl::Substitute(
      "name: replay-test\n"
      "resources: {nodes: 1, devices_per_node: $0}\n"
      "model: {layers: $9, d_model: 32, heads: 2, experts: 4, top_k: 2, "
      "ffn_hidden: 48, vocab: 96, seq_len: 16}\n"
      "parallel: {ep: $1, pp: $2, dp: $3}\n"
      "schedules: {dispatch_chunk_tokens: $4, ring_dtp: $5, sco: $6, "
      "optimizer_offload: stream}\n"
      "optimizer: {kind: skewadam}\n"
      "data: {path: data/none, batch_tokens: $7}\n"
      "train: {steps: 10, eval_every: 5, micro_batches: $8}\n",
      ranks, layout.ep, layout.pp, layout.dp, chunk_tokens,
      ring_dtp ? "true" : "false", sco ? "true" : "false", batch_tokens,
      layout.micro_batches, 2 * layout.pp));
  EXPECT_TRUE(spec.ok()) << spec.status();
  return *spec;
}

void ExpectSameLedger(const MemoryLedger& every, const MemoryLedger& few,
                      const std::string& what) {
  for (v1::MemoryPool pool : {v1::MEMORY_POOL_DEVICE, v1::MEMORY_POOL_HOST}) {
    EXPECT_EQ(few.pool_peak_bytes(pool), every.pool_peak_bytes(pool))
        << what << " pool " << pool;
    for (int c = 1; c <= kComponents; ++c) {
      const auto component = static_cast<v1::MemoryComponent>(c);
      EXPECT_EQ(few.peak_bytes(pool, component),
                every.peak_bytes(pool, component))
          << what << " pool " << pool << " component " << c;
      if (pool == v1::MEMORY_POOL_DEVICE) {
        EXPECT_EQ(few.device_bytes_at_peak(component),
                  every.device_bytes_at_peak(component))
            << what << " at the device peak, component " << c;
      }
    }
  }
  EXPECT_EQ(few.device_peak_phase(), every.device_peak_phase()) << what;
}

TEST(RankReplayTest, RepresentativeRepetitionsReachEveryPeak) {
  const Layout layouts[] = {{1, 1, 1, 1}, {1, 1, 1, 5}, {2, 1, 1, 3},
                            {1, 2, 1, 1}, {1, 2, 1, 2}, {1, 2, 1, 7},
                            {2, 2, 1, 4}, {1, 4, 1, 3}, {1, 4, 2, 9}};
  int cases = 0;
  for (const Layout& layout : layouts) {
    for (const int64_t chunk_tokens : {0, 4, 12, 40}) {
      for (const bool ring_dtp : {false, true}) {
        for (const bool sco : {false, true}) {
          absl::StatusOr<ReplayJob> job =
              ReplayJobOf(Spec(layout, chunk_tokens, ring_dtp, sco), Routing{});
          ASSERT_TRUE(job.ok()) << job.status();
          ReplayJob every_job = *job;
          every_job.every_repetition = true;
          for (const RankIndex& rank : DistinctRanks(*job)) {
            MemoryLedger every, few;
            ReplayRank(every_job, rank, &every);
            ReplayRank(*job, rank, &few);
            ExpectSameLedger(
                every, few,
                absl::Substitute("ep $0 pp $1 dp $2, $3 micro-batches, chunk "
                                 "$4, ring $5, sco $6, rank $7",
                                 layout.ep, layout.pp, layout.dp,
                                 layout.micro_batches, chunk_tokens, ring_dtp,
                                 sco, rank.rank(*job)));
            ++cases;
          }
        }
      }
    }
  }
  EXPECT_GT(cases, 100);
}

// The stages DistinctRanks leaves out (2 to pp - 2) peak, in every pool and
// component, at most where stage 1 does.
TEST(RankReplayTest, MiddleStagesPeakNoHigherThanTheSecond) {
  int compared = 0;
  for (const int pp : {4, 6}) {
    for (const int micro_batches : {1, 3, 8}) {
      for (const int64_t chunk_tokens : {0, 4}) {
        const Layout layout{2, pp, 1, micro_batches};
        absl::StatusOr<ReplayJob> job = ReplayJobOf(
            Spec(layout, chunk_tokens, /*ring_dtp=*/true, /*sco=*/true),
            Routing{});
        ASSERT_TRUE(job.ok()) << job.status();
        job->every_repetition = true;
        for (int ep = 0; ep < 2; ++ep) {
          MemoryLedger second;
          ReplayRank(*job, {1, ep, 0}, &second);
          for (int stage = 2; stage < pp - 1; ++stage) {
            MemoryLedger middle;
            ReplayRank(*job, {stage, ep, 0}, &middle);
            for (v1::MemoryPool pool :
                 {v1::MEMORY_POOL_DEVICE, v1::MEMORY_POOL_HOST}) {
              EXPECT_LE(middle.pool_peak_bytes(pool),
                        second.pool_peak_bytes(pool))
                  << "pp " << pp << " stage " << stage;
              for (int c = 1; c <= kComponents; ++c) {
                const auto component = static_cast<v1::MemoryComponent>(c);
                EXPECT_LE(middle.peak_bytes(pool, component),
                          second.peak_bytes(pool, component))
                    << "pp " << pp << ", " << micro_batches
                    << " micro-batches, stage " << stage << ", component " << c;
              }
            }
            ++compared;
          }
        }
      }
    }
  }
  EXPECT_EQ(compared, 48);
}

}  // namespace
}  // namespace plateau::plan
