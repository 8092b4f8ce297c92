// The model against an independent, naive float64 implementation of
// docs/ARCHITECTURE.md section 8: the loss must agree, and every parameter
// kind's gradient must agree with central differences of the float64 loss.
// Also: checkpointing changes no bit, runs are reproducible, and transient
// memory is released.
#include "engine/model/model.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/model/attention_footprint.h"
#include "engine/model/bf16_testing.h"
#include "engine/model/model_footprint.h"
#include "engine/model/moe_footprint.h"
#include "engine/model/tiny_model_config.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_ops.h"

namespace plateau::engine {
namespace {

using Doubles = std::vector<double>;

// ------------------------------------------------- float64 reference model

struct ReferenceResult {
  double cross_entropy = 0;
  double load_balancing = 0;
  double z_loss = 0;
  std::vector<int> routing;  // every token's chosen experts, all layers
  double total() const { return cross_entropy + load_balancing + z_loss; }
};

class ReferenceModel {
 public:
  ReferenceModel(const ModelConfig& config, const ParameterLayout& layout)
      : c_(config), layout_(layout) {}

  ReferenceResult Loss(const Doubles& p, const std::vector<int32_t>& tokens,
                       int64_t sequences) const {
    const int64_t T = c_.seq_len, D = c_.d_model, N = sequences * T;
    ReferenceResult result;
    Doubles x(N * D);
    std::vector<int32_t> targets(N);
    const double* embed = &p[Offset("embed.weight")];
    for (int64_t s = 0; s < sequences; ++s) {
      for (int64_t t = 0; t < T; ++t) {
        const int32_t id = tokens[s * (T + 1) + t];
        targets[s * T + t] = tokens[s * (T + 1) + t + 1];
        for (int64_t j = 0; j < D; ++j)
          x[(s * T + t) * D + j] = embed[id * D + j];
      }
    }
    for (int64_t l = 0; l < c_.layers; ++l) {
      const std::string prefix = "layers." + std::to_string(l) + ".";
      x = Add(x, Attention(p, prefix,
                           Norm(x, &p[Offset(prefix + "attn_norm.weight")], D),
                           sequences));
      x = Add(x,
              Moe(p, prefix, Norm(x, &p[Offset(prefix + "moe_norm.weight")], D),
                  &result));
    }
    const Doubles h = Norm(x, &p[Offset("final_norm.weight")], D);
    const Doubles logits = Linear(
        h, &p[Offset(c_.tie_embeddings ? "embed.weight" : "lm_head.weight")], D,
        c_.vocab);
    for (int64_t t = 0; t < N; ++t) {
      const double* row = &logits[t * c_.vocab];
      const double max = *std::max_element(row, row + c_.vocab);
      double sum = 0;
      for (int64_t v = 0; v < c_.vocab; ++v) sum += std::exp(row[v] - max);
      result.cross_entropy += max + std::log(sum) - row[targets[t]];
    }
    result.cross_entropy /= N;
    return result;
  }

 private:
  int64_t Offset(const std::string& name) const {
    return layout_.Find(name)->offset;
  }

  static Doubles Add(Doubles a, const Doubles& b) {
    for (size_t i = 0; i < a.size(); ++i) a[i] += b[i];
    return a;
  }

  // RMSNorm over rows of `width` (d_model, or head_dim for QK-norm).
  Doubles Norm(const Doubles& x, const double* weight, int64_t width) const {
    const int64_t D = width;
    Doubles out(x.size());
    for (size_t t = 0; t < x.size() / D; ++t) {
      double mean_square = 0;
      for (int64_t j = 0; j < D; ++j)
        mean_square += x[t * D + j] * x[t * D + j];
      const double inverse = 1.0 / std::sqrt(mean_square / D + c_.rms_epsilon);
      for (int64_t j = 0; j < D; ++j)
        out[t * D + j] = x[t * D + j] * inverse * weight[j];
    }
    return out;
  }

  // y = x W^T with W (out, in).
  static Doubles Linear(const Doubles& x, const double* w, int64_t in,
                        int64_t out) {
    const int64_t rows = x.size() / in;
    Doubles y(rows * out, 0.0);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t o = 0; o < out; ++o) {
        double sum = 0;
        for (int64_t i = 0; i < in; ++i) sum += x[r * in + i] * w[o * in + i];
        y[r * out + o] = sum;
      }
    }
    return y;
  }

  // x: rows of `heads` heads.
  void Rotate(Doubles& x, int64_t T, int64_t heads) const {
    const int64_t hd = c_.head_dim(), half = hd / 2, width = heads * hd;
    for (size_t row = 0; row < x.size() / width; ++row) {
      const double position = static_cast<double>(row % T);
      for (int64_t h = 0; h < heads; ++h) {
        for (int64_t i = 0; i < half; ++i) {
          const double angle = position * std::pow(10000.0, -2.0 * i / hd);
          double& a = x[row * width + h * hd + i];
          double& b = x[row * width + h * hd + i + half];
          const double a0 = a, b0 = b;
          a = a0 * std::cos(angle) - b0 * std::sin(angle);
          b = b0 * std::cos(angle) + a0 * std::sin(angle);
        }
      }
    }
  }

  Doubles Attention(const Doubles& p, const std::string& prefix,
                    const Doubles& xn, int64_t sequences) const {
    const int64_t T = c_.seq_len, D = c_.d_model, H = c_.heads,
                  hd = c_.head_dim(), KV = c_.kv_width(),
                  group = c_.heads / c_.kv_heads;
    Doubles q = Linear(xn, &p[Offset(prefix + "attn.wq.weight")], D, D);
    Doubles k = Linear(xn, &p[Offset(prefix + "attn.wk.weight")], D, KV);
    const Doubles v = Linear(xn, &p[Offset(prefix + "attn.wv.weight")], D, KV);
    if (c_.qk_norm) {
      q = Norm(q, &p[Offset(prefix + "attn.q_norm.weight")], hd);
      k = Norm(k, &p[Offset(prefix + "attn.k_norm.weight")], hd);
    }
    Rotate(q, T, H);
    Rotate(k, T, c_.kv_heads);
    Doubles context(xn.size(), 0.0);
    for (int64_t s = 0; s < sequences; ++s) {
      for (int64_t h = 0; h < H; ++h) {
        const int64_t kv_column = h / group * hd;
        for (int64_t i = 0; i < T; ++i) {
          Doubles scores(i + 1);
          for (int64_t j = 0; j <= i; ++j) {
            double dot = 0;
            for (int64_t e = 0; e < hd; ++e) {
              dot += q[(s * T + i) * D + h * hd + e] *
                     k[(s * T + j) * KV + kv_column + e];
            }
            scores[j] = dot / std::sqrt(static_cast<double>(hd));
          }
          const double max = *std::max_element(scores.begin(), scores.end());
          double sum = 0;
          for (double& score : scores) sum += (score = std::exp(score - max));
          for (int64_t j = 0; j <= i; ++j) {
            for (int64_t e = 0; e < hd; ++e) {
              context[(s * T + i) * D + h * hd + e] +=
                  scores[j] / sum * v[(s * T + j) * KV + kv_column + e];
            }
          }
        }
      }
    }
    return Linear(context, &p[Offset(prefix + "attn.wo.weight")], D, D);
  }

  // out[0, d) += scale * w2 (silu(w1 x) * (w3 x)) for one token x [d]:
  // w1 and w3 are `units` rows of d, w2's row o starts o * w2_row_stride
  // further on.
  void AddSwiGlu(const double* x, const double* w1, const double* w3,
                 const double* w2, int64_t w2_row_stride, int64_t units,
                 double scale, double* out) const {
    const int64_t D = c_.d_model;
    Doubles hidden(units);
    for (int64_t f = 0; f < units; ++f) {
      double a = 0, b = 0;
      for (int64_t i = 0; i < D; ++i) {
        a += w1[f * D + i] * x[i];
        b += w3[f * D + i] * x[i];
      }
      hidden[f] = a / (1.0 + std::exp(-a)) * b;
    }
    for (int64_t o = 0; o < D; ++o) {
      double y = 0;
      for (int64_t f = 0; f < units; ++f)
        y += w2[o * w2_row_stride + f] * hidden[f];
      out[o] += scale * y;
    }
  }

