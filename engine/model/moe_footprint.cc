#include "engine/model/moe_footprint.h"

#include <algorithm>
#include <vector>

#include "engine/model/expert_spill_plan.h"

namespace plateau::engine {
namespace {

using Handle = FootprintSink::Handle;
constexpr MemoryComponent kActivations = MemoryComponent::kActivations;
constexpr MemoryComponent kDispatch = MemoryComponent::kDispatch;

// SendToExperts and ReturnFromExperts: with expert parallelism `rows`
// arrive elsewhere in a new buffer, `arriving`, and the sent one goes; on
// one rank they stay where they are.
Handle Exchange(bool expert_parallel, FootprintSink& sink, Handle rows,
                const BufferSpec& arriving) {
  if (!expert_parallel) return rows;
  Handle received = sink.Allocate(arriving);
  sink.Free(&rows);
  return received;
}

// SharedExpertsForward's buffers, or SharedExpertsBackward's.
void SharedExpertsFootprint(const ModelConfig& config, int64_t sequences,
                            bool backward, FootprintSink& sink) {
  const SharedExpertBuffers buffers =
      SharedExpertBuffers::For(config, sequences * config.seq_len);
  std::vector<Handle> piece = {sink.Allocate(buffers.gate),
                               sink.Allocate(buffers.up),
                               sink.Allocate(buffers.hidden)};
  if (backward) {
    piece.push_back(sink.Allocate(buffers.d_hidden));
    piece.push_back(sink.Allocate(buffers.d_up));
    piece.push_back(sink.Allocate(buffers.normed));
    piece.push_back(sink.Allocate(buffers.inverse_rms));
  }
  for (Handle& handle : piece) sink.Free(&handle);
}

// CombineTokensBackward over `rows` copies: their gradients, made in
// ExpertOutputGradientRowsBuffer's type.
Handle CombineTokensBackwardFootprint(const ModelConfig& config, int64_t rows,
                                      FootprintSink& sink) {
  return sink.Allocate(ExpertOutputGradientRowsBuffer(config, rows));
}

// ExpertsForward's buffers over `rows` received rows.
void ExpertsForwardFootprint(const ExpertBuffers& buffers, FootprintSink& sink,
                             Handle* gate, Handle* up, Handle* hidden,
                             Handle* output) {
  *gate = sink.Allocate(buffers.gate);
  *up = sink.Allocate(buffers.up);
  *hidden = sink.Allocate(buffers.hidden);
  *output = sink.Allocate(buffers.output);
}

// ExpertsBackward over `rows` rows: consumes the input, the activations and
// d_output; returns d_input, rounded once the rest is freed where
// ExpertInputGradientRowsBuffer is narrower.
Handle ExpertsBackwardFootprint(const ModelConfig& config, int64_t rows,
                                FootprintSink& sink, Handle* input,
                                Handle* gate, Handle* up, Handle* hidden,
                                Handle* d_output) {
  const ExpertBuffers buffers = ExpertBuffers::For(config, rows);
  sink.Free(hidden);
  Handle d_hidden = sink.Allocate(buffers.d_hidden);
  sink.Free(d_output);
  // gate and up now hold their gradients.
  sink.Free(&d_hidden);
  Handle d_input = sink.Allocate(buffers.d_input);
  sink.Free(up);
  sink.Free(gate);
  sink.Free(input);
  const BufferSpec returned = ExpertInputGradientRowsBuffer(config, rows);
  if (returned.dtype == DType::kFloat32) return d_input;
  Handle rounded = sink.Allocate(returned);
  sink.Free(&d_input);
  return rounded;
}

// The chunked path (pipelined_experts.cc), one chunk dispatched at a time;
// with expert parallelism the next chunk's dispatch overlaps this one's
// experts on a helper thread, taken here at its worst interleaving (all of
// the next chunk's dispatch held while this chunk's experts run).
class ChunkedFootprint {
 public:
  ChunkedFootprint(const ModelConfig& config, int64_t sequences,
                   const DispatchShape& dispatch, bool expert_parallel,
                   FootprintSink& sink)
      : config_(config),
        buffers_(MoeBuffers::For(config, sequences)),
        dispatch_(dispatch),
        expert_parallel_(expert_parallel),
        sink_(sink) {}

