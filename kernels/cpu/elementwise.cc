// CpuOps elementwise ops, reductions, the embedding and the optimizer updates.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <numeric>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "kernels/cpu/adamw.h"
#include "kernels/cpu/bf16.h"
#include "kernels/cpu/blas.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/tiered_update.h"
#include "kernels/cpu/vector_math.h"

namespace plateau::kernels::cpu {
namespace {

// Elementwise work is split in ranges of whole cache-friendly grains.
constexpr int64_t kElementGrain = 4096;

// Sums the float64 partials of fixed chunks in chunk order, so the result
// depends neither on timing nor on the thread count.
template <typename ChunkSum>
double ReduceInChunks(ThreadPool& pool, int64_t count, ChunkSum chunk_sum) {
  const int64_t chunks = (count + kElementGrain - 1) / kElementGrain;
  std::vector<double> partial(static_cast<size_t>(chunks), 0.0);
  pool.ParallelFor(chunks, 1, [&](int64_t begin, int64_t end) {
    for (int64_t chunk = begin; chunk < end; ++chunk) {
      const int64_t first = chunk * kElementGrain;
      const int64_t length = std::min(kElementGrain, count - first);
      partial[chunk] = chunk_sum(first, length);
    }
  });
  double total = 0.0;
  for (double value : partial) total += value;
  return total;
}

// Elements [begin, end) of `slice`.
TieredSlice SubSlice(const TieredSlice& slice, int64_t begin, int64_t end) {
  TieredSlice part = slice;
  part.count = end - begin;
  part.params += begin;
  part.grads += begin;
  if (part.momentum != nullptr) part.momentum += begin;
  if (part.momentum_bfloat16 != nullptr) part.momentum_bfloat16 += begin;
  if (part.second_moment != nullptr) part.second_moment += begin;
  part.first_element += begin;
  return part;
}

}  // namespace

absl::StatusOr<std::unique_ptr<CpuOps>> CpuOps::Create(int threads) {
  if (!BlasStatus().ok()) return BlasStatus();
  return std::make_unique<CpuOps>(threads);
}

CpuOps::CpuOps(int threads, ScratchArena* scratch)
    : pool_(threads),
      own_scratch_(scratch == nullptr ? std::make_unique<HeapScratchArena>()
                                      : nullptr),
      scratch_(scratch == nullptr ? own_scratch_.get() : scratch) {
  // Parallelism comes from our pool; nested OpenBLAS threads would fight it.
  Blas().set_num_threads(1);
}

// The CPU backend's "device" memory is host memory.
void CpuOps::CopyFromHost(int64_t bytes, const void* host, void* device) {
  std::memcpy(device, host, static_cast<size_t>(bytes));
}

void CpuOps::CopyToHost(int64_t bytes, const void* device, void* host) {
  std::memcpy(host, device, static_cast<size_t>(bytes));
}

void CpuOps::Fill(int64_t count, float value, float* x) {
  pool_.ParallelFor(count, kElementGrain, [&](int64_t begin, int64_t end) {
    std::fill(x + begin, x + end, value);
  });
}

void CpuOps::Copy(int64_t count, const float* source, float* destination) {
  pool_.ParallelFor(count, kElementGrain, [&](int64_t begin, int64_t end) {
    std::memcpy(destination + begin, source + begin,
                static_cast<size_t>(end - begin) * sizeof(float));
  });
}

void CpuOps::CopyBf16(int64_t count, const uint16_t* source,
                      uint16_t* destination) {
  pool_.ParallelFor(count, kElementGrain, [&](int64_t begin, int64_t end) {
    std::memcpy(destination + begin, source + begin,
                static_cast<size_t>(end - begin) * sizeof(uint16_t));
  });
}

void CpuOps::CopyToBf16(int64_t count, const float* x, uint16_t* out) {
  pool_.ParallelFor(count, kElementGrain, [&](int64_t begin, int64_t end) {
    ConvertToBf16(absl::MakeConstSpan(x + begin, end - begin),
                  absl::MakeSpan(out + begin, end - begin));
  });
}

void CpuOps::CopyMatrixToBf16(int64_t rows, int64_t columns, const float* x,
                              int64_t x_stride, uint16_t* out,
                              int64_t out_stride) {
  if (columns == 0) return;
  const int64_t grain_rows = std::max<int64_t>(1, kElementGrain / columns);
  pool_.ParallelFor(rows, grain_rows, [&](int64_t begin, int64_t end) {
    ConvertMatrixToBf16(end - begin, columns, x + begin * x_stride, x_stride,
                        out + begin * out_stride, out_stride);
  });
}

void CpuOps::CopyFromBf16(int64_t count, const uint16_t* x, float* out) {
  pool_.ParallelFor(count, kElementGrain, [&](int64_t begin, int64_t end) {
    WidenBf16(absl::MakeConstSpan(x + begin, end - begin),
              absl::MakeSpan(out + begin, end - begin));
  });
}

void CpuOps::Add(int64_t count, const float* a, const float* b, float* out) {
  pool_.ParallelFor(count, kElementGrain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) out[i] = a[i] + b[i];
  });
}

