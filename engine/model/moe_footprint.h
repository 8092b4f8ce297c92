// The MoE block's buffers (moe_block.h, router.h, token_dispatcher.h,
// experts.h, dispatch_chunks.h, expert_spill.h) and its forward and
// backward footprints, whole or chunked (PipelinedLLEP with the LLEP
// spill). The routing decides how many rows move, so the footprints take
// the layer's DispatchShape, which DispatchShapeOf derives from the count
// matrix as the dispatch does.
#ifndef PLATEAU_ENGINE_MODEL_MOE_FOOTPRINT_H_
#define PLATEAU_ENGINE_MODEL_MOE_FOOTPRINT_H_

#include <cstdint>
#include <vector>

#include "engine/memory/footprint.h"
#include "engine/model/model_config.h"

namespace plateau::engine {

// N tokens, K = top_k, E experts, D = d_model, F = ffn_hidden.
struct MoeBuffers {
  static MoeBuffers For(const ModelConfig& config, int64_t sequences);

  // RMSNorm(x): the forward's only, in ProductInputType (only the
  // experts' and shared experts' products and the gathers for them read it
  // whole; the router's float32 scores read its rows made again, a
  // router_piece at a time, under bf16); the backward keeps inverse_rms and
  // makes the rows it reads again (rms_norm.h's NormInput).
  BufferSpec normed;        // (N, D)  activations  ProductInputType
  BufferSpec inverse_rms;   // (N)     activations
  BufferSpec logits;        // (N, E)  activations  the router's, transient
  BufferSpec probs;         // (N, E)  activations
  BufferSpec expert_index;  // (N, K)  activations  int32
  BufferSpec gates;         // (N, K)  activations
  // With a router z-loss (has_z_loss): each token's logsumexp of its router
  // logits, kept for the z-loss's gradient.
  BufferSpec router_logsumexp;  // (N)  activations
  bool has_z_loss = false;
  // With the sigmoid router (has_score_sums): each token's sum of its
  // experts' sigmoid scores, kept for the normalisation's gradient.
  BufferSpec router_score_sums;  // (N)  activations
  bool has_score_sums = false;
  BufferSpec assignment_row;  // (N K)   dispatch     int32, whole or a chunk's
  // Backward's own.
  BufferSpec d_gates;   // (N, K)  activations
  BufferSpec d_normed;  // (N, D)  activations
  BufferSpec d_logits;  // (N, E)  activations
  // The router's weight gradient reads its input a piece of P = min(N,
  // kRouterGradientPieceTokens) rows at a time, made again in float32, and
  // under bf16 its forward a piece of Q = min(N, kRouterPieceTokens) rows.
  BufferSpec normed_piece;              // (P, D)  activations
  BufferSpec normed_piece_inverse_rms;  // (P)     activations, scratch
  BufferSpec router_piece;              // (Q, D)  activations
  BufferSpec router_piece_inverse_rms;  // (Q)     activations, scratch
};

// Rows of the normed input the router's weight gradient reads at a time in
// backward (each piece made again in float32 from the block's input,
// NormRowsAgain; the more rows, the longer the product's sums), and its
// forward under bf16 (a piece under a quarter of the float32 normed input
// it spares even at 1024 tokens).
inline constexpr int64_t kRouterGradientPieceTokens = 1024;
inline constexpr int64_t kRouterPieceTokens = 256;

// R rows of token copies in dispatch, (R, D): the experts' inputs, gathered
// and sent in ProductInputType, and their outputs, made and returned in
// RoundedActivationType (both bf16 under bf16 products: half the bytes on
// the wire each way); the outputs' gradients, sent to the experts in
// ProductInputType (only the w2 products read them, which would round them
// so: the same bits in half the bytes), and the inputs' gradients, returned
// in RoundedActivationType (each the float32 sum of its expert's two
// products rounded once, where autocast rounds both products and their sum:
// so all four exchanges move half the bytes). DispatchRowsBuffer: such
// rows in float32, the component and shape of an exchange's arriving rows,
// which take the sent rows' type. And the copies' tokens, (R) int32.
BufferSpec ExpertInputRowsBuffer(const ModelConfig& config, int64_t rows);
BufferSpec ExpertOutputRowsBuffer(const ModelConfig& config, int64_t rows);
BufferSpec ExpertOutputGradientRowsBuffer(const ModelConfig& config,
                                          int64_t rows);
BufferSpec ExpertInputGradientRowsBuffer(const ModelConfig& config,
                                         int64_t rows);
BufferSpec DispatchRowsBuffer(const ModelConfig& config, int64_t rows);
BufferSpec RowTokenBuffer(int64_t rows);

// The expert bank's buffers for R rows (experts.h).
struct ExpertBuffers {
  static ExpertBuffers For(const ModelConfig& config, int64_t rows);