  Doubles Moe(const Doubles& p, const std::string& prefix, const Doubles& xn,
              ReferenceResult* result) const {
    const int64_t D = c_.d_model, E = c_.experts, K = c_.top_k,
                  F = c_.ffn_hidden;
    const int64_t N = xn.size() / D;
    const Doubles logits =
        Linear(xn, &p[Offset(prefix + "moe.router.weight")], D, E);
    const double* w1 = &p[Offset(prefix + "moe.experts.w1")];
    const double* w3 = &p[Offset(prefix + "moe.experts.w3")];
    const double* w2 = &p[Offset(prefix + "moe.experts.w2")];
    const double* bias = c_.expert_bias
                             ? &p[Offset(prefix + "moe.router.expert_bias")]
                             : nullptr;
    // The scores that choose: the softmax's probabilities, or the sigmoids.
    Doubles scores(E);
    auto choice_score = [&](const Doubles&, int e) {
      return bias == nullptr ? scores[e] : scores[e] + bias[e];
    };
    Doubles out(N * D, 0.0), mean_prob(E, 0.0), fraction(E, 0.0);
    for (int64_t t = 0; t < N; ++t) {
      Doubles probs(logits.begin() + t * E, logits.begin() + (t + 1) * E);
      if (c_.router_score == kernels::RouterScore::kSigmoid) {
        double sum = 0;
        for (int64_t e = 0; e < E; ++e) {
          sum += (scores[e] = 1.0 / (1.0 + std::exp(-probs[e])));
        }
        for (int64_t e = 0; e < E; ++e) probs[e] = scores[e] / sum;
      } else {
        const double max = *std::max_element(probs.begin(), probs.end());
        double sum = 0;
        for (double& prob : probs) sum += (prob = std::exp(prob - max));
        for (double& prob : probs) prob /= sum;
        scores = probs;
        const double logsumexp = max + std::log(sum);
        result->z_loss += c_.z_loss_coefficient * logsumexp * logsumexp /
                          static_cast<double>(N);
      }
      std::vector<int> order(E);
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
        return choice_score(probs, a) > choice_score(probs, b);
      });
      double selected = 0;
      for (int64_t j = 0; j < K; ++j) selected += probs[order[j]];
      for (int64_t e = 0; e < E; ++e) mean_prob[e] += probs[e] / N;
      for (int64_t j = 0; j < K; ++j) {
        const int e = order[j];
        result->routing.push_back(e);
        fraction[e] += 1.0 / (N * K);
        AddSwiGlu(&xn[t * D], w1 + e * F * D, w3 + e * F * D, w2 + e * D * F,
                  /*w2_row_stride=*/F, F, probs[e] / selected, &out[t * D]);
      }
    }
    for (int64_t e = 0; e < E; ++e) {
      result->load_balancing +=
          c_.load_balancing_coefficient * E * fraction[e] * mean_prob[e];
    }
    if (c_.shared_experts > 0) {
      // Each shared expert on its own, summed: the engine's one wide SwiGLU
      // holds expert j's units in rows [j * F_s, (j + 1) * F_s).
      const int64_t Fs = c_.shared_ffn_hidden, H = c_.shared_hidden();
      const double* s1 = &p[Offset(prefix + "moe.shared_experts.w1")];
      const double* s3 = &p[Offset(prefix + "moe.shared_experts.w3")];
      const double* s2 = &p[Offset(prefix + "moe.shared_experts.w2")];
      for (int64_t j = 0; j < c_.shared_experts; ++j) {
        for (int64_t t = 0; t < N; ++t) {
          AddSwiGlu(&xn[t * D], s1 + j * Fs * D, s3 + j * Fs * D, s2 + j * Fs,
                    /*w2_row_stride=*/H, Fs, 1.0, &out[t * D]);
        }
      }
    }
    return out;
  }

  ModelConfig c_;
  const ParameterLayout& layout_;
};

// ------------------------------------------------------------------ tests

class ModelTest : public ::testing::Test {
 protected:
  ModelTest() : ops_(2), allocator_(AllocatorOptions()) {}

  AccountedAllocator::Options AllocatorOptions() {
    AccountedAllocator::Options options;
    options.device_source = &source_;
    options.host_source = &source_;
    return options;
  }

  std::unique_ptr<Model> MakeModel(const ModelConfig& config, uint64_t seed) {
    auto model = Model::Create(config, &ops_, &allocator_);
    EXPECT_TRUE(model.ok()) << model.status();
    EXPECT_TRUE((*model)->InitializeWeights(seed).ok());
    return std::move(model).value();
  }

  static std::vector<int32_t> RandomTokens(const ModelConfig& config,
                                           int64_t sequences, int seed) {
    std::mt19937 rng(seed);
    std::vector<int32_t> tokens(sequences * (config.seq_len + 1));
    for (int32_t& token : tokens)
      token = static_cast<int32_t>(rng() % config.vocab);
    return tokens;
  }

  // Weights scaled up from the 0.02 initialisation so that every part of the
  // model (attention patterns, routing, SwiGLU curvature) is far from linear.
  // Each parameter's values are drawn from its name, whatever the layout.
  static void Perturb(Model& model, int seed) {
    std::normal_distribution<float> normal(0.0f, 0.3f);
    for (const ParameterInfo& info : model.layout().parameters()) {
      std::seed_seq name_seed(info.name.begin(), info.name.end());
      std::vector<uint32_t> name_bits(1);
      name_seed.generate(name_bits.begin(), name_bits.end());
      std::mt19937 rng(name_bits[0] ^ static_cast<uint32_t>(seed));
      float* values = model.weights().f32() + info.offset;
      const bool scale =
          info.init_std == 0.0f && info.role != ParameterRole::kExpertBias;
      for (int64_t i = 0; i < info.elements; ++i) {
        values[i] = scale ? 1.0f + normal(rng) : normal(rng);
      }
    }
  }

  // Runs `config` from the same perturbed weights; returns the loss and
  // fills the gradients.
  double LossAndGradients(const ModelConfig& config,
                          const std::vector<int32_t>& tokens, int64_t sequences,
                          Doubles* gradients) {
    std::unique_ptr<Model> model = MakeModel(config, 11);
    Perturb(*model, 12);
    auto loss = model->ForwardBackward(tokens.data(), sequences);
    EXPECT_TRUE(loss.ok()) << loss.status();
    const Tensor& g = model->gradients();
    gradients->assign(g.f32(), g.f32() + g.elements());
    return loss.ok() ? loss->total() : 0.0;
  }

  void ExpectLossAndGradientsMatchFloat64(const ModelConfig& config);
  void ExpectBf16SchedulesMatchTheUnscheduledStep(const ModelConfig& config);

  HostMemorySource source_;
  kernels::cpu::CpuOps ops_;
  AccountedAllocator allocator_;
};

// The tiny model with each of its options, for tests that cover them all.
std::vector<ModelConfig> EveryTinyModelOption() {
  return {TinyModelConfig(),
          TinyGroupedQueryModelConfig(),
          TinyQkNormModelConfig(),
          TinySigmoidRouterModelConfig(),
          TinySharedExpertsModelConfig(),
          TinyTiedEmbeddingsModelConfig()};
}

// What sets one of EveryTinyModelOption apart.
const char* OptionName(const ModelConfig& config) {
  return config.tie_embeddings            ? "tied embeddings"
         : config.shared_experts > 0      ? "shared experts"
         : config.qk_norm                 ? "QK-norm"
         : config.kv_heads < config.heads ? "grouped-query"
         : config.expert_bias             ? "sigmoid, expert bias"
                                          : "multi-head";
}

TEST_F(ModelTest, LossAndEveryParameterKindsGradientMatchFloat64) {
  ModelConfig sigmoid_aux_loss = TinyModelConfig();
  sigmoid_aux_loss.router_score = kernels::RouterScore::kSigmoid;
  for (const ModelConfig& config :
       {TinyModelConfig(), TinyGroupedQueryModelConfig(),
        TinyQkNormModelConfig(), TinyZLossModelConfig(),
        TinyExpertBiasModelConfig(), TinySigmoidRouterModelConfig(),
        sigmoid_aux_loss, TinySharedExpertsModelConfig(),
        TinyTiedEmbeddingsModelConfig()}) {
    SCOPED_TRACE(config.tie_embeddings            ? "tied embeddings"
                 : config.shared_experts > 0      ? "shared experts"
                 : config.qk_norm                 ? "QK-norm"
                 : config.kv_heads < config.heads ? "grouped-query"
                 : config.z_loss_coefficient > 0  ? "z-loss"
                 : config.router_score == kernels::RouterScore::kSigmoid
                     ? (config.expert_bias ? "sigmoid, expert bias"
                                           : "sigmoid, aux loss")
                 : config.expert_bias ? "expert bias"
                                      : "multi-head");
    ExpectLossAndGradientsMatchFloat64(config);
  }
}