void CpuOps::Scale(int64_t count, float factor, float* x) {
  pool_.ParallelFor(count, kElementGrain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) x[i] *= factor;
  });
}

// Squares and sums in float64 (SumOfSquaresF64): a float sum such as sdot's
// would overflow for squares above FLT_MAX, e.g. a gradient element of 1e20.
double CpuOps::SumOfSquares(int64_t count, const float* x) {
  return ReduceInChunks(pool_, count, [x](int64_t first, int64_t length) {
    return SumOfSquaresF64(length, x + first);
  });
}

double CpuOps::Sum(int64_t count, const float* x) {
  return ReduceInChunks(pool_, count, [x](int64_t first, int64_t length) {
    double sum = 0.0;
    for (int64_t i = first; i < first + length; ++i) sum += x[i];
    return sum;
  });
}

// Rows are summed in order within each column, so the sums are the same for
// any thread count.
void CpuOps::ColumnSums(int64_t rows, int64_t columns, const float* x,
                        absl::Span<double> column_sums) {
  pool_.ParallelFor(columns, 1, [&](int64_t begin, int64_t end) {
    for (int64_t j = begin; j < end; ++j) column_sums[j] = 0.0;
    for (int64_t i = 0; i < rows; ++i) {
      for (int64_t j = begin; j < end; ++j)
        column_sums[j] += x[i * columns + j];
    }
  });
}

void CpuOps::EmbeddingForward(int64_t tokens, int64_t dim, const int32_t* ids,
                              const float* table, float* out) {
  pool_.ParallelFor(tokens, 16, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      std::memcpy(out + t * dim, table + static_cast<int64_t>(ids[t]) * dim,
                  static_cast<size_t>(dim) * sizeof(float));
    }
  });
}

namespace {

// Threads own column ranges, and each walks the tokens in order: repeated
// ids accumulate in the same order every run, with no atomics.
template <typename Gradient>
void EmbeddingBackwardOf(ThreadPool& pool, int64_t tokens, int64_t dim,
                         const int32_t* ids, const Gradient* dout,
                         float* dtable) {
  pool.ParallelFor(dim, 16, [&](int64_t begin, int64_t end) {
    for (int64_t t = 0; t < tokens; ++t) {
      float* row = dtable + static_cast<int64_t>(ids[t]) * dim;
      const Gradient* gradient = dout + t * dim;
      for (int64_t j = begin; j < end; ++j) row[j] += ValueOf(gradient[j]);
    }
  });
}

}  // namespace

void CpuOps::EmbeddingBackward(int64_t tokens, int64_t dim, const int32_t* ids,
                               const float* dout, float* dtable) {
  EmbeddingBackwardOf(pool_, tokens, dim, ids, dout, dtable);
}