  void Forward() {
    std::vector<Handle> borrowed = BorrowExperts();
    Chunk chunk = Dispatch(0);
    for (int64_t c = 0; c < dispatch_.chunks; ++c) {
      Chunk next = Prefetch(c + 1);
      const ExpertBuffers experts =
          ExpertBuffers::For(config_, dispatch_.chunk_received_rows[c]);
      Handle gate, up, hidden, output;
      ExpertsForwardFootprint(experts, sink_, &gate, &up, &hidden, &output);
      sink_.Free(&hidden);
      sink_.Free(&up);
      sink_.Free(&gate);
      sink_.Free(&rows_in_flight_);
      sink_.Free(&chunk.received);
      Handle returned = Exchange(
          expert_parallel_, sink_, output,
          ExpertOutputRowsBuffer(config_, dispatch_.chunk_sent_rows[c]));
      sink_.Free(&returned);
      Release(&chunk);
      chunk = Following(c, next);
    }
    sink_.FreeAll(&borrowed);
  }

  void Backward() {
    std::vector<Handle> borrowed = BorrowExperts();
    std::vector<Handle> borrowed_gradients =
        AllocateBorrowed(BorrowedGradientsBuffer(config_, dispatch_.borrowed));
    Chunk chunk = Dispatch(0);
    for (int64_t c = 0; c < dispatch_.chunks; ++c) {
      Chunk next = Prefetch(c + 1);
      const int64_t sent = dispatch_.chunk_sent_rows[c];
      const int64_t received = dispatch_.chunk_received_rows[c];
      const ExpertBuffers experts = ExpertBuffers::For(config_, received);
      Handle gate, up, hidden, output;
      ExpertsForwardFootprint(experts, sink_, &gate, &up, &hidden, &output);
      sink_.Free(&rows_in_flight_);
      Handle returned = Exchange(expert_parallel_, sink_, output,
                                 ExpertOutputRowsBuffer(config_, sent));
      Handle d_returned = CombineTokensBackwardFootprint(config_, sent, sink_);
      sink_.Free(&returned);
      Handle d_output =
          Exchange(expert_parallel_, sink_, d_returned,
                   ExpertOutputGradientRowsBuffer(config_, received));
      Handle d_received =
          ExpertsBackwardFootprint(config_, received, sink_, &chunk.received,
                                   &gate, &up, &hidden, &d_output);
      Handle d_rows = Exchange(expert_parallel_, sink_, d_received,
                               ExpertInputGradientRowsBuffer(config_, sent));
      sink_.Free(&d_rows);
      Release(&chunk);
      chunk = Following(c, next);
    }
    // ReturnBorrowedGradients.
    if (dispatch_.spills) {
      Handle returned =
          sink_.Allocate(BorrowedGradientsBuffer(config_, dispatch_.lent));
      for (Handle& gradient : borrowed_gradients) {
        Handle packed = sink_.Allocate(
            BorrowedGradientsBuffer(config_, dispatch_.borrowed));
        sink_.Free(&packed);
        sink_.Free(&gradient);
      }
      sink_.Free(&returned);
    }
    sink_.FreeAll(&borrowed);
  }

 private:
  // One dispatched chunk: its plan's two int32 arrays and its rows where
  // its experts are.
  struct Chunk {
    Handle assignment_row = 0, row_token = 0, received = 0;
  };

