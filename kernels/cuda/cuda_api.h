// The CUDA runtime and cuBLAS as Plateau's host code sees them: the real
// headers, or in the emulated build (PLATEAU_CUDA_EMULATION) their CPU
// stand-ins in kernels/cuda/emulation, which declare the same subset.
#ifndef PLATEAU_KERNELS_CUDA_CUDA_API_H_
#define PLATEAU_KERNELS_CUDA_CUDA_API_H_

#ifdef PLATEAU_CUDA_EMULATION
#include "kernels/cuda/emulation/cublas_api.h"
#include "kernels/cuda/emulation/runtime_api.h"
#else
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#endif

#endif  // PLATEAU_KERNELS_CUDA_CUDA_API_H_
