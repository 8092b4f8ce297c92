// The op interface of the engine: every numeric kernel a training step needs,
// implemented once per backend (kernels/cpu, kernels/cuda). Pointers address
// the backend's device memory. Tensors are dense and row-major; matrix
// products follow y = x W^T with W stored [out_features, in_features].
//
// Every op is deterministic: the same inputs give bitwise the same outputs
// on the same machine (reductions never depend on timing), and on the CPU
// backend whatever its thread count.
// "+=" in a comment means the op accumulates into its output.
//
// Thread safety: an Ops object takes one call at a time (its callers
// serialize them; a backend may keep per-object state such as streams or
// scratch that relies on it) unless its backend states more, as CpuOps does.
//
// Errors: calls return nothing. A backend whose calls can fail (CUDA's: a
// failed launch or copy, after which it does nothing but zero the host
// outputs; the CPU's: a bf16 product without room for its staging) records
// the first failure in status(), so callers check status() where results
// leave the device for good (the end of a step, a checkpoint).
#ifndef PLATEAU_KERNELS_OPS_H_
#define PLATEAU_KERNELS_OPS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "kernels/adamw.h"
#include "kernels/tiered_update.h"

namespace plateau::kernels {

enum class Transpose { kNo, kYes };

// How a product treats its float32 inputs. kBf16 (mixed precision, as
// autocast and the tensor cores do): a and b are rounded to bf16 (to
// nearest even), the products accumulated in float32, c float32; results
// then differ from kFloat32 by bf16's rounding (8 bits of mantissa), and
// from backend to backend by the order of accumulation.
enum class GemmPrecision { kFloat32, kBf16 };

// c[m, n] = alpha * op(a)[m, k] . op(b)[k, n] + beta * c, where op(a) is a
// ([m, k], leading dimension lda) or a^T (a is [k, m]); likewise b. With
// beta == 0, c need not be initialised.
//
// An operand may instead be given as bf16 values (their bits: a float32's
// upper 16), a_bf16 or b_bf16 in place of a or b, which stay null: the
// activations that only products read are stored so (docs/ARCHITECTURE.md
// section 8). Or both ways, the bf16 values being the float32 ones rounded
// to nearest even (a weight and its per-pass bf16 copy): a backend reads
// whichever suits it. Such a product is a bf16 one whatever `precision`
// says (IsBf16Product), and gives bitwise what it gives with those values
// as float32 on the CPU.
//
// A bf16 product may also write c as bf16 (c_bf16 in place of c, which stays
// null; leading dimension ldc): each element its float32 result rounded to
// nearest even, as the activations that float32 math also reads are stored
// (RoundedActivationType), without a float32 copy of c. beta must be 0.
struct GemmArgs {
  Transpose transpose_a = Transpose::kNo;
  Transpose transpose_b = Transpose::kNo;
  int64_t m = 0;
  int64_t n = 0;
  int64_t k = 0;
  float alpha = 1.0f;
  const float* a = nullptr;
  int64_t lda = 0;
  const float* b = nullptr;
  int64_t ldb = 0;
  float beta = 0.0f;
  float* c = nullptr;
  int64_t ldc = 0;
  GemmPrecision precision = GemmPrecision::kFloat32;
  const uint16_t* a_bf16 = nullptr;
  const uint16_t* b_bf16 = nullptr;
  uint16_t* c_bf16 = nullptr;
};

inline bool IsBf16Product(const GemmArgs& args) {
  return args.precision == GemmPrecision::kBf16 || args.a_bf16 != nullptr ||
         args.b_bf16 != nullptr || args.c_bf16 != nullptr;
}

// INVALID_ARGUMENT for a product written in bf16 that would accumulate
// into it (beta != 0), which every backend refuses; else OK.
inline absl::Status CheckBf16Output(const GemmArgs& args) {
  if (args.c_bf16 == nullptr || args.beta == 0.0f) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("a matrix product written in bf16 (GemmArgs::c_bf16) cannot "
                   "accumulate into it: beta must be 0, got ",
                   args.beta));
}