void CpuOps::EmbeddingBackwardFromBf16(int64_t tokens, int64_t dim,
                                       const int32_t* ids, const uint16_t* dout,
                                       float* dtable) {
  EmbeddingBackwardOf(pool_, tokens, dim, ids, dout, dtable);
}

void CpuOps::EmbeddingForwardBf16(int64_t tokens, int64_t dim,
                                  const int32_t* ids, const uint16_t* table,
                                  uint16_t* out) {
  pool_.ParallelFor(tokens, 16, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      std::memcpy(out + t * dim, table + static_cast<int64_t>(ids[t]) * dim,
                  static_cast<size_t>(dim) * sizeof(uint16_t));
    }
  });
}

// The tokens sorted by id (stable, in the scratch), so that each row's
// sum is taken in float32 and rounded once; threads own column ranges.
void CpuOps::EmbeddingBackwardBf16(int64_t tokens, int64_t dim,
                                   const int32_t* ids, const uint16_t* dout,
                                   uint16_t* dtable) {
  if (tokens == 0) return;
  absl::StatusOr<void*> reserved =
      scratch_->Reserve(tokens * static_cast<int64_t>(sizeof(int32_t)));
  if (!reserved.ok()) {
    RecordError(absl::Status(
        reserved.status().code(),
        absl::StrCat("embedding backward: no room to sort ", tokens,
                     " token ids: ", reserved.status().message())));
    return;
  }
  int32_t* order = static_cast<int32_t*>(*reserved);
  std::iota(order, order + tokens, 0);
  std::stable_sort(order, order + tokens,
                   [ids](int32_t a, int32_t b) { return ids[a] < ids[b]; });
  pool_.ParallelFor(dim, 16, [&](int64_t begin, int64_t end) {
    std::vector<float> sum(static_cast<size_t>(end - begin));
    for (int64_t first = 0; first < tokens;) {
      const int32_t id = ids[order[first]];
      uint16_t* row = dtable + static_cast<int64_t>(id) * dim + begin;
      for (int64_t j = 0; j < end - begin; ++j) sum[j] = Bf16ToFloat(row[j]);
      int64_t next = first;
      for (; next < tokens && ids[order[next]] == id; ++next) {
        const uint16_t* gradient = dout + order[next] * dim + begin;
        for (int64_t j = 0; j < end - begin; ++j) {
          sum[j] += Bf16ToFloat(gradient[j]);
        }
      }
      for (int64_t j = 0; j < end - begin; ++j) row[j] = FloatToBf16(sum[j]);
      first = next;
    }
  });
}

void CpuOps::AdamWUpdate(const AdamWCoefficients& coefficients, int64_t count,
                         float* params, const float* grads, float* first_moment,
                         float* second_moment) {
  pool_.ParallelFor(count, kElementGrain, [&](int64_t begin, int64_t end) {
    cpu::AdamWUpdate(coefficients, end - begin, params + begin, grads + begin,
                     first_moment + begin, second_moment + begin);
  });
}

void CpuOps::AccumulateSquares(absl::Span<const TieredSlice> slices) {
  // Whole slices: each adds to its own sums.
  RunOverWholeSlices(
      slices, [](const TieredSlice& slice) { cpu::AccumulateSquares(slice); });
}

void CpuOps::TieredUpdate(const TieredCoefficients& coefficients,
                          absl::Span<const TieredSlice> slices,
                          float clip_threshold) {
  RunOverWholeSlices(slices, [&](const TieredSlice& slice) {
    cpu::TieredUpdate(coefficients, slice, clip_threshold);
  });
}

