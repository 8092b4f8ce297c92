// EvaluateWindows over expert ranks against one rank: every window counts
// once, whatever the rounds, and no rank runs more than rank_sequences
// windows in a round, so validation's peak is a micro-batch's. Ranks are
// threads of this process over loopback Gloo.
#include "engine/train/evaluation.h"

#include <random>
#include <vector>

#include "absl/time/time.h"
#include "engine/backend.h"
#include "engine/model/tiny_model_config.h"
#include "engine/parallel/parallel_layout.h"
#include "engine/parallel/rank_groups.h"
#include "engine/parallel/rank_threads.h"
#include "gtest/gtest.h"

namespace plateau::engine {
namespace {

// Window `index` of a fixed pseudo-random token stream.
void Window(int64_t index, int32_t* out) {
  const ModelConfig config = TinyModelConfig();
  std::mt19937 generator(500 + index);
  for (int64_t i = 0; i <= config.seq_len; ++i) {
    out[i] = static_cast<int32_t>(generator() % config.vocab);
  }
}

struct RankEvaluation {
  absl::StatusOr<EvaluationResult> result = absl::UnknownError("not run");
  int64_t device_peak_bytes = 0;  // over the evaluation alone
};

RankEvaluation EvaluateOnRank(const ParallelLayout& layout, int rank,
                              RankGroups* groups, int64_t windows,
                              int64_t rank_sequences,
                              const WindowSource& window) {
  RankEvaluation evaluation;
  const RankContext ranks(layout, rank, groups);
  std::unique_ptr<Backend> backend =
      Backend::CreateCpu(1, AccountedAllocator::kUnlimited);
  const ModelShard shard =
      ModelShard::For(TinyModelConfig(), ranks.pp_index, ranks.sizes.pp,
                      ranks.ep_index, ranks.sizes.ep);
  absl::StatusOr<std::unique_ptr<Model>> model =
      Model::Create(TinyModelConfig(), shard, &backend->ops(),
                    &backend->allocator(), ranks.model_groups());
  if (!model.ok()) {
    evaluation.result = model.status();
    return evaluation;
  }
  if (absl::Status status = (*model)->InitializeWeights(3); !status.ok()) {
    evaluation.result = status;
    return evaluation;
  }
  backend->allocator().ResetPeaks();
  evaluation.result =
      EvaluateWindows(**model, ranks, windows, rank_sequences, window);
  evaluation.device_peak_bytes =
      backend->allocator().PoolUsage(MemoryPool::kDevice).peak_bytes;
  return evaluation;
}

// Every rank of `sizes`, one thread each.
std::vector<RankEvaluation> EvaluateOnAllRanks(
    ParallelSizes sizes, int64_t windows, int64_t rank_sequences,
    const WindowSource& window = Window) {
  const ParallelLayout layout(sizes);
  std::vector<RankEvaluation> evaluations(layout.world());
  RunEveryRank(layout, absl::Seconds(60),
               [&](int rank, absl::StatusOr<RankGroups*> groups) {
                 if (!groups.ok()) {
                   evaluations[rank].result = groups.status();
                   return;
                 }
                 evaluations[rank] = EvaluateOnRank(
                     layout, rank, *groups, windows, rank_sequences, window);
               });
  return evaluations;
}

ParallelSizes ExpertRanks(int ep) {
  ParallelSizes sizes;
  sizes.ep = ep;
  return sizes;
}

TEST(EvaluationTest, EveryWindowCountsOnceWhateverTheRanks) {
  // 7 windows: over 2 expert ranks rounds of 2, 2, 2 and 1, in which rank
  // 1 runs an uncounted window; over 4, a round of 4 and one of 3.
  // One window over several ranks: a single round every rank but the
  // first pads.
  for (int64_t windows : {int64_t{1}, int64_t{7}}) {
    const RankEvaluation one_rank =
        EvaluateOnAllRanks(ExpertRanks(1), windows, 1)[0];
    ASSERT_TRUE(one_rank.result.ok()) << one_rank.result.status();
    for (int ep : {2, 4}) {
      for (const RankEvaluation& rank :
           EvaluateOnAllRanks(ExpertRanks(ep), windows, 1)) {
        ASSERT_TRUE(rank.result.ok()) << rank.result.status();
        EXPECT_EQ(rank.result->windows, windows);
        EXPECT_EQ(rank.result->predicted_tokens,
                  windows * TinyModelConfig().seq_len);
        EXPECT_NEAR(rank.result->cross_entropy, one_rank.result->cross_entropy,
                    1e-6)
            << "ep " << ep << ", " << windows << " windows";
      }
    }
  }
}

TEST(EvaluationTest, NoRankRunsMoreThanRankSequencesInARound) {
  // Over 2 expert ranks, 2 windows are one full round of one window each;
  // 3 leave one over, which a round of its own takes, so each rank's peak
  // is the one-window round's (before, the third joined the first round
  // and rank 0 ran two windows). Every window is the same, so that every
  // round routes alike and only the windows a rank runs move its peak.
  const WindowSource same = [](int64_t, int32_t* out) { Window(0, out); };
  const std::vector<RankEvaluation> full =
      EvaluateOnAllRanks(ExpertRanks(2), 2, 1, same);
  const std::vector<RankEvaluation> more =
      EvaluateOnAllRanks(ExpertRanks(2), 3, 1, same);
  for (int rank = 0; rank < 2; ++rank) {
    ASSERT_TRUE(full[rank].result.ok()) << full[rank].result.status();
    ASSERT_TRUE(more[rank].result.ok()) << more[rank].result.status();
    EXPECT_EQ(more[rank].device_peak_bytes, full[rank].device_peak_bytes)
        << "rank " << rank;
  }
}

TEST(EvaluationTest, NothingToEvaluateIsAnError) {
  const std::vector<RankEvaluation> none =
      EvaluateOnAllRanks(ExpertRanks(1), 0, 1);
  EXPECT_EQ(none[0].result.status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace plateau::engine