// Causal self-attention over `batch` sequences of `seq_len` tokens: token t
// of sequence s is row s * seq_len + t. Head h of a row occupies columns
// [h * head_dim, (h + 1) * head_dim): q and out have `heads` heads, k and v
// `kv_heads`, and query head h attends with key and value head
// h / (heads / kv_heads) (grouped-query attention; kv_heads divides heads).
// Softmax scale 1/sqrt(head_dim).
struct AttentionShape {
  int64_t batch = 0;
  int64_t seq_len = 0;
  int64_t heads = 0;
  int64_t kv_heads = 0;
  int64_t head_dim = 0;

  // A backward over a piece of a layer's heads (q, k, v, out and dout
  // pointing at the piece's first columns): the layer's query heads, which
  // lay out the forward's logsumexp (0: `heads`, the whole layer), and the
  // row stride of dq, dk and dv (0: the inputs' qkv_stride).
  int64_t layer_heads = 0;
  int64_t gradient_stride = 0;

  // Query heads per key and value head.
  int64_t group_size() const { return heads / kv_heads; }
  int64_t logsumexp_heads() const {
    return layer_heads > 0 ? layer_heads : heads;
  }
};

// How a router scores the experts (ModelConfig::router_score): softmax over
// the experts, or each expert's sigmoid on its own (DeepSeek-V3).
enum class RouterScore { kSoftmax, kSigmoid };

// `tokens` rows of `experts` router logits, each choosing top_k experts.
struct RouterShape {
  int64_t tokens = 0;
  int64_t experts = 0;
  int64_t top_k = 0;
  RouterScore score = RouterScore::kSoftmax;
};

// The bf16 products' staging until SetMatmulStagingBytes says otherwise.
inline constexpr int64_t kDefaultMatmulStagingBytes = int64_t{16} << 20;

class Ops {
 public:
  virtual ~Ops() = default;
  virtual const char* name() const = 0;
  // OK, or the first error a call met (see above).
  virtual absl::Status status() const { return absl::OkStatus(); }

  // ---- Matrix products ----
  virtual void Gemm(const GemmArgs& args) = 0;
  // Independent products (one per expert, say), run as one batch.
  virtual void GroupedGemm(absl::Span<const GemmArgs> problems) = 0;
  // The device scratch (the engine's, kernels/scratch_arena.h) a backend
  // holds for its bf16 products once it makes one
  // (kDefaultMatmulStagingBytes until this is called): both backends
  // convert the products' float32 operands into it a tile at a time, and
  // the memory planner predicts the same bytes (MatmulStagingBytes,
  // engine/model/model_config.h); a product whose smallest tile needs more
  // takes more.
  virtual void SetMatmulStagingBytes(int64_t /*bytes*/) {}

  // ---- Moving bytes between the host and the backend's device memory ----
  virtual void CopyFromHost(int64_t bytes, const void* host, void* device) = 0;
  virtual void CopyToHost(int64_t bytes, const void* device, void* host) = 0;