void ModelTest::ExpectLossAndGradientsMatchFloat64(const ModelConfig& config) {
  const int64_t sequences = 2;
  std::unique_ptr<Model> model = MakeModel(config, 1);
  Perturb(*model, 2);
  const std::vector<int32_t> tokens = RandomTokens(config, sequences, 3);
  auto loss = model->ForwardBackward(tokens.data(), sequences);
  ASSERT_TRUE(loss.ok()) << loss.status();

  const ReferenceModel reference(config, model->layout());
  const Doubles point(model->weights().f32(),
                      model->weights().f32() + model->weights().elements());
  const ReferenceResult base = reference.Loss(point, tokens, sequences);
  EXPECT_NEAR(loss->cross_entropy, base.cross_entropy, 1e-5);
  EXPECT_NEAR(loss->load_balancing, base.load_balancing, 1e-6);
  EXPECT_EQ(base.load_balancing > 0.0, config.load_balancing_coefficient > 0);
  EXPECT_NEAR(loss->z_loss, base.z_loss, 1e-6 * std::max(1.0, base.z_loss));
  EXPECT_EQ(base.z_loss > 0.0, config.z_loss_coefficient > 0.0f);

  std::mt19937 rng(4);
  const double step = 1e-5;
  int checked = 0;
  for (const ParameterInfo& info : model->layout().parameters()) {
    // Up to 12 entries of every parameter tensor.
    for (int sample = 0; sample < 12; ++sample) {
      const int64_t index = info.offset + rng() % info.elements;
      Doubles plus = point, minus = point;
      plus[index] += step;
      minus[index] -= step;
      const ReferenceResult up = reference.Loss(plus, tokens, sequences);
      const ReferenceResult down = reference.Loss(minus, tokens, sequences);
      // Routing is piecewise constant; skip a step that changes it.
      if (up.routing != base.routing || down.routing != base.routing) continue;
      const double numeric = (up.total() - down.total()) / (2 * step);
      const double analytic = model->gradients().f32()[index];
      ASSERT_NEAR(analytic, numeric, 2e-4 + 2e-3 * std::abs(numeric))
          << info.name << " element " << index - info.offset;
      ++checked;
    }
  }
  // 2 layers x 10 tensors (12 with QK-norm) + embed, final norm and head
  // (tied: embed is the head), nearly all samples.
  EXPECT_GT(checked, 22 * 10);
}

// The shared experts run kSharedExpertPieceTokens tokens at a time, and
// the router's weight gradient reads kRouterGradientPieceTokens normed rows
// at a time, made again: over more tokens than one piece, the loss and
// their gradients still match the float64 model, which runs each whole.
TEST_F(ModelTest, SharedExpertsAndRouterOverSeveralPiecesMatchFloat64) {
  const ModelConfig config = TinySharedExpertsModelConfig();
  const int64_t sequences =
      std::max(kSharedExpertPieceTokens, kRouterGradientPieceTokens) /
          config.seq_len +
      1;
  ASSERT_GT(sequences * config.seq_len, kSharedExpertPieceTokens);
  ASSERT_GT(sequences * config.seq_len, kRouterGradientPieceTokens);
  std::unique_ptr<Model> model = MakeModel(config, 1);
  Perturb(*model, 2);
  const std::vector<int32_t> tokens = RandomTokens(config, sequences, 3);
  auto loss = model->ForwardBackward(tokens.data(), sequences);
  ASSERT_TRUE(loss.ok()) << loss.status();

  const ReferenceModel reference(config, model->layout());
  const Doubles point(model->weights().f32(),
                      model->weights().f32() + model->weights().elements());
  const ReferenceResult base = reference.Loss(point, tokens, sequences);
  EXPECT_NEAR(loss->cross_entropy, base.cross_entropy, 1e-5);
  std::mt19937 rng(4);
  const double step = 1e-4;
  int checked = 0;
  for (const ParameterInfo& info : model->layout().parameters()) {
    if (info.role != ParameterRole::kSharedExpert &&
        info.role != ParameterRole::kRouter) {
      continue;
    }
    for (int sample = 0; sample < 6; ++sample) {
      const int64_t index = info.offset + rng() % info.elements;
      Doubles plus = point, minus = point;
      plus[index] += step;
      minus[index] -= step;
      const ReferenceResult up = reference.Loss(plus, tokens, sequences);
      const ReferenceResult down = reference.Loss(minus, tokens, sequences);
      if (up.routing != base.routing || down.routing != base.routing) continue;
      const double numeric = (up.total() - down.total()) / (2 * step);
      ASSERT_NEAR(model->gradients().f32()[index], numeric,
                  2e-5 + 2e-3 * std::abs(numeric))
          << info.name << " element " << index - info.offset;
      ++checked;
    }
  }
  // 2 layers x 4 matrices (3 shared, the router), nearly all samples.
  EXPECT_GT(checked, 8 * 4);
}

TEST_F(ModelTest, SharedExpertsAreDenseParametersBesideTheRouter) {
  const ModelConfig config = TinySharedExpertsModelConfig();
  const ParameterLayout layout(config);
  const ParameterInfo* w1 = layout.Find("layers.1.moe.shared_experts.w1");
  const ParameterInfo* w3 = layout.Find("layers.1.moe.shared_experts.w3");
  const ParameterInfo* w2 = layout.Find("layers.1.moe.shared_experts.w2");
  ASSERT_TRUE(w1 != nullptr && w3 != nullptr && w2 != nullptr);
  EXPECT_EQ(w1->shape, (std::vector<int64_t>{20, 16}));
  EXPECT_EQ(w3->shape, (std::vector<int64_t>{20, 16}));
  EXPECT_EQ(w2->shape, (std::vector<int64_t>{16, 20}));
  EXPECT_FALSE(layout.SplitOverExpertRanks(*w2));
  EXPECT_EQ(w3->offset, w1->offset + w1->elements);
  EXPECT_EQ(w2->offset, w3->offset + w3->elements);
  // Split over two expert ranks, every rank holds them whole.
  const ParameterLayout split(
      config, ModelShard::For(config, /*pp_index=*/0, /*pp=*/1, /*ep_index=*/1,
                              /*ep=*/2));
  EXPECT_EQ(split.Find("layers.0.moe.shared_experts.w2")->shape,
            (std::vector<int64_t>{16, 20}));
  const ModelConfig plain = TinyModelConfig();
  EXPECT_EQ(ParameterLayout(plain).layer(0).shared_w1, -1);
  EXPECT_EQ(ParameterLayout(config).total_elements(),
            ParameterLayout(plain).total_elements() +
                config.layers * 3 * 20 * config.d_model);
}

// The parameters bf16 reads rounded (the embedding and the product
// weights) are one range of each shard's buffer, [bf16_begin, total): every
// parameter before it is read in float32, whatever the options and the
// shard (an expert rank with the lm_head's vocabulary shard, a stage with
// no embedding or no head), and each part of the dense region (the
// float32 parameters, the embedding, the product weights) is padded to the
// shard's alignment.
TEST_F(ModelTest, ParametersReadRoundedAreOneRangeOfTheBuffer) {
  ModelConfig everything = TinySharedExpertsModelConfig();
  everything.qk_norm = true;
  everything.expert_bias = true;
  ModelConfig ring = TinyModelConfig();
  ring.vocab_block = 7;
  for (const auto& [config, pp_index, pp, ep_index, ep] :
       {std::tuple{everything, 0, 1, 0, 1}, std::tuple{everything, 1, 2, 1, 2},
        std::tuple{everything, 0, 2, 0, 2}, std::tuple{ring, 0, 1, 1, 2},
        std::tuple{TinyTiedEmbeddingsModelConfig(), 0, 1, 0, 1}}) {
    ModelShard shard = ModelShard::For(config, pp_index, pp, ep_index, ep);
    shard.dense_alignment = 4;
    const ParameterLayout layout(config, shard);
    SCOPED_TRACE(absl::StrCat("stage ", pp_index, " of ", pp, ", expert rank ",
                              ep_index, " of ", ep));
    EXPECT_EQ(layout.bf16_begin() % 4, 0);
    EXPECT_EQ(layout.dense_products_begin() % 4, 0);
    EXPECT_EQ(layout.dense_elements() % 4, 0);
    // The embedding alone before the dense product weights.
    for (const ParameterInfo& info : layout.parameters()) {
      EXPECT_EQ(info.offset >= layout.bf16_begin() &&
                    info.offset < layout.dense_products_begin(),
                info.role == ParameterRole::kEmbedding)
          << info.name;
    }
    int64_t rounded = 0;
    for (const ParameterInfo& info : layout.parameters()) {
      EXPECT_EQ(info.offset >= layout.bf16_begin(), ReadRoundedInBf16(info))
          << info.name;
      if (ReadRoundedInBf16(info)) rounded += info.elements;
    }
    EXPECT_GT(rounded, 0);
    EXPECT_LE(layout.bf16_begin() + rounded, layout.total_elements());
  }
}

