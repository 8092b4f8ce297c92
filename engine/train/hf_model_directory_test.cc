#include "engine/train/hf_model_directory.h"

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "common/test_files.h"
#include "engine/backend.h"
#include "engine/model/model.h"
#include "engine/model/tiny_model_config.h"
#include "engine/train/hf_export.h"
#include "engine/train/hf_layout.h"
#include "engine/train/model_io.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/tiered_update.h"
#include "nlohmann/json.hpp"

namespace plateau::engine {
namespace {

using ::plateau::testing::MakeTestDirectory;
using ::plateau::testing::ReadTestFile;
using ::plateau::testing::WriteTestFile;
using ::testing::HasSubstr;
using ::testing::Not;

// A whole model of `config` on the CPU backend, with the seed's weights.
struct SeededModel {
  std::unique_ptr<Backend> backend;
  std::unique_ptr<Model> model;

  SeededModel(const ModelConfig& config, uint64_t seed)
      : backend(Backend::CreateCpu(1, int64_t{64} << 20)) {
    model = *Model::Create(config, &backend->ops(), &backend->allocator());
    EXPECT_TRUE(model->InitializeWeights(seed).ok());
  }

  std::vector<float> Weights() const {
    std::vector<float> values(model->layout().total_elements());
    backend->ops().CopyToHost(values.size() * sizeof(float),
                              model->weights().f32(), values.data());
    return values;
  }
};

// The model's weights exported to `directory` in shards of about 4 KB.
void Export(const ModelConfig& config, uint64_t seed,
            const std::string& directory) {
  SeededModel seeded(config, seed);
  // One rank's pieces are whole tensors.
  ShardSnapshot snapshot = *SnapshotShard(
      WeightPieces(*seeded.model, /*dense=*/true, /*experts=*/true), {},
      seeded.backend->ops(), seeded.backend->allocator());
  std::vector<TensorView> views;
  for (const ChunkView& chunk : snapshot.contents.weights) {
    views.push_back({chunk.name, SafetensorsDtype::kF32, chunk.shape,
                     chunk.data,
                     static_cast<size_t>(chunk.elements) * sizeof(float)});
  }
  const std::string file = directory + ".safetensors";
  ASSERT_TRUE(WriteSafetensors(file, views).ok());
  HfExportOptions options;
  options.output_directory = directory;
  options.max_shard_bytes = 4000;
  const std::unique_ptr<SafetensorsReader> reader =
      *SafetensorsReader::Open(file);
  ASSERT_TRUE(
      ExportHuggingFace(config, SafetensorsTensorSource(*reader), options)
          .ok());
}

// The directory's weights loaded over `seed`'s into a model of `config`.
std::vector<float> Loaded(const std::string& directory,
                          const ModelConfig& config, uint64_t seed) {
  SeededModel seeded(config, seed);
  absl::StatusOr<std::unique_ptr<HfModelDirectory>> opened =
      HfModelDirectory::Open(directory, config);
  EXPECT_TRUE(opened.ok()) << opened.status();
  if (!opened.ok()) return {};
  LoadHfWeights(**opened, *seeded.model);
  return seeded.Weights();
}

class HfModelDirectoryTest : public ::testing::Test {
 protected:
  std::string root_ = MakeTestDirectory("hf_model_directory_test");
};

TEST_F(HfModelDirectoryTest, LoadsAnExportBitForBit) {
  // Export and import are each other's inverse: Mixtral's layout, and
  // Qwen3-MoE's with QK-norm and grouped-query attention.
  for (const ModelConfig& config :
       {TinyGroupedQueryModelConfig(), TinyQkNormModelConfig()}) {
    const std::string directory =
        absl::StrCat(root_, "/", HfArchitectureName(config));
    Export(config, /*seed=*/7, directory);
    EXPECT_EQ(Loaded(directory, config, /*seed=*/8),
              SeededModel(config, 7).Weights());
    EXPECT_NE(SeededModel(config, 8).Weights(),
              SeededModel(config, 7).Weights());
  }
}

// A bf16 piece longer than one conversion chunk (65,536 elements) takes
// every chunk rounded, each at its place.
TEST_F(HfModelDirectoryTest, LoadsIntoBf16PiecesChunkByChunk) {
  ModelConfig config = TinyModelConfig();
  config.vocab = 4100;  // embed.weight: 65,600 elements
  const std::string directory = root_ + "/wide";
  Export(config, /*seed=*/7, directory);
  absl::StatusOr<std::unique_ptr<HfModelDirectory>> opened =
      HfModelDirectory::Open(directory, config);
  ASSERT_TRUE(opened.ok()) << opened.status();
  const ParameterLayout layout(config);
  const ParameterInfo& embedding = *layout.Find("embed.weight");
  std::vector<uint16_t> bits(embedding.elements);
  TensorPiece piece{
      embedding.name, embedding.global_shape, 0, embedding.elements,
      nullptr,        MemoryPool::kHost};
  piece.bfloat16_data = bits.data();
  SeededModel seeded(config, 7);
  LoadHfWeights(**opened, {piece}, seeded.backend->ops());
  const std::vector<float> exported = seeded.Weights();
  std::vector<uint16_t> expected(embedding.elements);
  for (int64_t i = 0; i < embedding.elements; ++i) {
    expected[i] = kernels::FloatToBfloat16(exported[embedding.offset + i]);
  }
  EXPECT_EQ(bits, expected);
}

TEST_F(HfModelDirectoryTest, TheExpertBiasStartsAtZero) {
  // A model with bias balancing starts from a Mixtral directory: the same
  // weights, and its bias (no Hugging Face tensor) at zero.
  const std::string directory = root_ + "/mixtral";
  Export(TinyModelConfig(), 7, directory);
  const ModelConfig biased = TinyExpertBiasModelConfig();
  SeededModel seeded(biased, 8);
  LoadHfWeights(**HfModelDirectory::Open(directory, biased), *seeded.model);
  const std::vector<float> loaded = seeded.Weights();
  const std::vector<float> exported =
      SeededModel(TinyModelConfig(), 7).Weights();
  const ParameterLayout& layout = seeded.model->layout();
  const ParameterLayout plain(TinyModelConfig());
  for (const ParameterInfo& info : layout.parameters()) {
    const float* values = loaded.data() + info.offset;
    if (info.role == ParameterRole::kExpertBias) {
      EXPECT_EQ(std::vector<float>(values, values + info.elements),
                std::vector<float>(info.elements, 0.0f));
      continue;
    }
    const ParameterInfo* same = nullptr;
    for (const ParameterInfo& other : plain.parameters()) {
      if (other.name == info.name) same = &other;
    }
    ASSERT_NE(same, nullptr) << info.name;
    EXPECT_EQ(0, std::memcmp(values, exported.data() + same->offset,
                             info.elements * sizeof(float)))
        << info.name;
  }
}

// A directory of `config`'s tensors written by hand, one file, in BF16:
// element i of each tensor is the bfloat16 of (i % 97) / 64 - 0.75.
void WriteBfloat16Directory(const ModelConfig& config,
                            const std::string& directory) {
  WriteTestFile(directory + "/" + kHfConfigFileName,
                HfConfigJson(config, nullptr));
  std::vector<std::vector<uint16_t>> storage;
  std::vector<TensorView> views;
  for (const HfTensorName& name : HfTensorNames(config)) {
    int64_t elements = 1;
    for (int64_t size : name.shape) elements *= size;
    std::vector<uint16_t>& bits = storage.emplace_back(elements);
    for (int64_t i = 0; i < elements; ++i) {
      bits[i] = kernels::FloatToBfloat16((i % 97) / 64.0f - 0.75f);
    }
    views.push_back({name.hf_name, SafetensorsDtype::kBF16, name.shape,
                     bits.data(), bits.size() * sizeof(uint16_t)});
  }
  ASSERT_TRUE(
      WriteSafetensors(directory + "/" + kHfSingleFileName, views).ok());
}

TEST_F(HfModelDirectoryTest, ReadsBfloat16AsTheFloatsTheyAre) {
  const ModelConfig config = TinyQkNormModelConfig();
  const std::string directory = root_ + "/bf16";
  WriteBfloat16Directory(config, directory);
  auto opened = HfModelDirectory::Open(directory, config);
  ASSERT_TRUE(opened.ok()) << opened.status();
  EXPECT_EQ((*opened)->dtypes(), "BF16");
  // A bank's range across two experts' matrices: expert 1 ends at element
  // 12 x 16 = 192 of its own, expert 2 starts again at 0.
  std::vector<float> values(8);
  (*opened)->Read("layers.1.moe.experts.w2", 2 * 192 - 4, 8, values.data());
  std::vector<float> expected;
  for (int64_t i : {188, 189, 190, 191, 0, 1, 2, 3}) {
    expected.push_back(kernels::Bfloat16ToFloat(
        kernels::FloatToBfloat16((i % 97) / 64.0f - 0.75f)));
  }
  EXPECT_EQ(values, expected);
  EXPECT_FALSE((*opened)->HasValues("layers.0.moe.router.expert_bias"));
  EXPECT_TRUE((*opened)->HasValues("layers.0.attn.q_norm.weight"));
}

// Opens `directory` for `config` and returns the error's message.
std::string Refusal(const std::string& directory, const ModelConfig& config) {
  absl::StatusOr<std::unique_ptr<HfModelDirectory>> opened =
      HfModelDirectory::Open(directory, config);
  EXPECT_FALSE(opened.ok());
  return std::string(opened.status().message());
}

// Rewrites the directory's config.json through `edit`.
template <typename Edit>
void EditConfig(const std::string& directory, Edit edit) {
  const std::string path = directory + "/" + kHfConfigFileName;
  nlohmann::json json = nlohmann::json::parse(ReadTestFile(path));
  edit(json);
  WriteTestFile(path, json.dump());
}

TEST_F(HfModelDirectoryTest, RefusesAConfigThatIsNotTheSpecsModel) {
  const ModelConfig config = TinyGroupedQueryModelConfig();
  const std::string directory = root_ + "/config";
  Export(config, 7, directory);
  EditConfig(directory, [](nlohmann::json& json) {
    json["hidden_size"] = 4096;
    json["num_local_experts"] = 8;
    json["rms_norm_eps"] = 1e-6;
    json["tie_word_embeddings"] = true;
    json["rope_scaling"] = {{"type", "yarn"}};
    json["sliding_window"] = 4;
    json["head_dim"] = 64;
    json.erase("num_key_value_heads");
  });
  const std::string refusal = Refusal(directory, config);
  EXPECT_THAT(refusal, HasSubstr("config.json is not the spec's model:\n"));
  EXPECT_THAT(refusal, HasSubstr("hidden_size is 4096, but model.d_model "
                                 "is 16"));
  EXPECT_THAT(refusal, HasSubstr("num_local_experts is 8, but model.experts "
                                 "is 4"));
  EXPECT_THAT(refusal, HasSubstr("num_key_value_heads is missing"));
  EXPECT_THAT(refusal, HasSubstr("rms_norm_eps is 1e-06, but "
                                 "model.rms_epsilon is 1e-05"));
  EXPECT_THAT(refusal, HasSubstr("tie_word_embeddings is true, but "
                                 "model.tie_embeddings is false"));
  EXPECT_THAT(refusal, HasSubstr("rope_scaling is {\"type\":\"yarn\"}"));
  EXPECT_THAT(refusal, HasSubstr("sliding_window is 4; Plateau's attention "
                                 "is full causal attention"));
  EXPECT_THAT(refusal, HasSubstr("head_dim is 64; Plateau's heads are "
                                 "model.d_model / model.heads = 4 wide"));
}

TEST_F(HfModelDirectoryTest, TakesTheKeysTransformersMayLeaveOut) {
  // Older configs have no head_dim (or a null one), no rope_scaling and
  // no tie_word_embeddings; a sliding window as long as the sequence
  // changes nothing.
  const ModelConfig config = TinyGroupedQueryModelConfig();
  const std::string directory = root_ + "/older";
  Export(config, 7, directory);
  EditConfig(directory, [&](nlohmann::json& json) {
    json["head_dim"] = nullptr;
    json.erase("rope_scaling");
    json.erase("tie_word_embeddings");
    json["sliding_window"] = config.seq_len;
  });
  EXPECT_EQ(Loaded(directory, config, 8), SeededModel(config, 7).Weights());
}

TEST_F(HfModelDirectoryTest, NamesTheArchitectureToChoose) {
  const std::string directory = root_ + "/qwen3";
  Export(TinyQkNormModelConfig(), 7, directory);
  ModelConfig without_qk_norm = TinyQkNormModelConfig();
  without_qk_norm.qk_norm = false;
  EXPECT_THAT(Refusal(directory, without_qk_norm),
              HasSubstr("architectures is [\"Qwen3MoeForCausalLM\"], but the "
                        "spec's model is MixtralForCausalLM: set "
                        "model.qk_norm: true"));
  EditConfig(directory, [](nlohmann::json& json) {
    json["architectures"] = {"OlmoeForCausalLM"};
  });
  EXPECT_THAT(Refusal(directory, TinyQkNormModelConfig()),
              HasSubstr("Plateau reads MixtralForCausalLM and "
                        "Qwen3MoeForCausalLM"));
  EditConfig(directory, [](nlohmann::json& json) {
    json["architectures"] = {"Qwen3MoeForCausalLM"};
    json["norm_topk_prob"] = false;
    json["mlp_only_layers"] = {0};
  });
  const std::string refusal = Refusal(directory, TinyQkNormModelConfig());
  EXPECT_THAT(refusal, HasSubstr("norm_topk_prob is false; Plateau "
                                 "renormalises"));
  EXPECT_THAT(refusal, HasSubstr("mlp_only_layers is [0]; every Plateau "
                                 "layer is a mixture of experts"));
}

// Adds `values` as lm_head.weight, in a file of its own, to the index of
// `directory`.
void AddHeadCopy(const std::string& directory, const ModelConfig& config,
                 const float* values) {
  const TensorView head = {"lm_head.weight",
                           SafetensorsDtype::kF32,
                           {config.vocab, config.d_model},
                           values,
                           config.vocab * config.d_model * sizeof(float)};
  ASSERT_TRUE(WriteSafetensors(directory + "/head.safetensors", {head}).ok());
  const std::string path = directory + "/" + kHfIndexFileName;
  nlohmann::json index = nlohmann::json::parse(ReadTestFile(path));
  index["weight_map"]["lm_head.weight"] = "head.safetensors";
  WriteTestFile(path, index.dump());
}

TEST_F(HfModelDirectoryTest, TiedEmbeddingsHaveNoHeadOfTheirOwn) {
  ModelConfig tied = TinyGroupedQueryModelConfig();
  tied.tie_embeddings = true;
  const std::string directory = root_ + "/tied";
  Export(tied, 7, directory);
  EXPECT_EQ(Loaded(directory, tied, 8), SeededModel(tied, 7).Weights());
  ModelConfig untied = tied;
  untied.tie_embeddings = false;
  const std::string refusal = Refusal(directory, untied);
  EXPECT_THAT(refusal, HasSubstr("tie_word_embeddings is true, but "
                                 "model.tie_embeddings is false"));
  Export(untied, 7, root_ + "/untied");
  EXPECT_THAT(Refusal(root_ + "/untied", tied),
              HasSubstr("tie_word_embeddings is false, but "
                        "model.tie_embeddings is true"));

  // A copy of the table as lm_head.weight is the same model; another
  // head is not.
  const std::vector<float> weights = SeededModel(tied, 7).Weights();
  const float* table =
      weights.data() + ParameterLayout(tied).Find("embed.weight")->offset;
  AddHeadCopy(directory, tied, table);
  EXPECT_EQ(Loaded(directory, tied, 8), weights);
  std::vector<float> other(table, table + tied.vocab * tied.d_model);
  other[5] += 1.0f;
  AddHeadCopy(directory, tied, other.data());
  EXPECT_THAT(Refusal(directory, tied),
              HasSubstr("lm_head.weight differs from "
                        "model.embed_tokens.weight, but tie_word_embeddings "
                        "makes them one tensor"));
}

TEST_F(HfModelDirectoryTest, RefusesModelsWithoutAnArchitecture) {
  const std::string directory = root_ + "/plain";
  Export(TinyModelConfig(), 7, directory);
  ModelConfig shared = TinyModelConfig();
  shared.shared_experts = 1;
  shared.shared_ffn_hidden = 8;
  EXPECT_THAT(Refusal(directory, shared),
              HasSubstr("cannot start from " + directory +
                        ": model.shared_experts: neither"));
}

TEST_F(HfModelDirectoryTest, ListsEveryTensorProblem) {
  const ModelConfig config = TinyModelConfig();
  const std::string directory = root_ + "/tensors";
  WriteTestFile(directory + "/" + kHfConfigFileName,
                HfConfigJson(config, nullptr));
  std::vector<float> values(16 * 16, 0.5f);
  std::vector<uint16_t> halves(16, 0);
  const std::vector<TensorView> views = {
      // Wrong shape, wrong dtype, not the model's, and passed over.
      {"model.layers.0.self_attn.q_proj.weight",
       SafetensorsDtype::kF32,
       {8, 16},
       values.data(),
       8 * 16 * sizeof(float)},
      {"model.layers.0.input_layernorm.weight",
       SafetensorsDtype::kF16,
       {16},
       halves.data(),
       16 * sizeof(uint16_t)},
      {"model.layers.0.mlp.shared_expert.gate_proj.weight",
       SafetensorsDtype::kF32,
       {16},
       values.data(),
       16 * sizeof(float)},
      {"model.layers.0.self_attn.rotary_emb.inv_freq",
       SafetensorsDtype::kF32,
       {4},
       values.data(),
       4 * sizeof(float)},
  };
  ASSERT_TRUE(WriteSafetensors(directory + "/part.safetensors", views).ok());
  nlohmann::json index;
  for (const TensorView& view : views) {
    index["weight_map"][view.name] = "part.safetensors";
  }
  index["weight_map"]["model.norm.weight"] = "part.safetensors";
  WriteTestFile(directory + "/" + kHfIndexFileName, index.dump());
  const std::string refusal = Refusal(directory, config);
  EXPECT_THAT(refusal, HasSubstr("does not hold the spec's model's weights:"));
  EXPECT_THAT(refusal, HasSubstr("model.embed_tokens.weight is missing"));
  EXPECT_THAT(refusal, HasSubstr("model.layers.0.self_attn.q_proj.weight is "
                                 "[8, 16], the model's [16, 16]"));
  EXPECT_THAT(refusal, HasSubstr("model.layers.0.input_layernorm.weight is "
                                 "F16; Plateau reads F32 and BF16 weights"));
  EXPECT_THAT(refusal, HasSubstr("model.layers.0.mlp.shared_expert.gate_proj"
                                 ".weight is not part of this model"));
  EXPECT_THAT(refusal, HasSubstr("model.norm.weight: the index puts it in "
                                 "part.safetensors, which does not hold it"));
  EXPECT_THAT(refusal, Not(HasSubstr("inv_freq")));
  // The model's 2 x (7 + 3 x 4) + 3 = 41 tensors make 38 missing and 3
  // wrong, with one more not the model's; the list stops at 20.
  EXPECT_THAT(refusal, HasSubstr("and 22 more"));
}

TEST_F(HfModelDirectoryTest, RefusesWhatIsNotAModelDirectory) {
  const ModelConfig config = TinyModelConfig();
  const std::string directory = MakeTestDirectory("empty");
  EXPECT_FALSE(HfModelDirectory::IsHfModelDirectory(directory));
  EXPECT_THAT(Refusal(directory, config),
              HasSubstr("has no config.json: not a Hugging Face model "
                        "directory"));
  WriteTestFile(directory + "/" + kHfConfigFileName,
                HfConfigJson(config, nullptr));
  EXPECT_TRUE(HfModelDirectory::IsHfModelDirectory(directory));
  EXPECT_THAT(Refusal(directory, config),
              HasSubstr("holds neither model.safetensors.index.json nor "
                        "model.safetensors"));
  WriteTestFile(directory + "/" + kHfIndexFileName,
                R"({"weight_map": {"lm_head.weight": "../elsewhere"}})");
  EXPECT_THAT(Refusal(directory, config),
              HasSubstr("lm_head.weight is in \"../elsewhere\", not the name "
                        "of a file beside the index"));
  WriteTestFile(directory + "/" + kHfConfigFileName, "[1, 2]");
  EXPECT_THAT(Refusal(directory, config),
              HasSubstr("config.json is not a JSON object"));
}

}  // namespace
}  // namespace plateau::engine