  // ---- Elementwise and reductions ----
  virtual void Fill(int64_t count, float value, float* x) = 0;
  virtual void Copy(int64_t count, const float* source, float* destination) = 0;
  // The same for bf16 values (bit for bit).
  virtual void CopyBf16(int64_t count, const uint16_t* source,
                        uint16_t* destination) = 0;
  // out[i] = x[i] rounded to bf16 (to nearest even): the compute copy of
  // the weights that bf16 products read.
  virtual void CopyToBf16(int64_t count, const float* x, uint16_t* out) = 0;
  // The same for a [rows, columns] matrix in wider rows: out[r * out_stride
  // + c] = x[r * x_stride + c] rounded (a piece of columns into its place).
  virtual void CopyMatrixToBf16(int64_t rows, int64_t columns, const float* x,
                                int64_t x_stride, uint16_t* out,
                                int64_t out_stride) = 0;
  // out[i] = x[i] widened to float32 (exactly): a rounded activation (the
  // residual stream between layers) where float32 math reads it.
  virtual void CopyFromBf16(int64_t count, const uint16_t* x, float* out) = 0;
  // out = a + b (out may alias a or b).
  virtual void Add(int64_t count, const float* a, const float* b,
                   float* out) = 0;
  virtual void Scale(int64_t count, float factor, float* x) = 0;
  // Sum of x[i]^2 in float64, returned to the host.
  virtual double SumOfSquares(int64_t count, const float* x) = 0;
  // Sum of x[i] in float64, returned to the host.
  virtual double Sum(int64_t count, const float* x) = 0;
  // column_sums[j] = sum_i x[i, j] in float64, on the host; x: [rows, columns].
  virtual void ColumnSums(int64_t rows, int64_t columns, const float* x,
                          absl::Span<double> column_sums) = 0;

  // ---- Embedding: out[t, :] = table[ids[t], :] ----
  virtual void EmbeddingForward(int64_t tokens, int64_t dim, const int32_t* ids,
                                const float* table, float* out) = 0;
  // dtable[ids[t], :] += dout[t, :].
  virtual void EmbeddingBackward(int64_t tokens, int64_t dim,
                                 const int32_t* ids, const float* dout,
                                 float* dtable) = 0;
  // EmbeddingBackward of a dout stored as bf16 (the residual stream's
  // gradient under precision bf16), each value widened exactly.
  virtual void EmbeddingBackwardFromBf16(int64_t tokens, int64_t dim,
                                         const int32_t* ids,
                                         const uint16_t* dout,
                                         float* dtable) = 0;
  // The same two over a table stored as bf16 (the embedding under bf16
  // weight storage, its gradient under bf16 gradient accumulation; both
  // only under precision bf16, so dout is bf16 too). Forward gathers the
  // bf16 rows as they are. Backward widens each row an id touches, adds its
  // tokens' widened dout in float32 in token order, and rounds the sum
  // once: bit for bit EmbeddingBackwardFromBf16 on the widened table,
  // rounded.
  virtual void EmbeddingForwardBf16(int64_t tokens, int64_t dim,
                                    const int32_t* ids, const uint16_t* table,
                                    uint16_t* out) = 0;
  virtual void EmbeddingBackwardBf16(int64_t tokens, int64_t dim,
                                     const int32_t* ids, const uint16_t* dout,
                                     uint16_t* dtable) = 0;

  // ---- RMSNorm: out = x / sqrt(mean(x^2) + eps) * weight ----
  // x, out: [rows, dim]; inverse_rms: [rows] (kept for backward).
  virtual void RmsNormForward(int64_t rows, int64_t dim, const float* x,
                              const float* weight, float epsilon, float* out,
                              float* inverse_rms) = 0;
  // The same with out rounded to bf16 (to nearest even), for a norm only
  // products read.
  virtual void RmsNormForwardToBf16(int64_t rows, int64_t dim, const float* x,
                                    const float* weight, float epsilon,
                                    uint16_t* out, float* inverse_rms) = 0;
  // The same of a bf16 x (a layer boundary under precision bf16), each row
  // widened exactly as it is read: bit for bit RmsNormForwardToBf16 on the
  // widened x, with no float32 copy of it.
  virtual void RmsNormForwardBf16(int64_t rows, int64_t dim, const uint16_t* x,
                                  const float* weight, float epsilon,
                                  uint16_t* out, float* inverse_rms) = 0;
  // dx += d/dx, dweight += d/dweight.
  virtual void RmsNormBackward(int64_t rows, int64_t dim, const float* x,
                               const float* weight, const float* inverse_rms,
                               const float* dout, float* dx,
                               float* dweight) = 0;
  // The same into a dx stored as bf16 (the residual stream's gradient under
  // precision bf16): each row widened, the same float32 arithmetic, the sum
  // rounded once (to nearest even): bit for bit RmsNormBackward on the
  // widened dx, rounded.
  virtual void RmsNormBackwardToBf16(int64_t rows, int64_t dim, const float* x,
                                     const float* weight,
                                     const float* inverse_rms,
                                     const float* dout, uint16_t* dx,
                                     float* dweight) = 0;
  // The same of a bf16 x, each row widened exactly as it is read: bit for
  // bit RmsNormBackwardToBf16 on the widened x.
  virtual void RmsNormBackwardBf16(int64_t rows, int64_t dim, const uint16_t* x,
                                   const float* weight,
                                   const float* inverse_rms, const float* dout,
                                   uint16_t* dx, float* dweight) = 0;

