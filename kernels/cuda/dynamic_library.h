// Loading a CUDA library at run time (cuBLAS, NCCL) rather than linking it:
// dlopen once for the process, dlsym per function, errors that name the
// library and dlerror's reason.
#ifndef PLATEAU_KERNELS_CUDA_DYNAMIC_LIBRARY_H_
#define PLATEAU_KERNELS_CUDA_DYNAMIC_LIBRARY_H_

#include <dlfcn.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

namespace plateau::kernels::cuda {

// A handle that stays open for the process; FAILED_PRECONDITION "cannot load
// <what> (<file>): <reason>".
inline absl::StatusOr<void*> OpenLibrary(const char* file, const char* what) {
  void* handle = dlopen(file, RTLD_NOW | RTLD_LOCAL);
  if (handle != nullptr) return handle;
  return absl::FailedPreconditionError(
      absl::StrCat("cannot load ", what, " (", file, "): ", dlerror()));
}

template <typename Function>
absl::Status ResolveFunction(void* handle, const char* file, const char* name,
                             Function* function) {
  *function = reinterpret_cast<Function>(dlsym(handle, name));
  if (*function != nullptr) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat(file, " has no ", name, ": ", dlerror()));
}

}  // namespace plateau::kernels::cuda

#endif  // PLATEAU_KERNELS_CUDA_DYNAMIC_LIBRARY_H_