// Aux-loss-free balancing: the bias of each expert below the mean load rises
// by the rate, of each above it falls, of one at the mean stays; the
// optimizers never see it.
TEST_F(ModelTest, ExpertBiasMovesTowardTheMeanLoad) {
  ModelConfig config = TinyExpertBiasModelConfig();
  config.expert_bias_update_rate = 0.25f;
  std::unique_ptr<Model> model = MakeModel(config, 1);
  const ParameterLayout& layout = model->layout();
  const ParameterInfo* bias = layout.Find("layers.1.moe.router.expert_bias");
  ASSERT_NE(bias, nullptr);
  EXPECT_EQ(bias->shape, std::vector<int64_t>{4});
  EXPECT_FALSE(TrainedByOptimizer(*bias));
  const float* values = model->weights().f32() + bias->offset;
  EXPECT_EQ(std::vector<float>(values, values + 4),
            std::vector<float>(4, 0.0f));
  // Mean 6 in layer 0; every expert at the mean in layer 1.
  model->UpdateExpertBias({{10, 2, 6, 6}, {5, 5, 5, 5}});
  model->UpdateExpertBias({{10, 2, 7, 5}, {5, 5, 5, 5}});
  const float* layer0 = model->weights().f32() + layout.layer(0).expert_bias;
  EXPECT_EQ(std::vector<float>(layer0, layer0 + 4),
            (std::vector<float>{-0.5f, 0.5f, -0.25f, 0.25f}));
  EXPECT_EQ(std::vector<float>(values, values + 4),
            std::vector<float>(4, 0.0f));

  ModelConfig plain = TinyModelConfig();
  EXPECT_EQ(ParameterLayout(plain).layer(0).expert_bias, -1);
  EXPECT_EQ(
      ParameterLayout(config).total_elements(),
      ParameterLayout(plain).total_elements() + config.layers * config.experts);
}

// Tied, the head's rows are the embedding's: no lm_head.weight, vocab x
// d_model fewer parameters, and a Ring-DTP shard's rows are its own rows of
// the replicated table. Over pipeline stages the last stage has a copy of
// its rows outside the flat buffers, and no parameter of them.
TEST_F(ModelTest, TiedEmbeddingsShareTheTable) {
  const ModelConfig untied = TinyModelConfig();
  ModelConfig tied = TinyTiedEmbeddingsModelConfig();
  const ParameterLayout layout(tied);
  EXPECT_EQ(layout.Find("lm_head.weight"), nullptr);
  EXPECT_EQ(layout.lm_head_offset(), layout.embedding_offset());
  EXPECT_EQ(layout.total_elements(), ParameterLayout(untied).total_elements() -
                                         tied.vocab * tied.d_model);

  tied.vocab_block = 8;
  const ModelShard second = ModelShard::For(tied, 0, 1, 1, 2);
  ASSERT_TRUE(second.head_sharded);
  const ParameterLayout sharded(tied, second);
  EXPECT_EQ(sharded.Find("lm_head.weight"), nullptr);
  EXPECT_EQ(sharded.lm_head_offset(),
            sharded.embedding_offset() + second.head_first_row * tied.d_model);
  // The expert region holds the experts alone: no head shard.
  EXPECT_EQ(
      sharded.total_elements() - sharded.dense_elements(),
      tied.layers * 3 * second.expert_count * tied.ffn_hidden * tied.d_model);

  const ModelShard first = ModelShard::For(tied, 0, 2, 1, 2);
  const ModelShard last = ModelShard::For(tied, 1, 2, 1, 2);
  EXPECT_EQ(ParameterLayout(tied, first).tied_head_copy_elements(), 0);
  const ParameterLayout last_layout(tied, last);
  EXPECT_EQ(last_layout.tied_head_copy_elements(),
            last.head_rows * tied.d_model);
  EXPECT_EQ(last_layout.Find("embed.weight"), nullptr);
  EXPECT_EQ(last_layout.Find("lm_head.weight"), nullptr);
  auto model = Model::Create(tied, last, &ops_, &allocator_);
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ((*model)->tied_head_weights().elements(),
            last.head_rows * tied.d_model);
  EXPECT_EQ((*model)->tied_head_gradients().elements(),
            last.head_rows * tied.d_model);
  EXPECT_EQ((*model)->weights().elements(), last_layout.total_elements());
}

TEST_F(ModelTest, CheckpointingChangesNoBit) {
  for (ModelConfig config : EveryTinyModelOption()) {
    SCOPED_TRACE(OptionName(config));
    const std::vector<int32_t> tokens = RandomTokens(config, 3, 5);
    config.activation_checkpointing = true;
    std::unique_ptr<Model> checkpointed = MakeModel(config, 7);
    config.activation_checkpointing = false;
    std::unique_ptr<Model> plain = MakeModel(config, 7);
    auto a = checkpointed->ForwardBackward(tokens.data(), 3);
    auto b = plain->ForwardBackward(tokens.data(), 3);
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_EQ(a->total(), b->total()) << config.kv_heads;
    const Tensor& ga = checkpointed->gradients();
    const Tensor& gb = plain->gradients();
    EXPECT_TRUE(std::equal(ga.f32(), ga.f32() + ga.elements(), gb.f32()))
        << config.kv_heads;
  }
}

