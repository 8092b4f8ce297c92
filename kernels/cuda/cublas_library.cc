#include "kernels/cuda/cublas_library.h"

#include <dlfcn.h>

#include "absl/strings/str_cat.h"

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

template <typename Function>
absl::Status Resolve(void* handle, const char* name, Function* function) {
  *function = reinterpret_cast<Function>(dlsym(handle, name));
  if (*function != nullptr) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat(kLibrary, " has no ", name, ": ", dlerror()));
}

absl::StatusOr<CublasLibrary> Open() {
  void* handle = dlopen(kLibrary, RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot load cuBLAS (", kLibrary, "): ", dlerror()));
  }
  // The names are the _v2 API's (cublas_v2.h maps them).
  CublasLibrary library;
  absl::Status status = Resolve(handle, "cublasCreate_v2", &library.create);
  if (status.ok()) {
    status = Resolve(handle, "cublasDestroy_v2", &library.destroy);
  }
  if (status.ok()) {
    status = Resolve(handle, "cublasSetStream_v2", &library.set_stream);
  }
  if (status.ok()) status = Resolve(handle, "cublasGemmEx", &library.gemm);
  if (status.ok()) {
    status =
        Resolve(handle, "cublasGemmGroupedBatchedEx", &library.grouped_gemm);
  }
  if (status.ok()) {
    status = Resolve(handle, "cublasGetStatusString", &library.status_string);
  }
  if (!status.ok()) return status;
  return library;  // the handle stays open for the process
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
