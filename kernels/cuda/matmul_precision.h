// How cuBLAS may compute float32 products, as the CUDA backend's options
// and the worker's --cuda_matmul flag name it. Plain C++, so that code which
// only chooses a precision builds without the CUDA toolkit.
#ifndef PLATEAU_KERNELS_CUDA_MATMUL_PRECISION_H_
#define PLATEAU_KERNELS_CUDA_MATMUL_PRECISION_H_

namespace plateau::kernels::cuda {

// Exactly (kFloat32), or on the tensor cores with inputs rounded to tf32's
// 10-bit mantissa and float32 accumulation (kTensorFloat32, several times
// faster).
enum class MatmulPrecision { kFloat32, kTensorFloat32 };

// "fp32" and "tf32".
inline const char* MatmulPrecisionName(MatmulPrecision precision) {
  return precision == MatmulPrecision::kFloat32 ? "fp32" : "tf32";
}

}  // namespace plateau::kernels::cuda

#endif  // PLATEAU_KERNELS_CUDA_MATMUL_PRECISION_H_
