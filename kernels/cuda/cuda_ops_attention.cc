#include <algorithm>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/cuda_ops_internal.h"
#include "kernels/cuda/kernels.h"

namespace plateau::kernels::cuda {

namespace {

// Attention's grid has the heads in y and the sequences in z, which hold at
// most 65535 blocks: longer batches go in slices of sequences, whose rows
// and logsumexp entries are consecutive.
constexpr int64_t kMaxGridYZBlocks = 65535;

}  // namespace

bool CudaOps::CheckAttentionShape(const AttentionShape& shape) {
  if (shape.kv_heads < 1 || shape.heads % shape.kv_heads != 0) {
    Fail(absl::InvalidArgumentError(
        absl::StrCat("attention's ", shape.kv_heads,
                     " key and value heads do not divide its ", shape.heads,
                     " query heads")));
    return false;
  }
  if (shape.head_dim <= kMaxAttentionHeadDim &&
      shape.heads <= kMaxGridYZBlocks) {
    return true;
  }
  Fail(absl::InvalidArgumentError(absl::StrCat(
      "CUDA attention supports head_dim up to ", kMaxAttentionHeadDim,
      " and up to ", kMaxGridYZBlocks, " heads, not head_dim ", shape.head_dim,
      " with ", shape.heads, " heads")));
  return false;
}

template <typename Input>
void CudaOps::AttentionForwardOf(const AttentionShape& shape, const Input* q,
                                 const Input* k, const Input* v,
                                 int64_t qkv_stride, Input* out,
                                 int64_t out_stride, float* logsumexp) {
  if (failed() || !CheckAttentionShape(shape)) return;
  for (int64_t first = 0; first < shape.batch; first += kMaxGridYZBlocks) {
    AttentionDims dims{std::min(kMaxGridYZBlocks, shape.batch - first),
                       shape.seq_len,
                       shape.heads,
                       shape.kv_heads,
                       shape.head_dim,
                       shape.heads,
                       /*gradient_stride=*/0};
    const int64_t row = first * shape.seq_len;
    if (!Check(LaunchAttentionForward(
                   dims, q + row * qkv_stride, k + row * qkv_stride,
                   v + row * qkv_stride, qkv_stride, out + row * out_stride,
                   out_stride, logsumexp + first * shape.heads * shape.seq_len,
                   compute_stream_),
               "AttentionForward")) {
      return;
    }
  }
}

template <typename Input>
void CudaOps::AttentionBackwardOf(const AttentionShape& shape, const Input* q,
                                  const Input* k, const Input* v,
                                  int64_t qkv_stride, const Input* out,
                                  const float* dout, int64_t out_stride,
                                  const float* logsumexp, float* dq, float* dk,
                                  float* dv) {
  if (failed() || !CheckAttentionShape(shape)) return;
  const int64_t sequences = std::min(kMaxGridYZBlocks, shape.batch);
  char* scratch =
      Scratch(sequences * shape.heads * shape.seq_len * int64_t{sizeof(float)},
              "AttentionBackward");
  if (scratch == nullptr) return;
  const int64_t gradient_stride =
      shape.gradient_stride > 0 ? shape.gradient_stride : qkv_stride;
  for (int64_t first = 0; first < shape.batch; first += kMaxGridYZBlocks) {
    AttentionDims dims{std::min(kMaxGridYZBlocks, shape.batch - first),
                       shape.seq_len,
                       shape.heads,
                       shape.kv_heads,
                       shape.head_dim,
                       shape.logsumexp_heads(),
                       gradient_stride};
    const int64_t row = first * shape.seq_len;
    const int64_t qkv = row * qkv_stride;
    const int64_t outputs = row * out_stride;
    const int64_t gradients = row * gradient_stride;
    if (!Check(LaunchAttentionBackward(
                   dims, q + qkv, k + qkv, v + qkv, qkv_stride, out + outputs,
                   dout + outputs, out_stride,
                   logsumexp + first * shape.logsumexp_heads() * shape.seq_len,
                   dq + gradients, dk + gradients, dv + gradients,
                   At<float>(scratch, 0), compute_stream_),
               "AttentionBackward")) {
      return;
    }
  }
}

void CudaOps::AttentionForward(const AttentionShape& shape, const float* q,
                               const float* k, const float* v,
                               int64_t qkv_stride, float* out,
                               int64_t out_stride, float* logsumexp) {
  AttentionForwardOf(shape, q, k, v, qkv_stride, out, out_stride, logsumexp);
}

void CudaOps::AttentionForwardBf16(const AttentionShape& shape,
                                   const uint16_t* q, const uint16_t* k,
                                   const uint16_t* v, int64_t qkv_stride,
                                   uint16_t* out, int64_t out_stride,
                                   float* logsumexp) {
  AttentionForwardOf(shape, q, k, v, qkv_stride, out, out_stride, logsumexp);
}

void CudaOps::AttentionBackward(const AttentionShape& shape, const float* q,
                                const float* k, const float* v,
                                int64_t qkv_stride, const float* out,
                                const float* dout, int64_t out_stride,
                                const float* logsumexp, float* dq, float* dk,
                                float* dv) {
  AttentionBackwardOf(shape, q, k, v, qkv_stride, out, dout, out_stride,
                      logsumexp, dq, dk, dv);
}

void CudaOps::AttentionBackwardBf16(const AttentionShape& shape,
                                    const uint16_t* q, const uint16_t* k,
                                    const uint16_t* v, int64_t qkv_stride,
                                    const uint16_t* out, const float* dout,
                                    int64_t out_stride, const float* logsumexp,
                                    float* dq, float* dk, float* dv) {
  AttentionBackwardOf(shape, q, k, v, qkv_stride, out, dout, out_stride,
                      logsumexp, dq, dk, dv);
}

}  // namespace plateau::kernels::cuda
