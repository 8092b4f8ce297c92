#include "engine/model/experts.h"

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

enum class ExpertMatrix { kW1, kW3, kW2 };

// The products out = x M_e^T over the received rows, M_e the `matrix` of
// each segment's expert: gate and up (w1, w3: D -> F) from the input, the
// output (w2: F -> D) from hidden. A bf16 `out` is written rounded
// (GemmArgs::c_bf16): each value its float32 product rounded once.
std::vector<kernels::GemmArgs> ExpertProducts(
    const LayerContext& context, const ExpertBank<const float>& w,
    const std::vector<ExpertSegment>& segments, const Tensor& x,
    ExpertMatrix matrix, Tensor& out) {
  const ModelConfig& config = *context.config;
  const int64_t d = config.d_model;
  const int64_t f = config.ffn_hidden;
  const bool down = matrix == ExpertMatrix::kW2;
  const int64_t in = down ? f : d;
  const int64_t out_features = down ? d : f;
  const bool rounded = out.dtype() == DType::kBfloat16;
  std::vector<kernels::GemmArgs> products;
  for (const ExpertSegment& segment : segments) {
    const ExpertParameters<const float>& bank = w.For(segment);
    const LinearOperand matrices = matrix == ExpertMatrix::kW1   ? bank.w1
                                   : matrix == ExpertMatrix::kW3 ? bank.w3
                                                                 : bank.w2;
    const int64_t out_offset = segment.first_row * out_features;
    kernels::GemmArgs args = LinearForwardArgs(
        segment.rows, in, out_features, RowsOf(x, segment.first_row),
        matrices.At(segment.local_expert * d * f),
        rounded ? nullptr : out.f32() + out_offset,
        /*accumulate=*/false, config.matmul_precision);
    if (rounded) args.c_bf16 = out.bf16() + out_offset;
    products.push_back(args);
  }
  return products;
}

}  // namespace

absl::StatusOr<Tensor> ExpertsForward(
    const LayerContext& context, const ExpertBank<const float>& w,
    const std::vector<ExpertSegment>& segments, const Tensor& input,
    ExpertActivations* saved) {
  const ModelConfig& config = *context.config;
  const int64_t rows = input.dim(0);
  const int64_t f = config.ffn_hidden;
  const ExpertBuffers buffers = ExpertBuffers::For(config, rows);
  ASSIGN_OR_RETURN(saved->gate, context.Allocate(buffers.gate));
  ASSIGN_OR_RETURN(saved->up, context.Allocate(buffers.up));
  ASSIGN_OR_RETURN(saved->hidden, context.Allocate(buffers.hidden));
  ASSIGN_OR_RETURN(Tensor output, context.Allocate(buffers.output));

  // Gate and up in one group. Under bf16 each is rounded as it is written,
  // and hidden is made from the rounded values, the ones backward reads.
  std::vector<kernels::GemmArgs> products = ExpertProducts(
      context, w, segments, input, ExpertMatrix::kW1, saved->gate);
  for (const kernels::GemmArgs& up : ExpertProducts(
           context, w, segments, input, ExpertMatrix::kW3, saved->up)) {
    products.push_back(up);
  }
  context.ops->GroupedGemm(products);
  if (buffers.rounds()) {
    context.ops->SwiGluForwardBf16(rows * f, saved->gate.bf16(),
                                   saved->up.bf16(), saved->hidden.bf16());
  } else {
    context.ops->SwiGluForward(rows * f, saved->gate.f32(), saved->up.f32(),
                               saved->hidden.f32());
  }
  context.ops->GroupedGemm(ExpertProducts(context, w, segments, saved->hidden,
                                          ExpertMatrix::kW2, output));
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

  // Through w2: d_w2_e += d_out^T hidden, then d_hidden = d_out w2_e, so
  // that hidden is gone before d_hidden is made.
  const ExpertBuffers buffers = ExpertBuffers::For(config, rows);
  RunWeightGradients(
      context, segments,
      [&](const ExpertSegment& segment, int) {
        return LinearWeightGradArgs(
            segment.rows, f, d, RowsOf(d_output, segment.first_row),
            RowsOf(saved.hidden, segment.first_row),
            grads.For(segment).w2 + segment.local_expert * d * f,
            config.matmul_precision);
      },
      1);
  saved.hidden.Reset();
  ASSIGN_OR_RETURN(Tensor d_hidden, context.Allocate(buffers.d_hidden));
  std::vector<kernels::GemmArgs> products;
  for (const ExpertSegment& segment : segments) {
    products.push_back(LinearInputGradArgs(
        segment.rows, f, d, RowsOf(d_output, segment.first_row),
        w.For(segment).w2.At(segment.local_expert * d * f),
        d_hidden.f32() + segment.first_row * f, /*accumulate=*/false,
        config.matmul_precision));
  }
  context.ops->GroupedGemm(products);
  d_output.Reset();

  // SwiGLU's backward in place: d_gate over gate, d_up over up (the ops
  // read an element's gate and up before they write its gradients).
  Tensor d_gate = std::move(saved.gate);
  Tensor d_up = std::move(saved.up);
  if (buffers.rounds()) {
    context.ops->SwiGluBackwardBf16(rows * f, d_gate.bf16(), d_up.bf16(),
                                    d_hidden.f32(), d_gate.bf16(), d_up.bf16());
  } else {
    context.ops->SwiGluBackward(rows * f, d_gate.f32(), d_up.f32(),
                                d_hidden.f32(), d_gate.f32(), d_up.f32());
  }
  d_hidden.Reset();

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
        segment.rows, d, f, RowsOf(d_gate, segment.first_row),
        w.For(segment).w1.At(e * f * d), dx,
        /*accumulate=*/false, config.matmul_precision));
    accumulating.push_back(
        LinearInputGradArgs(segment.rows, d, f, RowsOf(d_up, segment.first_row),
                            w.For(segment).w3.At(e * f * d), dx,
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
                                          RowsOf(d_gate, segment.first_row), x,
                                          grads.For(segment).w1 + e * f * d,
                                          config.matmul_precision)
                   : LinearWeightGradArgs(segment.rows, d, f,
                                          RowsOf(d_up, segment.first_row), x,
                                          grads.For(segment).w3 + e * f * d,
                                          config.matmul_precision);
      },
      2);
  // Under bf16 d_input goes back rounded (ExpertInputGradientRowsBuffer),
  // once every other buffer here is freed: the float32 rows and their copy
  // are all this holds then.
  d_gate.Reset();
  d_up.Reset();
  input.Reset();
  const BufferSpec returned = ExpertInputGradientRowsBuffer(config, rows);
  if (returned.dtype == DType::kFloat32) return d_input;
  ASSIGN_OR_RETURN(Tensor rounded, context.Allocate(returned));
  context.ops->CopyToBf16(rows * d, d_input.f32(), rounded.bf16());
  return rounded;
}

}  // namespace plateau::engine