  // DispatchChunks::Chunk, GatherTokens, SendToExperts.
  Chunk Dispatch(int64_t c) {
    if (c >= dispatch_.chunks) return {};
    const int64_t sent = dispatch_.chunk_sent_rows[c];
    Chunk chunk;
    chunk.assignment_row = sink_.Allocate(buffers_.assignment_row);
    chunk.row_token = sink_.Allocate(RowTokenBuffer(sent));
    chunk.received = Exchange(
        expert_parallel_, sink_,
        sink_.Allocate(ExpertInputRowsBuffer(config_, sent)),
        ExpertInputRowsBuffer(config_, dispatch_.chunk_received_rows[c]));
    return chunk;
  }
  // On one rank the next chunk is dispatched when this one is done; with
  // expert parallelism its dispatch is done (received rows held) with its
  // gathered rows still held.
  Chunk Prefetch(int64_t next) {
    if (!expert_parallel_) return {};
    if (next >= dispatch_.chunks) return {};
    rows_in_flight_ = sink_.Allocate(
        ExpertInputRowsBuffer(config_, dispatch_.chunk_sent_rows[next]));
    return Dispatch(next);
  }
  void Release(Chunk* chunk) {
    sink_.Free(&chunk->received);
    sink_.Free(&chunk->row_token);
    sink_.Free(&chunk->assignment_row);
  }
  // The chunk after c: prefetched, or dispatched now.
  Chunk Following(int64_t c, const Chunk& prefetched) {
    return expert_parallel_ ? prefetched : Dispatch(c + 1);
  }

  // BorrowExperts (expert_spill.h): the borrowed matrices, then one packed
  // set at a time for the exchange; ZeroBorrowedGradients.
  std::vector<Handle> AllocateBorrowed(const BufferSpec& matrix) {
    if (!dispatch_.spills) return {};
    std::vector<Handle> matrices;
    for (int i = 0; i < 3; ++i) matrices.push_back(sink_.Allocate(matrix));
    return matrices;
  }
  std::vector<Handle> BorrowExperts() {
    std::vector<Handle> borrowed =
        AllocateBorrowed(BorrowedWeightsBuffer(config_, dispatch_.borrowed));
    if (!dispatch_.spills) return borrowed;
    for (int i = 0; i < 3; ++i) {
      Handle packed =
          sink_.Allocate(BorrowedWeightsBuffer(config_, dispatch_.lent));
      sink_.Free(&packed);
    }
    return borrowed;
  }

