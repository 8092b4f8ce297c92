// CpuOps' float32 matrix products (bf16 ones: gemm_bf16.cc). Each call is
// split across the thread pool along the larger output dimension (never
// along k, so every output element is one OpenBLAS dot-product order:
// reproducible), each piece a single-threaded OpenBLAS sgemm (more than one
// only for sizes beyond its 32-bit integers, see blas_split.h).
#include <algorithm>
#include <vector>

#include "kernels/cpu/blas_split.h"
#include "kernels/cpu/cpu_ops.h"

namespace plateau::kernels::cpu {
namespace {

// Below this many multiply-adds a product runs on one thread.
constexpr int64_t kSerialMultiplyAdds = 1 << 16;
// Pieces are whole multiples of this many rows or columns.
constexpr int64_t kGrain = 16;

// The sub-product of output rows (split_rows) or columns [begin, end).
void GemmPiece(const GemmArgs& args, bool split_rows, int64_t begin,
               int64_t end) {
  const float* a = args.a;
  const float* b = args.b;
  float* c = args.c;
  int64_t m = args.m;
  int64_t n = args.n;
  if (split_rows) {
    a += args.transpose_a == Transpose::kNo ? begin * args.lda : begin;
    c += begin * args.ldc;
    m = end - begin;
  } else {
    b += args.transpose_b == Transpose::kNo ? begin : begin * args.ldb;
    c += begin;
    n = end - begin;
  }
  GemmArgs piece = args;
  piece.a = a;
  piece.b = b;
  piece.c = c;
  piece.m = m;
  piece.n = n;
  BlasGemm(piece);
}

int64_t MultiplyAdds(const GemmArgs& args) { return args.m * args.n * args.k; }

struct GemmPieceRange {
  const GemmArgs* args;
  bool split_rows;
  int64_t begin;
  int64_t end;
};

}  // namespace

void CpuOps::Gemm(const GemmArgs& args) {
  if (IsBf16Product(args)) return Bf16Products({args});
  if (args.m == 0 || args.n == 0) return;
  const bool split_rows = args.m >= args.n;
  const int64_t extent = split_rows ? args.m : args.n;
  if (MultiplyAdds(args) < kSerialMultiplyAdds) {
    GemmPiece(args, split_rows, 0, extent);
    return;
  }
  pool_.ParallelFor(extent, kGrain, [&](int64_t begin, int64_t end) {
    GemmPiece(args, split_rows, begin, end);
  });
}

// Each problem is cut along its larger output dimension into as many pieces
// as its share of the total work calls for (a problem worth a whole thread
// or less stays whole: bigger products run faster), and the pieces are dealt
// to threads in order so that each thread gets an equal share of the
// multiply-adds. A skewed expert is shared; many small ones are not cut.
// bf16 problems go to Bf16Products as one group.
void CpuOps::GroupedGemm(absl::Span<const GemmArgs> all_problems) {
  std::vector<GemmArgs> float32_problems;
  std::vector<GemmArgs> bf16_problems;
  for (const GemmArgs& args : all_problems) {
    (IsBf16Product(args) ? bf16_problems : float32_problems).push_back(args);
  }
  if (!bf16_problems.empty()) Bf16Products(bf16_problems);
  const absl::Span<const GemmArgs> problems = float32_problems;
  const int threads = pool_.threads();
  int64_t total_work = 0;
  for (const GemmArgs& args : problems) total_work += MultiplyAdds(args);
  std::vector<GemmPieceRange> pieces;
  std::vector<int64_t> piece_work;
  for (const GemmArgs& args : problems) {
    if (args.m == 0 || args.n == 0) continue;
    const bool split_rows = args.m >= args.n;
    const int64_t extent = split_rows ? args.m : args.n;
    const int64_t work = MultiplyAdds(args);
    const int parts = PartsByShare(work, total_work, threads);
    for (int part = 0; part < parts; ++part) {
      const int64_t begin = PartBegin(extent, kGrain, parts, part);
      const int64_t end = PartBegin(extent, kGrain, parts, part + 1);
      if (begin == end) continue;
      pieces.push_back({&args, split_rows, begin, end});
      piece_work.push_back(work / extent * (end - begin));
    }
  }
  if (pieces.empty()) return;
  const std::vector<int> owner = OwnersByWork(piece_work, total_work, threads);
  pool_.RunParts(threads, [&](int part) {
    for (size_t i = 0; i < pieces.size(); ++i) {
      if (owner[i] != part) continue;
      GemmPiece(*pieces[i].args, pieces[i].split_rows, pieces[i].begin,
                pieces[i].end);
    }
  });
}

}  // namespace plateau::kernels::cpu
