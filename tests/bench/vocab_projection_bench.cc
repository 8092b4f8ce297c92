// Peak memory of the vocabulary projection (final norm, lm_head, softmax
// cross-entropy; forward then backward) in its plain form and with Ring-DTP
// on one rank, read from the accounted allocator: the `vocab_projection`
// component and the device pool as a whole, at vocabularies of 128k and 200k
// and 8k to 32k tokens. The plain form runs where its (tokens, vocab) logits
// fit under --max_plain_bytes; beyond that its peak is the exact formula the
// runs that fit confirm, marked "(formula)". Loss and input gradient of the
// two forms are compared where both run.
//
// Then the same head over two expert ranks (the ring of Ring-DTP) at 8k
// tokens a rank, next to one rank with the same tokens.
//
// Usage: vocab_projection_bench [--d_model N] [--max_plain_bytes B]
//                               [--json FILE]
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
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/byte_size.h"
#include "engine/backend.h"
#include "engine/model/output_head.h"
#include "engine/parallel/gloo_communicator.h"
#include "engine/parallel/parallel_layout.h"
#include "engine/parallel/rank_groups.h"
#include "gloo/rendezvous/hash_store.h"
#include "nlohmann/json.hpp"
#include "tests/bench/bench_main.h"

ABSL_FLAG(int64_t, d_model, 256, "hidden size");
ABSL_FLAG(int64_t, max_plain_bytes, int64_t{7} << 30,
          "run the plain form only where its logits take at most this many "
          "bytes");

