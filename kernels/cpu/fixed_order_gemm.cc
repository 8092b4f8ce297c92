#include "kernels/cpu/fixed_order_gemm.h"

#include <algorithm>

#include "kernels/cpu/bf16.h"
#include "kernels/cpu/bf16_avx2.h"
#include "kernels/cpu/intrinsics.h"
#include "kernels/cpu/simd.h"

namespace plateau::kernels::cpu {
namespace {

constexpr int64_t kPanelFloats = kPanelRows * kPanelColumns;
// A product is made in blocks of c of kBlockRowPanels x kBlockColumnPanels
// panels, k in steps of kBlockDepth: a column panel's step (24 KiB) stays
// in L1 while the block's row panels (64 KiB) come from L2. The block's
// sums so far wait in memory between steps, exactly as they were.
constexpr int64_t kBlockRowPanels = 16;
constexpr int64_t kBlockColumnPanels = 4;
constexpr int64_t kBlockDepth = 256;

// An element as the product reads it: rounded to bf16, or widened.
inline float Rounded(float value) { return Bf16ToFloat(FloatToBf16(value)); }
inline float Rounded(uint16_t value) { return Bf16ToFloat(value); }

// ---- Packing, scalar (any layout, partial panels, ends of k) ----

// Panels are packed kPackDepth values of k at a time across a block's
// panels, so that the rows of a layout whose stored rows run along k are
// read a few pages at a time.
constexpr int64_t kPackDepth = 256;

// Depths [depth_begin, depth_end) of a panel.
template <typename T>
void PackRowPanelScalar(const T* a, int64_t stride, bool transposed,
                        int64_t first_row, int64_t rows, int64_t depth_begin,
                        int64_t depth_end, float* panel) {
  for (int64_t depth = depth_begin; depth < depth_end; ++depth) {
    for (int64_t r = 0; r < kPanelRows; ++r) {
      const int64_t row = first_row + r;
      panel[depth * kPanelRows + r] =
          row >= rows ? 0.0f
                      : Rounded(transposed ? a[depth * stride + row]
                                           : a[row * stride + depth]);
    }
  }
}

template <typename T>
void PackColumnPanelScalar(const T* b, int64_t stride, bool transposed,
                           int64_t first_column, int64_t columns,
                           int64_t depth_begin, int64_t depth_end,
                           float* panel) {
  for (int64_t depth = depth_begin; depth < depth_end; ++depth) {
    for (int64_t j = 0; j < kPanelColumns; ++j) {
      const int64_t column = first_column + j;
      panel[depth * kPanelColumns + j] =
          column >= columns ? 0.0f
                            : Rounded(transposed ? b[column * stride + depth]
                                                 : b[depth * stride + column]);
    }
  }
}

// ---- Packing, AVX2 (whole panels) ----

#define PLATEAU_AVX2 __attribute__((target("avx2,fma")))

// Rounded() on 8 values, bit for bit.
PLATEAU_AVX2 inline __m256 Rounded8(const float* from) {
  return RoundedBf16x8(_mm256_loadu_ps(from));
}
PLATEAU_AVX2 inline __m256 Rounded8(const uint16_t* from) {
  return WidenBf16x8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(from)));
}

// Four values at `from`, then four `stride` further on.
PLATEAU_AVX2 inline __m256 RoundedPair(const float* from, int64_t stride) {
  return RoundedBf16x8(
      _mm256_insertf128_ps(_mm256_castps128_ps256(_mm_loadu_ps(from)),
                           _mm_loadu_ps(from + stride), 1));
}
PLATEAU_AVX2 inline __m256 RoundedPair(const uint16_t* from, int64_t stride) {
  return WidenBf16x8(_mm_unpacklo_epi64(
      _mm_loadl_epi64(reinterpret_cast<const __m128i*>(from)),
      _mm_loadl_epi64(reinterpret_cast<const __m128i*>(from + stride))));
}

