// PipelinedLLEP's dispatch peak against the unchunked dispatch's: the
// `dispatch` component of the accounted allocator on every rank of an
// expert-parallel group (ranks are threads of this process, talking Gloo
// over loopback), over a training step's forward and backward, with uniform
// routing and with skewed routing (every router row but expert 0's zero:
// each token picks expert 1 and one of its neighbours, so expert rank 0
// receives every copy). Reports the busiest rank's peak, the reduction and
// the step time (the slowest rank's); the chunked loss must match.
//
// Usage: dispatch_bench [--ranks P] [--tokens N] [--cap C] [--rounds R]
//                       [--json FILE]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "common/byte_size.h"
#include "engine/backend.h"
#include "engine/model/model.h"
#include "engine/parallel/gloo_communicator.h"
#include "engine/parallel/parallel_layout.h"
#include "engine/parallel/rank_groups.h"
#include "gloo/rendezvous/hash_store.h"
#include "nlohmann/json.hpp"
#include "tests/bench/bench_main.h"

ABSL_FLAG(int, ranks, 2, "expert-parallel ranks");
ABSL_FLAG(int64_t, tokens, 4096, "tokens per rank and step");
ABSL_FLAG(int64_t, cap, 1024,
          "PipelinedLLEP: token copies per source and destination per chunk");
ABSL_FLAG(int, rounds, 2, "timed steps per variant");

