#include "kernels/cpu/tiered_update.h"

#include <algorithm>
#include <cmath>

#include "kernels/cpu/simd.h"

// Each kernel is written once as plain loops over blocks small enough for
// L1 (an always-inline body) and compiled three times, for AVX-512, AVX2 and
// plain x86-64; BUILD lets the compiler vectorise them (reductions
// included), so results are reproducible for one CPU, not across SIMD
// levels.
#define PLATEAU_INLINE inline __attribute__((always_inline))
#define PLATEAU_AVX512 __attribute__((target("avx512f,avx512bw,avx2,fma")))
#define PLATEAU_AVX2 __attribute__((target("avx2,fma")))

namespace plateau::kernels::cpu {
namespace {

constexpr int64_t kBlock = 256;

PLATEAU_INLINE void AccumulateSquaresBody(const TieredSlice& s) {
  const int64_t count = s.count;
  const float* grads = s.grads;
  const int64_t first_element = s.first_element;
  const int64_t columns = s.columns;
  float* row_sums = s.row_sums;
  float* column_sums = s.column_sums;
  int64_t done = 0;
  while (done < count) {
    const int64_t element = first_element + done;
    const int64_t row = element / columns;
    const int64_t column = element % columns;
    const int64_t run = std::min(columns - column, count - done);
    const float* g = grads + done;
    float* columns_of_run = column_sums + column;
    float row_sum = 0.0f;
    for (int64_t i = 0; i < run; ++i) {
      const float square = g[i] * g[i] + kFactoredSquareFloor;
      row_sum += square;
      columns_of_run[i] += square;
    }
    row_sums[row] += row_sum;
    done += run;
  }
}

// numerator[i] = m / (1 - beta1^t) (or g) for `count` <= kBlock elements
// from `offset`, updating the momentum first when `update`.
PLATEAU_INLINE void Numerators(const TieredCoefficients& c,
                               const TieredSlice& s, int64_t offset,
                               int64_t count, bool update, float* numerator) {
  const float* g = s.grads + offset;
  if (s.momentum != nullptr) {
    float* m = s.momentum + offset;
    if (update) {
      for (int64_t i = 0; i < count; ++i) {
        m[i] = c.beta1 * m[i] + c.one_minus_beta1 * g[i];
      }
    }
    for (int64_t i = 0; i < count; ++i) {
      numerator[i] = m[i] * c.momentum_correction;
    }
  } else if (s.momentum_bfloat16 != nullptr) {
    uint16_t* m = s.momentum_bfloat16 + offset;
    if (update) {
      for (int64_t i = 0; i < count; ++i) {
        m[i] = FloatToBfloat16(c.beta1 * Bfloat16ToFloat(m[i]) +
                               c.one_minus_beta1 * g[i]);
      }
    }
    for (int64_t i = 0; i < count; ++i) {
      numerator[i] = Bfloat16ToFloat(m[i]) * c.momentum_correction;
    }
  } else {
    for (int64_t i = 0; i < count; ++i) numerator[i] = g[i];
  }
}

// denominator[i] = sqrt(v) + eps for `count` elements from `offset`, all
// in one row of a factored matrix (row_root: that row's, column: the first
// one's column); updating an exact moment first when `update`.
PLATEAU_INLINE void Denominators(const TieredCoefficients& c,
                                 const TieredSlice& s, int64_t offset,
                                 int64_t count, bool update, float row_root,
                                 int64_t column, float* denominator) {
  if (s.second_moment != nullptr) {
    const float* g = s.grads + offset;
    float* v = s.second_moment + offset;
    if (update) {
      for (int64_t i = 0; i < count; ++i) {
        v[i] = c.beta2 * v[i] + c.one_minus_beta2 * (g[i] * g[i]);
      }
    }
    for (int64_t i = 0; i < count; ++i) {
      denominator[i] = std::sqrt(v[i] * s.second_moment_scale) + c.epsilon;
    }
    return;
  }
  const float* column_roots = s.column_roots + column;
  for (int64_t i = 0; i < count; ++i) {
    denominator[i] = row_root * column_roots[i] + c.epsilon;
  }
}

// Calls block(offset, count, row_root, column) over the slice in blocks of
// at most kBlock elements that never cross a row of a factored matrix.
template <typename Block>
PLATEAU_INLINE void ForEachBlock(const TieredSlice& s, Block&& block) {
  const bool factored = s.second_moment == nullptr;
  int64_t done = 0;
  while (done < s.count) {
    int64_t count = std::min(kBlock, s.count - done);
    float row_root = 0.0f;
    int64_t column = 0;
    if (factored) {
      const int64_t element = s.first_element + done;
      column = element % s.columns;
      count = std::min(count, s.columns - column);
      row_root = s.row_roots[element / s.columns];
    }
    block(done, count, row_root, column);
    done += count;
  }
}

PLATEAU_INLINE double MeasureBody(const TieredCoefficients& c,
                                  const TieredSlice& s) {
  double total = 0.0;
  ForEachBlock(
      s, [&](int64_t offset, int64_t count, float row_root, int64_t column)
             __attribute__((always_inline)) {
               float numerator[kBlock];
               float denominator[kBlock];
               Numerators(c, s, offset, count, /*update=*/true, numerator);
               Denominators(c, s, offset, count, /*update=*/true, row_root,
                            column, denominator);
               float sum = 0.0f;
               for (int64_t i = 0; i < count; ++i) {
                 const float u = numerator[i] / denominator[i];
                 sum += u * u;
               }
               total += sum;
             });
  return total;
}

// Recomputes u from the state Measure left (cheaper than storing it: the
// factored denominator is a product of two roots).
PLATEAU_INLINE void ApplyBody(const TieredCoefficients& c,
                              const TieredSlice& s) {
  const float decay = s.decay ? c.decay : 1.0f;
  const float step = c.learning_rate * s.update_scale;
  ForEachBlock(
      s, [&](int64_t offset, int64_t count, float row_root, int64_t column)
             __attribute__((always_inline)) {
               float numerator[kBlock];
               float denominator[kBlock];
               Numerators(c, s, offset, count, /*update=*/false, numerator);
               Denominators(c, s, offset, count, /*update=*/false, row_root,
                            column, denominator);
               float* p = s.params + offset;
               for (int64_t i = 0; i < count; ++i) {
                 p[i] = p[i] * decay - step * (numerator[i] / denominator[i]);
               }
             });
}

PLATEAU_INLINE void LionBody(const TieredCoefficients& c,
                             const TieredSlice& s) {
  const float decay = s.decay ? c.decay : 1.0f;
  float* p = s.params;
  const float* g = s.grads;
  float* m = s.momentum;
  for (int64_t i = 0; i < s.count; ++i) {
    const float mixed = c.beta1 * m[i] + c.one_minus_beta1 * g[i];
    const float sign =
        static_cast<float>(mixed > 0.0f) - static_cast<float>(mixed < 0.0f);
    p[i] = p[i] * decay - c.learning_rate * sign;
    m[i] = c.beta2 * m[i] + c.one_minus_beta2 * g[i];
  }
}

PLATEAU_AVX512 void AccumulateSquaresAvx512(const TieredSlice& s) {
  AccumulateSquaresBody(s);
}
PLATEAU_AVX2 void AccumulateSquaresAvx2(const TieredSlice& s) {
  AccumulateSquaresBody(s);
}
PLATEAU_AVX512 double MeasureAvx512(const TieredCoefficients& c,
                                    const TieredSlice& s) {
  return MeasureBody(c, s);
}
PLATEAU_AVX2 double MeasureAvx2(const TieredCoefficients& c,
                                const TieredSlice& s) {
  return MeasureBody(c, s);
}
PLATEAU_AVX512 void ApplyAvx512(const TieredCoefficients& c,
                                const TieredSlice& s) {
  ApplyBody(c, s);
}
PLATEAU_AVX2 void ApplyAvx2(const TieredCoefficients& c, const TieredSlice& s) {
  ApplyBody(c, s);
}
PLATEAU_AVX512 void LionAvx512(const TieredCoefficients& c,
                               const TieredSlice& s) {
  LionBody(c, s);
}
PLATEAU_AVX2 void LionAvx2(const TieredCoefficients& c, const TieredSlice& s) {
  LionBody(c, s);
}

}  // namespace

void AccumulateSquares(const TieredSlice& slice) {
  switch (DetectedSimdLevel()) {
    case SimdLevel::kAvx512:
      return AccumulateSquaresAvx512(slice);
    case SimdLevel::kAvx2:
      return AccumulateSquaresAvx2(slice);
    case SimdLevel::kScalar:
      return AccumulateSquaresBody(slice);
  }
}

double TieredMeasure(const TieredCoefficients& coefficients,
                     const TieredSlice& slice) {
  switch (DetectedSimdLevel()) {
    case SimdLevel::kAvx512:
      return MeasureAvx512(coefficients, slice);
    case SimdLevel::kAvx2:
      return MeasureAvx2(coefficients, slice);
    case SimdLevel::kScalar:
      break;
  }
  return MeasureBody(coefficients, slice);
}

void TieredApply(const TieredCoefficients& coefficients,
                 const TieredSlice& slice) {
  switch (DetectedSimdLevel()) {
    case SimdLevel::kAvx512:
      return ApplyAvx512(coefficients, slice);
    case SimdLevel::kAvx2:
      return ApplyAvx2(coefficients, slice);
    case SimdLevel::kScalar:
      return ApplyBody(coefficients, slice);
  }
}

void TieredUpdate(const TieredCoefficients& coefficients,
                  const TieredSlice& slice, float clip_threshold) {
  TieredSlice whole = slice;
  if (slice.row_statistics != nullptr) {
    float* row_sums = slice.row_sums;
    float* column_sums = slice.column_sums;
    std::fill_n(row_sums, slice.rows, 0.0f);
    std::fill_n(column_sums, slice.columns, 0.0f);
    AccumulateSquares(slice);
    double row_total = 0.0;
    for (int64_t r = 0; r < slice.rows; ++r) {
      row_sums[r] = coefficients.beta2 * slice.row_statistics[r] +
                    coefficients.one_minus_beta2 * row_sums[r];
      row_total += row_sums[r];
    }
    for (int64_t c = 0; c < slice.columns; ++c) {
      column_sums[c] = coefficients.beta2 * slice.column_statistics[c] +
                       coefficients.one_minus_beta2 * column_sums[c];
    }
    const float row_scale =
        static_cast<float>(slice.second_moment_scale / row_total);
    for (int64_t r = 0; r < slice.rows; ++r) {
      slice.row_statistics[r] = std::sqrt(row_sums[r] * row_scale);
    }
    for (int64_t c = 0; c < slice.columns; ++c) {
      slice.column_statistics[c] = std::sqrt(column_sums[c]);
    }
    whole.row_roots = slice.row_statistics;
    whole.column_roots = slice.column_statistics;
  }
  const double rms = std::sqrt(TieredMeasure(coefficients, whole) /
                               static_cast<double>(whole.count));
  whole.update_scale =
      static_cast<float>(1.0 / std::max(1.0, rms / clip_threshold));
  TieredApply(coefficients, whole);
}

void LionUpdate(const TieredCoefficients& coefficients,
                const TieredSlice& slice) {
  switch (DetectedSimdLevel()) {
    case SimdLevel::kAvx512:
      return LionAvx512(coefficients, slice);
    case SimdLevel::kAvx2:
      return LionAvx2(coefficients, slice);
    case SimdLevel::kScalar:
      return LionBody(coefficients, slice);
  }
}

}  // namespace plateau::kernels::cpu
