// The part of cuBLAS that Plateau's CUDA code calls, for the emulated build:
// the same names and values as <cublas_v2.h>, implemented by cublas.cc with
// a plain column-major loop per product. Arguments are checked as cuBLAS
// checks them (CUBLAS_STATUS_INVALID_VALUE for a leading dimension below
// the matrix's, say), and the fast compute types round the inputs as the
// tensor cores would (to tf32's or bfloat16's mantissa), so tolerances
// chosen here hold on a GPU.
#ifndef PLATEAU_KERNELS_CUDA_EMULATION_CUBLAS_API_H_
#define PLATEAU_KERNELS_CUDA_EMULATION_CUBLAS_API_H_

#include <cstdint>

#include "kernels/cuda/emulation/runtime_api.h"

enum cublasStatus_t {
  CUBLAS_STATUS_SUCCESS = 0,
  CUBLAS_STATUS_NOT_INITIALIZED = 1,
  CUBLAS_STATUS_INVALID_VALUE = 7,
  CUBLAS_STATUS_NOT_SUPPORTED = 15,
};

enum cublasOperation_t {
  CUBLAS_OP_N = 0,
  CUBLAS_OP_T = 1,
};

enum cudaDataType_t {
  CUDA_R_32F = 0,
  CUDA_R_16BF = 14,
};
using cudaDataType = cudaDataType_t;

enum cublasComputeType_t {
  CUBLAS_COMPUTE_32F = 68,
  CUBLAS_COMPUTE_32F_FAST_TF32 = 77,
};

enum cublasGemmAlgo_t {
  CUBLAS_GEMM_DEFAULT = -1,
};

struct cublasContext;
using cublasHandle_t = cublasContext*;

const char* cublasGetStatusString(cublasStatus_t status);
cublasStatus_t cublasCreate(cublasHandle_t* handle);
cublasStatus_t cublasDestroy(cublasHandle_t handle);
cublasStatus_t cublasSetStream(cublasHandle_t handle, cudaStream_t stream);

cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa,
                            cublasOperation_t transb, int m, int n, int k,
                            const void* alpha, const void* A,
                            cudaDataType Atype, int lda, const void* B,
                            cudaDataType Btype, int ldb, const void* beta,
                            void* C, cudaDataType Ctype, int ldc,
                            cublasComputeType_t computeType,
                            cublasGemmAlgo_t algo);

// Aarray, Barray and Carray are device memory; the rest host memory.
// Supports CUBLAS_COMPUTE_32F and CUBLAS_COMPUTE_32F_FAST_TF32 on float32.
cublasStatus_t cublasGemmGroupedBatchedEx(
    cublasHandle_t handle, const cublasOperation_t transa_array[],
    const cublasOperation_t transb_array[], const int m_array[],
    const int n_array[], const int k_array[], const void* alpha_array,
    const void* const Aarray[], cudaDataType_t Atype, const int lda_array[],
    const void* const Barray[], cudaDataType_t Btype, const int ldb_array[],
    const void* beta_array, void* const Carray[], cudaDataType_t Ctype,
    const int ldc_array[], int group_count, const int group_size[],
    cublasComputeType_t computeType);

#endif  // PLATEAU_KERNELS_CUDA_EMULATION_CUBLAS_API_H_
