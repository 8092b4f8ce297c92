#include "kernels/cpu/simd.h"

#include <cstdlib>
#include <cstring>

namespace plateau::kernels::cpu {
namespace {

SimdLevel HardwareSimdLevel() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) return SimdLevel::kAvx512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    return SimdLevel::kAvx2;
  }
  return SimdLevel::kScalar;
}

SimdLevel ComputeSimdLevel() {
  const SimdLevel hardware = HardwareSimdLevel();
  const char* requested = std::getenv("PLATEAU_SIMD");
  if (requested == nullptr) return hardware;
  SimdLevel wanted = hardware;
  if (std::strcmp(requested, "scalar") == 0) wanted = SimdLevel::kScalar;
  if (std::strcmp(requested, "avx2") == 0) wanted = SimdLevel::kAvx2;
  if (std::strcmp(requested, "avx512") == 0) wanted = SimdLevel::kAvx512;
  return wanted < hardware ? wanted : hardware;
}

}  // namespace

SimdLevel DetectedSimdLevel() {
  static const SimdLevel level = ComputeSimdLevel();
  return level;
}

bool SimdLevelSupported(SimdLevel level) {
  return level <= HardwareSimdLevel();
}

const char* SimdLevelName(SimdLevel level) {
  switch (level) {
    case SimdLevel::kAvx512:
      return "avx512";
    case SimdLevel::kAvx2:
      return "avx2";
    case SimdLevel::kScalar:
      return "scalar";
  }
  return "unknown";
}

}  // namespace plateau::kernels::cpu