namespace plateau {
namespace {

using engine::MemoryComponent;
using engine::MemoryPool;
using engine::Tensor;

struct Result {
  int64_t vocab_projection_peak_bytes = 0;
  int64_t device_peak_bytes = 0;  // weights, gradients, input included
  double loss = 0.0;
  std::vector<float> input_gradient_sample;
  double seconds = 0.0;
};

Tensor Random(engine::AccountedAllocator& allocator, MemoryComponent component,
              std::vector<int64_t> shape, float scale, int seed) {
  Tensor tensor =
      Tensor::Create(allocator, MemoryPool::kDevice, component, shape).value();
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  for (int64_t i = 0; i < tensor.elements(); ++i) tensor.f32()[i] = normal(rng);
  return tensor;
}

// Rank `rank` of `ranks` (group: their expert group, null for one rank):
// its share of the lm_head, its own tokens.
Result Run(int64_t vocab, int64_t tokens, int64_t vocab_block, int rank = 0,
           int ranks = 1, engine::Communicator* group = nullptr) {
  const int64_t d = absl::GetFlag(FLAGS_d_model);
  // A fresh backend each time: nothing cached from the previous run. The
  // ranks share the machine's 2 cores.
  std::unique_ptr<engine::Backend> backend = engine::Backend::CreateCpu(
      std::max(1, 2 / ranks), engine::AccountedAllocator::kUnlimited);
  engine::AccountedAllocator& allocator = backend->allocator();
  engine::ModelConfig config;
  config.layers = 1;
  config.experts = ranks;
  config.d_model = d;
  config.vocab = vocab;
  config.seq_len = tokens;
  config.vocab_block = vocab_block;
  engine::LayerContext context;
  context.config = &config;
  context.shard = engine::ModelShard::For(config, 0, 1, rank, ranks);
  context.groups.experts = group;
  context.ops = &backend->ops();
  context.allocator = &allocator;
  const int64_t rows = context.shard.head_rows;
  context.sequences = 1;
  context.head = &engine::HeadStrategyFor(config);
  context.loss_weights.cross_entropy_per_token = 1.0 / tokens;

  Tensor norm = Random(allocator, MemoryComponent::kWeights, {d}, 0.1f, 1);
  for (int64_t i = 0; i < d; ++i) norm.f32()[i] += 1.0f;
  Tensor lm_head = Random(allocator, MemoryComponent::kWeights, {rows, d},
                          0.02f, 2 + 10 * rank);
  Tensor norm_grad = Tensor::Create(allocator, MemoryPool::kDevice,
                                    MemoryComponent::kGradients, {d})
                         .value();
  Tensor lm_head_grad = Tensor::Create(allocator, MemoryPool::kDevice,
                                       MemoryComponent::kGradients, {rows, d})
                            .value();
  backend->ops().Fill(d, 0.0f, norm_grad.f32());
  backend->ops().Fill(rows * d, 0.0f, lm_head_grad.f32());
  Tensor x = Random(allocator, MemoryComponent::kActivations, {tokens, d}, 1.0f,
                    3 + 10 * rank);
  Tensor dx = Tensor::Create(allocator, MemoryPool::kDevice,
                             MemoryComponent::kActivations, {tokens, d})
                  .value();
  Tensor targets = Tensor::Create(allocator, MemoryPool::kDevice,
                                  MemoryComponent::kActivations, {tokens},
                                  engine::DType::kInt32)
                       .value();
  std::mt19937 rng(4 + rank);
  for (int64_t t = 0; t < tokens; ++t) {
    targets.i32()[t] = static_cast<int32_t>(rng() % vocab);
  }

  allocator.ResetPeaks();
  const auto start = std::chrono::steady_clock::now();
  engine::OutputHeadActivations saved;
  Result result;
  result.loss = engine::OutputHeadForward(context, {norm.f32(), lm_head.f32()},
                                          x, targets, &saved)
                    .value();
  const absl::Status backward = engine::OutputHeadBackward(
      context, {norm.f32(), lm_head.f32()},
      {norm_grad.f32(), lm_head_grad.f32()}, x, targets, &saved, &dx);
  if (!backward.ok()) {
    std::fprintf(stderr, "%s\n", backward.ToString().c_str());
    std::exit(1);
  }
  result.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  result.vocab_projection_peak_bytes =
      allocator.Usage(MemoryPool::kDevice, MemoryComponent::kVocabProjection)
          .peak_bytes;
  result.device_peak_bytes =
      allocator.PoolUsage(MemoryPool::kDevice).peak_bytes;
  for (int64_t i = 0; i < tokens * d; i += tokens * d / 64) {
    result.input_gradient_sample.push_back(dx.f32()[i]);
  }
  return result;
}

// Ring-DTP over `ranks` expert ranks (threads of this process, Gloo over
// loopback), each with `tokens` tokens: the largest per-rank peaks and the
// slowest rank's time.
Result RunRing(int64_t vocab, int64_t tokens, int ranks) {
  engine::ParallelSizes sizes;
  sizes.ep = ranks;
  const engine::ParallelLayout layout(sizes);
  auto store = std::make_shared<gloo::rendezvous::HashStore>();
  std::vector<Result> results(ranks);
  std::vector<std::thread> threads;
  const int64_t block =
      engine::RingDtpVocabBlock(absl::GetFlag(FLAGS_d_model), vocab);
  for (int rank = 0; rank < ranks; ++rank) {
    threads.emplace_back([&, rank] {
      auto groups = engine::ConnectRankGroups(
          layout, rank, engine::GlooGroupConnector(store, absl::Seconds(300)));
      if (!groups.ok()) {
        std::fprintf(stderr, "%s\n", groups.status().ToString().c_str());
        std::exit(1);
      }
      results[rank] = Run(vocab, tokens, block, rank, ranks, groups->ep.get());
    });
  }
  for (std::thread& thread : threads) thread.join();
  Result worst;
  for (const Result& result : results) {
    worst.vocab_projection_peak_bytes = std::max(
        worst.vocab_projection_peak_bytes, result.vocab_projection_peak_bytes);
    worst.device_peak_bytes =
        std::max(worst.device_peak_bytes, result.device_peak_bytes);
    worst.seconds = std::max(worst.seconds, result.seconds);
  }
  return worst;
}

int Main() {
  const int64_t d = absl::GetFlag(FLAGS_d_model);
  nlohmann::json rows = nlohmann::json::array();
  std::printf(
      "d_model %lld; peaks of forward + backward\n"
      "%8s %7s | %-28s | %-20s | %s\n",
      static_cast<long long>(d), "vocab", "tokens", "plain vocab_projection",
      "Ring-DTP (block)", "reduction");
  for (const int64_t vocab : {int64_t{131072}, int64_t{200000}}) {
    for (const int64_t tokens :
         {int64_t{8192}, int64_t{16384}, int64_t{32768}}) {
      const int64_t block = engine::RingDtpVocabBlock(d, vocab);
      const Result ring = Run(vocab, tokens, block);
      // Logits, their logsumexp and the per-token losses.
      const int64_t plain_formula = (tokens * vocab + 2 * tokens) * 4;
      const bool run_plain =
          tokens * vocab * 4 <= absl::GetFlag(FLAGS_max_plain_bytes);
      Result plain;
      if (run_plain) {
        plain = Run(vocab, tokens, 0);
        if (plain.vocab_projection_peak_bytes != plain_formula) {
          std::fprintf(
              stderr, "plain peak %lld differs from the formula %lld\n",
              static_cast<long long>(plain.vocab_projection_peak_bytes),
              static_cast<long long>(plain_formula));
          return 1;
        }
        const double loss_difference =
            std::abs(plain.loss - ring.loss) / plain.loss;
        float worst = 0.0f, largest = 0.0f;
        for (size_t i = 0; i < plain.input_gradient_sample.size(); ++i) {
          worst = std::max(worst, std::abs(plain.input_gradient_sample[i] -
                                           ring.input_gradient_sample[i]));
          largest = std::max(largest, std::abs(plain.input_gradient_sample[i]));
        }
        if (loss_difference > 1e-5 || worst > 1e-4f * largest) {
          std::fprintf(stderr, "forms disagree: loss %g, gradient %g of %g\n",
                       loss_difference, worst, largest);
          return 1;
        }
      }
      const int64_t plain_peak =
          run_plain ? plain.vocab_projection_peak_bytes : plain_formula;
      const double reduction =
          1.0 - static_cast<double>(ring.vocab_projection_peak_bytes) /
                    static_cast<double>(plain_peak);
      std::printf("%8lld %7lld | %-28s | %-20s | -%.1f%%\n",
                  static_cast<long long>(vocab), static_cast<long long>(tokens),
                  (FormatBytes(plain_peak) +
                   (run_plain ? absl::StrCat(" (", plain.seconds, " s)")
                              : std::string(" (formula)")))
                      .c_str(),
                  (FormatBytes(ring.vocab_projection_peak_bytes) + " (" +
                   std::to_string(block) + ")")
                      .c_str(),
                  100 * reduction);
      std::fflush(stdout);
      rows.push_back(
          {{"vocab", vocab},
           {"tokens", tokens},
           {"vocab_block", block},
           {"plain_vocab_projection_peak_bytes", plain_peak},
           {"plain_measured", run_plain},
           {"plain_device_peak_bytes", run_plain ? plain.device_peak_bytes : 0},
           {"ring_vocab_projection_peak_bytes",
            ring.vocab_projection_peak_bytes},
           {"ring_device_peak_bytes", ring.device_peak_bytes},
           {"ring_seconds", ring.seconds},
           {"plain_seconds", run_plain ? plain.seconds : 0.0},
           {"reduction", reduction}});
    }
  }
  // Across two ranks the lm_head is split in two and the ring moves token
  // blocks (here fewer bytes than vocabulary shards).
  constexpr int kRanks = 2;
  std::printf(
      "\nRing-DTP over %d expert ranks, each with its own tokens; the "
      "busiest rank's peaks (device: lm_head shard and its gradient "
      "included)\n%8s %7s | %-36s | %-36s\n",
      kRanks, "vocab", "tokens", "one rank: vocab_projection (device)",
      "per rank: vocab_projection (device)");
  nlohmann::json ring_rows = nlohmann::json::array();
  for (const int64_t vocab : {int64_t{131072}, int64_t{200000}}) {
    const int64_t tokens = 8192;
    const int64_t block = engine::RingDtpVocabBlock(d, vocab);
    const Result one = Run(vocab, tokens, block);
    const Result ring = RunRing(vocab, tokens, kRanks);
    std::printf("%8lld %7lld | %-36s | %-36s\n", static_cast<long long>(vocab),
                static_cast<long long>(tokens),
                absl::StrCat(FormatBytes(one.vocab_projection_peak_bytes), " (",
                             FormatBytes(one.device_peak_bytes), "), ",
                             absl::SixDigits(one.seconds), " s")
                    .c_str(),
                absl::StrCat(FormatBytes(ring.vocab_projection_peak_bytes),
                             " (", FormatBytes(ring.device_peak_bytes), "), ",
                             absl::SixDigits(ring.seconds), " s")
                    .c_str());
    std::fflush(stdout);
    ring_rows.push_back(
        {{"vocab", vocab},
         {"tokens_per_rank", tokens},
         {"ranks", kRanks},
         {"one_rank_vocab_projection_peak_bytes",
          one.vocab_projection_peak_bytes},
         {"one_rank_device_peak_bytes", one.device_peak_bytes},
         {"ring_vocab_projection_peak_bytes", ring.vocab_projection_peak_bytes},
         {"ring_device_peak_bytes", ring.device_peak_bytes},
         {"one_rank_seconds", one.seconds},
         {"ring_seconds", ring.seconds}});
  }
  bench::WriteJsonResults(
      {{"d_model", d}, {"rows", rows}, {"ring_rows", ring_rows}});
  return 0;
}

}  // namespace
}  // namespace plateau

int main(int argc, char** argv) {
  return plateau::bench::BenchmarkMain(argc, argv, plateau::Main);
}
