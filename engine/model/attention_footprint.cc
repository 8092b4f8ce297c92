#include "engine/model/attention_footprint.h"

#include <algorithm>

namespace plateau::engine {

AttentionBuffers AttentionBuffers::For(const ModelConfig& config,
                                       int64_t sequences) {
  const int64_t n = sequences * config.seq_len;
  const int64_t d = config.d_model;
  const int64_t qkv_width = config.qkv_width();
  constexpr MemoryComponent kActivations = MemoryComponent::kActivations;
  constexpr MemoryComponent kAttention = MemoryComponent::kAttention;
  AttentionBuffers buffers;
  buffers.normed = DeviceBuffer(kActivations, {n, d}, ProductInputType(config));
  buffers.inverse_rms = DeviceBuffer(kActivations, {n});
  buffers.qkv =
      DeviceBuffer(kAttention, {n, qkv_width}, RoundedActivationType(config));
  buffers.context =
      DeviceBuffer(kAttention, {n, d}, RoundedActivationType(config));
  buffers.qkv_product =
      DeviceBuffer(kAttention, {std::min(n, kQkvProductRows), qkv_width});
  buffers.logsumexp =
      DeviceBuffer(kAttention, {sequences, config.heads, config.seq_len});
  buffers.d_branch = DeviceBuffer(kActivations, {n, d});
  buffers.d_qkv =
      DeviceBuffer(kAttention, {n, qkv_width}, RoundedActivationType(config));
  const int64_t pieces =
      buffers.rounds_qkv() ? std::min(config.kv_heads, kAttentionGradientPieces)
                           : 1;
  buffers.piece_kv_heads = (config.kv_heads + pieces - 1) / pieces;
  const int64_t group = config.heads / config.kv_heads;
  const int64_t head_dim = config.head_dim();
  buffers.d_qkv_piece = DeviceBuffer(
      kAttention, {n, buffers.piece_kv_heads * (group + 2) * head_dim});
  buffers.widens_input = RoundedActivationType(config) != DType::kFloat32;
  buffers.qk_product = DeviceBuffer(
      kAttention, {std::min(n, kQkvProductRows),
                   buffers.piece_kv_heads * (group + 1) * head_dim});
  buffers.qk_norm = config.qk_norm;
  return buffers;
}

void AttentionForwardFootprint(const AttentionBuffers& buffers,
                               FootprintSink& sink, AttentionSaved* saved) {
  FootprintSink::Handle normed = sink.Allocate(buffers.normed);
  saved->inverse_rms = sink.Allocate(buffers.inverse_rms);
  if (buffers.rounds_qkv()) {
    FootprintSink::Handle qkv_product = sink.Allocate(buffers.qkv_product);
    saved->qkv = sink.Allocate(buffers.qkv);
    sink.Free(&qkv_product);
  } else {
    saved->qkv = sink.Allocate(buffers.qkv);
  }
  sink.Free(&normed);
  saved->context = sink.Allocate(buffers.context);
  saved->logsumexp = sink.Allocate(buffers.logsumexp);
}

void AttentionBackwardFootprint(const AttentionBuffers& buffers,
                                FootprintSink& sink, AttentionSaved* saved) {
  // The normed input made again: normed, the statistics' scratch.
  FootprintSink::Handle normed = sink.Allocate(buffers.normed);
  FootprintSink::Handle inverse_rms = sink.Allocate(buffers.inverse_rms);
  sink.Free(&inverse_rms);
  FootprintSink::Handle d_branch = sink.Allocate(buffers.d_branch);
  FootprintSink::Handle d_qkv =
      buffers.rounds_qkv() ? 0 : sink.Allocate(buffers.d_qkv);
  FootprintSink::Handle d_qkv_piece =
      buffers.rounds_qkv() ? sink.Allocate(buffers.d_qkv_piece) : 0;
  FootprintSink::Handle qk_product =
      buffers.qk_norm ? sink.Allocate(buffers.qk_product) : 0;
  sink.Free(&qk_product);
  sink.Free(&d_qkv_piece);
  sink.Free(&saved->context);
  sink.Free(&saved->logsumexp);
  if (buffers.rounds_qkv()) {
    // d_qkv was written over q, k and v.
    d_qkv = saved->qkv;
    saved->qkv = 0;
  } else {
    sink.Free(&saved->qkv);
  }
  sink.Free(&d_qkv);
  sink.Free(&normed);
  sink.Free(&d_branch);
}

void ReleaseAttentionFootprint(FootprintSink& sink, AttentionSaved* saved) {
  sink.Free(&saved->logsumexp);
  sink.Free(&saved->context);
  sink.Free(&saved->qkv);
  sink.Free(&saved->inverse_rms);
}

}  // namespace plateau::engine
