// The output head's buffers (output_head.h), plain or Ring-DTP, and its
// forward and backward footprints.
#ifndef PLATEAU_ENGINE_MODEL_OUTPUT_HEAD_FOOTPRINT_H_
#define PLATEAU_ENGINE_MODEL_OUTPUT_HEAD_FOOTPRINT_H_

#include <cstdint>
#include <vector>

#include "engine/memory/footprint.h"
#include "engine/model/model_config.h"

namespace plateau::engine {

// The head's logits (logits.h): (tokens, columns), vocab_projection,
// RoundedActivationType.
BufferSpec LogitsBuffer(const ModelConfig& config, int64_t tokens,
                        int64_t columns);

// N tokens, D = d_model, V = vocab.
struct OutputHeadBuffers {
  static OutputHeadBuffers For(const ModelConfig& config, int64_t sequences);

  BufferSpec normed;         // (N, D)  activations  ProductInputType
  BufferSpec inverse_rms;    // (N)     activations
  BufferSpec logsumexp;      // (N)     vocab_projection
  BufferSpec logits;         // (N, V)  vocab_projection  plain form only
  BufferSpec losses;         // (N)     vocab_projection  plain form only
  BufferSpec target_logits;  // (N)     vocab_projection  Ring-DTP only
  BufferSpec d_normed;       // (N, D)  activations
};

// Ring-DTP over the expert ranks: whether the token blocks travel (else
// the weight shards do), whichever moves fewer bytes in a hop. A token
// carries its hidden state (ProductInputType), target and logsumexp, and
// its target logit (forward) or hidden gradient (backward); a vocabulary
// row its weights (ProductInputType: the products' bf16 copy under bf16)
// and, backward, their float32 gradient.
bool RingMovesTokens(const ModelConfig& config, int64_t most_tokens,
                     int64_t most_rows, bool backward);
// The rows of the largest of `ranks` vocabulary shards
// (ModelShard::VocabShardBegin).
int64_t LargestVocabShardRows(int64_t vocab, int ranks);

// The ring's buffers: a block of logits over `width` tokens, a travelling
// weight shard (ProductInputType) and its gradient (float32) of `rows`
// rows, and a travelling token block of `tokens` tokens.
BufferSpec RingLogitsBuffer(const ModelConfig& config, int64_t width);
BufferSpec RingShardBuffer(const ModelConfig& config, int64_t rows);
BufferSpec RingShardGradientBuffer(const ModelConfig& config, int64_t rows);
struct RingTokenBuffers {
  static RingTokenBuffers For(const ModelConfig& config, int64_t tokens);

  BufferSpec hidden;           // (t, D)  vocab_projection  ProductInputType
  BufferSpec targets;          // (t)     vocab_projection  int32
  BufferSpec logsumexp;        // (t)     vocab_projection
  BufferSpec target_logits;    // (t)     vocab_projection  forward only
  BufferSpec hidden_gradient;  // (t, D)  vocab_projection  backward only
};

// How the head's vocabulary is held: whole on this rank, or sharded over
// the expert group whose ranks have `group_tokens` tokens each.
struct HeadLayout {
  bool sharded = false;
  std::vector<int64_t> group_tokens;
};

// The footprint's handles of OutputHeadActivations.
struct OutputHeadSaved {
  FootprintSink::Handle normed = 0, inverse_rms = 0, logits = 0, logsumexp = 0;
};

void OutputHeadForwardFootprint(const ModelConfig& config, int64_t sequences,
                                const HeadLayout& layout, FootprintSink& sink,
                                OutputHeadSaved* saved);
// Frees what of *saved the backward frees (the plain form's logits).
void OutputHeadBackwardFootprint(const ModelConfig& config, int64_t sequences,
                                 const HeadLayout& layout, FootprintSink& sink,
                                 OutputHeadSaved* saved);
// Frees what is left of *saved, as destroying OutputHeadActivations does.
void ReleaseOutputHeadFootprint(FootprintSink& sink, OutputHeadSaved* saved);

}  // namespace plateau::engine

#endif  // PLATEAU_ENGINE_MODEL_OUTPUT_HEAD_FOOTPRINT_H_
