#include "engine/model/output_head_footprint.h"

#include <algorithm>

#include "engine/model/model_shard.h"

namespace plateau::engine {
namespace {

using Handle = FootprintSink::Handle;
constexpr MemoryComponent kActivations = MemoryComponent::kActivations;
constexpr MemoryComponent kVocab = MemoryComponent::kVocabProjection;

// RingForward or RingBackward's buffers, all freed when it returns.
void RingFootprint(const ModelConfig& config, int64_t tokens,
                   const HeadLayout& layout, bool backward,
                   FootprintSink& sink) {
  std::vector<Handle> buffers;
  const auto allocate_logits = [&](int64_t width) {
    buffers.push_back(sink.Allocate(RingLogitsBuffer(config, width)));
  };
  if (!layout.sharded) {
    allocate_logits(tokens);
    sink.FreeAll(&buffers);
    return;
  }
  const int ranks = static_cast<int>(layout.group_tokens.size());
  const int64_t most_rows = LargestVocabShardRows(config.vocab, ranks);
  const int64_t most_tokens =
      *std::max_element(layout.group_tokens.begin(), layout.group_tokens.end());
  const bool move_tokens =
      RingMovesTokens(config, most_tokens, most_rows, backward);
  allocate_logits(move_tokens ? most_tokens : tokens);
  const RingTokenBuffers travelling =
      RingTokenBuffers::For(config, most_tokens);
  for (int i = 0; i < 2; ++i) {
    if (!move_tokens) {
      buffers.push_back(sink.Allocate(RingShardBuffer(config, most_rows)));
      if (backward) {
        buffers.push_back(
            sink.Allocate(RingShardGradientBuffer(config, most_rows)));
      }
      continue;
    }
    buffers.push_back(sink.Allocate(travelling.hidden));
    buffers.push_back(sink.Allocate(travelling.targets));
    buffers.push_back(sink.Allocate(travelling.logsumexp));
    buffers.push_back(sink.Allocate(backward ? travelling.hidden_gradient
                                             : travelling.target_logits));
  }
  sink.FreeAll(&buffers);
}

}  // namespace

BufferSpec LogitsBuffer(const ModelConfig& config, int64_t tokens,
                        int64_t columns) {
  return DeviceBuffer(kVocab, {tokens, columns}, RoundedActivationType(config));
}

OutputHeadBuffers OutputHeadBuffers::For(const ModelConfig& config,
                                         int64_t sequences) {
  const int64_t n = sequences * config.seq_len;
  const int64_t d = config.d_model;
  OutputHeadBuffers buffers;
  buffers.normed = DeviceBuffer(kActivations, {n, d}, ProductInputType(config));
  buffers.inverse_rms = DeviceBuffer(kActivations, {n});
  buffers.logsumexp = DeviceBuffer(kVocab, {n});
  buffers.logits = LogitsBuffer(config, n, config.vocab);
  buffers.losses = DeviceBuffer(kVocab, {n});
  buffers.target_logits = DeviceBuffer(kVocab, {n});
  buffers.d_normed = DeviceBuffer(kActivations, {n, d});
  return buffers;
}

bool RingMovesTokens(const ModelConfig& config, int64_t most_tokens,
                     int64_t most_rows, bool backward) {
  const int64_t d = config.d_model;
  const int64_t bytes_per_token = d * DTypeBytes(ProductInputType(config)) +
                                  2 * kFloatBytes +
                                  (backward ? d * kFloatBytes : kFloatBytes);
  const int64_t bytes_per_row = d * DTypeBytes(ProductInputType(config)) +
                                (backward ? d * kFloatBytes : 0);
  return most_tokens * bytes_per_token < most_rows * bytes_per_row;
}

int64_t LargestVocabShardRows(int64_t vocab, int ranks) {
  int64_t most_rows = 0;
  for (int r = 0; r < ranks; ++r) {
    most_rows =
        std::max(most_rows, ModelShard::VocabShardBegin(vocab, r + 1, ranks) -
                                ModelShard::VocabShardBegin(vocab, r, ranks));
  }
  return most_rows;
}

BufferSpec RingLogitsBuffer(const ModelConfig& config, int64_t width) {
  return LogitsBuffer(config, width, config.vocab_block);
}

BufferSpec RingShardBuffer(const ModelConfig& config, int64_t rows) {
  return DeviceBuffer(kVocab, {rows, config.d_model}, ProductInputType(config));
}

BufferSpec RingShardGradientBuffer(const ModelConfig& config, int64_t rows) {
  return DeviceBuffer(kVocab, {rows, config.d_model});
}

RingTokenBuffers RingTokenBuffers::For(const ModelConfig& config,
                                       int64_t tokens) {
  const int64_t d = config.d_model;
  RingTokenBuffers buffers;
  buffers.hidden = DeviceBuffer(kVocab, {tokens, d}, ProductInputType(config));
  buffers.hidden_gradient = DeviceBuffer(kVocab, {tokens, d});
  buffers.targets = DeviceBuffer(kVocab, {tokens}, DType::kInt32);
  buffers.logsumexp = buffers.target_logits = DeviceBuffer(kVocab, {tokens});
  return buffers;
}

void OutputHeadForwardFootprint(const ModelConfig& config, int64_t sequences,
                                const HeadLayout& layout, FootprintSink& sink,
                                OutputHeadSaved* saved) {
  const OutputHeadBuffers buffers = OutputHeadBuffers::For(config, sequences);
  saved->normed = sink.Allocate(buffers.normed);
  saved->inverse_rms = sink.Allocate(buffers.inverse_rms);
  saved->logsumexp = sink.Allocate(buffers.logsumexp);
  if (config.vocab_block > 0) {
    Handle target_logits = sink.Allocate(buffers.target_logits);
    RingFootprint(config, sequences * config.seq_len, layout,
                  /*backward=*/false, sink);
    sink.Free(&target_logits);
    return;
  }
  saved->logits = sink.Allocate(buffers.logits);
  Handle losses = sink.Allocate(buffers.losses);
  sink.Free(&losses);
}

void OutputHeadBackwardFootprint(const ModelConfig& config, int64_t sequences,
                                 const HeadLayout& layout, FootprintSink& sink,
                                 OutputHeadSaved* saved) {
  const OutputHeadBuffers buffers = OutputHeadBuffers::For(config, sequences);
  Handle d_normed = sink.Allocate(buffers.d_normed);
  if (config.vocab_block > 0) {
    RingFootprint(config, sequences * config.seq_len, layout,
                  /*backward=*/true, sink);
  }
  sink.Free(&saved->logits);
  sink.Free(&d_normed);
}

void ReleaseOutputHeadFootprint(FootprintSink& sink, OutputHeadSaved* saved) {
  sink.Free(&saved->logsumexp);
  sink.Free(&saved->logits);
  sink.Free(&saved->inverse_rms);
  sink.Free(&saved->normed);
}

}  // namespace plateau::engine
