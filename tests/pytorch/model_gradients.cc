// Test tool for the PyTorch parity test: loads weights from a safetensors
// file, runs one forward and backward pass of Plateau's model on a token
// file, and writes the gradients (same names as the weights) to a
// safetensors file and the losses as JSON on stdout.
//
// model_gradients --layers L --d_model D --heads H --experts E --top_k K
//   --ffn_hidden F --vocab V --seq_len T --sequences S
//   [--activation_checkpointing] --weights W.safetensors
//   --tokens T.bin (uint32, S x (T + 1)) --gradients OUT.safetensors
#include <cstdio>
#include <iostream>
#include <memory>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "engine/backend.h"
#include "engine/checkpoint/safetensors.h"
#include "engine/data/token_dataset.h"
#include "engine/memory/accounted_allocator.h"
#include "engine/model/model.h"
#include "engine/train/model_io.h"
#include "nlohmann/json.hpp"

ABSL_FLAG(int64_t, layers, 2, "");
ABSL_FLAG(int64_t, d_model, 16, "");
ABSL_FLAG(int64_t, heads, 2, "");
ABSL_FLAG(int64_t, kv_heads, 0, "model.kv_heads; 0: heads");
ABSL_FLAG(int64_t, experts, 4, "");
ABSL_FLAG(int64_t, top_k, 2, "");
ABSL_FLAG(int64_t, ffn_hidden, 12, "");
ABSL_FLAG(int64_t, vocab, 23, "");
ABSL_FLAG(int64_t, seq_len, 9, "");
ABSL_FLAG(double, rope_theta, 10000.0, "model.rope_theta");
ABSL_FLAG(double, rms_epsilon, 1e-5, "model.rms_epsilon");
ABSL_FLAG(double, aux_loss_coefficient, 0.01, "model.aux_loss_coefficient");
ABSL_FLAG(double, z_loss_coefficient, 0.0, "model.z_loss_coefficient");
ABSL_FLAG(bool, qk_norm, false, "model.qk_norm");
ABSL_FLAG(bool, expert_bias, false, "model.balancing: bias");
ABSL_FLAG(bool, sigmoid_router, false, "model.router: sigmoid");
ABSL_FLAG(int64_t, shared_experts, 0, "model.shared_experts");
ABSL_FLAG(int64_t, shared_ffn_hidden, 0, "model.shared_ffn_hidden");
ABSL_FLAG(bool, tie_embeddings, false, "model.tie_embeddings");
ABSL_FLAG(int64_t, sequences, 2, "");
ABSL_FLAG(bool, activation_checkpointing, true, "");
ABSL_FLAG(bool, bf16, false, "bf16 products (precision: bf16)");
ABSL_FLAG(std::string, weights, "", "");
ABSL_FLAG(std::string, tokens, "", "");
ABSL_FLAG(std::string, gradients, "", "");

namespace plateau {
namespace {

int Fail(const absl::Status& status) {
  std::cerr << "model_gradients: " << status << "\n";
  return 1;
}

int Run() {
  engine::ModelConfig config;
  config.layers = absl::GetFlag(FLAGS_layers);
  config.d_model = absl::GetFlag(FLAGS_d_model);
  config.heads = absl::GetFlag(FLAGS_heads);
  config.kv_heads = absl::GetFlag(FLAGS_kv_heads) > 0
                        ? absl::GetFlag(FLAGS_kv_heads)
                        : config.heads;
  config.experts = absl::GetFlag(FLAGS_experts);
  config.top_k = absl::GetFlag(FLAGS_top_k);
  config.ffn_hidden = absl::GetFlag(FLAGS_ffn_hidden);
  config.vocab = absl::GetFlag(FLAGS_vocab);
  config.seq_len = absl::GetFlag(FLAGS_seq_len);
  config.rope_theta = absl::GetFlag(FLAGS_rope_theta);
  config.rms_epsilon = static_cast<float>(absl::GetFlag(FLAGS_rms_epsilon));
  config.load_balancing_coefficient =
      static_cast<float>(absl::GetFlag(FLAGS_aux_loss_coefficient));
  config.z_loss_coefficient =
      static_cast<float>(absl::GetFlag(FLAGS_z_loss_coefficient));
  config.qk_norm = absl::GetFlag(FLAGS_qk_norm);
  config.expert_bias = absl::GetFlag(FLAGS_expert_bias);
  if (absl::GetFlag(FLAGS_sigmoid_router)) {
    config.router_score = kernels::RouterScore::kSigmoid;
  }
  config.shared_experts = absl::GetFlag(FLAGS_shared_experts);
  config.shared_ffn_hidden = absl::GetFlag(FLAGS_shared_ffn_hidden);
  config.tie_embeddings = absl::GetFlag(FLAGS_tie_embeddings);
  config.activation_checkpointing =
      absl::GetFlag(FLAGS_activation_checkpointing);
  if (absl::GetFlag(FLAGS_bf16)) {
    config.matmul_precision = kernels::GemmPrecision::kBf16;
  }
  const int64_t sequences = absl::GetFlag(FLAGS_sequences);

  std::unique_ptr<engine::Backend> backend =
      engine::Backend::CreateCpu(2, engine::AccountedAllocator::kUnlimited);
  auto model =
      engine::Model::Create(config, &backend->ops(), &backend->allocator());
  if (!model.ok()) return Fail(model.status());
  auto weights = engine::SafetensorsReader::Open(absl::GetFlag(FLAGS_weights));
  if (!weights.ok()) return Fail(weights.status());
  absl::Status status =
      engine::LoadWeights(engine::SafetensorsTensorSource(**weights), **model);
  if (!status.ok()) return Fail(status);
  auto tokens =
      engine::ReadRawTokenFile(absl::GetFlag(FLAGS_tokens), config.vocab);
  if (!tokens.ok()) return Fail(tokens.status());
  if (static_cast<int64_t>(tokens->size()) !=
      sequences * (config.seq_len + 1)) {
    return Fail(absl::InvalidArgumentError("token file size mismatch"));
  }
  auto loss = (*model)->ForwardBackward(tokens->data(), sequences);
  if (!loss.ok()) return Fail(loss.status());

  // Gradients share the weights' layout: write them under the same names.
  std::vector<engine::TensorView> views;
  for (const engine::ParameterInfo& info : (*model)->layout().parameters()) {
    views.push_back({info.name, engine::SafetensorsDtype::kF32, info.shape,
                     (*model)->gradients().f32() + info.offset,
                     static_cast<size_t>(info.elements) * sizeof(float)});
  }
  status = engine::WriteSafetensors(absl::GetFlag(FLAGS_gradients), views);
  if (!status.ok()) return Fail(status);
  std::cout << nlohmann::json{{"cross_entropy", loss->cross_entropy},
                              {"load_balancing", loss->load_balancing},
                              {"z_loss", loss->z_loss}}
                   .dump()
            << "\n";
  return 0;
}

}  // namespace
}  // namespace plateau

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return plateau::Run();
}
