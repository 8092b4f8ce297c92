// The emulated cuBLAS (cublas_api.h): column-major products, one at a time,
// on the emulated device's memory.
#include <cstring>
#include <vector>

#include "kernels/cuda/emulation/cublas_api.h"
#include "kernels/tiered_update.h"

struct cublasContext {
  cudaStream_t stream = nullptr;
};

namespace {

// What a tensor core sees of x: float32 with its mantissa rounded to
// nearest-even at `kept_bits` bits (10 for tf32).
float RoundMantissa(float x, int kept_bits) {
  const int dropped = 23 - kept_bits;
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof(bits));
  if (dropped == 0 || (bits & 0x7f800000u) == 0x7f800000u) return x;
  const uint32_t half = 1u << (dropped - 1);
  bits += half - 1 + ((bits >> dropped) & 1u);
  bits &= ~((1u << dropped) - 1);
  std::memcpy(&x, &bits, sizeof(x));
  return x;
}

int KeptMantissaBits(cublasComputeType_t compute) {
  switch (compute) {
    case CUBLAS_COMPUTE_32F_FAST_TF32:
      return 10;
    default:
      return 23;
  }
}

struct Product {
  cublasOperation_t transa, transb;
  int m, n, k;
  float alpha;
  const float* a;
  int lda;
  const float* b;
  int ldb;
  float beta;
  float* c;
  int ldc;
};

bool ValidOperation(cublasOperation_t operation) {
  return operation == CUBLAS_OP_N || operation == CUBLAS_OP_T;
}

// cuBLAS's own argument checks.
cublasStatus_t Check(const Product& p) {
  if (!ValidOperation(p.transa) || !ValidOperation(p.transb) || p.m < 0 ||
      p.n < 0 || p.k < 0) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  const int a_rows = p.transa == CUBLAS_OP_N ? p.m : p.k;
  const int b_rows = p.transb == CUBLAS_OP_N ? p.k : p.n;
  if (p.lda < (a_rows > 1 ? a_rows : 1) || p.ldb < (b_rows > 1 ? b_rows : 1) ||
      p.ldc < (p.m > 1 ? p.m : 1)) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  return CUBLAS_STATUS_SUCCESS;
}

// C = alpha op(A) op(B) + beta C, column-major; C is not read when beta is 0.
void Multiply(const Product& p, int kept_bits) {
  for (int j = 0; j < p.n; ++j) {
    for (int i = 0; i < p.m; ++i) {
      float sum = 0.0f;
      for (int l = 0; l < p.k; ++l) {
        const float a = p.transa == CUBLAS_OP_N
                            ? p.a[i + static_cast<int64_t>(l) * p.lda]
                            : p.a[l + static_cast<int64_t>(i) * p.lda];
        const float b = p.transb == CUBLAS_OP_N
                            ? p.b[l + static_cast<int64_t>(j) * p.ldb]
                            : p.b[j + static_cast<int64_t>(l) * p.ldb];
        sum += RoundMantissa(a, kept_bits) * RoundMantissa(b, kept_bits);
      }
      float& c = p.c[i + static_cast<int64_t>(j) * p.ldc];
      c = p.beta == 0.0f ? p.alpha * sum : p.alpha * sum + p.beta * c;
    }
  }
}

// A column-major bf16 matrix, rows x columns with leading dimension
// `leading`, as float32 values (laid out alike).
std::vector<float> Widen(const void* matrix, int rows, int columns,
                         int leading) {
  const int64_t elements =
      rows == 0 || columns == 0
          ? 0
          : static_cast<int64_t>(columns - 1) * leading + rows;
  const uint16_t* bits = static_cast<const uint16_t*>(matrix);
  std::vector<float> values(elements);
  for (int64_t i = 0; i < elements; ++i) {
    const uint32_t widened = static_cast<uint32_t>(bits[i]) << 16;
    std::memcpy(&values[i], &widened, sizeof(float));
  }
  return values;
}

}  // namespace

const char* cublasGetStatusString(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS:
      return "the operation completed successfully";
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "the library was not initialized";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "an invalid numeric value was used as an argument";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "the functionality requested is not supported";
  }
  return "unknown error";
}

