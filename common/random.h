// Deterministic pseudo-random bits that do not depend on the toolchain or
// the standard library, for anything that must be reproducible bit for bit
// (training batches, initial weights).
#ifndef PLATEAU_COMMON_RANDOM_H_
#define PLATEAU_COMMON_RANDOM_H_

#include <cstdint>

namespace plateau {

// The SplitMix64 finaliser (Vigna): a bijective 64-bit hash, good as a
// counter-based generator. SplitMix64(seed + k * 0x9e3779b97f4a7c15) is the
// (k + 1)-th output of the sequential splitmix64 generator seeded with seed.
inline uint64_t SplitMix64(uint64_t x) {
  uint64_t z = x + 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

}  // namespace plateau

#endif  // PLATEAU_COMMON_RANDOM_H_
