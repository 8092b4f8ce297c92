// The cutting of products for OpenBLAS's 32-bit sizes, exercised with small
// artificial limits: every piece fits, and the pieces compute the product.
#include "kernels/cpu/blas_split.h"

#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/blas.h"

namespace plateau::kernels::cpu {
namespace {

using Floats = std::vector<float>;

Floats RandomFloats(int64_t count, int seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  Floats values(count);
  for (float& value : values) value = normal(rng);
  return values;
}

// The stored [rows, columns] of op's operand (row-major, before transpose).
int64_t StoredRows(Transpose transpose, int64_t rows, int64_t columns) {
  return transpose == Transpose::kNo ? rows : columns;
}
int64_t StoredColumns(Transpose transpose, int64_t rows, int64_t columns) {
  return transpose == Transpose::kNo ? columns : rows;
}

// c = alpha op(a) op(b) + beta c in float64, read through args' own sizes,
// leading dimensions and pointers only (as OpenBLAS would).
void NaiveGemm(const GemmArgs& args) {
  for (int64_t i = 0; i < args.m; ++i) {
    for (int64_t j = 0; j < args.n; ++j) {
      double sum = 0.0;
      for (int64_t p = 0; p < args.k; ++p) {
        const double a = args.transpose_a == Transpose::kNo
                             ? args.a[i * args.lda + p]
                             : args.a[p * args.lda + i];
        const double b = args.transpose_b == Transpose::kNo
                             ? args.b[p * args.ldb + j]
                             : args.b[j * args.ldb + p];
        sum += a * b;
      }
      float& c = args.c[i * args.ldc + j];
      c = static_cast<float>(args.alpha * sum + double{args.beta} * c);
    }
  }
}

// A product with leading dimensions wider than its matrices.
struct Product {
  Floats a, b, c;
  GemmArgs args;
};

Product MakeProduct(Transpose ta, Transpose tb, int64_t m, int64_t n,
                    int64_t k) {
  Product p;
  GemmArgs& args = p.args;
  args.transpose_a = ta;
  args.transpose_b = tb;
  args.m = m;
  args.n = n;
  args.k = k;
  args.alpha = 0.75f;
  args.beta = 0.5f;
  args.lda = StoredColumns(ta, m, k) + 2;
  args.ldb = StoredColumns(tb, k, n) + 3;
  args.ldc = n + 1;
  p.a = RandomFloats(StoredRows(ta, m, k) * args.lda, 1);
  p.b = RandomFloats(StoredRows(tb, k, n) * args.ldb, 2);
  p.c = RandomFloats(m * args.ldc, 3);
  args.a = p.a.data();
  args.b = p.b.data();
  args.c = p.c.data();
  return p;
}

// Every size of the piece fits the limit and every leading dimension is
// valid for what the piece stores.
void ExpectFits(const GemmArgs& piece, int64_t limit) {
  EXPECT_LE(piece.m, limit);
  EXPECT_LE(piece.n, limit);
  EXPECT_LE(piece.k, limit);
  EXPECT_LE(piece.lda, limit);
  EXPECT_LE(piece.ldb, limit);
  EXPECT_LE(piece.ldc, limit);
  EXPECT_GE(piece.lda, std::max<int64_t>(1, StoredColumns(piece.transpose_a,
                                                          piece.m, piece.k)));
  EXPECT_GE(piece.ldb, std::max<int64_t>(1, StoredColumns(piece.transpose_b,
                                                          piece.k, piece.n)));
  EXPECT_GE(piece.ldc, std::max<int64_t>(1, piece.n));
}

void ExpectNear(const Floats& actual, const Floats& expected,
                const char* what) {
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t i = 0; i < actual.size(); ++i) {
    ASSERT_NEAR(actual[i], expected[i], 1e-5 * (1 + std::abs(expected[i])))
        << what << " at " << i;
  }
}

// Limits from 1 (every piece 1 x 1 x 1, every leading dimension too wide)
// up to above every size (one piece), in every layout, through a naive
// product and through OpenBLAS itself.
TEST(SplitGemmForBlasTest, PiecesFitAndComputeTheProduct) {
  for (int64_t limit : {1, 2, 3, 5, 8, 100}) {
    for (Transpose ta : {Transpose::kNo, Transpose::kYes}) {
      for (Transpose tb : {Transpose::kNo, Transpose::kYes}) {
        SCOPED_TRACE(testing::Message()
                     << "limit " << limit << " ta " << (ta == Transpose::kYes)
                     << " tb " << (tb == Transpose::kYes));
        Product whole = MakeProduct(ta, tb, 7, 9, 11);
        NaiveGemm(whole.args);

        Product naive = MakeProduct(ta, tb, 7, 9, 11);
        int pieces = 0;
        SplitGemmForBlas(naive.args, limit, [&](const GemmArgs& piece) {
          ExpectFits(piece, limit);
          NaiveGemm(piece);
          ++pieces;
        });
        ExpectNear(naive.c, whole.c, "naive pieces");
        if (limit >= 100) {
          EXPECT_EQ(pieces, 1);
        }

        Product blas = MakeProduct(ta, tb, 7, 9, 11);
        SplitGemmForBlas(blas.args, limit, [&](const GemmArgs& piece) {
          Blas().sgemm(
              CblasRowMajor,
              piece.transpose_a == Transpose::kYes ? CblasTrans : CblasNoTrans,
              piece.transpose_b == Transpose::kYes ? CblasTrans : CblasNoTrans,
              static_cast<blasint>(piece.m), static_cast<blasint>(piece.n),
              static_cast<blasint>(piece.k), piece.alpha, piece.a,
              static_cast<blasint>(piece.lda), piece.b,
              static_cast<blasint>(piece.ldb), piece.beta, piece.c,
              static_cast<blasint>(piece.ldc));
        });
        ExpectNear(blas.c, whole.c, "OpenBLAS pieces");
      }
    }
  }
}

// k is cut into consecutive chunks, always in the same order: the first
// takes beta, the rest accumulate.
TEST(SplitGemmForBlasTest, KChunksAccumulateInOrder) {
  // a^T and b stored k-major with narrow rows: only k exceeds the limit.
  Product p = MakeProduct(Transpose::kYes, Transpose::kNo, 2, 2, 10);
  p.args.lda = 2;
  p.args.ldb = 2;
  p.args.ldc = 2;
  std::vector<GemmArgs> pieces;
  SplitGemmForBlas(p.args, 4,
                   [&](const GemmArgs& piece) { pieces.push_back(piece); });
  ASSERT_EQ(pieces.size(), 3u);
  const int64_t ks[] = {4, 4, 2};
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(pieces[i].k, ks[i]) << i;
    EXPECT_EQ(pieces[i].a, p.args.a + 4 * i * p.args.lda) << i;
    EXPECT_EQ(pieces[i].b, p.args.b + 4 * i * p.args.ldb) << i;
    EXPECT_EQ(pieces[i].c, p.args.c) << i;
    EXPECT_EQ(pieces[i].beta, i == 0 ? p.args.beta : 1.0f) << i;
    EXPECT_EQ(pieces[i].alpha, p.args.alpha) << i;
  }
}