// The 8 x 8 block rows[0..7] transposed in place.
PLATEAU_AVX2 inline void Transpose8x8(__m256 rows[8]) {
  const __m256 t0 = _mm256_unpacklo_ps(rows[0], rows[1]);
  const __m256 t1 = _mm256_unpackhi_ps(rows[0], rows[1]);
  const __m256 t2 = _mm256_unpacklo_ps(rows[2], rows[3]);
  const __m256 t3 = _mm256_unpackhi_ps(rows[2], rows[3]);
  const __m256 t4 = _mm256_unpacklo_ps(rows[4], rows[5]);
  const __m256 t5 = _mm256_unpackhi_ps(rows[4], rows[5]);
  const __m256 t6 = _mm256_unpacklo_ps(rows[6], rows[7]);
  const __m256 t7 = _mm256_unpackhi_ps(rows[6], rows[7]);
  const __m256 s0 = _mm256_shuffle_ps(t0, t2, 0x44);
  const __m256 s1 = _mm256_shuffle_ps(t0, t2, 0xee);
  const __m256 s2 = _mm256_shuffle_ps(t1, t3, 0x44);
  const __m256 s3 = _mm256_shuffle_ps(t1, t3, 0xee);
  const __m256 s4 = _mm256_shuffle_ps(t4, t6, 0x44);
  const __m256 s5 = _mm256_shuffle_ps(t4, t6, 0xee);
  const __m256 s6 = _mm256_shuffle_ps(t5, t7, 0x44);
  const __m256 s7 = _mm256_shuffle_ps(t5, t7, 0xee);
  rows[0] = _mm256_permute2f128_ps(s0, s4, 0x20);
  rows[1] = _mm256_permute2f128_ps(s1, s5, 0x20);
  rows[2] = _mm256_permute2f128_ps(s2, s6, 0x20);
  rows[3] = _mm256_permute2f128_ps(s3, s7, 0x20);
  rows[4] = _mm256_permute2f128_ps(s0, s4, 0x31);
  rows[5] = _mm256_permute2f128_ps(s1, s5, 0x31);
  rows[6] = _mm256_permute2f128_ps(s2, s6, 0x31);
  rows[7] = _mm256_permute2f128_ps(s3, s7, 0x31);
}

// Rows r[0..3] of 8 values each as 8 k-major groups of 4: the 32 floats
// r0[0] r1[0] r2[0] r3[0] r0[1] ... at `to`.
PLATEAU_AVX2 inline void StoreTransposed4x8(const __m256 r[4], float* to) {
  const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]);  // k 0, 1 | 4, 5
  const __m256 t1 = _mm256_unpackhi_ps(r[0], r[1]);  // k 2, 3 | 6, 7
  const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]);
  const __m256 t3 = _mm256_unpackhi_ps(r[2], r[3]);
  const __m256 k04 = _mm256_shuffle_ps(t0, t2, 0x44);
  const __m256 k15 = _mm256_shuffle_ps(t0, t2, 0xee);
  const __m256 k26 = _mm256_shuffle_ps(t1, t3, 0x44);
  const __m256 k37 = _mm256_shuffle_ps(t1, t3, 0xee);
  _mm256_storeu_ps(to, _mm256_permute2f128_ps(k04, k15, 0x20));
  _mm256_storeu_ps(to + 8, _mm256_permute2f128_ps(k26, k37, 0x20));
  _mm256_storeu_ps(to + 16, _mm256_permute2f128_ps(k04, k15, 0x31));
  _mm256_storeu_ps(to + 24, _mm256_permute2f128_ps(k26, k37, 0x31));
}

// A whole panel of a's rows: stored along k, 8 values of each of its 4 rows
// at a time, transposed; stored along the rows (transposed), its 4 values
// at two values of k at a time.
template <typename T>
PLATEAU_AVX2 void PackRowPanelAvx2(const T* a, int64_t stride, bool transposed,
                                   int64_t first_row, int64_t rows,
                                   int64_t depth_begin, int64_t depth_end,
                                   float* panel) {
  int64_t depth = depth_begin;
  if (transposed) {
    for (; depth + 2 <= depth_end; depth += 2) {
      _mm256_storeu_ps(panel + depth * kPanelRows,
                       RoundedPair(a + depth * stride + first_row, stride));
    }
  } else {
    for (; depth + 8 <= depth_end; depth += 8) {
      __m256 block[kPanelRows];
      for (int64_t r = 0; r < kPanelRows; ++r) {
        block[r] = Rounded8(a + (first_row + r) * stride + depth);
      }
      StoreTransposed4x8(block, panel + depth * kPanelRows);
    }
  }
  PackRowPanelScalar(a, stride, transposed, first_row, rows, depth, depth_end,
                     panel);
}