namespace plateau {
namespace {

using engine::MemoryComponent;
using engine::MemoryPool;

constexpr int64_t kSeqLen = 512;

engine::ModelConfig Config(int64_t cap) {
  engine::ModelConfig config;
  config.layers = 2;
  config.d_model = 256;
  config.heads = 4;
  config.kv_heads = 4;
  config.experts = 8;
  config.top_k = 2;
  config.ffn_hidden = 1024;
  config.vocab = 4096;
  config.seq_len = kSeqLen;
  config.dispatch_chunk_tokens = cap;
  return config;
}

struct RankResult {
  int64_t dispatch_peak_bytes = 0;
  int64_t device_peak_bytes = 0;
  double seconds = 0.0;  // median step
  double loss = 0.0;
  std::string error;
};

RankResult RunRank(const engine::ParallelLayout& layout, int rank,
                   std::shared_ptr<gloo::rendezvous::Store> store, int64_t cap,
                   bool skewed) {
  RankResult result;
  auto groups = engine::ConnectRankGroups(
      layout, rank, engine::GlooGroupConnector(store, absl::Seconds(120)));
  if (!groups.ok()) {
    result.error = groups.status().ToString();
    return result;
  }
  const engine::ModelConfig config = Config(cap);
  std::unique_ptr<engine::Backend> backend =
      engine::Backend::CreateCpu(1, engine::AccountedAllocator::kUnlimited);
  engine::ModelShard shard =
      engine::ModelShard::For(config, 0, 1, rank, layout.sizes().ep);
  auto model = engine::Model::Create(config, shard, &backend->ops(),
                                     &backend->allocator(),
                                     {groups->ep.get(), groups->ep.get()});
  if (!model.ok()) {
    result.error = model.status().ToString();
    return result;
  }
  if (absl::Status status = (*model)->InitializeWeights(1); !status.ok()) {
    result.error = status.ToString();
    return result;
  }
  if (skewed) {
    const engine::ParameterLayout& parameters = (*model)->layout();
    for (int64_t l = 0; l < config.layers; ++l) {
      float* router = (*model)->weights().f32() + parameters.layer(l).router;
      std::fill(router + config.d_model,
                router + config.experts * config.d_model, 0.0f);
    }
  }
  const int64_t sequences = absl::GetFlag(FLAGS_tokens) / kSeqLen;
  std::mt19937 rng(100 + rank);
  std::vector<int32_t> tokens(sequences * (kSeqLen + 1));
  for (int32_t& token : tokens) token = rng() % config.vocab;
  std::vector<double> seconds;
  for (int round = 0; round <= absl::GetFlag(FLAGS_rounds); ++round) {
    (*model)->ZeroGradients();
    backend->allocator().ResetPeaks();
    const auto start = std::chrono::steady_clock::now();
    auto loss = (*model)->ForwardBackward(tokens.data(), sequences);
    if (!loss.ok()) {
      result.error = loss.status().ToString();
      return result;
    }
    if (round > 0) {  // round 0 warms up
      seconds.push_back(std::chrono::duration<double>(
                            std::chrono::steady_clock::now() - start)
                            .count());
    }
    result.loss = loss->total();
  }
  std::sort(seconds.begin(), seconds.end());
  result.seconds = seconds[seconds.size() / 2];
  result.dispatch_peak_bytes =
      backend->allocator()
          .Usage(MemoryPool::kDevice, MemoryComponent::kDispatch)
          .peak_bytes;
  result.device_peak_bytes =
      backend->allocator().PoolUsage(MemoryPool::kDevice).peak_bytes;
  return result;
}

// Every rank's result, in rank order.
std::vector<RankResult> RunGroup(int64_t cap, bool skewed) {
  engine::ParallelSizes sizes;
  sizes.ep = absl::GetFlag(FLAGS_ranks);
  const engine::ParallelLayout layout(sizes);
  auto store = std::make_shared<gloo::rendezvous::HashStore>();
  std::vector<RankResult> results(layout.world());
  std::vector<std::thread> threads;
  for (int rank = 0; rank < layout.world(); ++rank) {
    threads.emplace_back([&, rank] {
      results[rank] = RunRank(layout, rank, store, cap, skewed);
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (const RankResult& result : results) {
    if (!result.error.empty()) {
      std::fprintf(stderr, "%s\n", result.error.c_str());
      std::exit(1);
    }
  }
  return results;
}

int64_t Busiest(const std::vector<RankResult>& results) {
  int64_t most = 0;
  for (const RankResult& result : results) {
    most = std::max(most, result.dispatch_peak_bytes);
  }
  return most;
}

double Slowest(const std::vector<RankResult>& results) {
  double most = 0.0;
  for (const RankResult& result : results) {
    most = std::max(most, result.seconds);
  }
  return most;
}

int Main() {
  const int64_t cap = absl::GetFlag(FLAGS_cap);
  std::printf(
      "%d expert ranks, %lld tokens each, 8 experts (top 2), d_model 256, "
      "ffn 1024; busiest rank's `dispatch` peak over forward + backward\n"
      "%-8s | %-22s | %-28s | %-10s | %s\n",
      absl::GetFlag(FLAGS_ranks),
      static_cast<long long>(absl::GetFlag(FLAGS_tokens)), "routing",
      "unchunked", absl::StrFormat("PipelinedLLEP (C = %d)", cap).c_str(),
      "reduction", "step time chunked / unchunked");
  nlohmann::json rows = nlohmann::json::array();
  for (const bool skewed : {false, true}) {
    const std::vector<RankResult> whole = RunGroup(0, skewed);
    const std::vector<RankResult> chunked = RunGroup(cap, skewed);
    for (size_t rank = 0; rank < whole.size(); ++rank) {
      if (std::abs(chunked[rank].loss - whole[rank].loss) >
          1e-5 * std::abs(whole[rank].loss)) {
        std::fprintf(stderr, "rank %zu: chunked loss %.9g, unchunked %.9g\n",
                     rank, chunked[rank].loss, whole[rank].loss);
        return 1;
      }
    }
    const double reduction = 1.0 - static_cast<double>(Busiest(chunked)) /
                                       static_cast<double>(Busiest(whole));
    std::printf(
        "%-8s | %-22s | %-28s | %-10s | %.3f (%.2f s vs %.2f s)\n",
        skewed ? "skewed" : "uniform", FormatBytes(Busiest(whole)).c_str(),
        FormatBytes(Busiest(chunked)).c_str(),
        absl::StrFormat("-%.1f%%", 100 * reduction).c_str(),
        Slowest(chunked) / Slowest(whole), Slowest(chunked), Slowest(whole));
    std::fflush(stdout);
    rows.push_back({{"routing", skewed ? "skewed" : "uniform"},
                    {"ranks", whole.size()},
                    {"tokens_per_rank", absl::GetFlag(FLAGS_tokens)},
                    {"cap", cap},
                    {"unchunked_dispatch_peak_bytes", Busiest(whole)},
                    {"chunked_dispatch_peak_bytes", Busiest(chunked)},
                    {"unchunked_step_seconds", Slowest(whole)},
                    {"chunked_step_seconds", Slowest(chunked)}});
  }
  bench::WriteJsonResults(rows);
  return 0;
}

}  // namespace
}  // namespace plateau

int main(int argc, char** argv) {
  return plateau::bench::BenchmarkMain(argc, argv, plateau::Main);
}
