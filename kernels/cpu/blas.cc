#include "kernels/cpu/blas.h"

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/simd.h"

namespace plateau::kernels::cpu {
namespace {

// OpenBLAS's kernels for the SIMD level the others run at (the CPU's, or
// lower with PLATEAU_SIMD): never above the CPU's, since OpenBLAS does not
// check a forced core type.
const char* CoreTypeForThisCpu() {
  __builtin_cpu_init();
  switch (DetectedSimdLevel()) {
    case SimdLevel::kAvx512:
      if (__builtin_cpu_supports("avx512bw") &&
          __builtin_cpu_supports("avx512vl") &&
          __builtin_cpu_supports("avx512dq")) {
        return "SkylakeX";
      }
      return "Haswell";
    case SimdLevel::kAvx2:
      return "Haswell";
    case SimdLevel::kScalar:
      // Held below the CPU: Nehalem's SSE kernels. A CPU without AVX2 has
      // OpenBLAS choose for itself.
      if (SimdLevelSupported(SimdLevel::kAvx2) &&
          __builtin_cpu_supports("sse4.2")) {
        return "Nehalem";
      }
      return nullptr;
  }
  return nullptr;
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