// The layouts whose stored rows run across the panels (a transposed, b
// not) are packed a few whole panels at once, so that each value of k reads
// whole cache lines of the stored matrix once and deals them out: a panel
// at a time reads 16 or 96 bytes of a line, and the lines k apart, which a
// row stride of a power of two kilobytes puts in one cache set, evict one
// another before the next panel reads the rest (2.5x slower).
constexpr int64_t kRowPanelsAtOnce = 4;     // 16 floats, a cache line
constexpr int64_t kColumnPanelsAtOnce = 2;  // 48 floats, three

template <typename T>
PLATEAU_AVX2 void PackRowPanelsAlongRowsAvx2(const T* a, int64_t stride,
                                             int64_t first_row,
                                             int64_t depth_begin,
                                             int64_t depth_end, int64_t k,
                                             float* panels) {
  const int64_t panel_floats = kPanelRows * k;
  for (int64_t depth = depth_begin; depth < depth_end; ++depth) {
    const T* row = a + depth * stride + first_row;
    const __m256 low = Rounded8(row);
    const __m256 high = Rounded8(row + 8);
    float* to = panels + depth * kPanelRows;
    _mm_storeu_ps(to, _mm256_castps256_ps128(low));
    _mm_storeu_ps(to + panel_floats, _mm256_extractf128_ps(low, 1));
    _mm_storeu_ps(to + 2 * panel_floats, _mm256_castps256_ps128(high));
    _mm_storeu_ps(to + 3 * panel_floats, _mm256_extractf128_ps(high, 1));
  }
}

template <typename T>
PLATEAU_AVX2 void PackColumnPanelsAlongRowsAvx2(const T* b, int64_t stride,
                                                int64_t first_column,
                                                int64_t depth_begin,
                                                int64_t depth_end, int64_t k,
                                                float* panels) {
  const int64_t panel_floats = kPanelColumns * k;
  for (int64_t depth = depth_begin; depth < depth_end; ++depth) {
    const T* row = b + depth * stride + first_column;
    for (int64_t panel = 0; panel < kColumnPanelsAtOnce; ++panel) {
      float* to = panels + panel * panel_floats + depth * kPanelColumns;
      for (int64_t j = 0; j < kPanelColumns; j += 8) {
        _mm256_storeu_ps(to + j, Rounded8(row + panel * kPanelColumns + j));
      }
    }
  }
}

template <typename T>
PLATEAU_AVX2 void PackColumnPanelAvx2(const T* b, int64_t stride,
                                      bool transposed, int64_t first_column,
                                      int64_t columns, int64_t depth_begin,
                                      int64_t depth_end, float* panel) {
  int64_t depth = depth_begin;
  if (!transposed) {
    for (; depth < depth_end; ++depth) {
      const T* from = b + depth * stride + first_column;
      float* to = panel + depth * kPanelColumns;
      for (int64_t j = 0; j < kPanelColumns; j += 8) {
        _mm256_storeu_ps(to + j, Rounded8(from + j));
      }
    }
    return;
  }
  for (; depth + 8 <= depth_end; depth += 8) {
    for (int64_t group = 0; group < kPanelColumns; group += 8) {
      __m256 block[8];
      for (int64_t j = 0; j < 8; ++j) {
        block[j] = Rounded8(b + (first_column + group + j) * stride + depth);
      }
      Transpose8x8(block);
      for (int64_t i = 0; i < 8; ++i) {
        _mm256_storeu_ps(panel + (depth + i) * kPanelColumns + group, block[i]);
      }
    }
  }
  PackColumnPanelScalar(b, stride, transposed, first_column, columns, depth,
                        depth_end, panel);
}

// a's panels and b's, for PackPanelsOf: a panel's width, how many the
// layout whose stored rows run across them packs at once, and the packers.
struct RowPanels {
  static constexpr int64_t kWidth = kPanelRows;
  static constexpr int64_t kAtOnce = kRowPanelsAtOnce;
  static bool StoredAcross(bool transposed) { return transposed; }
  template <typename T>
  static void Several(const T* from, int64_t stride, int64_t first,
                      int64_t depth_begin, int64_t depth_end, int64_t k,
                      float* panels) {
    PackRowPanelsAlongRowsAvx2(from, stride, first, depth_begin, depth_end, k,
                               panels);
  }
  template <typename T>
  static void Whole(const T* from, int64_t stride, bool transposed,
                    int64_t first, int64_t count, int64_t depth_begin,
                    int64_t depth_end, float* panel) {
    PackRowPanelAvx2(from, stride, transposed, first, count, depth_begin,
                     depth_end, panel);
  }
  template <typename T>
  static void Any(const T* from, int64_t stride, bool transposed, int64_t first,
                  int64_t count, int64_t depth_begin, int64_t depth_end,
                  float* panel) {
    PackRowPanelScalar(from, stride, transposed, first, count, depth_begin,
                       depth_end, panel);
  }
};

