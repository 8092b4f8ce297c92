#include "tests/gpu/cuda_benchmarks.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <memory>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/byte_size.h"
#include "common/status_macros.h"
#include "engine/cuda_backend.h"
#include "engine/memory/tensor.h"
#include "engine/model/model.h"
#include "engine/optim/adamw_optimizer.h"
#include "engine/optim/zero_shards.h"
#include "engine/train/rank_context.h"
#include "engine/train/training_step.h"
#include "kernels/cuda/cuda_api.h"
#include "tests/bench/bench_util.h"

namespace plateau::gpu {
namespace {

using engine::Backend;
using engine::MemoryComponent;
using engine::MemoryPool;
using engine::Tensor;
using kernels::GemmArgs;
using kernels::Ops;
using kernels::Transpose;
using Clock = std::chrono::steady_clock;

absl::StatusOr<std::unique_ptr<Backend>> MakeBackend() {
  engine::CudaBackendOptions options;
  options.matmul_precision = kernels::cuda::MatmulPrecision::kTensorFloat32;
  return engine::CreateCudaBackend(options);
}

absl::StatusOr<Tensor> DeviceTensor(
    Backend& backend, int64_t elements,
    engine::DType dtype = engine::DType::kFloat32) {
  return Tensor::Create(backend.allocator(), MemoryPool::kDevice,
                        MemoryComponent::kOther, {elements}, dtype);
}

// Random normal values at `device`, a host chunk of them tiled over it.
void FillRandom(Ops& ops, float* device, int64_t count, float scale, int seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> chunk(std::min<int64_t>(count, int64_t{1} << 20));
  for (float& value : chunk) value = normal(rng);
  for (int64_t done = 0; done < count;
       done += static_cast<int64_t>(chunk.size())) {
    const int64_t n =
        std::min<int64_t>(static_cast<int64_t>(chunk.size()), count - done);
    ops.CopyFromHost(n * int64_t{sizeof(float)}, chunk.data(), device + done);
  }
}

// Mean seconds of `work` over `repeats` runs after one warm-up, the device
// idle before and after each timing.
absl::StatusOr<double> TimeIt(Ops& ops, int repeats,
                              const std::function<void()>& work) {
  work();
  cudaDeviceSynchronize();
  const auto start = Clock::now();
  for (int i = 0; i < repeats; ++i) work();
  cudaDeviceSynchronize();
  const double seconds =
      std::chrono::duration<double>(Clock::now() - start).count() / repeats;
  RETURN_IF_ERROR(ops.status());
  return seconds;
}

GemmArgs Product(int64_t m, int64_t n, int64_t k, const float* a,
                 Transpose transpose_b, const float* b, float* c,
                 float beta = 0.0f) {
  GemmArgs args;
  args.m = m;
  args.n = n;
  args.k = k;
  args.a = a;
  args.lda = k;
  args.transpose_b = transpose_b;
  args.b = b;
  args.ldb = transpose_b == Transpose::kYes ? k : n;
  args.beta = beta;
  args.c = c;
  args.ldc = n;
  return args;
}

// The experts' up-projection: expert e's n_e token rows times its [f, d]
// weight, transposed; token counts uneven, as routing leaves them. With
// `bf16` both operands are bf16 (the tokens' rows and the weights' compute
// copy, as precision bf16 stores them), products accumulating in float32.
absl::StatusOr<BenchmarkResult> GroupedGemm(Backend& backend,
                                            const BenchmarkOptions& options,
                                            bool bf16) {
  const int64_t experts = options.smoke ? 3 : 16;
  const int64_t d = options.smoke ? 32 : 2048;
  const int64_t f = options.smoke ? 24 : 1408;
  const int64_t mean_tokens = options.smoke ? 20 : 2048;
  std::vector<int64_t> tokens(experts);
  int64_t total = 0;
  for (int64_t e = 0; e < experts; ++e) {
    tokens[e] =
        mean_tokens / 2 + mean_tokens * e / std::max<int64_t>(1, experts - 1);
    total += tokens[e];
  }
  Ops& ops = backend.ops();
  ASSIGN_OR_RETURN(Tensor x, DeviceTensor(backend, total * d));
  ASSIGN_OR_RETURN(Tensor w, DeviceTensor(backend, experts * f * d));
  ASSIGN_OR_RETURN(Tensor h, DeviceTensor(backend, total * f));
  FillRandom(ops, x.f32(), x.elements(), 1.0f, 1);
  FillRandom(ops, w.f32(), w.elements(), 0.02f, 2);
  Tensor x_bf16;
  Tensor w_bf16;
  if (bf16) {
    ASSIGN_OR_RETURN(
        x_bf16, DeviceTensor(backend, x.elements(), engine::DType::kBfloat16));
    ASSIGN_OR_RETURN(
        w_bf16, DeviceTensor(backend, w.elements(), engine::DType::kBfloat16));
    ops.CopyToBf16(x.elements(), x.f32(), x_bf16.bf16());
    ops.CopyToBf16(w.elements(), w.f32(), w_bf16.bf16());
  }
  // A product of rows [row, row + rows) and weight matrix `matrix`.
  auto product = [&](int64_t row, int64_t rows, int64_t matrix) {
    GemmArgs args = Product(rows, f, d, x.f32() + row * d, Transpose::kYes,
                            w.f32() + matrix * f * d, h.f32() + row * f);
    if (bf16) {
      args.a = nullptr;
      args.b = nullptr;
      args.a_bf16 = x_bf16.bf16() + row * d;
      args.b_bf16 = w_bf16.bf16() + matrix * f * d;
    }
    return args;
  };
  std::vector<GemmArgs> problems;
  int64_t row = 0;
  for (int64_t e = 0; e < experts; ++e) {
    problems.push_back(product(row, tokens[e], e));
    row += tokens[e];
  }
  const GemmArgs dense = product(0, total, 0);
  const double flops = 2.0 * total * f * d;
  ASSIGN_OR_RETURN(
      const double grouped_seconds,
      TimeIt(ops, options.repeats, [&] { ops.GroupedGemm(problems); }));
  ASSIGN_OR_RETURN(const double dense_seconds,
                   TimeIt(ops, options.repeats, [&] { ops.Gemm(dense); }));
  BenchmarkResult result;
  result.name = bf16 ? "grouped_gemm_bf16" : "grouped_gemm";
  result.unit = "TFLOP/s";
  result.value = flops / grouped_seconds / 1e12;
  result.baseline = bf16 ? "dense bf16 GEMM of the same FLOPs"
                         : "dense GEMM of the same FLOPs";
  result.baseline_value = flops / dense_seconds / 1e12;
  result.detail =
      absl::StrFormat("%s; %d experts of %d to %d tokens, d %d, f %d",
                      bf16 ? "bf16 operands, float32 accumulation" : "tf32",
                      experts, tokens[0], tokens[experts - 1], d, f);
  return result;
}

// The output head forward and backward: by vocabulary blocks (Ring-DTP on
// one rank) against all the logits at once.
absl::StatusOr<BenchmarkResult> VocabProjection(
    Backend& backend, const BenchmarkOptions& options) {
  const int64_t tokens = options.smoke ? 24 : 8192;
  const int64_t d = options.smoke ? 16 : 2048;
  const int64_t vocab = options.smoke ? 300 : 131072;
  const int64_t block = options.smoke ? 128 : 16384;
  Ops& ops = backend.ops();
  ASSIGN_OR_RETURN(Tensor hidden, DeviceTensor(backend, tokens * d));
  ASSIGN_OR_RETURN(Tensor weight, DeviceTensor(backend, vocab * d));
  ASSIGN_OR_RETURN(Tensor d_hidden, DeviceTensor(backend, tokens * d));
  ASSIGN_OR_RETURN(Tensor d_weight, DeviceTensor(backend, vocab * d));
  ASSIGN_OR_RETURN(Tensor targets,
                   DeviceTensor(backend, tokens, engine::DType::kInt32));
  ASSIGN_OR_RETURN(Tensor losses, DeviceTensor(backend, tokens));
  ASSIGN_OR_RETURN(Tensor logsumexp, DeviceTensor(backend, tokens));
  ASSIGN_OR_RETURN(Tensor target_logits, DeviceTensor(backend, tokens));
  FillRandom(ops, hidden.f32(), hidden.elements(), 1.0f, 3);
  FillRandom(ops, weight.f32(), weight.elements(), 0.02f, 4);
  std::mt19937 rng(5);
  std::vector<int32_t> host_targets(tokens);
  for (int32_t& target : host_targets)
    target = static_cast<int32_t>(rng() % vocab);
  ops.CopyFromHost(tokens * int64_t{sizeof(int32_t)}, host_targets.data(),
                   targets.i32());
  const float scale = 1.0f / static_cast<float>(tokens);

  ASSIGN_OR_RETURN(Tensor logits, DeviceTensor(backend, tokens * vocab));
  auto unfused = [&] {
    ops.Gemm(Product(tokens, vocab, d, hidden.f32(), Transpose::kYes,
                     weight.f32(), logits.f32()));
    ops.CrossEntropyForward(tokens, vocab, logits.f32(), targets.i32(),
                            losses.f32(), logsumexp.f32());
    ops.CrossEntropyBackward(tokens, vocab, 0, targets.i32(), logsumexp.f32(),
                             scale, logits.f32());
    ops.Gemm(Product(tokens, d, vocab, logits.f32(), Transpose::kNo,
                     weight.f32(), d_hidden.f32()));
    GemmArgs weight_gradient =
        Product(vocab, d, tokens, logits.f32(), Transpose::kNo, hidden.f32(),
                d_weight.f32());
    weight_gradient.transpose_a = Transpose::kYes;
    weight_gradient.lda = vocab;
    ops.Gemm(weight_gradient);
  };
  ASSIGN_OR_RETURN(const double unfused_seconds,
                   TimeIt(ops, options.repeats, unfused));
  const int64_t unfused_bytes = logits.bytes();
  logits.Reset();

  ASSIGN_OR_RETURN(Tensor block_logits, DeviceTensor(backend, tokens * block));
  auto blockwise = [&] {
    ops.Fill(tokens, -INFINITY, logsumexp.f32());
    for (int64_t begin = 0; begin < vocab; begin += block) {
      const int64_t columns = std::min(block, vocab - begin);
      ops.Gemm(Product(tokens, columns, d, hidden.f32(), Transpose::kYes,
                       weight.f32() + begin * d, block_logits.f32()));
      ops.CrossEntropyFoldBlock(tokens, columns, begin, block_logits.f32(),
                                targets.i32(), logsumexp.f32(),
                                target_logits.f32());
    }
    for (int64_t begin = 0; begin < vocab; begin += block) {
      const int64_t columns = std::min(block, vocab - begin);
      ops.Gemm(Product(tokens, columns, d, hidden.f32(), Transpose::kYes,
                       weight.f32() + begin * d, block_logits.f32()));
      ops.CrossEntropyBackward(tokens, columns, begin, targets.i32(),
                               logsumexp.f32(), scale, block_logits.f32());
      ops.Gemm(Product(tokens, d, columns, block_logits.f32(), Transpose::kNo,
                       weight.f32() + begin * d, d_hidden.f32(),
                       begin == 0 ? 0.0f : 1.0f));
      GemmArgs weight_gradient =
          Product(columns, d, tokens, block_logits.f32(), Transpose::kNo,
                  hidden.f32(), d_weight.f32() + begin * d);
      weight_gradient.transpose_a = Transpose::kYes;
      weight_gradient.lda = columns;
      ops.Gemm(weight_gradient);
    }
  };
  ASSIGN_OR_RETURN(const double blockwise_seconds,
                   TimeIt(ops, options.repeats, blockwise));
  BenchmarkResult result;
  result.name = "vocab_projection";
  result.unit = "s";
  result.value = blockwise_seconds;
  result.baseline = "unfused logits + cross-entropy";
  result.baseline_value = unfused_seconds;
  result.detail = absl::StrFormat(
      "forward + backward, %d tokens, d %d, vocab %d in blocks of %d; logits "
      "%s blockwise vs %s unfused",
      tokens, d, vocab, block, FormatBytes(block_logits.bytes()),
      FormatBytes(unfused_bytes));
  return result;
}

// GB/s of memory traffic: AdamW reads parameters, gradients and both
// moments and writes all but the gradients (28 bytes a parameter); a copy
// reads and writes 8 bytes an element.
absl::StatusOr<BenchmarkResult> AdamW(Backend& backend,
                                      const BenchmarkOptions& options) {
  const int64_t count = options.smoke ? 4096 : int64_t{1} << 28;
  Ops& ops = backend.ops();
  ASSIGN_OR_RETURN(Tensor params, DeviceTensor(backend, count));
  ASSIGN_OR_RETURN(Tensor grads, DeviceTensor(backend, count));
  ASSIGN_OR_RETURN(Tensor first, DeviceTensor(backend, count));
  ASSIGN_OR_RETURN(Tensor second, DeviceTensor(backend, count));
  ops.Fill(count, 0.5f, params.f32());
  ops.Fill(count, 0.01f, grads.f32());
  ops.Fill(count, 0.0f, first.f32());
  ops.Fill(count, 0.0f, second.f32());
  kernels::AdamWHyperparameters hyper;
  hyper.weight_decay = 0.1f;
  const kernels::AdamWCoefficients coefficients =
      kernels::ComputeAdamWCoefficients(hyper);
  ASSIGN_OR_RETURN(const double update_seconds,
                   TimeIt(ops, options.repeats, [&] {
                     ops.AdamWUpdate(coefficients, count, params.f32(),
                                     grads.f32(), first.f32(), second.f32());
                   }));
  ASSIGN_OR_RETURN(const double copy_seconds, TimeIt(ops, options.repeats, [&] {
                     ops.Copy(count, grads.f32(), first.f32());
                   }));
  BenchmarkResult result;
  result.name = "adamw";
  result.unit = "GB/s";
  result.value = 28.0 * count / update_seconds / 1e9;
  result.baseline = "device-to-device copy";
  result.baseline_value = 8.0 * count / copy_seconds / 1e9;
  result.detail = absl::StrFormat("%d parameters", count);
  return result;
}

engine::ModelConfig TrainingConfig(bool smoke) {
  engine::ModelConfig config;
  if (smoke) {
    config.layers = 2;
    config.d_model = 32;
    config.heads = 2;
    config.kv_heads = 2;
    config.experts = 4;
    config.top_k = 2;
    config.ffn_hidden = 24;
    config.vocab = 64;
    config.seq_len = 16;
    return config;
  }
  // 1.24e9 parameters, 0.24e9 active per token.
  config.layers = 16;
  config.d_model = 1024;
  config.heads = 16;
  config.kv_heads = 16;
  config.experts = 16;
  config.top_k = 2;
  config.ffn_hidden = 1408;
  config.vocab = 32768;
  config.seq_len = 1024;
  return config;
}

// The device's peak bytes by component since the last ResetPeaks, the
// components that held any: "weights 2.3 GiB, gradients ...".
std::string ComponentPeaks(const engine::AccountedAllocator& allocator) {
  std::string text;
  for (int i = 0; i < engine::kMemoryComponentCount; ++i) {
    const auto component = static_cast<MemoryComponent>(i);
    const int64_t peak =
        allocator.Usage(MemoryPool::kDevice, component).peak_bytes;
    if (peak == 0) continue;
    absl::StrAppend(&text, text.empty() ? "" : ", ",
                    engine::MemoryComponentName(component), " ",
                    FormatBytes(peak));
  }
  return text;
}

// One training step's rate under `precision` (tf32 products on float32
// storage, or bf16 mixed precision), as model FLOP/s against the dense
// product of that precision (`dense_tflops`). The peaks are this step's,
// but `other` includes the backend's scratch arena as earlier benchmarks
// grew it.
absl::StatusOr<BenchmarkResult> Training(Backend& backend,
                                         const BenchmarkOptions& options,
                                         kernels::GemmPrecision precision,
                                         double dense_tflops) {
  engine::ModelConfig config = TrainingConfig(options.smoke);
  config.matmul_precision = precision;
  const bool bf16 = precision == kernels::GemmPrecision::kBf16;
  const int64_t sequences = options.smoke ? 4 : 8;
  Ops& ops = backend.ops();
  engine::AccountedAllocator& allocator = backend.allocator();
  allocator.ResetPeaks();
  ASSIGN_OR_RETURN(std::unique_ptr<engine::Model> model,
                   engine::Model::Create(config, &ops, &allocator));
  RETURN_IF_ERROR(model->InitializeWeights(1));
  engine::ZeroShards shards(model->layout(), nullptr, nullptr);
  ASSIGN_OR_RETURN(
      std::unique_ptr<engine::Optimizer> optimizer,
      engine::AdamWOptimizer::Create(
          {}, &model->layout(), shards.owned(), model->weight_buffers(),
          model->gradient_buffers(), &ops, &allocator));
  engine::TrainingStep step(engine::RankContext(), model.get(), &shards,
                            optimizer.get(), /*micro_batches=*/1, &allocator);
  std::mt19937 rng(1);
  std::vector<int32_t> tokens(sequences * (config.seq_len + 1));
  auto train = [&](int64_t index) -> absl::Status {
    for (int32_t& token : tokens) {
      token = static_cast<int32_t>(rng() % config.vocab);
    }
    RETURN_IF_ERROR(
        step.Run(tokens.data(), sequences, 1e-4f, index, 1.0).status());
    return ops.status();
  };
  RETURN_IF_ERROR(train(1));
  RETURN_IF_ERROR(train(2));
  cudaDeviceSynchronize();
  const auto start = Clock::now();
  for (int i = 0; i < options.training_steps; ++i)
    RETURN_IF_ERROR(train(3 + i));
  cudaDeviceSynchronize();
  const double seconds =
      std::chrono::duration<double>(Clock::now() - start).count();
  const double tokens_per_second =
      options.training_steps * sequences * config.seq_len / seconds;
  BenchmarkResult result;
  result.name = bf16 ? "training_bf16" : "training";
  result.unit = "model TFLOP/s";
  result.value =
      3.0 * bench::ForwardFlopsPerToken(config) * tokens_per_second / 1e12;
  result.baseline = bf16 ? "dense bf16 GEMM (grouped_gemm_bf16's)"
                         : "dense GEMM (grouped_gemm's)";
  result.baseline_value = dense_tflops;
  result.detail = absl::StrFormat(
      "%.0f tokens/s; %d parameters, %d layers, d %d, %d experts top-%d, "
      "seq %d, %d tokens a step, AdamW, %s; device peak %s (%s)",
      tokens_per_second, model->layout().total_elements(), config.layers,
      config.d_model, config.experts, config.top_k, config.seq_len,
      sequences * config.seq_len,
      bf16 ? "bf16 mixed precision" : "float32 storage, tf32 products",
      FormatBytes(allocator.PoolUsage(MemoryPool::kDevice).peak_bytes),
      ComponentPeaks(allocator));
  return result;
}

}  // namespace

absl::StatusOr<std::vector<BenchmarkResult>> RunCudaBenchmarks(
    const BenchmarkOptions& options) {
  ASSIGN_OR_RETURN(std::unique_ptr<Backend> backend, MakeBackend());
  std::vector<BenchmarkResult> results;
  ASSIGN_OR_RETURN(BenchmarkResult grouped,
                   GroupedGemm(*backend, options, /*bf16=*/false));
  results.push_back(grouped);
  ASSIGN_OR_RETURN(BenchmarkResult grouped_bf16,
                   GroupedGemm(*backend, options, /*bf16=*/true));
  results.push_back(grouped_bf16);
  ASSIGN_OR_RETURN(BenchmarkResult vocab, VocabProjection(*backend, options));
  results.push_back(vocab);
  ASSIGN_OR_RETURN(BenchmarkResult adamw, AdamW(*backend, options));
  results.push_back(adamw);
  ASSIGN_OR_RETURN(BenchmarkResult training,
                   Training(*backend, options, kernels::GemmPrecision::kFloat32,
                            grouped.baseline_value));
  results.push_back(training);
  ASSIGN_OR_RETURN(BenchmarkResult training_bf16,
                   Training(*backend, options, kernels::GemmPrecision::kBf16,
                            grouped_bf16.baseline_value));
  // The same model and tokens: the ratio of model FLOP/s is that of tokens/s.
  absl::StrAppendFormat(&training_bf16.detail, " (tokens/s %.2fx tf32's)",
                        training_bf16.value / training.value);
  results.push_back(training_bf16);
  return results;
}

std::string FormatResults(const std::vector<BenchmarkResult>& results) {
  std::string text;
  for (const BenchmarkResult& r : results) {
    absl::StrAppendFormat(
        &text, "%-17s %10.4g %-14s vs %-32s %10.4g  x%.3f  %s\n", r.name,
        r.value, r.unit, r.baseline, r.baseline_value, r.ratio(), r.detail);
  }
  return text;
}

}  // namespace plateau::gpu