  // ---- Per-head RMSNorm (QK-norm), in place ----
  // x: [rows, heads * head_dim] with the given row stride. Each head's
  // head_dim values are normalised on their own and scaled by the heads'
  // shared weight [head_dim]: x_h <- x_h / sqrt(mean(x_h^2) + eps) * weight.
  virtual void HeadRmsNormForward(int64_t rows, int64_t heads, int64_t head_dim,
                                  int64_t row_stride, const float* weight,
                                  float epsilon, float* x) = 0;
  // Its backward, from the forward's input x (rows of stride x_stride), the
  // statistics recomputed from it so that the forward keeps nothing: dx
  // holds the output's gradient (rows of stride row_stride) and is
  // overwritten with the input's; dweight += d/dweight.
  virtual void HeadRmsNormBackward(int64_t rows, int64_t heads,
                                   int64_t head_dim, const float* x,
                                   int64_t x_stride, const float* weight,
                                   float epsilon, int64_t row_stride, float* dx,
                                   float* dweight) = 0;

  // ---- Rotary embedding (rotate-half form), in place ----
  // x: [rows, heads * head_dim] with the given row stride, rows first_row
  // on of sequences of seq_len back to back: row r is at position
  // (first_row + r) % seq_len, so a piece of the rows rotates as the whole
  // would. Pair i of a head turns by position * theta^(-2i / head_dim)
  // (ModelConfig::rope_theta). Backward applies the inverse rotation to dx.
  virtual void RotaryForward(int64_t rows, int64_t first_row, int64_t seq_len,
                             int64_t heads, int64_t head_dim,
                             int64_t row_stride, double theta, float* x) = 0;
  virtual void RotaryBackward(int64_t rows, int64_t first_row, int64_t seq_len,
                              int64_t heads, int64_t head_dim,
                              int64_t row_stride, double theta, float* dx) = 0;

  // ---- Causal attention, blockwise with an online softmax ----
  // q, k, v rows have stride qkv_stride; out rows have stride out_stride.
  // logsumexp: [batch, heads, seq_len], the softmax normaliser per query.
  // Working memory is O(block), never seq_len x seq_len.
  virtual void AttentionForward(const AttentionShape& shape, const float* q,
                                const float* k, const float* v,
                                int64_t qkv_stride, float* out,
                                int64_t out_stride, float* logsumexp) = 0;
  // Writes (does not accumulate) dq, dk, dv, with stride qkv_stride or the
  // shape's gradient_stride. A key and value head's dk and dv sum its
  // group's query heads in order. A piece of the heads (the shape's heads
  // and kv_heads a group-aligned part of layer_heads) gives bitwise the
  // whole backward's columns of those heads.
  virtual void AttentionBackward(const AttentionShape& shape, const float* q,
                                 const float* k, const float* v,
                                 int64_t qkv_stride, const float* out,
                                 const float* dout, int64_t out_stride,
                                 const float* logsumexp, float* dq, float* dk,
                                 float* dv) = 0;
  // The same over q, k, v and out stored as bf16 (attention's buffers
  // under precision bf16): the math is the float32 ops' on their exact
  // values, in the same order, so the forward gives bitwise
  // AttentionForward's logsumexp and its out rounded to bf16 (to nearest
  // even), and the backward bitwise AttentionBackward's dq, dk, dv (float32,
  // as dout is).
  virtual void AttentionForwardBf16(const AttentionShape& shape,
                                    const uint16_t* q, const uint16_t* k,
                                    const uint16_t* v, int64_t qkv_stride,
                                    uint16_t* out, int64_t out_stride,
                                    float* logsumexp) = 0;
  virtual void AttentionBackwardBf16(const AttentionShape& shape,
                                     const uint16_t* q, const uint16_t* k,
                                     const uint16_t* v, int64_t qkv_stride,
                                     const uint16_t* out, const float* dout,
                                     int64_t out_stride, const float* logsumexp,
                                     float* dq, float* dk, float* dv) = 0;

