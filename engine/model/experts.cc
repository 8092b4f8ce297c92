#include "engine/model/experts.h"

#include <algorithm>
#include <functional>
#include <vector>

#include "common/status_macros.h"
#include "engine/model/linear.h"
#include "engine/model/moe_footprint.h"

namespace plateau::engine {
namespace {

// Weight gradients of one expert from different segments add into the same
// matrix, so they run one source at a time (in order: deterministic); the
// segments of one source belong to different experts.
void RunWeightGradients(
    const LayerContext& context, const std::vector<ExpertSegment>& segments,
    const std::function<kernels::GemmArgs(const ExpertSegment&, int product)>&
        args_of,
    int products_per_segment) {
  std::vector<kernels::GemmArgs> batch;
  for (size_t i = 0; i < segments.size(); ++i) {
    for (int product = 0; product < products_per_segment; ++product) {
      batch.push_back(args_of(segments[i], product));
    }
    const bool last_of_source = i + 1 == segments.size() ||
                                segments[i + 1].source != segments[i].source;
    if (last_of_source) {
      context.ops->GroupedGemm(batch);
      batch.clear();
    }
  }
}

// out = hidden w2_e^T for `count` of the segment's rows from row `first`
// (of the received rows), written at `out`.
kernels::GemmArgs W2Product(const LayerContext& context,
                            const ExpertBank<const float>& w,
                            const ExpertSegment& segment, const Tensor& hidden,
                            int64_t first, int64_t count, float* out) {
  const ModelConfig& config = *context.config;
  const int64_t d = config.d_model;
  const int64_t f = config.ffn_hidden;
  return LinearForwardArgs(
      count, f, d, RowsOf(hidden, first),
      context.Weight(w.For(segment).w2 + segment.local_expert * d * f), out,
      /*accumulate=*/false, config.matmul_precision);
}

}  // namespace

absl::StatusOr<Tensor> ExpertsForward(
    const LayerContext& context, const ExpertBank<const float>& w,
    const std::vector<ExpertSegment>& segments, const Tensor& input,
    ExpertActivations* saved) {
  const ModelConfig& config = *context.config;
  const int64_t rows = input.dim(0);
  const int64_t d = config.d_model;
  const int64_t f = config.ffn_hidden;
  const ExpertBuffers buffers = ExpertBuffers::For(config, rows);
  ASSIGN_OR_RETURN(saved->gate, context.Allocate(buffers.gate));
  ASSIGN_OR_RETURN(saved->up, context.Allocate(buffers.up));
  ASSIGN_OR_RETURN(saved->hidden, context.Allocate(buffers.hidden));
  ASSIGN_OR_RETURN(Tensor output, context.Allocate(buffers.output));

  // gate = X w1_e^T, up = X w3_e^T      (rows, F), per segment
  std::vector<kernels::GemmArgs> products;
  for (const ExpertSegment& segment : segments) {
    const int64_t e = segment.local_expert;
    const LinearOperand x = RowsOf(input, segment.first_row);
    products.push_back(LinearForwardArgs(
        segment.rows, d, f, x, context.Weight(w.For(segment).w1 + e * f * d),
        saved->gate.f32() + segment.first_row * f,
        /*accumulate=*/false, config.matmul_precision));
    products.push_back(LinearForwardArgs(
        segment.rows, d, f, x, context.Weight(w.For(segment).w3 + e * f * d),
        saved->up.f32() + segment.first_row * f,
        /*accumulate=*/false, config.matmul_precision));
  }
  context.ops->GroupedGemm(products);
  if (saved->hidden.dtype() == DType::kBfloat16) {
    context.ops->SwiGluForwardToBf16(rows * f, saved->gate.f32(),
                                     saved->up.f32(), saved->hidden.bf16());
  } else {
    context.ops->SwiGluForward(rows * f, saved->gate.f32(), saved->up.f32(),
                               saved->hidden.f32());
  }
  // out = hidden w2_e^T      (rows, D), per segment. A bf16 out is rounded
  // from a float32 piece of at most kExpertOutputPieceRows rows at a time:
  // the product of each segment's rows in the piece.
  if (!buffers.rounds_output()) {
    products.clear();
    for (const ExpertSegment& segment : segments) {
      products.push_back(W2Product(context, w, segment, saved->hidden,
                                   segment.first_row, segment.rows,
                                   output.f32() + segment.first_row * d));
    }
    context.ops->GroupedGemm(products);
    return output;
  }
  ASSIGN_OR_RETURN(Tensor piece, context.Allocate(buffers.output_piece));
  for (int64_t first = 0; first < rows; first += kExpertOutputPieceRows) {
    const int64_t last = std::min(rows, first + kExpertOutputPieceRows);
    products.clear();
    for (const ExpertSegment& segment : segments) {
      const int64_t begin = std::max(first, segment.first_row);
      const int64_t end = std::min(last, segment.first_row + segment.rows);
      if (begin >= end) continue;
      products.push_back(W2Product(context, w, segment, saved->hidden, begin,
                                   end - begin,
                                   piece.f32() + (begin - first) * d));
    }
    context.ops->GroupedGemm(products);
    context.ops->CopyToBf16((last - first) * d, piece.f32(),
                            output.bf16() + first * d);
  }
  return output;
}

absl::StatusOr<Tensor> ExpertsBackward(
    const LayerContext& context, const ExpertBank<const float>& w,
    const ExpertBank<float>& grads, const std::vector<ExpertSegment>& segments,
    Tensor input, ExpertActivations saved, Tensor d_output) {
  const ModelConfig& config = *context.config;
  const int64_t rows = input.dim(0);
  const int64_t d = config.d_model;
  const int64_t f = config.ffn_hidden;

  // Through w2: d_hidden = d_out w2_e; d_w2_e += d_out^T hidden.
  const ExpertBuffers buffers = ExpertBuffers::For(config, rows);
  ASSIGN_OR_RETURN(Tensor d_hidden, context.Allocate(buffers.d_hidden));
  std::vector<kernels::GemmArgs> products;
  for (const ExpertSegment& segment : segments) {
    products.push_back(LinearInputGradArgs(
        segment.rows, f, d, d_output.f32() + segment.first_row * d,
        context.Weight(w.For(segment).w2 + segment.local_expert * d * f),
        d_hidden.f32() + segment.first_row * f, /*accumulate=*/false,
        config.matmul_precision));
  }
  context.ops->GroupedGemm(products);
  RunWeightGradients(
      context, segments,
      [&](const ExpertSegment& segment, int) {
        return LinearWeightGradArgs(
            segment.rows, f, d, d_output.f32() + segment.first_row * d,
            RowsOf(saved.hidden, segment.first_row),
            grads.For(segment).w2 + segment.local_expert * d * f,
            config.matmul_precision);
      },
      1);
  d_output.Reset();
  saved.hidden.Reset();

  ASSIGN_OR_RETURN(Tensor d_gate, context.Allocate(buffers.d_gate));
  ASSIGN_OR_RETURN(Tensor d_up, context.Allocate(buffers.d_up));
  context.ops->SwiGluBackward(rows * f, saved.gate.f32(), saved.up.f32(),
                              d_hidden.f32(), d_gate.f32(), d_up.f32());
  d_hidden.Reset();
  saved.gate.Reset();
  saved.up.Reset();

  // Through w1 and w3: d_x = d_gate w1_e + d_up w3_e, and the weight
  // gradients. The two input-gradient products write the same rows, so the
  // second (accumulating) one runs in a later batch.
  ASSIGN_OR_RETURN(Tensor d_input, context.Allocate(buffers.d_input));
  products.clear();
  std::vector<kernels::GemmArgs> accumulating;
  for (const ExpertSegment& segment : segments) {
    const int64_t e = segment.local_expert;
    float* dx = d_input.f32() + segment.first_row * d;
    products.push_back(LinearInputGradArgs(
        segment.rows, d, f, d_gate.f32() + segment.first_row * f,
        context.Weight(w.For(segment).w1 + e * f * d), dx,
        /*accumulate=*/false, config.matmul_precision));
    accumulating.push_back(LinearInputGradArgs(
        segment.rows, d, f, d_up.f32() + segment.first_row * f,
        context.Weight(w.For(segment).w3 + e * f * d), dx,
        /*accumulate=*/true, config.matmul_precision));
  }
  context.ops->GroupedGemm(products);
  context.ops->GroupedGemm(accumulating);
  RunWeightGradients(
      context, segments,
      [&](const ExpertSegment& segment, int product) {
        const LinearOperand x = RowsOf(input, segment.first_row);
        const int64_t e = segment.local_expert;
        return product == 0
                   ? LinearWeightGradArgs(segment.rows, d, f,
                                          d_gate.f32() + segment.first_row * f,
                                          x, grads.For(segment).w1 + e * f * d,
                                          config.matmul_precision)
                   : LinearWeightGradArgs(segment.rows, d, f,
                                          d_up.f32() + segment.first_row * f, x,
                                          grads.For(segment).w3 + e * f * d,
                                          config.matmul_precision);
      },
      2);
  return d_input;
}

}  // namespace plateau::engine
