// Every block's footprint against the allocations the block really makes:
// a model's micro-batch, forward and backward, with each schedule and both
// heads, and a validation pass, run on the CPU backend with an observer on
// the allocator, must allocate the same buffers as its footprint and reach
// the same peak in every pool and component. A block that allocates a
// buffer its footprint does not name fails here.
#include "engine/model/model_footprint.h"

#include <algorithm>
#include <array>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/model/model.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_ops.h"

namespace plateau::engine {
namespace {

struct Event {
  bool allocate = true;
  MemoryPool pool = MemoryPool::kDevice;
  MemoryComponent component = MemoryComponent::kOther;
  int64_t bytes = 0;
};

// What a stream of events allocated (sorted) and the peaks it reached.
struct Summary {
  std::vector<std::string> allocations;
  std::array<int64_t, kMemoryPoolCount> pool_peaks{};
  std::array<std::array<int64_t, kMemoryComponentCount>, kMemoryPoolCount>
      peaks{};
  std::array<int64_t, kMemoryPoolCount> live{};
};

Summary Summarise(const std::vector<Event>& events) {
  Summary summary;
  std::array<std::array<int64_t, kMemoryComponentCount>, kMemoryPoolCount>
      current{};
  for (const Event& event : events) {
    const int p = static_cast<int>(event.pool);
    const int c = static_cast<int>(event.component);
    const int64_t bytes = event.allocate ? event.bytes : -event.bytes;
    if (event.allocate) {
      summary.allocations.push_back(
          absl::StrCat(MemoryPoolName(event.pool), " ",
                       MemoryComponentName(event.component), " ", event.bytes));
    }
    current[p][c] += bytes;
    summary.live[p] += bytes;
    summary.peaks[p][c] = std::max(summary.peaks[p][c], current[p][c]);
    summary.pool_peaks[p] = std::max(summary.pool_peaks[p], summary.live[p]);
  }
  std::sort(summary.allocations.begin(), summary.allocations.end());
  return summary;
}

void ExpectSameFootprint(const std::vector<Event>& real,
                         const std::vector<Event>& footprint) {
  const Summary a = Summarise(real), b = Summarise(footprint);
  EXPECT_EQ(a.allocations, b.allocations);
  for (int p = 0; p < kMemoryPoolCount; ++p) {
    const char* pool = MemoryPoolName(static_cast<MemoryPool>(p));
    EXPECT_EQ(a.pool_peaks[p], b.pool_peaks[p]) << pool << " pool peak";
    EXPECT_EQ(a.live[p], b.live[p]) << pool << " bytes left live";
    for (int c = 0; c < kMemoryComponentCount; ++c) {
      EXPECT_EQ(a.peaks[p][c], b.peaks[p][c])
          << pool << " " << MemoryComponentName(static_cast<MemoryComponent>(c))
          << " peak";
    }
  }
}

// The allocator's events while `recording`.
class Recorder final : public AllocationObserver {
 public:
  void OnAllocate(MemoryPool pool, MemoryComponent component,
                  int64_t bytes) override {
    if (recording) events.push_back({true, pool, component, bytes});
  }
  void OnFree(MemoryPool pool, MemoryComponent component,
              int64_t bytes) override {
    if (recording) events.push_back({false, pool, component, bytes});
  }

  bool recording = false;
  std::vector<Event> events;
};

// The footprint's events.
class RecordingSink final : public FootprintSink {
 public:
  Handle Allocate(const BufferSpec& spec) override {
    specs_.push_back(spec);
    events.push_back({true, spec.pool, spec.component, spec.bytes()});
    return static_cast<Handle>(specs_.size());
  }
  void Free(Handle* handle) override {
    if (*handle == 0) return;
    const BufferSpec& spec = specs_[*handle - 1];
    events.push_back({false, spec.pool, spec.component, spec.bytes()});
    *handle = 0;
  }

  std::vector<Event> events;

 private:
  std::vector<BufferSpec> specs_;
};

ModelConfig TinyConfig() {
  ModelConfig config;
  config.layers = 2;
  config.d_model = 16;
  config.heads = 2;
  config.experts = 4;
  config.top_k = 2;
  config.ffn_hidden = 12;
  config.vocab = 23;
  config.seq_len = 9;
  return config;
}

struct Schedule {
  const char* name;
  bool activation_checkpointing = false;
  bool offload_checkpoints = false;
  int64_t dispatch_chunk_tokens = 0;
  int64_t vocab_block = 0;
};

class ModelFootprintTest : public ::testing::TestWithParam<Schedule> {
 protected:
  ModelFootprintTest() : ops_(2), allocator_(Options()) {}