  // ---- SwiGLU: out = silu(gate) * up ----
  virtual void SwiGluForward(int64_t count, const float* gate, const float* up,
                             float* out) = 0;
  // The same with out rounded to bf16.
  virtual void SwiGluForwardToBf16(int64_t count, const float* gate,
                                   const float* up, uint16_t* out) = 0;
  // dgate may be gate and dup may be up: an element's gate and up are read
  // before its gradients are written (the experts' backward writes them in
  // place).
  virtual void SwiGluBackward(int64_t count, const float* gate, const float* up,
                              const float* dout, float* dgate, float* dup) = 0;
  // The same over gate and up stored as bf16 (the experts' pre-activations
  // under precision bf16): bitwise SwiGluForwardToBf16 and SwiGluBackward
  // on their exact values, the backward's dgate and dup rounded to bf16 (to
  // nearest even): only bf16 products read them, which would round them so.
  virtual void SwiGluForwardBf16(int64_t count, const uint16_t* gate,
                                 const uint16_t* up, uint16_t* out) = 0;
  virtual void SwiGluBackwardBf16(int64_t count, const uint16_t* gate,
                                  const uint16_t* up, const float* dout,
                                  uint16_t* dgate, uint16_t* dup) = 0;

  // ---- Router ----
  // Softmax: probs[t, :] = softmax(logits[t, :]) over experts, and the
  // experts' scores are probs. Sigmoid: the scores are s = sigmoid(logits),
  // score_sums[t] = sum_e s[t, e] and probs = s / score_sums[t].
  // expert_index[t, :] the top_k experts by score, or unless expert_bias is
  // null by score plus expert_bias[e] (aux-loss-free balancing; descending,
  // ties to the lower index); gates[t, :] their probs (without the bias)
  // renormalised to sum to one. Softmax only: unless logsumexp is null,
  // logsumexp[t] = log sum_e exp(logits[t, e]) (the router z-loss's).
  // score_sums: sigmoid only, and then required.
  virtual void RouterForward(const RouterShape& shape, const float* logits,
                             const float* expert_bias, float* probs,
                             int32_t* expert_index, float* gates,
                             float* logsumexp, float* score_sums) = 0;
  // dlogits[t, :] from dgates[t, :] and a per-expert gradient added to every
  // token's probs (the load-balancing loss's), of size `experts`, through
  // the softmax or (with the forward's score_sums) the sigmoid and its
  // normalisation; softmax only: unless logsumexp is null, plus
  // z_loss_scale * logsumexp[t] * probs[t, :], the gradient of
  // (z_loss_scale / 2) * logsumexp[t]^2.
  virtual void RouterBackward(const RouterShape& shape, const float* probs,
                              const int32_t* expert_index, const float* gates,
                              const float* dgates,
                              absl::Span<const float> dprobs_per_expert,
                              const float* logsumexp, float z_loss_scale,
                              const float* score_sums, float* dlogits) = 0;