  const ModelConfig& config_;
  const MoeBuffers buffers_;
  const DispatchShape& dispatch_;
  const bool expert_parallel_;
  FootprintSink& sink_;
  // The next chunk's gathered rows while its exchange is in flight.
  Handle rows_in_flight_ = 0;
};

}  // namespace

int64_t CopiesInChunk(int64_t n, int64_t chunk, int64_t chunks) {
  return n > chunk ? (n - chunk - 1) / chunks + 1 : 0;
}

MoeBuffers MoeBuffers::For(const ModelConfig& config, int64_t sequences) {
  const int64_t n = sequences * config.seq_len;
  const int64_t d = config.d_model, k = config.top_k, e = config.experts;
  MoeBuffers buffers;
  buffers.normed = DeviceBuffer(kActivations, {n, d}, ProductInputType(config));
  buffers.inverse_rms = DeviceBuffer(kActivations, {n});
  buffers.logits = DeviceBuffer(kActivations, {n, e});
  buffers.probs = DeviceBuffer(kActivations, {n, e});
  buffers.expert_index = DeviceBuffer(kActivations, {n, k}, DType::kInt32);
  buffers.gates = DeviceBuffer(kActivations, {n, k});
  buffers.router_logsumexp = DeviceBuffer(kActivations, {n});
  buffers.has_z_loss = config.z_loss_coefficient > 0.0f;
  buffers.router_score_sums = DeviceBuffer(kActivations, {n});
  buffers.has_score_sums =
      config.router_score == kernels::RouterScore::kSigmoid;
  buffers.assignment_row = DeviceBuffer(kDispatch, {n * k}, DType::kInt32);
  buffers.d_gates = DeviceBuffer(kActivations, {n, k});
  buffers.d_normed = DeviceBuffer(kActivations, {n, d});
  buffers.d_logits = DeviceBuffer(kActivations, {n, e});
  const int64_t piece = std::min(n, kRouterGradientPieceTokens);
  buffers.normed_piece = DeviceBuffer(kActivations, {piece, d});
  buffers.normed_piece_inverse_rms = DeviceBuffer(kActivations, {piece});
  const int64_t router_piece = std::min(n, kRouterPieceTokens);
  buffers.router_piece = DeviceBuffer(kActivations, {router_piece, d});
  buffers.router_piece_inverse_rms = DeviceBuffer(kActivations, {router_piece});
  return buffers;
}

BufferSpec ExpertInputRowsBuffer(const ModelConfig& config, int64_t rows) {
  return DeviceBuffer(kDispatch, {rows, config.d_model},
                      ProductInputType(config));
}

BufferSpec ExpertOutputRowsBuffer(const ModelConfig& config, int64_t rows) {
  return DeviceBuffer(kDispatch, {rows, config.d_model},
                      RoundedActivationType(config));
}

BufferSpec ExpertOutputGradientRowsBuffer(const ModelConfig& config,
                                          int64_t rows) {
  return DeviceBuffer(kDispatch, {rows, config.d_model},
                      ProductInputType(config));
}

BufferSpec ExpertInputGradientRowsBuffer(const ModelConfig& config,
                                         int64_t rows) {
  return DeviceBuffer(kDispatch, {rows, config.d_model},
                      RoundedActivationType(config));
}

BufferSpec DispatchRowsBuffer(const ModelConfig& config, int64_t rows) {
  return DeviceBuffer(kDispatch, {rows, config.d_model});
}

BufferSpec RowTokenBuffer(int64_t rows) {
  return DeviceBuffer(kDispatch, {rows}, DType::kInt32);
}

ExpertBuffers ExpertBuffers::For(const ModelConfig& config, int64_t rows) {
  const int64_t d = config.d_model, f = config.ffn_hidden;
  ExpertBuffers buffers;
  buffers.gate = buffers.up =
      DeviceBuffer(kDispatch, {rows, f}, RoundedActivationType(config));
  buffers.hidden = DeviceBuffer(kDispatch, {rows, f}, ProductInputType(config));
  buffers.output = ExpertOutputRowsBuffer(config, rows);
  buffers.d_hidden = DeviceBuffer(kDispatch, {rows, f});
  buffers.d_input = DeviceBuffer(kDispatch, {rows, d});
  return buffers;
}

SharedExpertBuffers SharedExpertBuffers::For(const ModelConfig& config,
                                             int64_t tokens) {
  const int64_t piece = std::min(tokens, kSharedExpertPieceTokens);
  SharedExpertBuffers buffers;
  buffers.gate = buffers.up = buffers.hidden = buffers.d_hidden = buffers.d_up =
      DeviceBuffer(kActivations, {piece, config.shared_hidden()});
  buffers.normed = DeviceBuffer(kActivations, {piece, config.d_model});
  buffers.inverse_rms = DeviceBuffer(kActivations, {piece});
  return buffers;
}

BufferSpec BorrowedWeightsBuffer(const ModelConfig& config, int64_t experts) {
  return DeviceBuffer(kDispatch, {experts, config.ffn_hidden * config.d_model},
                      ProductInputType(config));
}

BufferSpec BorrowedGradientsBuffer(const ModelConfig& config, int64_t experts) {
  return DeviceBuffer(kDispatch, {experts, config.ffn_hidden * config.d_model});
}

DispatchShape DispatchShapeOf(const ModelConfig& config, int ranks, int self,
                              const std::vector<int64_t>& counts,
                              ChunkRows chunk_rows, int64_t max_chunks) {
  const int64_t experts = config.experts;
  const int64_t local = experts / ranks;
  DispatchShape shape;
  for (int s = 0; s < ranks; ++s) {
    for (int64_t e = 0; e < experts; ++e) {
      if (s == self) shape.sent_rows += counts[s * experts + e];
      if (e / local == self) shape.received_rows += counts[s * experts + e];
    }
  }
  if (config.dispatch_chunk_tokens <= 0) return shape;

  // DispatchChunks::Split: every (source, destination) list, then K.
  const std::vector<ExpertSpill> spills =
      PlanExpertSpill(counts, ranks, experts);
  shape.spills = !spills.empty();
  for (const ExpertSpill& spill : spills) {
    if (spill.owner == self) ++shape.lent;
  }
  shape.borrowed = static_cast<int64_t>(SpillsBorrowedBy(spills, self).size());
  const std::vector<int64_t> length =
      DispatchListLengths(counts, spills, ranks, experts);
  const int64_t longest = *std::max_element(length.begin(), length.end());
  const int64_t cap = config.dispatch_chunk_tokens;
  const int64_t chunks = std::max<int64_t>(1, (longest + cap - 1) / cap);
  shape.chunks = std::min(chunks, max_chunks);
  if (chunk_rows == ChunkRows::kBound) {
    // Every chunk alike: the cap from each list, or the whole list.
    int64_t sent = 0, received = 0;
    for (int r = 0; r < ranks; ++r) {
      sent += std::min(cap, length[self * ranks + r]);
      received += std::min(cap, length[r * ranks + self]);
    }
    shape.chunk_sent_rows.assign(shape.chunks, sent);
    shape.chunk_received_rows.assign(shape.chunks, received);
    return shape;
  }
  for (int64_t c = 0; c < shape.chunks; ++c) {
    int64_t sent = 0, received = 0;
    for (int r = 0; r < ranks; ++r) {
      sent += CopiesInChunk(length[self * ranks + r], c, chunks);
      received += CopiesInChunk(length[r * ranks + self], c, chunks);
    }
    shape.chunk_sent_rows.push_back(sent);
    shape.chunk_received_rows.push_back(received);
  }
  return shape;
}

void MoeForwardFootprint(const ModelConfig& config, int64_t sequences,
                         const DispatchShape& dispatch, bool expert_parallel,
                         bool combine, FootprintSink& sink, MoeSaved* saved) {
  const MoeBuffers buffers = MoeBuffers::For(config, sequences);
  Handle normed = sink.Allocate(buffers.normed);
  saved->inverse_rms = sink.Allocate(buffers.inverse_rms);
  // RouteTokens (from pieces of float32 rows made again where normed is
  // bf16), then PlanDispatch.
  Handle logits = sink.Allocate(buffers.logits);
  saved->probs = sink.Allocate(buffers.probs);
  saved->expert_index = sink.Allocate(buffers.expert_index);
  saved->gates = sink.Allocate(buffers.gates);
  if (buffers.has_z_loss) {
    saved->router_logsumexp = sink.Allocate(buffers.router_logsumexp);
  }
  if (buffers.has_score_sums) {
    saved->router_score_sums = sink.Allocate(buffers.router_score_sums);
  }
  if (buffers.normed.dtype != DType::kFloat32) {
    Handle piece = sink.Allocate(buffers.router_piece);
    Handle piece_inverse_rms = sink.Allocate(buffers.router_piece_inverse_rms);
    sink.Free(&piece_inverse_rms);
    sink.Free(&piece);
  }
  sink.Free(&logits);
  saved->assignment_row = sink.Allocate(buffers.assignment_row);
  saved->row_token = sink.Allocate(RowTokenBuffer(dispatch.sent_rows));
  if (config.dispatch_chunk_tokens > 0) {
    // The chunks carry what backward needs of the plan.
    sink.Free(&saved->row_token);
    sink.Free(&saved->assignment_row);
    if (combine) {
      ChunkedFootprint(config, sequences, dispatch, expert_parallel, sink)
          .Forward();
    }
  } else {
    // GatherTokens, SendToExperts, ExpertsForward, ReturnFromExperts.
    saved->expert_input = Exchange(
        expert_parallel, sink,
        sink.Allocate(ExpertInputRowsBuffer(config, dispatch.sent_rows)),
        ExpertInputRowsBuffer(config, dispatch.received_rows));
    Handle output;
    ExpertsForwardFootprint(ExpertBuffers::For(config, dispatch.received_rows),
                            sink, &saved->gate, &saved->up, &saved->hidden,
                            &output);
    saved->expert_output =
        Exchange(expert_parallel, sink, output,
                 ExpertOutputRowsBuffer(config, dispatch.sent_rows));
  }
  if (combine && config.shared_experts > 0) {
    SharedExpertsFootprint(config, sequences, /*backward=*/false, sink);
  }
  sink.Free(&normed);
}

void MoeBackwardFootprint(const ModelConfig& config, int64_t sequences,
                          const DispatchShape& dispatch, bool expert_parallel,
                          FootprintSink& sink, MoeSaved* saved) {
  const MoeBuffers buffers = MoeBuffers::For(config, sequences);
  Handle d_gates = sink.Allocate(buffers.d_gates);
  Handle d_normed = 0;
  if (config.dispatch_chunk_tokens > 0) {
    d_normed = sink.Allocate(buffers.d_normed);
    ChunkedFootprint(config, sequences, dispatch, expert_parallel, sink)
        .Backward();
  } else {
    // CombineTokensBackward, SendToExperts, ExpertsBackward,
    // ReturnFromExperts; d_normed is made only once the rows are back.
    Handle d_rows =
        CombineTokensBackwardFootprint(config, dispatch.sent_rows, sink);
    sink.Free(&saved->expert_output);
    Handle d_output = Exchange(
        expert_parallel, sink, d_rows,
        ExpertOutputGradientRowsBuffer(config, dispatch.received_rows));
    Handle d_received = ExpertsBackwardFootprint(
        config, dispatch.received_rows, sink, &saved->expert_input,
        &saved->gate, &saved->up, &saved->hidden, &d_output);
    Handle d_expert_input =
        Exchange(expert_parallel, sink, d_received,
                 ExpertInputGradientRowsBuffer(config, dispatch.sent_rows));
    d_normed = sink.Allocate(buffers.d_normed);
    sink.Free(&d_expert_input);
    sink.Free(&saved->row_token);
    sink.Free(&saved->assignment_row);
  }
  if (config.shared_experts > 0) {
    SharedExpertsFootprint(config, sequences, /*backward=*/true, sink);
  }
  // RouterBackward; the routing goes; RouterWeightGradient a piece at a
  // time.
  Handle d_logits = sink.Allocate(buffers.d_logits);
  sink.Free(&saved->router_score_sums);
  sink.Free(&saved->router_logsumexp);
  sink.Free(&saved->gates);
  sink.Free(&saved->expert_index);
  sink.Free(&saved->probs);
  Handle piece = sink.Allocate(buffers.normed_piece);
  Handle piece_inverse_rms = sink.Allocate(buffers.normed_piece_inverse_rms);
  sink.Free(&piece_inverse_rms);
  sink.Free(&piece);
  sink.Free(&d_logits);
  sink.Free(&d_normed);
  sink.Free(&d_gates);
}

void ReleaseMoeFootprint(FootprintSink& sink, MoeSaved* saved) {
  for (Handle* handle :
       {&saved->expert_output, &saved->hidden, &saved->up, &saved->gate,
        &saved->expert_input, &saved->row_token, &saved->assignment_row,
        &saved->router_score_sums, &saved->router_logsumexp, &saved->gates,
        &saved->expert_index, &saved->probs, &saved->inverse_rms}) {
    sink.Free(handle);
  }
}

}  // namespace plateau::engine
