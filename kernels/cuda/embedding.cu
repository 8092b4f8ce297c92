// The embedding over a float32 or bf16 table: a gather forward; backward,
// the tokens sorted by id (stable, sort.cu) and one block per id adding its
// tokens' gradients in token order, as the CPU does, without atomics.
#include "kernels/cuda/device_code.cuh"
#include "kernels/cuda/kernels.h"

namespace plateau::kernels::cuda {
namespace {

// Token ids are non-negative int32s.
constexpr int kIdBits = 31;

// Element: float, or uint16_t for bf16 rows, gathered as they are.
template <typename Element>
__global__ void EmbeddingForwardKernel(int64_t tokens, int64_t dim,
                                       const int32_t* ids, const Element* table,
                                       Element* out) {
  const int64_t count = tokens * dim;
  for (int64_t i = GlobalThread(); i < count; i += GridThreads()) {
    const int64_t token = i / dim;
    out[i] = table[static_cast<int64_t>(ids[token]) * dim + i % dim];
  }
}

// Block p handles the run of equal ids that starts at sorted position p,
// summing in float32 from the row's value; a bf16 row (Element uint16_t)
// is rounded once, at the end. A bf16 dout (Gradient uint16_t) is widened.
template <typename Gradient, typename Element>
__global__ void EmbeddingBackwardKernel(int64_t tokens, int64_t dim,
                                        const int32_t* sorted_ids,
                                        const int32_t* sorted_tokens,
                                        const Gradient* dout, Element* dtable) {
  const int64_t first = blockIdx.x;
  const int32_t id = sorted_ids[first];
  if (first > 0 && sorted_ids[first - 1] == id) return;
  Element* row = dtable + static_cast<int64_t>(id) * dim;
  for (int64_t column = threadIdx.x; column < dim; column += blockDim.x) {
    float sum = ValueOf(row[column]);
    for (int64_t p = first; p < tokens && sorted_ids[p] == id; ++p) {
      sum +=
          ValueOf(dout[static_cast<int64_t>(sorted_tokens[p]) * dim + column]);
    }
    StoreAs(sum, &row[column]);
  }
}

template <typename Element>
cudaError_t LaunchForward(int64_t tokens, int64_t dim, const int32_t* ids,
                          const Element* table, Element* out,
                          cudaStream_t stream) {
  ForgetStaleError();
  if (tokens * dim == 0) return cudaSuccess;
  PLATEAU_LAUNCH(EmbeddingForwardKernel<Element>,
                 static_cast<unsigned int>(GridStrideBlocks(tokens * dim)),
                 kBlockThreads, stream)
  (tokens, dim, ids, table, out);
  return cudaGetLastError();
}

template <typename Gradient, typename Element>
cudaError_t LaunchBackward(int64_t tokens, int64_t dim, const int32_t* ids,
                           const Gradient* dout, Element* dtable,
                           int32_t* scratch, cudaStream_t stream) {
  ForgetStaleError();
  if (tokens == 0 || dim == 0) return cudaSuccess;
  SortedItems sorted;
  const cudaError_t error =
      LaunchStableSortByKey(tokens, ids, kIdBits, scratch, &sorted, stream);
  if (error != cudaSuccess) return error;
  PLATEAU_LAUNCH((EmbeddingBackwardKernel<Gradient, Element>),
                 static_cast<unsigned int>(tokens), RowBlockThreads(dim),
                 stream)
  (tokens, dim, sorted.keys, sorted.positions, dout, dtable);
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchEmbeddingForward(int64_t tokens, int64_t dim,
                                   const int32_t* ids, const float* table,
                                   float* out, cudaStream_t stream) {
  return LaunchForward(tokens, dim, ids, table, out, stream);
}

cudaError_t LaunchEmbeddingForwardBf16(int64_t tokens, int64_t dim,
                                       const int32_t* ids,
                                       const uint16_t* table, uint16_t* out,
                                       cudaStream_t stream) {
  return LaunchForward(tokens, dim, ids, table, out, stream);
}

cudaError_t LaunchEmbeddingBackward(int64_t tokens, int64_t dim,
                                    const int32_t* ids, const float* dout,
                                    float* dtable, int32_t* scratch,
                                    cudaStream_t stream) {
  return LaunchBackward(tokens, dim, ids, dout, dtable, scratch, stream);
}

cudaError_t LaunchEmbeddingBackwardFromBf16(int64_t tokens, int64_t dim,
                                            const int32_t* ids,
                                            const uint16_t* dout, float* dtable,
                                            int32_t* scratch,
                                            cudaStream_t stream) {
  return LaunchBackward(tokens, dim, ids, dout, dtable, scratch, stream);
}

cudaError_t LaunchEmbeddingBackwardBf16(int64_t tokens, int64_t dim,
                                        const int32_t* ids,
                                        const uint16_t* dout, uint16_t* dtable,
                                        int32_t* scratch, cudaStream_t stream) {
  return LaunchBackward(tokens, dim, ids, dout, dtable, scratch, stream);
}

}  // namespace plateau::kernels::cuda