  AccountedAllocator::Options Options() {
    AccountedAllocator::Options options;
    options.device_source = &source_;
    options.host_source = &source_;
    options.observer = &recorder_;
    return options;
  }

  ModelConfig Config() const {
    ModelConfig config = TinyConfig();
    config.activation_checkpointing = GetParam().activation_checkpointing;
    config.offload_checkpoints = GetParam().offload_checkpoints;
    config.dispatch_chunk_tokens = GetParam().dispatch_chunk_tokens;
    config.vocab_block = GetParam().vocab_block;
    return config;
  }

  std::vector<int32_t> Tokens(const ModelConfig& config, int64_t sequences) {
    std::mt19937 rng(7);
    std::vector<int32_t> tokens(sequences * (config.seq_len + 1));
    for (int32_t& token : tokens) {
      token = static_cast<int32_t>(rng() % config.vocab);
    }
    return tokens;
  }

  // The pass the model just made: its routing's counts, exactly.
  static PassShape PassOf(const ModelConfig& config, const Model& model,
                          int64_t sequences) {
    PassShape pass;
    pass.sequences = sequences;
    pass.head.group_tokens = {sequences * config.seq_len};
    for (const std::vector<int64_t>& counts : model.expert_tokens()) {
      pass.dispatch.push_back(DispatchShapeOf(config, /*ranks=*/1,
                                              /*self=*/0, counts,
                                              ChunkRows::kExact));
    }
    return pass;
  }

  HostMemorySource source_;
  Recorder recorder_;
  kernels::cpu::CpuOps ops_;
  AccountedAllocator allocator_;
};

TEST_P(ModelFootprintTest, TrainingMicroBatchAllocatesItsFootprint) {
  const ModelConfig config = Config();
  const int64_t sequences = 3;
  auto model = Model::Create(config, &ops_, &allocator_);
  ASSERT_TRUE(model.ok()) << model.status();
  ASSERT_TRUE((*model)->InitializeWeights(5).ok());
  const std::vector<int32_t> tokens = Tokens(config, sequences);
  recorder_.recording = true;
  auto loss = (*model)->ForwardBackward(tokens.data(), sequences);
  recorder_.recording = false;
  ASSERT_TRUE(loss.ok()) << loss.status();

  const PassShape pass = PassOf(config, **model, sequences);
  RecordingSink sink;
  ModelFootprint footprint(config, ModelShard::Whole(config), &sink);
  EXPECT_EQ(footprint.Forward(0, pass, /*input=*/0), 0);
  EXPECT_EQ(footprint.Backward(0, /*output_gradient=*/0), 0);
  ExpectSameFootprint(recorder_.events, sink.events);

  // The comparison can fail: a pass of one sequence fewer is told apart.
  PassShape shorter = pass;
  shorter.sequences = sequences - 1;
  RecordingSink other;
  ModelFootprint other_footprint(config, ModelShard::Whole(config), &other);
  other_footprint.Forward(0, shorter, 0);
  other_footprint.Backward(0, 0);
  EXPECT_NE(Summarise(recorder_.events).allocations,
            Summarise(other.events).allocations);
}

TEST_P(ModelFootprintTest, ValidationPassAllocatesItsFootprint) {
  const ModelConfig config = Config();
  const int64_t sequences = 2;
  auto model = Model::CreateForEvaluation(config, &ops_, &allocator_);
  ASSERT_TRUE(model.ok()) << model.status();
  ASSERT_TRUE((*model)->InitializeWeights(5).ok());
  const std::vector<int32_t> tokens = Tokens(config, sequences);
  recorder_.recording = true;
  auto output = (*model)->EvaluateStage(tokens.data(), sequences, Tensor());
  recorder_.recording = false;
  ASSERT_TRUE(output.ok()) << output.status();

  RecordingSink sink;
  ModelFootprint footprint(config, ModelShard::Whole(config), &sink);
  footprint.Evaluate(PassOf(config, **model, sequences), /*input=*/0);
  ExpectSameFootprint(recorder_.events, sink.events);
}

INSTANTIATE_TEST_SUITE_P(
    Schedules, ModelFootprintTest,
    ::testing::Values(Schedule{"plain"},
                      Schedule{"activation_checkpointing", true},
                      Schedule{"checkpoint_offload", true, true},
                      Schedule{"chunked_dispatch", false, false, 5},
                      Schedule{"ring_vocabulary", false, false, 0, 7},
                      Schedule{"every_schedule", true, true, 5, 7}),
    [](const ::testing::TestParamInfo<Schedule>& info) {
      return std::string(info.param.name);
    });

}  // namespace
}  // namespace plateau::engine