  // ---- Token permutation by expert ----
  // Sorts the tokens * top_k assignments by expert (stable: by token, then
  // slot). assignment_row[t * top_k + j] is the row of assignment (t, j);
  // row_token[r] the token of row r; expert_offsets (host, experts + 1
  // entries) the first row of each expert.
  virtual void ComputeExpertLayout(int64_t tokens, int64_t experts,
                                   int64_t top_k, const int32_t* expert_index,
                                   int32_t* assignment_row, int32_t* row_token,
                                   absl::Span<int64_t> expert_offsets) = 0;
  // The three ops below that take an assignment_row skip the assignments
  // whose row is negative: a chunk of the dispatch (PipelinedLLEP) passes
  // only its own.
  // rows[r, :] = x[row_token[r], :].
  virtual void GatherRows(int64_t rows, int64_t dim, const float* x,
                          const int32_t* row_token, float* out) = 0;
  // The same over bf16 rows (the MoE block's normed input under precision
  // bf16), gathered as they are.
  virtual void GatherRowsBf16(int64_t rows, int64_t dim, const uint16_t* x,
                              const int32_t* row_token, uint16_t* out) = 0;
  // rows[r, :] = x[t, :] * inverse_rms[t] * weight, t = row_token[r]:
  // bitwise the rows RmsNormForward made of x with these statistics, then
  // gathered, so that a backward can gather normed rows without keeping
  // the normed tensor.
  virtual void GatherRmsNormedRows(int64_t rows, int64_t dim, const float* x,
                                   const float* inverse_rms,
                                   const float* weight,
                                   const int32_t* row_token, float* out) = 0;
  // The same with out rounded to bf16.
  virtual void GatherRmsNormedRowsToBf16(
      int64_t rows, int64_t dim, const float* x, const float* inverse_rms,
      const float* weight, const int32_t* row_token, uint16_t* out) = 0;
  // dx[t, :] += sum_j drows[assignment_row[t * top_k + j], :].
  virtual void GatherRowsBackward(int64_t tokens, int64_t top_k, int64_t dim,
                                  const float* drows,
                                  const int32_t* assignment_row, float* dx) = 0;
  // The same over rows stored as bf16 (the experts' input gradients under
  // precision bf16): bitwise the float32 op on the rows' exact values.
  virtual void GatherRowsBackwardBf16(int64_t tokens, int64_t top_k,
                                      int64_t dim, const uint16_t* drows,
                                      const int32_t* assignment_row,
                                      float* dx) = 0;
  // out[t, :] = residual[t, :] + sum_j gates[t, j] * rows[assignment_row[t,
  // j], :] (out may alias residual).
  virtual void CombineRows(int64_t tokens, int64_t top_k, int64_t dim,
                           const float* rows, const int32_t* assignment_row,
                           const float* gates, const float* residual,
                           float* out) = 0;
  // drows[assignment_row[t, j], :] = gates[t, j] * dout[t, :];
  // dgates[t, j] = dot(dout[t, :], rows[assignment_row[t, j], :]).
  virtual void CombineRowsBackward(int64_t tokens, int64_t top_k, int64_t dim,
                                   const float* rows,
                                   const int32_t* assignment_row,
                                   const float* gates, const float* dout,
                                   float* drows, float* dgates) = 0;
  // The same two over rows stored as bf16 (the experts' outputs under
  // precision bf16): bitwise the float32 ops on the rows' exact values, the
  // backward's drows stored rounded to bf16 (to nearest even) as it makes
  // them: only bf16 products read them, which would round them so. The
  // backward's dout is bf16 too (the residual stream's gradient under
  // precision bf16), widened exactly.
  virtual void CombineRowsBf16(int64_t tokens, int64_t top_k, int64_t dim,
                               const uint16_t* rows,
                               const int32_t* assignment_row,
                               const float* gates, const float* residual,
                               float* out) = 0;
  virtual void CombineRowsBackwardBf16(int64_t tokens, int64_t top_k,
                                       int64_t dim, const uint16_t* rows,
                                       const int32_t* assignment_row,
                                       const float* gates, const uint16_t* dout,
                                       uint16_t* drows, float* dgates) = 0;