TEST(SplitGemmForBlasTest, EmptyProducts) {
  Product p = MakeProduct(Transpose::kNo, Transpose::kNo, 0, 3, 4);
  int pieces = 0;
  SplitGemmForBlas(p.args, 2, [&](const GemmArgs&) { ++pieces; });
  EXPECT_EQ(pieces, 0);
  // k == 0: c = beta c, block by block.
  Product scale = MakeProduct(Transpose::kNo, Transpose::kNo, 3, 5, 0);
  const Floats before = scale.c;
  SplitGemmForBlas(scale.args, 2, [&](const GemmArgs& piece) {
    EXPECT_EQ(piece.k, 0);
    NaiveGemm(piece);
    ++pieces;
  });
  // ldc (6) exceeds the limit: single rows of c, in column blocks of 2.
  EXPECT_EQ(pieces, 3 * 3);
  for (int64_t i = 0; i < 3; ++i) {
    for (int64_t j = 0; j < 5; ++j) {
      const int64_t at = i * scale.args.ldc + j;
      EXPECT_EQ(scale.c[at], 0.5f * before[at]) << i << " " << j;
    }
  }
}

// Within the limit, BlasGemm is exactly one sgemm with the same arguments.
TEST(BlasGemmTest, WithinTheLimitIsOneUnchangedSgemm) {
  Product ours = MakeProduct(Transpose::kNo, Transpose::kYes, 33, 17, 29);
  Product direct = MakeProduct(Transpose::kNo, Transpose::kYes, 33, 17, 29);
  BlasGemm(ours.args);
  const GemmArgs& d = direct.args;
  Blas().sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, 33, 17, 29, d.alpha,
               d.a, static_cast<blasint>(d.lda), d.b,
               static_cast<blasint>(d.ldb), d.beta, d.c,
               static_cast<blasint>(d.ldc));
  EXPECT_EQ(ours.c, direct.c);
}

TEST(BlasDotTest, MatchesSdot) {
  const Floats x = RandomFloats(1001, 4);
  const Floats y = RandomFloats(1001, 5);
  EXPECT_EQ(BlasDot(1001, x.data(), y.data()),
            Blas().sdot(1001, x.data(), 1, y.data(), 1));
}

}  // namespace
}  // namespace plateau::kernels::cpu
