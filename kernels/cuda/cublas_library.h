// cuBLAS as CudaOps calls it, loaded (dlopen of libcublas.so.13) the first
// time it is asked for rather than linked: a process that never uses a GPU
// neither needs the library nor carries its thread-local storage, about
// 100 KB per thread with cuBLASLt's, which makes threads with small stacks
// (civetweb's, serving /metrics) fail to start. The emulated build hands out
// kernels/cuda/emulation's functions instead.
#ifndef PLATEAU_KERNELS_CUDA_CUBLAS_LIBRARY_H_
#define PLATEAU_KERNELS_CUDA_CUBLAS_LIBRARY_H_

#include "absl/status/statusor.h"
#include "kernels/cuda/cuda_api.h"

namespace plateau::kernels::cuda {

struct CublasLibrary {
  decltype(&cublasCreate) create = nullptr;
  decltype(&cublasDestroy) destroy = nullptr;
  decltype(&cublasSetStream) set_stream = nullptr;
  // cublasGemmEx is overloaded in C++ (a compute type or, as before CUDA
  // 11, a data type): this is the C function's type.
  using GemmEx = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t,
                                    cublasOperation_t, int, int, int,
                                    const void*, const void*, cudaDataType, int,
                                    const void*, cudaDataType, int, const void*,
                                    void*, cudaDataType, int,
                                    cublasComputeType_t, cublasGemmAlgo_t);
  GemmEx gemm = nullptr;
  decltype(&cublasGemmGroupedBatchedEx) grouped_gemm = nullptr;
  decltype(&cublasGetStatusString) status_string = nullptr;
};

// The same library on every call; FAILED_PRECONDITION naming the library
// and dlerror's reason when it cannot be loaded.
absl::StatusOr<const CublasLibrary*> LoadCublas();

}  // namespace plateau::kernels::cuda

#endif  // PLATEAU_KERNELS_CUDA_CUBLAS_LIBRARY_H_