// SCO: the layer inputs wait in the host pool; the device holds two of them
// at most, whatever the depth, and not a bit of the result changes.
TEST_F(ModelTest, CheckpointOffloadChangesNoBitAndHoldsTwoBoundaries) {
  for (const int64_t layers : {2, 6}) {
    ModelConfig config = TinyModelConfig();
    config.layers = layers;
    const int64_t sequences = 3;
    const int64_t boundary_bytes =
        sequences * config.seq_len * 4 * config.d_model;
    const std::vector<int32_t> tokens = RandomTokens(config, sequences, 5);
    std::unique_ptr<Model> resident = MakeModel(config, 7);
    config.offload_checkpoints = true;
    std::unique_ptr<Model> offloaded = MakeModel(config, 7);
    Perturb(*resident, 8);
    Perturb(*offloaded, 8);
    auto a = resident->ForwardBackward(tokens.data(), sequences);
    allocator_.ResetPeaks();
    auto b = offloaded->ForwardBackward(tokens.data(), sequences);
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_EQ(a->total(), b->total());
    const Tensor& ga = resident->gradients();
    const Tensor& gb = offloaded->gradients();
    EXPECT_TRUE(std::equal(ga.f32(), ga.f32() + ga.elements(), gb.f32()))
        << layers << " layers";
    EXPECT_EQ(
        allocator_.Usage(MemoryPool::kDevice, MemoryComponent::kCheckpoint)
            .peak_bytes,
        2 * boundary_bytes)
        << layers << " layers";
    const MemoryUsage host =
        allocator_.Usage(MemoryPool::kHost, MemoryComponent::kCheckpoint);
    EXPECT_EQ(host.peak_bytes, layers * boundary_bytes);
    EXPECT_EQ(host.current_bytes, 0);
  }
  ModelConfig unsupported = TinyModelConfig();
  unsupported.offload_checkpoints = true;
  unsupported.activation_checkpointing = false;
  EXPECT_EQ(Model::Create(unsupported, &ops_, &allocator_).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// The backward holds one gradient of the residual stream, bf16 under bf16,
// and no block's normed input. With every layer recomputed, the
// activations' peak is the last layer's router weight gradient: the
// micro-batch's token ids, that gradient and the layer's residual (mid),
// the two norms' statistics, the MoE block's own gradients and one piece of
// its normed input made again. A second gradient of the stream held across
// the backward, as it once was, or the MoE block's whole normed input, as
// it was kept until 2026-12-06, adds (N, D) float32 to it; the attention
// block's, kept until then too, (N, D) in ProductInputType; a float32
// gradient under bf16, as it was until 2026-12-06, (N, D) bf16.
TEST_F(ModelTest, BackwardHoldsOneGradientOfTheResidualStream) {
  for (const kernels::GemmPrecision precision :
       {kernels::GemmPrecision::kFloat32, kernels::GemmPrecision::kBf16}) {
    ModelConfig config = TinyModelConfig();
    config.activation_checkpointing = true;
    config.matmul_precision = precision;
    // More tokens than a piece of the router's weight gradient.
    const int64_t sequences = kRouterGradientPieceTokens / config.seq_len + 2;
    const std::vector<int32_t> tokens = RandomTokens(config, sequences, 5);
    std::unique_ptr<Model> model = MakeModel(config, 7);
    allocator_.ResetPeaks();
    ASSERT_TRUE(model->ForwardBackward(tokens.data(), sequences).ok());
    const AttentionBuffers attention = AttentionBuffers::For(config, sequences);
    const MoeBuffers moe = MoeBuffers::For(config, sequences);
    const int64_t expected =
        2 * TokenIdsBuffer(config, sequences).bytes() +
        ResidualStreamBuffer(config, sequences).bytes() +
        ResidualGradientBuffer(config, sequences).bytes() +
        attention.inverse_rms.bytes() + moe.inverse_rms.bytes() +
        moe.d_gates.bytes() + moe.d_normed.bytes() + moe.d_logits.bytes() +
        moe.normed_piece.bytes() + moe.normed_piece_inverse_rms.bytes();
    ASSERT_LT(moe.normed_piece.elements(), moe.normed.elements());
    EXPECT_EQ(
        allocator_.Usage(MemoryPool::kDevice, MemoryComponent::kActivations)
            .peak_bytes,
        expected)
        << (precision == kernels::GemmPrecision::kBf16 ? "bf16" : "fp32");
  }
}

// Routing as skewed as it gets short of degenerate: with every router row
// but expert 0's zero, each token picks expert 0 and 1, or 1 and 2, so
// expert 1 takes every token and expert 3 none.
void SkewRouting(Model& model) {
  const ModelConfig& config = model.config();
  for (int64_t l = 0; l < model.layout().shard().layer_count; ++l) {
    float* router = model.weights().f32() + model.layout().layer(l).router;
    std::fill(router + config.d_model, router + config.experts * config.d_model,
              0.0f);
  }
}

// PipelinedLLEP on one rank: the dispatch in chunks of at most 5 token
// copies (11 chunks here) gives the unchunked loss and every gradient, with
// uniform and with skewed routing, and its dispatch peak is a chunk's.
TEST_F(ModelTest, ChunkedDispatchMatchesTheWholeWithABoundedPeak) {
  ModelConfig config = TinyModelConfig();
  const int64_t sequences = 3;
  const int64_t tokens = sequences * config.seq_len;
  const int64_t copies = tokens * config.top_k;
  const std::vector<int32_t> batch = RandomTokens(config, sequences, 8);
  auto run = [&](int64_t cap, bool skewed, Doubles* gradients) {
    config.dispatch_chunk_tokens = cap;
    std::unique_ptr<Model> model = MakeModel(config, 11);
    Perturb(*model, 12);
    if (skewed) SkewRouting(*model);
    allocator_.ResetPeaks();
    auto loss = model->ForwardBackward(batch.data(), sequences);
    EXPECT_TRUE(loss.ok()) << loss.status();
    const Tensor& g = model->gradients();
    gradients->assign(g.f32(), g.f32() + g.elements());
    if (skewed) {
      EXPECT_EQ(model->expert_tokens()[0][1], tokens);
      EXPECT_EQ(model->expert_tokens()[0][3], 0);
    }
    return std::make_pair(
        loss.ok() ? loss->total() : 0.0,
        allocator_.Usage(MemoryPool::kDevice, MemoryComponent::kDispatch)
            .peak_bytes);
  };
  const int64_t cap = 5;
  const int64_t d = config.d_model, f = config.ffn_hidden;
  int64_t chunked_peaks[2] = {0, 0};
  for (const bool skewed : {false, true}) {
    Doubles whole_gradients, chunked_gradients;
    const auto [whole_loss, whole_peak] = run(0, skewed, &whole_gradients);
    const auto [chunked_loss, chunked_peak] =
        run(cap, skewed, &chunked_gradients);
    EXPECT_NEAR(chunked_loss, whole_loss, 1e-5 * whole_loss);
    double largest = 0.0;
    for (double g : whole_gradients) largest = std::max(largest, std::abs(g));
    for (size_t i = 0; i < whole_gradients.size(); ++i) {
      ASSERT_NEAR(chunked_gradients[i], whole_gradients[i], 1e-4 * largest)
          << "element " << i << (skewed ? " (skewed)" : "");
    }
    // A chunk's rows at their widest (as in the unchunked count below) and
    // its two int32 arrays, on top of the plan's two arrays while the plan
    // is split; never more than the copies' own.
    const int64_t widest = std::max({3 * d + 3 * f, 2 * d + 4 * f, d + 5 * f});
    EXPECT_LE(chunked_peak, cap * widest * 4 + 3 * copies * 4 + cap * 4);
    EXPECT_EQ(whole_peak, copies * widest * 4 + 2 * copies * 4);
    chunked_peaks[skewed] = chunked_peak;
  }
  // Skew does not move the chunked peak.
  EXPECT_EQ(chunked_peaks[0], chunked_peaks[1]);
}

// Ring-DTP on one rank: the head in blocks of 7 of the 23 vocabulary columns
// (the last block short) gives the plain head's loss and every gradient,
// including under the skewed routing of perturbed weights, and its
// vocabulary-projection peak is one block instead of the whole logits.
TEST_F(ModelTest, RingDtpMatchesThePlainHeadWithABoundedPeak) {
  ModelConfig config = TinyModelConfig();
  const int64_t sequences = 3;
  const std::vector<int32_t> tokens = RandomTokens(config, sequences, 8);
  auto run = [&](int64_t vocab_block, Doubles* gradients) {
    config.vocab_block = vocab_block;
    std::unique_ptr<Model> model = MakeModel(config, 11);
    Perturb(*model, 12);
    allocator_.ResetPeaks();
    auto loss = model->ForwardBackward(tokens.data(), sequences);
    EXPECT_TRUE(loss.ok()) << loss.status();
    const Tensor& g = model->gradients();
    gradients->assign(g.f32(), g.f32() + g.elements());
    return std::make_pair(
        loss.ok() ? loss->total() : 0.0,
        allocator_.Usage(MemoryPool::kDevice, MemoryComponent::kVocabProjection)
            .peak_bytes);
  };
  Doubles plain_gradients, ring_gradients;
  const auto [plain_loss, plain_peak] = run(0, &plain_gradients);
  const auto [ring_loss, ring_peak] = run(7, &ring_gradients);
  EXPECT_NEAR(ring_loss, plain_loss, 1e-5 * plain_loss);
  double largest = 0.0;
  for (double g : plain_gradients) largest = std::max(largest, std::abs(g));
  for (size_t i = 0; i < plain_gradients.size(); ++i) {
    ASSERT_NEAR(ring_gradients[i], plain_gradients[i], 1e-4 * largest)
        << "element " << i;
  }
  const int64_t tokens_count = sequences * config.seq_len;
  // Plain: logits + their logsumexp and losses. Ring: one block, the
  // running logsumexp and the target logits.
  EXPECT_EQ(plain_peak, (tokens_count * config.vocab + 2 * tokens_count) * 4);
  EXPECT_EQ(ring_peak, (tokens_count * 7 + 2 * tokens_count) * 4);
}

// A spec without `precision` is bf16, the default; the staging is sized by
// the largest weight, within its bounds, and there is none under fp32.
TEST(ModelConfigTest, PrecisionComesFromTheSpecAndSizesTheStaging) {
  v1::JobSpec spec;
  spec.mutable_model()->set_d_model(256);
  spec.mutable_model()->set_heads(8);
  spec.mutable_model()->set_ffn_hidden(512);
  spec.mutable_model()->set_vocab(4096);
  EXPECT_EQ(ModelConfigFromSpec(spec).matmul_precision,
            kernels::GemmPrecision::kBf16);
  // Four bf16 copies of the 4096 x 256 head: 8 MiB.
  EXPECT_EQ(MatmulStagingBytes(ModelConfigFromSpec(spec)), int64_t{8} << 20);
  spec.mutable_model()->set_vocab(1 << 20);
  EXPECT_EQ(MatmulStagingBytes(ModelConfigFromSpec(spec)), int64_t{64} << 20);
  spec.mutable_model()->set_d_model(8);
  spec.mutable_model()->set_ffn_hidden(8);
  spec.mutable_model()->set_vocab(16);
  EXPECT_EQ(MatmulStagingBytes(ModelConfigFromSpec(spec)), int64_t{1} << 20);
  // bf16 weight storage comes with bf16 products and an offloaded
  // optimizer, whose masters keep the float32 weights.
  EXPECT_FALSE(ModelConfigFromSpec(spec).bf16_weight_storage);
  for (const v1::OptimizerOffload offload :
       {v1::OPTIMIZER_OFFLOAD_SERIAL, v1::OPTIMIZER_OFFLOAD_STREAM}) {
    spec.mutable_schedules()->set_optimizer_offload(offload);
    EXPECT_TRUE(ModelConfigFromSpec(spec).bf16_weight_storage);
  }
  spec.mutable_schedules()->set_optimizer_offload(v1::OPTIMIZER_OFFLOAD_NONE);
  EXPECT_FALSE(ModelConfigFromSpec(spec).bf16_weight_storage);
  spec.mutable_schedules()->set_optimizer_offload(v1::OPTIMIZER_OFFLOAD_STREAM);
  spec.set_precision(v1::PRECISION_FP32);
  EXPECT_FALSE(ModelConfigFromSpec(spec).bf16_weight_storage);
  EXPECT_EQ(ModelConfigFromSpec(spec).matmul_precision,
            kernels::GemmPrecision::kFloat32);
  EXPECT_EQ(MatmulStagingBytes(ModelConfigFromSpec(spec)), 0);
}

// A spec without the model options gets today's model; with them, theirs.
TEST(ModelConfigTest, ModelOptionsComeFromTheSpec) {
  v1::JobSpec spec;
  EXPECT_EQ(ModelConfigFromSpec(spec).rope_theta, 10000.0);
  EXPECT_EQ(ModelConfigFromSpec(spec).load_balancing_coefficient, 0.01f);
  EXPECT_EQ(ModelConfigFromSpec(spec).z_loss_coefficient, 0.0f);
  EXPECT_FALSE(ModelConfigFromSpec(spec).qk_norm);
  EXPECT_FALSE(ModelConfigFromSpec(spec).expert_bias);
  spec.mutable_model()->set_balancing(v1::BALANCING_NONE);
  EXPECT_EQ(ModelConfigFromSpec(spec).load_balancing_coefficient, 0.0f);
  EXPECT_FALSE(ModelConfigFromSpec(spec).expert_bias);
  spec.mutable_model()->set_balancing(v1::BALANCING_BIAS);
  EXPECT_EQ(ModelConfigFromSpec(spec).load_balancing_coefficient, 0.0f);
  EXPECT_TRUE(ModelConfigFromSpec(spec).expert_bias);
  EXPECT_EQ(ModelConfigFromSpec(spec).expert_bias_update_rate, 1e-3f);
  spec.mutable_model()->set_bias_update_rate(0.01);
  EXPECT_EQ(ModelConfigFromSpec(spec).expert_bias_update_rate, 0.01f);
  spec.mutable_model()->clear_balancing();
  spec.mutable_model()->clear_bias_update_rate();
  EXPECT_EQ(ModelConfigFromSpec(spec).router_score,
            kernels::RouterScore::kSoftmax);
  spec.mutable_model()->set_router(v1::ROUTER_SCORE_SIGMOID);
  EXPECT_EQ(ModelConfigFromSpec(spec).router_score,
            kernels::RouterScore::kSigmoid);
  spec.mutable_model()->clear_router();
  spec.mutable_model()->set_heads(8);
  EXPECT_EQ(ModelConfigFromSpec(spec).kv_heads, 8);
  spec.mutable_model()->set_rope_theta(1e6);
  spec.mutable_model()->set_aux_loss_coefficient(0);
  spec.mutable_model()->set_kv_heads(2);
  spec.mutable_model()->set_z_loss_coefficient(1e-3);
  spec.mutable_model()->set_qk_norm(true);
  EXPECT_TRUE(ModelConfigFromSpec(spec).qk_norm);
  EXPECT_EQ(ModelConfigFromSpec(spec).rope_theta, 1e6);
  EXPECT_EQ(ModelConfigFromSpec(spec).z_loss_coefficient, 1e-3f);
  EXPECT_EQ(ModelConfigFromSpec(spec).load_balancing_coefficient, 0.0f);
  EXPECT_EQ(ModelConfigFromSpec(spec).kv_heads, 2);
}

// bf16 products (precision: bf16) against float32 ones from the same
// weights: the loss within bf16's rounding, the gradients pointing the same
// way, and not bitwise float32's (the products really are bf16). The
// weights are perturbed to 15 times their initial scale, where bf16's
// rounding grows through the layers: two draws of them gave gradients
// 3.0% and 6.6% apart (in norm); a wrong product errs by order 1.
TEST_F(ModelTest, Bf16ProductsTrackTheFloat32Step) {
  ModelConfig config = TinyModelConfig();
  const int64_t sequences = 3;
  const std::vector<int32_t> tokens = RandomTokens(config, sequences, 8);
  Doubles exact_gradients, bf16_gradients;
  const double exact =
      LossAndGradients(config, tokens, sequences, &exact_gradients);
  config.matmul_precision = kernels::GemmPrecision::kBf16;
  const double bf16 =
      LossAndGradients(config, tokens, sequences, &bf16_gradients);
  EXPECT_NE(bf16, exact);
  EXPECT_NEAR(bf16, exact, 1e-2 * exact);
  double difference = 0, norm = 0;
  for (size_t i = 0; i < exact_gradients.size(); ++i) {
    difference += std::pow(bf16_gradients[i] - exact_gradients[i], 2);
    norm += std::pow(exact_gradients[i], 2);
  }
  EXPECT_LT(std::sqrt(difference / norm), 0.1);
}

// A pass's weights: its product weights are operands over the float32
// weights, and under bf16 products they carry the pass's copy, each matrix
// at its place in one buffer of the planned size holding its values rounded;
// under fp32 there is no copy. (A pass whose products rounded the float32
// weights themselves would compute the same bits, only slower: this is
// where a lost copy shows.)
TEST_F(ModelTest, PassWeightsCarryTheirBf16CopyUnderBf16Products) {
  for (const kernels::GemmPrecision precision :
       {kernels::GemmPrecision::kBf16, kernels::GemmPrecision::kFloat32}) {
    const bool bf16 = precision == kernels::GemmPrecision::kBf16;
    SCOPED_TRACE(bf16 ? "bf16" : "fp32");
    ModelConfig config = TinySharedExpertsModelConfig();
    config.matmul_precision = precision;
    std::unique_ptr<Model> model = MakeModel(config, 5);
    const ParameterLayout& layout = model->layout();
    const float* weights = model->weights().f32();
    auto expect_operand = [&](const LinearOperand& operand,
                              const std::string& name, const Tensor& copy) {
      SCOPED_TRACE(name);
      const ParameterInfo* info = layout.Find(name);
      ASSERT_NE(info, nullptr);
      EXPECT_EQ(operand.f32, weights + info->offset);
      if (!bf16) {
        EXPECT_EQ(operand.bf16, nullptr);
        EXPECT_TRUE(copy.empty());
        return;
      }
      ASSERT_NE(operand.bf16, nullptr);
      EXPECT_GE(operand.bf16, copy.bf16());
      EXPECT_LE(operand.bf16 + info->elements, copy.bf16() + copy.elements());
      const std::vector<float> values(operand.f32,
                                      operand.f32 + info->elements);
      EXPECT_EQ(testing::Bf16Bits(operand.bf16, operand.bf16 + info->elements),
                testing::RoundedToBf16(values));
    };
    for (int64_t layer = 0; layer < config.layers; ++layer) {
      Tensor copy;
      auto pass = model->LayerWeightsForPass(layer, &copy);
      ASSERT_TRUE(pass.ok()) << pass.status();
      if (bf16) {
        EXPECT_EQ(copy.bytes(),
                  LayerWeightsCopyBuffer(config, layout.shard())->bytes());
      }
      const std::string prefix = absl::StrCat("layers.", layer, ".");
      expect_operand(pass->attention.wqkv, prefix + "attn.wq.weight", copy);
      expect_operand(pass->attention.wo, prefix + "attn.wo.weight", copy);
      expect_operand(pass->moe.shared.w1, prefix + "moe.shared_experts.w1",
                     copy);
      expect_operand(pass->moe.shared.w3, prefix + "moe.shared_experts.w3",
                     copy);
      expect_operand(pass->moe.shared.w2, prefix + "moe.shared_experts.w2",
                     copy);
      expect_operand(pass->moe.experts.w1, prefix + "moe.experts.w1", copy);
      expect_operand(pass->moe.experts.w3, prefix + "moe.experts.w3", copy);
      expect_operand(pass->moe.experts.w2, prefix + "moe.experts.w2", copy);
    }
    Tensor copy;
    auto head = model->HeadWeightsForPass(&copy);
    ASSERT_TRUE(head.ok()) << head.status();
    expect_operand(head->lm_head, "lm_head.weight", copy);
  }
}

// bf16 weight storage keeps the product weights in bf16 only; the passes
// read them in place, and since the products read the weights rounded
// either way, the loss and gradients are bitwise those of float32 weights
// with per-pass copies, while the weights' device peak falls: their bf16
// bytes in place of float32 bytes plus the largest pass copy.
TEST_F(ModelTest, Bf16WeightStorageChangesNoBitAndHalvesTheWeights) {
  for (ModelConfig config : EveryTinyModelOption()) {
    SCOPED_TRACE(OptionName(config));
    config.matmul_precision = kernels::GemmPrecision::kBf16;
    const std::vector<int32_t> tokens = RandomTokens(config, 3, 4);
    int64_t weights_peak[2] = {0, 0};
    double loss[2] = {0, 0};
    Doubles gradients[2];
    std::vector<uint16_t> product_bits[2];
    for (const bool stored : {false, true}) {
      config.bf16_weight_storage = stored;
      allocator_.ResetPeaks();
      std::unique_ptr<Model> model = MakeModel(config, 9);
      const ParameterLayout& layout = model->layout();
      const int64_t begin = layout.bf16_begin();
      const int64_t total = layout.total_elements();
      if (stored) {
        ASSERT_EQ(model->weights().elements(), begin);
        ASSERT_EQ(model->weight_buffers().bf16->elements(), total - begin);
        const uint16_t* bits = model->weight_buffers().bf16->bf16();
        product_bits[1].assign(bits, bits + (total - begin));
      } else {
        const float* values = model->weights().f32();
        product_bits[0] = testing::RoundedToBf16(
            std::vector<float>(values + begin, values + total));
      }
      // Stored, a pass makes no copy (a tied head's neither) and reads the
      // stored weights.
      Tensor copy;
      auto pass = model->LayerWeightsForPass(0, &copy);
      ASSERT_TRUE(pass.ok()) << pass.status();
      EXPECT_EQ(copy.empty(), stored);
      if (stored) {
        EXPECT_EQ(pass->attention.wqkv.f32, nullptr);
        EXPECT_EQ(pass->attention.wqkv.bf16,
                  model->weight_buffers().Bf16At(layout.layer(0).wqkv));
        EXPECT_EQ(pass->moe.experts.w2.bf16,
                  model->weight_buffers().Bf16At(layout.layer(0).w2));
      }
      Tensor head_copy;
      auto head = model->HeadWeightsForPass(&head_copy);
      ASSERT_TRUE(head.ok()) << head.status();
      EXPECT_EQ(head_copy.empty(), stored);
      EXPECT_NE(head->lm_head.bf16, nullptr);
      copy.Reset();
      head_copy.Reset();

      auto result = model->ForwardBackward(tokens.data(), 3);
      ASSERT_TRUE(result.ok()) << result.status();
      loss[stored] = result->total();
      const Tensor& g = model->gradients();
      gradients[stored].assign(g.f32(), g.f32() + g.elements());
      weights_peak[stored] =
          allocator_.Usage(MemoryPool::kDevice, MemoryComponent::kWeights)
              .peak_bytes;
    }
    // The same initial weights, rounded as the passes round them.
    EXPECT_EQ(product_bits[1], product_bits[0]);
    EXPECT_EQ(loss[1], loss[0]);
    EXPECT_EQ(gradients[1], gradients[0]);
    EXPECT_LT(weights_peak[1], weights_peak[0] * 0.6);
  }
}

TEST_F(ModelTest, Bf16WeightStorageNeedsBf16Products) {
  ModelConfig config = TinyModelConfig();
  config.bf16_weight_storage = true;
  auto model = Model::Create(config, &ops_, &allocator_);
  EXPECT_EQ(model.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(model.status().message().find("precision: bf16"), std::string::npos)
      << model.status();
}

// bf16 gradient accumulation keeps the gradients of the parameters bf16
// reads rounded in bf16, each pass accumulating in a float32 window rounded
// once, and the embedding's backward summing each row in float32: a
// micro-batch's gradients are bitwise the float32 ones rounded, and a
// second micro-batch's are the float32 sum from the first's rounded values,
// rounded again (the float32 model is given those values to add to). But
// tied rows, rounded twice (after the head's pass and after the
// embedding's): within two roundings, 2^-7 of the table's largest
// gradient. With every model option, alone and with the model's four
// schedules (their several accumulations into a layer's and the head's
// gradients stay in the window). The gradients' device peak is the two
// buffers and one window, the largest of a layer's and the head's.
TEST_F(ModelTest, Bf16GradientsAreTheFloat32OnesRoundedOncePerMicroBatch) {
  for (ModelConfig config : EveryTinyModelOption()) {
    for (const bool scheduled : {false, true}) {
      SCOPED_TRACE(
          absl::StrCat(OptionName(config), scheduled ? ", scheduled" : ""));
      config.matmul_precision = kernels::GemmPrecision::kBf16;
      config.bf16_weight_storage = true;
      config.activation_checkpointing = scheduled;
      config.offload_checkpoints = scheduled;
      config.dispatch_chunk_tokens = scheduled ? 5 : 0;
      config.vocab_block = scheduled ? 8 : 0;
      const std::vector<int32_t> first = RandomTokens(config, 3, 4);
      const std::vector<int32_t> second = RandomTokens(config, 3, 5);
      config.bf16_gradients = false;
      allocator_.ResetPeaks();
      std::unique_ptr<Model> float32 = MakeModel(config, 9);
      config.bf16_gradients = true;
      std::unique_ptr<Model> bf16 = MakeModel(config, 9);
      const int64_t begin = bf16->layout().bf16_begin();
      const int64_t total = bf16->layout().total_elements();
      ASSERT_EQ(bf16->gradients().elements(), begin);
      ASSERT_EQ(bf16->gradient_buffers().bf16->elements(), total - begin);
      for (const std::vector<int32_t>* tokens : {&first, &second}) {
        auto expected = float32->ForwardBackward(tokens->data(), 3);
        ASSERT_TRUE(expected.ok()) << expected.status();
        auto actual = bf16->ForwardBackward(tokens->data(), 3);
        ASSERT_TRUE(actual.ok()) << actual.status();
        EXPECT_EQ(actual->total(), expected->total());
        float* sums = float32->gradients().f32();
        EXPECT_EQ(std::vector<float>(bf16->gradients().f32(),
                                     bf16->gradients().f32() + begin),
                  std::vector<float>(sums, sums + begin));
        const std::vector<uint16_t> rounded = testing::RoundedToBf16(
            std::vector<float>(sums + begin, sums + total));
        const uint16_t* bits = bf16->gradient_buffers().bf16->bf16();
        std::vector<uint16_t> actual_bits(bits, bits + (total - begin));
        if (config.tie_embeddings) {
          const ParameterInfo& table = *bf16->layout().Find("embed.weight");
          float largest = 0.0f;
          for (int64_t i = 0; i < table.elements; ++i) {
            largest = std::max(largest, std::abs(sums[table.offset + i]));
          }
          for (int64_t i = table.offset; i < table.offset + table.elements;
               ++i) {
            ASSERT_NEAR(kernels::Bfloat16ToFloat(actual_bits[i - begin]),
                        kernels::Bfloat16ToFloat(rounded[i - begin]),
                        std::ldexp(largest, -7))
                << "embed.weight element " << i - table.offset;
            actual_bits[i - begin] = rounded[i - begin];
          }
        }
        ASSERT_EQ(actual_bits, rounded);
        // The next micro-batch adds to the bf16 model's gradients.
        for (int64_t i = begin; i < total; ++i) {
          sums[i] = kernels::Bfloat16ToFloat(bits[i - begin]);
        }
      }
      const std::optional<BufferSpec> head_window =
          HeadGradientsWindowBuffer(config, bf16->layout().shard());
      const int64_t window_bytes = std::max(
          LayerGradientsWindowBuffer(config, bf16->layout().shard())->bytes(),
          head_window ? head_window->bytes() : 0);
      // Beside the float32 model's (P) gradients.
      EXPECT_EQ(
          allocator_.Usage(MemoryPool::kDevice, MemoryComponent::kGradients)
              .peak_bytes,
          total * 4 + begin * 4 + (total - begin) * 2 + window_bytes);
    }
  }
}

TEST_F(ModelTest, Bf16GradientsNeedBf16WeightStorage) {
  ModelConfig config = TinyModelConfig();
  config.matmul_precision = kernels::GemmPrecision::kBf16;
  config.bf16_gradients = true;
  auto model = Model::Create(config, &ops_, &allocator_);
  EXPECT_EQ(model.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(model.status().message().find("bf16 weight storage"),
            std::string::npos)
      << model.status();
}

// Each schedule in bf16 against the unscheduled bf16 step. bf16 rounds
// every product input element by element, the same way whatever the
// schedule, so a schedule that keeps the order of arithmetic (checkpointing
// and SCO recompute the same products) changes no bit, and one that splits
// products (PipelinedLLEP's chunks, Ring-DTP's blocks) changes only the
// order of float32 accumulation: the float32 tests' tolerances hold.
TEST_F(ModelTest, Bf16SchedulesMatchTheUnscheduledBf16Step) {
  for (const ModelConfig& config : EveryTinyModelOption()) {
    SCOPED_TRACE(OptionName(config));
    ExpectBf16SchedulesMatchTheUnscheduledStep(config);
  }
}

void ModelTest::ExpectBf16SchedulesMatchTheUnscheduledStep(
    const ModelConfig& config) {
  ModelConfig plain = config;
  plain.matmul_precision = kernels::GemmPrecision::kBf16;
  plain.activation_checkpointing = false;
  const int64_t sequences = 3;
  const std::vector<int32_t> tokens = RandomTokens(plain, sequences, 8);
  Doubles plain_gradients;
  const double plain_loss =
      LossAndGradients(plain, tokens, sequences, &plain_gradients);
  double largest = 0.0;
  for (double g : plain_gradients) largest = std::max(largest, std::abs(g));
  struct Schedule {
    const char* name;
    ModelConfig config;
    bool bitwise;
  };
  ModelConfig checkpointed = plain, offloaded = plain, chunked = plain,
              ring = plain;
  checkpointed.activation_checkpointing = true;
  offloaded.activation_checkpointing = true;
  offloaded.offload_checkpoints = true;
  chunked.dispatch_chunk_tokens = 5;
  ring.vocab_block = 7;
  for (const Schedule& schedule :
       {Schedule{"checkpointing", checkpointed, true},
        Schedule{"sco", offloaded, true}, Schedule{"chunked", chunked, false},
        Schedule{"ring_dtp", ring, false}}) {
    Doubles gradients;
    const double loss =
        LossAndGradients(schedule.config, tokens, sequences, &gradients);
    if (schedule.bitwise) {
      EXPECT_EQ(loss, plain_loss) << schedule.name;
      EXPECT_EQ(gradients, plain_gradients) << schedule.name;
      continue;
    }
    EXPECT_NEAR(loss, plain_loss, 1e-5 * plain_loss) << schedule.name;
    for (size_t i = 0; i < plain_gradients.size(); ++i) {
      ASSERT_NEAR(gradients[i], plain_gradients[i], 1e-4 * largest)
          << schedule.name << " element " << i;
    }
  }
}

TEST_F(ModelTest, RunsAreBitwiseReproducibleAndEvaluateMatches) {
  const ModelConfig config = TinyModelConfig();
  const std::vector<int32_t> tokens = RandomTokens(config, 2, 6);
  std::unique_ptr<Model> first = MakeModel(config, 9);
  std::unique_ptr<Model> second = MakeModel(config, 9);
  auto a = first->ForwardBackward(tokens.data(), 2);
  auto b = second->ForwardBackward(tokens.data(), 2);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->cross_entropy, b->cross_entropy);
  EXPECT_TRUE(
      std::equal(first->gradients().f32(),
                 first->gradients().f32() + first->gradients().elements(),
                 second->gradients().f32()));
  auto evaluated = first->EvaluateStage(tokens.data(), 2, Tensor());
  ASSERT_TRUE(evaluated.ok());
  EXPECT_EQ(evaluated->cross_entropy, a->cross_entropy);
  // At initialisation the model is near uniform over the vocabulary.
  EXPECT_NEAR(evaluated->cross_entropy, std::log(config.vocab), 0.1);
}

TEST_F(ModelTest, ReleasesEveryTransientTensorAndBoundsCheckpoints) {
  ModelConfig config = TinyModelConfig();
  const int64_t sequences = 4;
  const int64_t tokens = sequences * config.seq_len;
  std::unique_ptr<Model> model = MakeModel(config, 11);
  const int64_t parameter_bytes = model->layout().total_elements() * 4;
  allocator_.ResetPeaks();
  const std::vector<int32_t> batch = RandomTokens(config, sequences, 12);
  ASSERT_TRUE(model->ForwardBackward(batch.data(), sequences).ok());
  EXPECT_EQ(allocator_.PoolUsage(MemoryPool::kDevice).current_bytes,
            2 * parameter_bytes);
  // One (N, D) boundary per layer plus the head's input, all at once.
  EXPECT_EQ(allocator_.Usage(MemoryPool::kDevice, MemoryComponent::kCheckpoint)
                .peak_bytes,
            (config.layers + 1) * tokens * config.d_model * 4);
  // The (N, V) logits plus the per-token loss and log-sum-exp.
  EXPECT_EQ(
      allocator_.Usage(MemoryPool::kDevice, MemoryComponent::kVocabProjection)
          .peak_bytes,
      tokens * config.vocab * 4 + 2 * tokens * 4);
  // Dispatch holds one layer's routed copies (R rows) at a time under
  // checkpointing. In the layer's backward the saved expert tensors are freed
  // as their gradients are made; the peak is the largest of three moments
  // (rows of width D or F):
  //   combine backward:  input, output, d_output (3 D) + gate, up, hidden (3 F)
  //   through w2:        input, d_output (2 D) + gate, up, hidden, d_hidden
  //   SwiGLU backward:   input (D) + gate, up, d_hidden, d_gate, d_up (5 F)
  // plus the plan's two int32 arrays.
  const int64_t copies = tokens * config.top_k;
  const int64_t d = config.d_model, f = config.ffn_hidden;
  const int64_t widest = std::max({3 * d + 3 * f, 2 * d + 4 * f, d + 5 * f});
  EXPECT_EQ(allocator_.Usage(MemoryPool::kDevice, MemoryComponent::kDispatch)
                .peak_bytes,
            copies * widest * 4 + 2 * copies * 4);
  EXPECT_GT(model->expert_tokens()[0][0] + model->expert_tokens()[0][1] +
                model->expert_tokens()[0][2] + model->expert_tokens()[0][3],
            0);
}

TEST_F(ModelTest, AnEvaluationModelHoldsNoGradientsAndMatches) {
  const ModelConfig config = TinyModelConfig();
  const std::vector<int32_t> tokens = RandomTokens(config, 2, 6);
  std::unique_ptr<Model> trained = MakeModel(config, 9);
  auto expected = trained->EvaluateStage(tokens.data(), 2, Tensor());
  ASSERT_TRUE(expected.ok());
  const MemoryUsage gradients_before =
      allocator_.Usage(MemoryPool::kDevice, MemoryComponent::kGradients);
  auto model = Model::CreateForEvaluation(config, &ops_, &allocator_);
  ASSERT_TRUE(model.ok()) << model.status();
  ASSERT_TRUE((*model)->InitializeWeights(9).ok());
  EXPECT_EQ(allocator_.Usage(MemoryPool::kDevice, MemoryComponent::kGradients)
                .current_bytes,
            gradients_before.current_bytes);
  auto evaluated = (*model)->EvaluateStage(tokens.data(), 2, Tensor());
  ASSERT_TRUE(evaluated.ok()) << evaluated.status();
  EXPECT_EQ(evaluated->cross_entropy, expected->cross_entropy);
  EXPECT_EQ((*model)->ForwardBackward(tokens.data(), 2).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_F(ModelTest, OutOfRangeTokenIsAnErrorNotACrash) {
  const ModelConfig config = TinyModelConfig();
  std::unique_ptr<Model> model = MakeModel(config, 13);
  std::vector<int32_t> tokens = RandomTokens(config, 1, 14);
  tokens[3] = static_cast<int32_t>(config.vocab);
  auto loss = model->ForwardBackward(tokens.data(), 1);
  EXPECT_EQ(loss.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(ModelTest, DeviceCapacityOverflowNamesTheComponent) {
  HostMemorySource source;
  AccountedAllocator::Options options;
  options.device_source = &source;
  options.host_source = &source;
  const ModelConfig config = TinyModelConfig();
  const int64_t parameter_bytes = ParameterLayout(config).total_elements() * 4;
  // Room for weights and gradients and a little more, not for the logits.
  options.device_capacity_bytes = 2 * parameter_bytes + 64 * 1024;
  AccountedAllocator small(options);
  auto model = Model::Create(config, &ops_, &small);
  ASSERT_TRUE(model.ok());
  ASSERT_TRUE((*model)->InitializeWeights(1).ok());
  const std::vector<int32_t> tokens = RandomTokens(config, 64, 15);
  auto loss = (*model)->ForwardBackward(tokens.data(), 64);
  ASSERT_FALSE(loss.ok());
  EXPECT_EQ(loss.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(loss.status().message().find("device memory exhausted"),
            std::string::npos)
      << loss.status();
}

}  // namespace
}  // namespace plateau::engine