struct ColumnPanels {
  static constexpr int64_t kWidth = kPanelColumns;
  static constexpr int64_t kAtOnce = kColumnPanelsAtOnce;
  static bool StoredAcross(bool transposed) { return !transposed; }
  template <typename T>
  static void Several(const T* from, int64_t stride, int64_t first,
                      int64_t depth_begin, int64_t depth_end, int64_t k,
                      float* panels) {
    PackColumnPanelsAlongRowsAvx2(from, stride, first, depth_begin, depth_end,
                                  k, panels);
  }
  template <typename T>
  static void Whole(const T* from, int64_t stride, bool transposed,
                    int64_t first, int64_t count, int64_t depth_begin,
                    int64_t depth_end, float* panel) {
    PackColumnPanelAvx2(from, stride, transposed, first, count, depth_begin,
                        depth_end, panel);
  }
  template <typename T>
  static void Any(const T* from, int64_t stride, bool transposed, int64_t first,
                  int64_t count, int64_t depth_begin, int64_t depth_end,
                  float* panel) {
    PackColumnPanelScalar(from, stride, transposed, first, count, depth_begin,
                          depth_end, panel);
  }
};

// Panels [first_panel, end_panel) of `count` rows of a (or columns of b),
// kPackDepth values of k at a time: whole panels with AVX2 where the level
// allows, several at once where the stored rows run across them.
template <typename Panels, typename T>
void PackPanelsOf(const T* from, int64_t stride, bool transposed, int64_t count,
                  int64_t k, int64_t first_panel, int64_t end_panel,
                  float* packed) {
  const bool avx2 = DetectedSimdLevel() >= SimdLevel::kAvx2;
  const int64_t width = Panels::kWidth;
  for (int64_t depth = 0; depth < k; depth += kPackDepth) {
    const int64_t depth_end = std::min(k, depth + kPackDepth);
    int64_t p = first_panel;
    if (avx2 && Panels::StoredAcross(transposed)) {
      for (; p + Panels::kAtOnce <= end_panel &&
             (p + Panels::kAtOnce) * width <= count;
           p += Panels::kAtOnce) {
        Panels::Several(from, stride, p * width, depth, depth_end, k,
                        packed + p * width * k);
      }
    }
    for (; p < end_panel; ++p) {
      const int64_t first = p * width;
      float* panel = packed + p * width * k;
      if (avx2 && first + width <= count) {
        Panels::Whole(from, stride, transposed, first, count, depth, depth_end,
                      panel);
      } else {
        Panels::Any(from, stride, transposed, first, count, depth, depth_end,
                    panel);
      }
    }
  }
}

// ---- The products of one panel pair over `depth` values of k ----
// sums (kPanelRows x kPanelColumns, 32-byte aligned) is added to in k order,
// or started from zero unless `resume`.

void PanelProductScalar(int64_t depth, const float* a, const float* b,
                        bool resume, float* sums) {
  float acc[kPanelFloats];
  for (int64_t i = 0; i < kPanelFloats; ++i) acc[i] = resume ? sums[i] : 0.0f;
  for (int64_t d = 0; d < depth; ++d) {
    for (int64_t r = 0; r < kPanelRows; ++r) {
      const float x = a[d * kPanelRows + r];
      for (int64_t j = 0; j < kPanelColumns; ++j) {
        acc[r * kPanelColumns + j] += x * b[d * kPanelColumns + j];
      }
    }
  }
  std::copy_n(acc, kPanelFloats, sums);
}

