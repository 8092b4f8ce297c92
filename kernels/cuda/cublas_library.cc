#include "kernels/cuda/cublas_library.h"

#include "kernels/cuda/dynamic_library.h"

namespace plateau::kernels::cuda {
namespace {

#ifdef PLATEAU_CUDA_EMULATION

absl::StatusOr<CublasLibrary> Open() {
  CublasLibrary library;
  library.create = &cublasCreate;
  library.destroy = &cublasDestroy;
  library.set_stream = &cublasSetStream;
  library.gemm = &cublasGemmEx;
  library.grouped_gemm = &cublasGemmGroupedBatchedEx;
  library.status_string = &cublasGetStatusString;
  return library;
}

#else

constexpr char kLibrary[] = "libcublas.so.13";

absl::StatusOr<CublasLibrary> Open() {
  absl::StatusOr<void*> handle = OpenLibrary(kLibrary, "cuBLAS");
  if (!handle.ok()) return handle.status();
  // The names are the _v2 API's (cublas_v2.h maps them).
  CublasLibrary l;
  for (const absl::Status& status : {
           ResolveFunction(*handle, kLibrary, "cublasCreate_v2", &l.create),
           ResolveFunction(*handle, kLibrary, "cublasDestroy_v2", &l.destroy),
           ResolveFunction(*handle, kLibrary, "cublasSetStream_v2",
                           &l.set_stream),
           ResolveFunction(*handle, kLibrary, "cublasGemmEx", &l.gemm),
           ResolveFunction(*handle, kLibrary, "cublasGemmGroupedBatchedEx",
                           &l.grouped_gemm),
           ResolveFunction(*handle, kLibrary, "cublasGetStatusString",
                           &l.status_string),
       }) {
    if (!status.ok()) return status;
  }
  return l;
}

#endif

}  // namespace

absl::StatusOr<const CublasLibrary*> LoadCublas() {
  static const absl::StatusOr<CublasLibrary>* const library =
      new absl::StatusOr<CublasLibrary>(Open());
  if (!library->ok()) return library->status();
  return &**library;
}

}  // namespace plateau::kernels::cuda
