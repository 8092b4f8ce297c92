#include "kernels/cpu/blas.h"

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>

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
void Resolve(void* library, const char* name, Function* function) {
  *function = reinterpret_cast<Function>(dlsym(library, name));
  if (*function == nullptr) {
    std::fprintf(stderr, "plateau: libopenblas.so.0 lacks %s: %s\n", name,
                 dlerror());
    std::exit(1);
  }
}

OpenBlas Load() {
  const char* core = CoreTypeForThisCpu();
  if (core != nullptr) setenv("OPENBLAS_CORETYPE", core, /*overwrite=*/0);
  void* library = dlopen("libopenblas.so.0", RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) {
    std::fprintf(stderr,
                 "plateau: cannot load OpenBLAS (%s); install it with "
                 "deploy/install-deps.sh\n",
                 dlerror());
    std::exit(1);
  }
  OpenBlas blas;
  Resolve(library, "cblas_sgemm", &blas.sgemm);
  Resolve(library, "cblas_sdot", &blas.sdot);
  Resolve(library, "openblas_set_num_threads", &blas.set_num_threads);
  Resolve(library, "openblas_get_corename", &blas.corename);
  return blas;
}

}  // namespace

const OpenBlas& Blas() {
  static const OpenBlas blas = Load();
  return blas;
}

}  // namespace plateau::kernels::cpu