PLATEAU_AVX2 void PanelProductAvx2(int64_t depth, const float* a,
                                   const float* b, bool resume, float* sums) {
  __m256 c00, c01, c02, c10, c11, c12, c20, c21, c22, c30, c31, c32;
  if (resume) {
    c00 = _mm256_load_ps(sums + 0);
    c01 = _mm256_load_ps(sums + 8);
    c02 = _mm256_load_ps(sums + 16);
    c10 = _mm256_load_ps(sums + 24);
    c11 = _mm256_load_ps(sums + 32);
    c12 = _mm256_load_ps(sums + 40);
    c20 = _mm256_load_ps(sums + 48);
    c21 = _mm256_load_ps(sums + 56);
    c22 = _mm256_load_ps(sums + 64);
    c30 = _mm256_load_ps(sums + 72);
    c31 = _mm256_load_ps(sums + 80);
    c32 = _mm256_load_ps(sums + 88);
  } else {
    c00 = c01 = c02 = c10 = c11 = c12 = _mm256_setzero_ps();
    c20 = c21 = c22 = c30 = c31 = c32 = _mm256_setzero_ps();
  }
  for (int64_t d = 0; d < depth; ++d) {
    const __m256 b0 = _mm256_loadu_ps(b);
    const __m256 b1 = _mm256_loadu_ps(b + 8);
    const __m256 b2 = _mm256_loadu_ps(b + 16);
    __m256 x = _mm256_broadcast_ss(a);
    c00 = _mm256_fmadd_ps(x, b0, c00);
    c01 = _mm256_fmadd_ps(x, b1, c01);
    c02 = _mm256_fmadd_ps(x, b2, c02);
    x = _mm256_broadcast_ss(a + 1);
    c10 = _mm256_fmadd_ps(x, b0, c10);
    c11 = _mm256_fmadd_ps(x, b1, c11);
    c12 = _mm256_fmadd_ps(x, b2, c12);
    x = _mm256_broadcast_ss(a + 2);
    c20 = _mm256_fmadd_ps(x, b0, c20);
    c21 = _mm256_fmadd_ps(x, b1, c21);
    c22 = _mm256_fmadd_ps(x, b2, c22);
    x = _mm256_broadcast_ss(a + 3);
    c30 = _mm256_fmadd_ps(x, b0, c30);
    c31 = _mm256_fmadd_ps(x, b1, c31);
    c32 = _mm256_fmadd_ps(x, b2, c32);
    a += kPanelRows;
    b += kPanelColumns;
  }
  _mm256_store_ps(sums + 0, c00);
  _mm256_store_ps(sums + 8, c01);
  _mm256_store_ps(sums + 16, c02);
  _mm256_store_ps(sums + 24, c10);
  _mm256_store_ps(sums + 32, c11);
  _mm256_store_ps(sums + 40, c12);
  _mm256_store_ps(sums + 48, c20);
  _mm256_store_ps(sums + 56, c21);
  _mm256_store_ps(sums + 64, c22);
  _mm256_store_ps(sums + 72, c30);
  _mm256_store_ps(sums + 80, c31);
  _mm256_store_ps(sums + 88, c32);
}

// c's elements of a panel pair from their sums. Each is alpha * sum, then
// rounded to bf16, or plus beta * c: the same two roundings at every level.
void WriteSumsScalar(const float* sums, int64_t rows, int64_t columns,
                     float alpha, float beta, float* c, uint16_t* c_bf16,
                     int64_t ldc) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < columns; ++j) {
      float value = sums[r * kPanelColumns + j];
      if (alpha != 1.0f) value = alpha * value;
      if (c_bf16 != nullptr) {
        c_bf16[r * ldc + j] = FloatToBf16(value);
      } else {
        float& out = c[r * ldc + j];
        out = beta == 0.0f ? value : value + beta * out;
      }
    }
  }
}

PLATEAU_AVX2 void WriteSumsAvx2(const float* sums, int64_t rows,
                                int64_t columns, float alpha, float beta,
                                float* c, uint16_t* c_bf16, int64_t ldc) {
  const int64_t whole = columns / 8 * 8;
  const __m256 alpha8 = _mm256_set1_ps(alpha);
  const __m256 beta8 = _mm256_set1_ps(beta);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < whole; j += 8) {
      __m256 value = _mm256_load_ps(sums + r * kPanelColumns + j);
      if (alpha != 1.0f) value = _mm256_mul_ps(alpha8, value);
      if (c_bf16 != nullptr) {
        _mm_storeu_si128(reinterpret_cast<__m128i*>(c_bf16 + r * ldc + j),
                         Bf16Bitsx8(value));
        continue;
      }
      float* out = c + r * ldc + j;
      if (beta != 0.0f) {
        value =
            _mm256_add_ps(value, _mm256_mul_ps(beta8, _mm256_loadu_ps(out)));
      }
      _mm256_storeu_ps(out, value);
    }
  }
  if (whole < columns) {
    WriteSumsScalar(sums + whole, rows, columns - whole, alpha, beta,
                    c == nullptr ? nullptr : c + whole,
                    c_bf16 == nullptr ? nullptr : c_bf16 + whole, ldc);
  }
}

