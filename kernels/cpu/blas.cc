#include "kernels/cpu/blas.h"

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"

namespace plateau::kernels::cpu {
namespace {

const char* CoreTypeForThisCpu() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") &&
      __builtin_cpu_supports("avx512dq")) {
    return "SkylakeX";
  }
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    return "Haswell";
  }
  return nullptr;  // let OpenBLAS decide
}

template <typename Function>
absl::Status Resolve(void* library, const char* library_name, const char* name,
                     Function* function) {
  *function = reinterpret_cast<Function>(dlsym(library, name));
  if (*function != nullptr) return absl::OkStatus();
  const char* error = dlerror();
  return absl::FailedPreconditionError(
      absl::StrCat(library_name, " lacks ", name, ": ",
                   error != nullptr ? error : "no such symbol",
                   "; install OpenBLAS with deploy/install-deps.sh"));
}

struct LoadedBlas {
  absl::Status status;
  OpenBlas blas = {};
};

LoadedBlas LoadOnce() {
  const char* core = CoreTypeForThisCpu();
  if (core != nullptr) setenv("OPENBLAS_CORETYPE", core, /*overwrite=*/0);
  absl::StatusOr<OpenBlas> blas = LoadOpenBlas("libopenblas.so.0");
  if (!blas.ok()) return {blas.status()};
  return {absl::OkStatus(), *blas};
}

const LoadedBlas& Loaded() {
  static const LoadedBlas* const loaded = new LoadedBlas(LoadOnce());
  return *loaded;
}

}  // namespace

absl::StatusOr<OpenBlas> LoadOpenBlas(const char* library) {
  void* handle = dlopen(library, RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* error = dlerror();
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot load OpenBLAS (", error != nullptr ? error : library,
        "); install it with deploy/install-deps.sh"));
  }
  OpenBlas blas;
  absl::Status status = Resolve(handle, library, "cblas_sgemm", &blas.sgemm);
  if (status.ok()) status = Resolve(handle, library, "cblas_sdot", &blas.sdot);
  if (status.ok()) {
    status = Resolve(handle, library, "openblas_set_num_threads",
                     &blas.set_num_threads);
  }
  if (status.ok()) {
    status = Resolve(handle, library, "openblas_get_corename", &blas.corename);
  }
  if (!status.ok()) {
    dlclose(handle);
    return status;
  }
  // The handle stays open: the functions are used for the process's life.
  return blas;
}

const absl::Status& BlasStatus() { return Loaded().status; }

const OpenBlas& Blas() {
  const LoadedBlas& loaded = Loaded();
  if (!loaded.status.ok()) BlasFatalError(loaded.status.message());
  return loaded.blas;
}

void BlasFatalError(absl::string_view message) {
  std::fprintf(stderr, "plateau: %.*s\n", static_cast<int>(message.size()),
               message.data());
  std::fflush(stderr);
  std::abort();
}

}  // namespace plateau::kernels::cpu