  // ---- Cross-entropy over the vocabulary ----
  // losses[t] = logsumexp(logits[t, :]) - logits[t, targets[t]].
  virtual void CrossEntropyForward(int64_t tokens, int64_t vocab,
                                   const float* logits, const int32_t* targets,
                                   float* losses, float* logsumexp) = 0;
  // Ring-DTP's online softmax: folds logits[t, :], which are the columns
  // [vocab_begin, vocab_begin + block) of the vocabulary, into token t's
  // running logsumexp (start from -infinity) and, where targets[t] falls in
  // the block, sets target_logits[t]. After the last block logsumexp[t] is
  // the whole row's, and the loss is logsumexp[t] - target_logits[t].
  virtual void CrossEntropyFoldBlock(int64_t tokens, int64_t block,
                                     int64_t vocab_begin, const float* logits,
                                     const int32_t* targets, float* logsumexp,
                                     float* target_logits) = 0;
  // In place: logits[t, :] <- scale * (softmax - onehot) over the columns
  // [vocab_begin, vocab_begin + block) of the vocabulary, given each row's
  // whole logsumexp (vocab_begin 0 and block = vocab: the plain backward).
  virtual void CrossEntropyBackward(int64_t tokens, int64_t block,
                                    int64_t vocab_begin, const int32_t* targets,
                                    const float* logsumexp, float scale,
                                    float* logits) = 0;
  // The same three over bf16 logits (precision bf16 stores them so):
  // bitwise the float32 ops on the widened values, the backward's gradient
  // rounded once into the logits it replaces.
  virtual void CrossEntropyForwardBf16(int64_t tokens, int64_t vocab,
                                       const uint16_t* logits,
                                       const int32_t* targets, float* losses,
                                       float* logsumexp) = 0;
  virtual void CrossEntropyFoldBlockBf16(int64_t tokens, int64_t block,
                                         int64_t vocab_begin,
                                         const uint16_t* logits,
                                         const int32_t* targets,
                                         float* logsumexp,
                                         float* target_logits) = 0;
  virtual void CrossEntropyBackwardBf16(int64_t tokens, int64_t block,
                                        int64_t vocab_begin,
                                        const int32_t* targets,
                                        const float* logsumexp, float scale,
                                        uint16_t* logits) = 0;

  // ---- Optimizer ----
  virtual void AdamWUpdate(const AdamWCoefficients& coefficients, int64_t count,
                           float* params, const float* grads,
                           float* first_moment, float* second_moment) = 0;
  // The tiered optimizers' passes (kernels/tiered_update.h), each over a
  // group of slices of different tensors at once (one launch, not one per
  // tensor). Slices that add to the same row and column sums must not be in
  // one AccumulateSquares call.
  virtual void AccumulateSquares(absl::Span<const TieredSlice> slices) = 0;
  // out[i] = sqrt(scale * x[i]) (out may alias x).
  virtual void SquareRoots(int64_t count, float scale, const float* x,
                           float* out) = 0;
  // Updates each slice's moments; sums[i] = slice i's sum of u^2.
  virtual void TieredMeasure(const TieredCoefficients& coefficients,
                             absl::Span<const TieredSlice> slices,
                             absl::Span<double> sums) = 0;
  virtual void TieredApply(const TieredCoefficients& coefficients,
                           absl::Span<const TieredSlice> slices) = 0;
  // The whole update of each slice in turn (for a factored matrix its sums
  // and statistics, see TieredSlice; then Measure, the rms clip to
  // clip_threshold and Apply): for slices that are whole tensors, small
  // enough to stay in cache from the first pass to the last.
  virtual void TieredUpdate(const TieredCoefficients& coefficients,
                            absl::Span<const TieredSlice> slices,
                            float clip_threshold) = 0;
  virtual void LionUpdate(const TieredCoefficients& coefficients,
                          absl::Span<const TieredSlice> slices) = 0;
};

}  // namespace plateau::kernels

#endif  // PLATEAU_KERNELS_OPS_H_