#undef PLATEAU_AVX2

}  // namespace

int64_t PackedRowsElements(int64_t rows, int64_t k) {
  return (rows + kPanelRows - 1) / kPanelRows * kPanelRows * k;
}

int64_t PackedColumnsElements(int64_t columns, int64_t k) {
  return (columns + kPanelColumns - 1) / kPanelColumns * kPanelColumns * k;
}

void PackRows(const StoredMatrix& a, bool transposed, int64_t rows, int64_t k,
              int64_t first_panel, int64_t end_panel, float* packed) {
  if (a.bf16 != nullptr) {
    PackPanelsOf<RowPanels>(a.bf16, a.stride, transposed, rows, k, first_panel,
                            end_panel, packed);
  } else {
    PackPanelsOf<RowPanels>(a.values, a.stride, transposed, rows, k,
                            first_panel, end_panel, packed);
  }
}

void PackColumns(const StoredMatrix& b, bool transposed, int64_t columns,
                 int64_t k, int64_t first_panel, int64_t end_panel,
                 float* packed) {
  if (b.bf16 != nullptr) {
    PackPanelsOf<ColumnPanels>(b.bf16, b.stride, transposed, columns, k,
                               first_panel, end_panel, packed);
  } else {
    PackPanelsOf<ColumnPanels>(b.values, b.stride, transposed, columns, k,
                               first_panel, end_panel, packed);
  }
}

void FixedOrderProduct(int64_t rows, int64_t columns, int64_t k,
                       const float* packed_rows, const float* packed_columns,
                       float alpha, float beta, float* c, uint16_t* c_bf16,
                       int64_t ldc) {
  const bool avx2 = DetectedSimdLevel() >= SimdLevel::kAvx2;
  const auto panel_product = avx2 ? PanelProductAvx2 : PanelProductScalar;
  const auto write_sums = avx2 ? WriteSumsAvx2 : WriteSumsScalar;
  alignas(32) float sums[kBlockRowPanels][kBlockColumnPanels][kPanelFloats];
  const int64_t row_panels = (rows + kPanelRows - 1) / kPanelRows;
  const int64_t column_panels = (columns + kPanelColumns - 1) / kPanelColumns;
  for (int64_t row_block = 0; row_block < row_panels;
       row_block += kBlockRowPanels) {
    const int64_t block_rows =
        std::min(kBlockRowPanels, row_panels - row_block);
    for (int64_t column_block = 0; column_block < column_panels;
         column_block += kBlockColumnPanels) {
      const int64_t block_columns =
          std::min(kBlockColumnPanels, column_panels - column_block);
      for (int64_t depth = 0; depth < k; depth += kBlockDepth) {
        const int64_t step = std::min(kBlockDepth, k - depth);
        for (int64_t j = 0; j < block_columns; ++j) {
          const float* b = packed_columns +
                           (column_block + j) * kPanelColumns * k +
                           depth * kPanelColumns;
          for (int64_t i = 0; i < block_rows; ++i) {
            const float* a = packed_rows + (row_block + i) * kPanelRows * k +
                             depth * kPanelRows;
            panel_product(step, a, b, depth > 0, sums[i][j]);
          }
        }
      }
      for (int64_t i = 0; i < block_rows; ++i) {
        for (int64_t j = 0; j < block_columns; ++j) {
          const int64_t row = (row_block + i) * kPanelRows;
          const int64_t column = (column_block + j) * kPanelColumns;
          write_sums(sums[i][j], std::min(kPanelRows, rows - row),
                     std::min(kPanelColumns, columns - column), alpha, beta,
                     c == nullptr ? nullptr : c + row * ldc + column,
                     c_bf16 == nullptr ? nullptr : c_bf16 + row * ldc + column,
                     ldc);
        }
      }
    }
  }
}

}  // namespace plateau::kernels::cpu
