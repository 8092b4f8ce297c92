// What the files of CudaOps share (cuda_ops.cc, cuda_ops_*.cc, one per op
// family as kernels/cpu has them): the scratch layout and the checks of
// what cuBLAS and the kernels' int indices accept.
#ifndef PLATEAU_KERNELS_CUDA_CUDA_OPS_INTERNAL_H_
#define PLATEAU_KERNELS_CUDA_CUDA_OPS_INTERNAL_H_

#include <cstdint>
#include <limits>

#include "kernels/cuda/cublas_library.h"
#include "kernels/ops.h"

namespace plateau::kernels::cuda {

// Offsets of the pieces of one scratch reservation, each 256-byte aligned
// (cudaMalloc's own alignment, enough for any kernel's loads).
class ScratchLayout {
 public:
  template <typename T>
  int64_t Add(int64_t count) {
    const int64_t offset = (bytes_ + 255) / 256 * 256;
    bytes_ = offset + count * static_cast<int64_t>(sizeof(T));
    return offset;
  }
  int64_t bytes() const { return bytes_; }

 private:
  int64_t bytes_ = 0;
};

inline cublasOperation_t BlasOperation(Transpose transpose) {
  return transpose == Transpose::kYes ? CUBLAS_OP_T : CUBLAS_OP_N;
}

inline bool FitsInt(int64_t value) {
  return value >= 0 && value <= std::numeric_limits<int>::max();
}

inline bool Aligned16(const void* pointer) {
  return reinterpret_cast<uintptr_t>(pointer) % 16 == 0;
}

inline bool GemmFitsInt(const GemmArgs& args) {
  return FitsInt(args.m) && FitsInt(args.n) && FitsInt(args.k) &&
         FitsInt(args.lda) && FitsInt(args.ldb) && FitsInt(args.ldc);
}

template <typename T>
T* At(char* base, int64_t offset) {
  return reinterpret_cast<T*>(base + offset);
}

}  // namespace plateau::kernels::cuda

#endif  // PLATEAU_KERNELS_CUDA_CUDA_OPS_INTERNAL_H_