  // Kept for backward: gate and up RoundedActivationType, which is
  // ProductInputType: backward writes d_gate and d_up over them.
  BufferSpec gate, up;  // (R, F)  dispatch
  BufferSpec hidden;    // (R, F)  dispatch  ProductInputType
  BufferSpec output;    // (R, D)  dispatch  ExpertOutputRowsBuffer
  BufferSpec d_hidden;  // (R, F)  dispatch
  BufferSpec d_input;   // (R, D)  dispatch  float32, then rounded
                        //   (ExpertInputGradientRowsBuffer)

  bool rounds() const { return gate.dtype != DType::kFloat32; }
};

// `experts` experts' copies of one of w1, w3, w2 (expert_spill.h),
// borrowed or packed for the exchange: the weights as the products read
// them (ProductInputType: under bf16 products their pass's bf16 copy, half
// the bytes on the wire), and their float32 gradients.
BufferSpec BorrowedWeightsBuffer(const ModelConfig& config, int64_t experts);
BufferSpec BorrowedGradientsBuffer(const ModelConfig& config, int64_t experts);

// What one rank moves in one layer's dispatch.
struct DispatchShape {
  // This rank's token copies (rows sent) and the rows its experts receive.
  int64_t sent_rows = 0;
  int64_t received_rows = 0;
  // Chunked (config.dispatch_chunk_tokens > 0): K (or the max_chunks of
  // DispatchShapeOf), and each chunk's rows.
  int64_t chunks = 0;
  std::vector<int64_t> chunk_sent_rows;
  std::vector<int64_t> chunk_received_rows;
  // The LLEP spill: whether the layer spills at all, and how many experts
  // this rank borrows and lends.
  bool spills = false;
  int64_t borrowed = 0;
  int64_t lent = 0;
};

// How many of a list's first n copies are chunk c's of K: copy i goes to
// chunk i mod K (dispatch_chunks.h).
int64_t CopiesInChunk(int64_t n, int64_t chunk, int64_t chunks);

// Tokens the shared experts (shared_experts.h) run at a time, in the
// forward and again in the backward.
inline constexpr int64_t kSharedExpertPieceTokens = 1024;

// The shared experts' buffers for N tokens: one piece of P =
// min(N, kSharedExpertPieceTokens) tokens, H = shared_hidden, float32. The
// forward holds gate, up and hidden; the backward all five (d_gate is
// written over hidden once w2's gradient has read it) and the piece's
// normed input, made again.
struct SharedExpertBuffers {
  static SharedExpertBuffers For(const ModelConfig& config, int64_t tokens);

  BufferSpec gate, up, hidden;  // (P, H)  activations
  BufferSpec d_hidden, d_up;    // (P, H)  activations
  BufferSpec normed;            // (P, D)  activations, backward's
  BufferSpec inverse_rms;       // (P)     activations, backward's scratch
};

enum class ChunkRows {
  // Each chunk's rows exactly, as DispatchChunks deals them out.
  kExact,
  // Each chunk at its bound (the cap, or the whole list if shorter): what
  // the planner takes, since real counts vary around the expected ones.
  kBound,
};

// counts[s * E + e]: the copies expert rank s routes to expert e (the
// plan's count matrix) over `ranks` expert ranks; `self` is this rank. The
// shape keeps the first `max_chunks` chunks at most: the planner replays a
// few of K chunks at their bound, which are all alike, and K reaches
// millions on a long sequence.
DispatchShape DispatchShapeOf(const ModelConfig& config, int ranks, int self,
                              const std::vector<int64_t>& counts,
                              ChunkRows chunk_rows, int64_t max_chunks);

// The footprint's handles of MoeActivations (unchunked: the plan, the
// experts' rows and activations).
struct MoeSaved {
  FootprintSink::Handle inverse_rms = 0, probs = 0, expert_index = 0, gates = 0,
                        router_logsumexp = 0, router_score_sums = 0,
                        assignment_row = 0, row_token = 0, expert_input = 0,
                        gate = 0, up = 0, hidden = 0, expert_output = 0;
};

// MoeBlockForward; `combine` false is its null `out` (a recompute).
// expert_parallel: the layer's expert group has more than one rank.
void MoeForwardFootprint(const ModelConfig& config, int64_t sequences,
                         const DispatchShape& dispatch, bool expert_parallel,
                         bool combine, FootprintSink& sink, MoeSaved* saved);
// MoeBlockBackward; frees what of *saved it frees (inverse_rms stays).
void MoeBackwardFootprint(const ModelConfig& config, int64_t sequences,
                          const DispatchShape& dispatch, bool expert_parallel,
                          FootprintSink& sink, MoeSaved* saved);
// Frees what is left of *saved, as destroying MoeActivations does.
void ReleaseMoeFootprint(FootprintSink& sink, MoeSaved* saved);

}  // namespace plateau::engine

#endif  // PLATEAU_ENGINE_MODEL_MOE_FOOTPRINT_H_