cublasStatus_t cublasCreate(cublasHandle_t* handle) {
  *handle = new cublasContext();
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDestroy(cublasHandle_t handle) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream(cublasHandle_t handle, cudaStream_t stream) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  handle->stream = stream;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa,
                            cublasOperation_t transb, int m, int n, int k,
                            const void* alpha, const void* A,
                            cudaDataType Atype, int lda, const void* B,
                            cudaDataType Btype, int ldb, const void* beta,
                            void* C, cudaDataType Ctype, int ldc,
                            cublasComputeType_t computeType, cublasGemmAlgo_t) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  // float32 inputs, exactly or as tf32, or bf16 ones (with float32
  // accumulation); C float32, or bf16 (rounded to nearest even) after bf16
  // inputs. Not cuBLAS's float32 inputs as bf16
  // (CUBLAS_COMPUTE_32F_FAST_16BF): the hardware's rounding to bf16 is not
  // nearest-even, so an emulation of it would pass tests a GPU fails.
  const bool bf16 = Atype == CUDA_R_16BF && Btype == CUDA_R_16BF &&
                    computeType == CUBLAS_COMPUTE_32F;
  const bool float32 = Atype == CUDA_R_32F && Btype == CUDA_R_32F &&
                       (computeType == CUBLAS_COMPUTE_32F ||
                        computeType == CUBLAS_COMPUTE_32F_FAST_TF32);
  const bool bf16_c = bf16 && Ctype == CUDA_R_16BF;
  if (!(bf16 || float32) || !(Ctype == CUDA_R_32F || bf16_c)) {
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  Product product{transa,
                  transb,
                  m,
                  n,
                  k,
                  *static_cast<const float*>(alpha),
                  static_cast<const float*>(A),
                  lda,
                  static_cast<const float*>(B),
                  ldb,
                  *static_cast<const float*>(beta),
                  static_cast<float*>(C),
                  ldc};
  const cublasStatus_t status = Check(product);
  if (status != CUBLAS_STATUS_SUCCESS) return status;
  plateau::kernels::cuda::emulation::DeviceAccessScope access;
  std::vector<float> a_values, b_values;
  if (bf16) {
    a_values =
        transa == CUBLAS_OP_N ? Widen(A, m, k, lda) : Widen(A, k, m, lda);
    b_values =
        transb == CUBLAS_OP_N ? Widen(B, k, n, ldb) : Widen(B, n, k, ldb);
    product.a = a_values.data();
    product.b = b_values.data();
  }
  if (!bf16_c) {
    Multiply(product, KeptMantissaBits(computeType));
    return CUBLAS_STATUS_SUCCESS;
  }
  // A bf16 C: the float32 results (C widened where beta reads it), rounded.
  std::vector<float> c_values(static_cast<int64_t>(m) * n);
  product.c = c_values.data();
  product.ldc = m;
  uint16_t* c_bits = static_cast<uint16_t*>(C);
  const auto at = [&](int i, int j) {
    return c_bits + i + static_cast<int64_t>(j) * ldc;
  };
  if (product.beta != 0.0f) {
    for (int j = 0; j < n; ++j) {
      for (int i = 0; i < m; ++i) {
        c_values[i + static_cast<int64_t>(j) * m] =
            plateau::kernels::Bfloat16ToFloat(*at(i, j));
      }
    }
  }
  Multiply(product, KeptMantissaBits(computeType));
  for (int j = 0; j < n; ++j) {
    for (int i = 0; i < m; ++i) {
      *at(i, j) = plateau::kernels::FloatToBfloat16(
          c_values[i + static_cast<int64_t>(j) * m]);
    }
  }
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGemmGroupedBatchedEx(
    cublasHandle_t handle, const cublasOperation_t transa_array[],
    const cublasOperation_t transb_array[], const int m_array[],
    const int n_array[], const int k_array[], const void* alpha_array,
    const void* const Aarray[], cudaDataType_t Atype, const int lda_array[],
    const void* const Barray[], cudaDataType_t Btype, const int ldb_array[],
    const void* beta_array, void* const Carray[], cudaDataType_t Ctype,
    const int ldc_array[], int group_count, const int group_size[],
    cublasComputeType_t computeType) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (Atype != CUDA_R_32F || Btype != CUDA_R_32F || Ctype != CUDA_R_32F ||
      (computeType != CUBLAS_COMPUTE_32F &&
       computeType != CUBLAS_COMPUTE_32F_FAST_TF32)) {
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  if (group_count < 0) return CUBLAS_STATUS_INVALID_VALUE;
  const float* alphas = static_cast<const float*>(alpha_array);
  const float* betas = static_cast<const float*>(beta_array);
  plateau::kernels::cuda::emulation::DeviceAccessScope access;
  // Every product is checked before any runs, as cuBLAS does.
  std::vector<Product> products;
  for (int group = 0; group < group_count; ++group) {
    if (group_size[group] < 0) return CUBLAS_STATUS_INVALID_VALUE;
    for (int i = 0; i < group_size[group]; ++i) {
      const size_t problem = products.size();
      products.push_back(
          {transa_array[group], transb_array[group], m_array[group],
           n_array[group], k_array[group], alphas[group],
           static_cast<const float*>(Aarray[problem]), lda_array[group],
           static_cast<const float*>(Barray[problem]), ldb_array[group],
           betas[group], static_cast<float*>(Carray[problem]),
           ldc_array[group]});
      const cublasStatus_t status = Check(products.back());
      if (status != CUBLAS_STATUS_SUCCESS) return status;
    }
  }
  for (const Product& product : products) {
    Multiply(product, KeptMantissaBits(computeType));
  }
  return CUBLAS_STATUS_SUCCESS;
}