template <typename Body>
void CpuOps::RunOverWholeSlices(absl::Span<const TieredSlice> slices,
                                Body body) {
  int64_t total = 0;
  for (const TieredSlice& slice : slices) total += slice.count;
  const int parts = static_cast<int>(std::min<int64_t>(
      pool_.threads(), (total + kElementGrain - 1) / kElementGrain));
  if (parts <= 1) {
    for (const TieredSlice& slice : slices) body(slice);
    return;
  }
  // Parts of about equal elements, cut between slices.
  std::vector<size_t> first_slice(static_cast<size_t>(parts) + 1,
                                  slices.size());
  first_slice[0] = 0;
  int64_t before = 0;
  int part = 0;
  for (size_t i = 0; i < slices.size(); ++i) {
    while (part + 1 < parts && before >= total * (part + 1) / parts) {
      first_slice[++part] = i;
    }
    before += slices[i].count;
  }
  pool_.RunParts(parts, [&](int part) {
    for (size_t i = first_slice[part]; i < first_slice[part + 1]; ++i) {
      body(slices[i]);
    }
  });
}

void CpuOps::SquareRoots(int64_t count, float scale, const float* x,
                         float* out) {
  pool_.ParallelFor(count, kElementGrain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) out[i] = std::sqrt(scale * x[i]);
  });
}

namespace {

// Slices cut into pieces of at most this many elements, which the threads
// share in contiguous runs.
constexpr int64_t kPieceElements = 16 * kElementGrain;

struct SlicePiece {
  size_t slice = 0;
  int64_t begin = 0;
  int64_t end = 0;
};

std::vector<SlicePiece> PiecesOf(absl::Span<const TieredSlice> slices) {
  std::vector<SlicePiece> pieces;
  for (size_t i = 0; i < slices.size(); ++i) {
    for (int64_t begin = 0; begin < slices[i].count; begin += kPieceElements) {
      pieces.push_back(
          {i, begin, std::min(begin + kPieceElements, slices[i].count)});
    }
  }
  return pieces;
}

// Calls body(index, piece as a slice) for every piece, across the pool.
template <typename Body>
void ForEachPiece(ThreadPool& pool, absl::Span<const TieredSlice> slices,
                  const std::vector<SlicePiece>& pieces, Body body) {
  pool.ParallelFor(
      static_cast<int64_t>(pieces.size()), 1, [&](int64_t begin, int64_t end) {
        for (int64_t p = begin; p < end; ++p) {
          const SlicePiece& piece = pieces[p];
          body(static_cast<size_t>(p),
               SubSlice(slices[piece.slice], piece.begin, piece.end));
        }
      });
}

}  // namespace

void CpuOps::TieredMeasure(const TieredCoefficients& coefficients,
                           absl::Span<const TieredSlice> slices,
                           absl::Span<double> sums) {
  const std::vector<SlicePiece> pieces = PiecesOf(slices);
  // Per piece, then added in piece order: the sums do not depend on the
  // thread count.
  std::vector<double> piece_sums(pieces.size(), 0.0);
  ForEachPiece(pool_, slices, pieces, [&](size_t p, const TieredSlice& piece) {
    piece_sums[p] = cpu::TieredMeasure(coefficients, piece);
  });
  std::fill(sums.begin(), sums.end(), 0.0);
  for (size_t p = 0; p < pieces.size(); ++p) {
    sums[pieces[p].slice] += piece_sums[p];
  }
}

void CpuOps::TieredApply(const TieredCoefficients& coefficients,
                         absl::Span<const TieredSlice> slices) {
  ForEachPiece(pool_, slices, PiecesOf(slices),
               [&](size_t, const TieredSlice& piece) {
                 cpu::TieredApply(coefficients, piece);
               });
}

void CpuOps::LionUpdate(const TieredCoefficients& coefficients,
                        absl::Span<const TieredSlice> slices) {
  ForEachPiece(pool_, slices, PiecesOf(slices),
               [&](size_t, const TieredSlice& piece) {
                 cpu::LionUpdate(coefficients, piece);
               });
}

}  // namespace plateau::kernels::cpu
