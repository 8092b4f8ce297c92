// CpuOps' float32 matrix products (bf16 ones: gemm_bf16.cc). Each product
// is cut along its larger output dimension (never along k, so every output
// element is one OpenBLAS dot product) into pieces set by its size alone
// (PiecesOfProduct), which are dealt to the pool's threads: the results are
// bitwise the same for any thread count. Each piece is a single-threaded
// OpenBLAS sgemm (more than one only for sizes beyond its 32-bit integers,
// see blas_split.h).
#include <vector>

#include "kernels/cpu/blas_split.h"
#include "kernels/cpu/cpu_ops.h"

namespace plateau::kernels::cpu {
namespace {

// Pieces are whole multiples of this many rows or columns, and at least
// kMinPieceExtent of them: OpenBLAS's AVX-512 sgemm loses 6-12% on pieces
// of 128 rows and 16-18% on 64 against 1024 (docs/BENCHMARKS.md, "The same
// bits at any thread count"); a narrower cut along columns repacks a in
// the same way.
constexpr int64_t kGrain = 16;
constexpr int64_t kMinPieceExtent = 256;

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
  GroupedGemm(absl::MakeConstSpan(&args, 1));
}

// Each problem is cut into its own pieces (PiecesOfProduct: an expert of up
// to 2^26 multiply-adds stays whole, a busier one is cut), and all the
// pieces are dealt to threads in order by work (RunPiecesByWork). bf16
// problems go to Bf16Products as one group.
void CpuOps::GroupedGemm(absl::Span<const GemmArgs> all_problems) {
  std::vector<GemmArgs> float32_problems;
  std::vector<GemmArgs> bf16_problems;
  for (const GemmArgs& args : all_problems) {
    (IsBf16Product(args) ? bf16_problems : float32_problems).push_back(args);
  }
  if (!bf16_problems.empty()) Bf16Products(bf16_problems);
  std::vector<GemmPieceRange> pieces;
  std::vector<int64_t> piece_work;
  for (const GemmArgs& args : float32_problems) {
    if (args.m == 0 || args.n == 0) continue;
    const bool split_rows = args.m >= args.n;
    const int64_t extent = split_rows ? args.m : args.n;
    const int64_t work = MultiplyAdds(args);
    const int parts = PiecesOfProduct(work, extent, kMinPieceExtent);
    for (int part = 0; part < parts; ++part) {
      const int64_t begin = PartBegin(extent, kGrain, parts, part);
      const int64_t end = PartBegin(extent, kGrain, parts, part + 1);
      if (begin == end) continue;
      pieces.push_back({&args, split_rows, begin, end});
      piece_work.push_back(work / extent * (end - begin));
    }
  }
  RunPiecesByWork(pool_, piece_work, [&](size_t i) {
    GemmPiece(*pieces[i].args, pieces[i].split_rows, pieces[i].begin,
              pieces[i].end);
  });
}

}  // namespace plateau::kernels::cpu
