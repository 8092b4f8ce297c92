// Every CpuOps kernel against a float64 reference on random inputs: forward
// outputs directly, backward outputs against central differences of the
// float64 reference forward (so the backward formulas are checked, not
// restated). Runs at every SIMD level (see BUILD) and several thread counts.
#include "kernels/cpu/cpu_ops.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <functional>
#include <limits>
#include <memory>
#include <numeric>
#include <random>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/adamw.h"
#include "kernels/cpu/tiered_update.h"

namespace plateau::kernels::cpu {
namespace {

using Doubles = std::vector<double>;
using Floats = std::vector<float>;

Floats RandomFloats(int64_t count, int seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  Floats values(count);
  for (float& value : values) value = normal(rng);
  return values;
}

Doubles ToDoubles(const Floats& values) {
  return Doubles(values.begin(), values.end());
}

void ExpectClose(const Floats& actual, const Doubles& expected,
                 double tolerance, const char* what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  for (size_t i = 0; i < actual.size(); ++i) {
    ASSERT_NEAR(actual[i], expected[i],
                tolerance * (1.0 + std::abs(expected[i])))
        << what << " at " << i;
  }
}

// d(sum_i weights[i] * f(x)[i]) / dx[j] by central differences in float64,
// for the sampled coordinates j (all when samples <= 0).
Doubles NumericGradient(const std::function<Doubles(const Doubles&)>& f,
                        Doubles x, const Doubles& weights,
                        std::vector<size_t>* coordinates) {
  const double step = 1e-6;
  Doubles gradient;
  for (size_t j : *coordinates) {
    const double saved = x[j];
    x[j] = saved + step;
    const Doubles plus = f(x);
    x[j] = saved - step;
    const Doubles minus = f(x);
    x[j] = saved;
    double difference = 0.0;
    for (size_t i = 0; i < plus.size(); ++i) {
      difference += weights[i] * (plus[i] - minus[i]);
    }
    gradient.push_back(difference / (2 * step));
  }
  return gradient;
}

std::vector<size_t> SampleCoordinates(size_t count, size_t samples, int seed) {
  std::vector<size_t> all(count);
  std::iota(all.begin(), all.end(), 0);
  if (count <= samples) return all;
  std::mt19937 rng(seed);
  std::shuffle(all.begin(), all.end(), rng);
  all.resize(samples);
  std::sort(all.begin(), all.end());
  return all;
}

void ExpectGradient(const Floats& analytic, const Doubles& numeric,
                    const std::vector<size_t>& coordinates, double tolerance,
                    const char* what) {
  for (size_t i = 0; i < coordinates.size(); ++i) {
    ASSERT_NEAR(analytic[coordinates[i]], numeric[i],
                tolerance * (1.0 + std::abs(numeric[i])))
        << what << " at " << coordinates[i];
  }
}

class CpuOpsTest : public ::testing::TestWithParam<int> {
 protected:
  CpuOpsTest() : ops_(GetParam()) {}
  CpuOps ops_;
};

TEST(CpuOpsCreateTest, CreatesWhenOpenBlasLoads) {
  absl::StatusOr<std::unique_ptr<CpuOps>> ops = CpuOps::Create(2);
  ASSERT_TRUE(ops.ok()) << ops.status();
  EXPECT_EQ((*ops)->threads(), 2);
}

// ---------------------------------------------------------------- GEMM

Doubles ReferenceGemm(const GemmArgs& args, const Floats& c_before) {
  Doubles c(c_before.begin(), c_before.end());
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
      c[i * args.ldc + j] = args.alpha * sum + args.beta * c[i * args.ldc + j];
    }
  }
  return c;
}

TEST_P(CpuOpsTest, GemmMatchesFloat64InEveryLayout) {
  struct Case {
    int64_t m, n, k;
  };
  // Tall, wide (splits columns), tiny (serial) and ragged shapes.
  for (const Case& shape :
       {Case{97, 33, 40}, Case{20, 130, 64}, Case{3, 5, 7}, Case{64, 64, 1}}) {
    for (Transpose ta : {Transpose::kNo, Transpose::kYes}) {
      for (Transpose tb : {Transpose::kNo, Transpose::kYes}) {
        GemmArgs args;
        args.transpose_a = ta;
        args.transpose_b = tb;
        args.m = shape.m;
        args.n = shape.n;
        args.k = shape.k;
        args.alpha = 0.75f;
        args.beta = 0.5f;
        // Leading dimensions wider than the matrices, as for strided views.
        args.lda = (ta == Transpose::kNo ? shape.k : shape.m) + 3;
        args.ldb = (tb == Transpose::kNo ? shape.n : shape.k) + 5;
        args.ldc = shape.n + 2;
        const Floats a = RandomFloats(
            (ta == Transpose::kNo ? shape.m : shape.k) * args.lda, 1);
        const Floats b = RandomFloats(
            (tb == Transpose::kNo ? shape.k : shape.n) * args.ldb, 2);
        Floats c = RandomFloats(shape.m * args.ldc, 3);
        args.a = a.data();
        args.b = b.data();
        const Doubles expected = ReferenceGemm(args, c);
        args.c = c.data();
        ops_.Gemm(args);
        ExpectClose(c, expected, 1e-5, "gemm");
      }
    }
  }
}

TEST_P(CpuOpsTest, GroupedGemmMatchesEachProductAlone) {
  // Skewed groups, as routing produces: one large, one empty, several small.
  const std::vector<int64_t> rows = {300, 0, 7, 1, 64, 12};
  const int64_t n = 48, k = 32;
  std::vector<Floats> as, bs, cs;
  std::vector<GemmArgs> problems;
  std::vector<Doubles> expected;
  for (size_t g = 0; g < rows.size(); ++g) {
    as.push_back(RandomFloats(rows[g] * k, 10 + g));
    bs.push_back(RandomFloats(n * k, 20 + g));
    cs.push_back(Floats(rows[g] * n, 0.0f));
  }
  for (size_t g = 0; g < rows.size(); ++g) {
    GemmArgs args;
    args.transpose_b = Transpose::kYes;
    args.m = rows[g];
    args.n = n;
    args.k = k;
    args.a = as[g].data();
    args.lda = k;
    args.b = bs[g].data();
    args.ldb = k;
    args.ldc = n;
    expected.push_back(ReferenceGemm(args, cs[g]));
    args.c = cs[g].data();
    problems.push_back(args);
  }
  ops_.GroupedGemm(problems);
  for (size_t g = 0; g < rows.size(); ++g) {
    ExpectClose(cs[g], expected[g], 1e-5, "grouped gemm");
  }
}

// CpuOps is safe to share between threads (cpu_ops.h): concurrent calls,
// split across the pool or not, give bitwise what they give alone.
TEST_P(CpuOpsTest, ConcurrentCallersGetBitwiseTheirResultsAlone) {
  struct Work {
    Floats a, b, c;
    GemmArgs args;
    Floats x;
    Floats c_alone;
    double sum_of_squares_alone = 0.0;
  };
  auto make_work = [&](int seed, int64_t m) {
    Work w;
    const int64_t n = 64, k = 40;
    w.a = RandomFloats(m * k, seed);
    w.b = RandomFloats(n * k, seed + 1);
    w.c.assign(m * n, 0.0f);
    w.x = RandomFloats(20000 + seed, seed + 2);
    w.args.transpose_b = Transpose::kYes;
    w.args.m = m;
    w.args.n = n;
    w.args.k = k;
    w.args.a = w.a.data();
    w.args.lda = k;
    w.args.b = w.b.data();
    w.args.ldb = k;
    w.args.c = w.c.data();
    w.args.ldc = n;
    ops_.Gemm(w.args);
    w.c_alone = w.c;
    w.sum_of_squares_alone = ops_.SumOfSquares(w.x.size(), w.x.data());
    return w;
  };
  // A product big enough to split across the pool, and one that runs serial.
  std::vector<Work> works;
  works.push_back(make_work(30, 97));
  works.push_back(make_work(40, 5));
  std::atomic<int> failures{0};
  auto hammer = [&](Work& w) {
    w.args.a = w.a.data();
    w.args.b = w.b.data();
    w.args.c = w.c.data();
    for (int round = 0; round < 200; ++round) {
      std::fill(w.c.begin(), w.c.end(), 0.0f);
      ops_.Gemm(w.args);
      if (w.c != w.c_alone) ++failures;
      if (ops_.SumOfSquares(w.x.size(), w.x.data()) != w.sum_of_squares_alone) {
        ++failures;
      }
    }
  };
  std::thread first(hammer, std::ref(works[0]));
  std::thread second(hammer, std::ref(works[1]));
  first.join();
  second.join();
  EXPECT_EQ(failures.load(), 0);
}

// ------------------------------------------------- elementwise, reductions

TEST_P(CpuOpsTest, ElementwiseOpsAndReductions) {
  const int64_t count = 10007;
  const Floats a = RandomFloats(count, 4);
  const Floats b = RandomFloats(count, 5);
  Floats out(count);
  ops_.Add(count, a.data(), b.data(), out.data());
  for (int64_t i = 0; i < count; ++i) ASSERT_EQ(out[i], a[i] + b[i]);
  ops_.Scale(count, 2.5f, out.data());
  for (int64_t i = 0; i < count; ++i) ASSERT_EQ(out[i], (a[i] + b[i]) * 2.5f);
  ops_.Copy(count, a.data(), out.data());
  EXPECT_EQ(out, a);
  ops_.Fill(count, -1.5f, out.data());
  EXPECT_TRUE(
      std::all_of(out.begin(), out.end(), [](float v) { return v == -1.5f; }));
  double squares = 0, sum = 0;
  for (float v : a) {
    squares += double{v} * v;
    sum += v;
  }
  EXPECT_NEAR(ops_.SumOfSquares(count, a.data()), squares, 1e-6 * squares);
  EXPECT_NEAR(ops_.Sum(count, a.data()), sum, 1e-9 * count);
  // Columns of a [rows, 7] view of the same data.
  const int64_t columns = 7, rows = count / columns;
  std::vector<double> column_sums(columns);
  ops_.ColumnSums(rows, columns, a.data(), absl::MakeSpan(column_sums));
  for (int64_t j = 0; j < columns; ++j) {
    double expected = 0;
    for (int64_t i = 0; i < rows; ++i) expected += a[i * columns + j];
    EXPECT_NEAR(column_sums[j], expected, 1e-9 * rows) << j;
  }
  // Reductions are reproducible call to call.
  EXPECT_EQ(ops_.SumOfSquares(count, a.data()),
            ops_.SumOfSquares(count, a.data()));
}

// The float64 contract holds where float would overflow: squares of values
// around 1e20 are about 1e40, above FLT_MAX (3.4e38).
TEST_P(CpuOpsTest, SumOfSquaresDoesNotOverflowFloat) {
  const int64_t count = 3 * 4096 + 77;  // several chunks and a ragged one
  Floats x = RandomFloats(count, 8);
  for (float& value : x) value *= 1e20f;
  long double expected = 0;
  for (float value : x) expected += static_cast<long double>(value) * value;
  const double sum = ops_.SumOfSquares(count, x.data());
  ASSERT_TRUE(std::isfinite(sum));
  EXPECT_NEAR(sum, static_cast<double>(expected),
              1e-13 * static_cast<double>(expected));
  // One element alone, far beyond float's range when squared.
  const float huge = 3e37f;
  EXPECT_EQ(ops_.SumOfSquares(1, &huge), double{huge} * double{huge});
}

TEST_P(CpuOpsTest, EmbeddingGathersAndAccumulatesRepeatedIds) {
  const int64_t vocab = 11, dim = 37, tokens = 50;
  const Floats table = RandomFloats(vocab * dim, 6);
  std::vector<int32_t> ids(tokens);
  for (int64_t t = 0; t < tokens; ++t) ids[t] = (t * 7) % 5;  // repeats
  Floats out(tokens * dim);
  ops_.EmbeddingForward(tokens, dim, ids.data(), table.data(), out.data());
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t d = 0; d < dim; ++d) {
      ASSERT_EQ(out[t * dim + d], table[ids[t] * dim + d]);
    }
  }
  const Floats dout = RandomFloats(tokens * dim, 7);
  Floats dtable = RandomFloats(vocab * dim, 8);
  Doubles expected = ToDoubles(dtable);
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t d = 0; d < dim; ++d) {
      expected[ids[t] * dim + d] += dout[t * dim + d];
    }
  }
  ops_.EmbeddingBackward(tokens, dim, ids.data(), dout.data(), dtable.data());
  ExpectClose(dtable, expected, 1e-6, "embedding backward");
}

// ------------------------------------------------------------ RMSNorm

Doubles ReferenceRmsNorm(int64_t rows, int64_t dim, const Doubles& x,
                         const Doubles& weight, double epsilon) {
  Doubles out(rows * dim);
  for (int64_t r = 0; r < rows; ++r) {
    double mean_square = 0;
    for (int64_t j = 0; j < dim; ++j)
      mean_square += x[r * dim + j] * x[r * dim + j];
    mean_square /= dim;
    const double inverse_rms = 1.0 / std::sqrt(mean_square + epsilon);
    for (int64_t j = 0; j < dim; ++j) {
      out[r * dim + j] = x[r * dim + j] * inverse_rms * weight[j];
    }
  }
  return out;
}

TEST_P(CpuOpsTest, RmsNormForwardAndBackward) {
  const int64_t rows = 19, dim = 45;
  const float epsilon = 1e-5f;
  const Floats x = RandomFloats(rows * dim, 9);
  const Floats weight = RandomFloats(dim, 10);
  Floats out(rows * dim), inverse_rms(rows);
  ops_.RmsNormForward(rows, dim, x.data(), weight.data(), epsilon, out.data(),
                      inverse_rms.data());
  ExpectClose(
      out,
      ReferenceRmsNorm(rows, dim, ToDoubles(x), ToDoubles(weight), epsilon),
      1e-5, "rmsnorm");

  const Floats dout = RandomFloats(rows * dim, 11);
  const Floats dx_before = RandomFloats(rows * dim, 12);
  const Floats dweight_before = RandomFloats(dim, 13);
  Floats dx = dx_before, dweight = dweight_before;
  ops_.RmsNormBackward(rows, dim, x.data(), weight.data(), inverse_rms.data(),
                       dout.data(), dx.data(), dweight.data());
  for (size_t i = 0; i < dx.size(); ++i) dx[i] -= dx_before[i];
  for (size_t i = 0; i < dweight.size(); ++i) dweight[i] -= dweight_before[i];
  std::vector<size_t> x_coordinates = SampleCoordinates(x.size(), 200, 1);
  const Doubles numeric_dx = NumericGradient(
      [&](const Doubles& point) {
        return ReferenceRmsNorm(rows, dim, point, ToDoubles(weight), epsilon);
      },
      ToDoubles(x), ToDoubles(dout), &x_coordinates);
  ExpectGradient(dx, numeric_dx, x_coordinates, 1e-4, "rmsnorm dx");
  std::vector<size_t> w_coordinates = SampleCoordinates(dim, dim, 2);
  const Doubles numeric_dweight = NumericGradient(
      [&](const Doubles& point) {
        return ReferenceRmsNorm(rows, dim, ToDoubles(x), point, epsilon);
      },
      ToDoubles(weight), ToDoubles(dout), &w_coordinates);
  ExpectGradient(dweight, numeric_dweight, w_coordinates, 1e-4,
                 "rmsnorm dweight");
}

// ------------------------------------------------------------- Rotary

Doubles ReferenceRotary(int64_t rows, int64_t seq_len, int64_t heads,
                        int64_t head_dim, int64_t stride, Doubles x) {
  const int64_t half = head_dim / 2;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t position = r % seq_len;
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t i = 0; i < half; ++i) {
        const double angle =
            position *
            std::pow(10000.0, -2.0 * i / static_cast<double>(head_dim));
        double& x1 = x[r * stride + h * head_dim + i];
        double& x2 = x[r * stride + h * head_dim + i + half];
        const double a = x1, b = x2;
        x1 = a * std::cos(angle) - b * std::sin(angle);
        x2 = b * std::cos(angle) + a * std::sin(angle);
      }
    }
  }
  return x;
}

TEST_P(CpuOpsTest, RotaryForwardAndBackward) {
  const int64_t seq_len = 13, rows = 2 * seq_len, heads = 3, head_dim = 8;
  const int64_t stride = heads * head_dim + 4;  // a view inside wider rows
  const Floats x = RandomFloats(rows * stride, 14);
  Floats rotated = x;
  ops_.RotaryForward(rows, seq_len, heads, head_dim, stride, rotated.data());
  ExpectClose(
      rotated,
      ReferenceRotary(rows, seq_len, heads, head_dim, stride, ToDoubles(x)),
      1e-5, "rotary");
  const Floats dout = RandomFloats(rows * stride, 15);
  Floats dx = dout;
  ops_.RotaryBackward(rows, seq_len, heads, head_dim, stride, dx.data());
  std::vector<size_t> coordinates;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < heads * head_dim; ++c) {
      coordinates.push_back(r * stride + c);
    }
  }
  const Doubles numeric = NumericGradient(
      [&](const Doubles& point) {
        return ReferenceRotary(rows, seq_len, heads, head_dim, stride, point);
      },
      ToDoubles(x), ToDoubles(dout), &coordinates);
  ExpectGradient(dx, numeric, coordinates, 1e-5, "rotary backward");
}

// ---------------------------------------------------------- Attention

struct AttentionReference {
  Doubles out;
  Doubles logsumexp;
};

// Naive causal attention: materialises every score (fine at test sizes).
AttentionReference ReferenceAttention(const AttentionShape& shape,
                                      const Doubles& q, const Doubles& k,
                                      const Doubles& v, int64_t stride) {
  const int64_t width = shape.heads * shape.head_dim;
  AttentionReference result{Doubles(shape.batch * shape.seq_len * width, 0.0),
                            Doubles(shape.batch * shape.heads * shape.seq_len)};
  const double scale = 1.0 / std::sqrt(static_cast<double>(shape.head_dim));
  for (int64_t s = 0; s < shape.batch; ++s) {
    for (int64_t h = 0; h < shape.heads; ++h) {
      for (int64_t i = 0; i < shape.seq_len; ++i) {
        const int64_t query_row = s * shape.seq_len + i;
        Doubles scores(i + 1);
        double max = -1e300;
        for (int64_t j = 0; j <= i; ++j) {
          const int64_t key_row = s * shape.seq_len + j;
          double dot = 0;
          for (int64_t d = 0; d < shape.head_dim; ++d) {
            dot += q[query_row * stride + h * shape.head_dim + d] *
                   k[key_row * stride + h * shape.head_dim + d];
          }
          scores[j] = dot * scale;
          max = std::max(max, scores[j]);
        }
        double sum = 0;
        for (double& score : scores) {
          score = std::exp(score - max);
          sum += score;
        }
        for (int64_t j = 0; j <= i; ++j) {
          const int64_t key_row = s * shape.seq_len + j;
          for (int64_t d = 0; d < shape.head_dim; ++d) {
            result.out[query_row * width + h * shape.head_dim + d] +=
                scores[j] / sum * v[key_row * stride + h * shape.head_dim + d];
          }
        }
        result.logsumexp[(s * shape.heads + h) * shape.seq_len + i] =
            max + std::log(sum);
      }
    }
  }
  return result;
}

TEST_P(CpuOpsTest, AttentionForwardAndBackwardAcrossBlocks) {
  AttentionShape shape;
  shape.batch = 2;
  shape.seq_len = kAttentionBlockTokens + 22;  // crosses a block boundary
  shape.heads = 2;
  shape.head_dim = 8;
  const int64_t width = shape.heads * shape.head_dim;
  const int64_t stride = 3 * width;  // q, k, v side by side, as in the model
  const int64_t rows = shape.batch * shape.seq_len;
  const Floats qkv = RandomFloats(rows * stride, 16);
  Floats out(rows * width),
      logsumexp(shape.batch * shape.heads * shape.seq_len);
  ops_.AttentionForward(shape, qkv.data(), qkv.data() + width,
                        qkv.data() + 2 * width, stride, out.data(), width,
                        logsumexp.data());
  const Doubles all = ToDoubles(qkv);
  const auto split = [&](const Doubles& source, int part) {
    Doubles view(rows * stride, 0.0);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < width; ++c) {
        view[r * stride + c] = source[r * stride + part * width + c];
      }
    }
    return view;
  };
  const AttentionReference expected = ReferenceAttention(
      shape, split(all, 0), split(all, 1), split(all, 2), stride);
  ExpectClose(out, expected.out, 1e-5, "attention out");
  ExpectClose(logsumexp, expected.logsumexp, 1e-5, "attention logsumexp");

  const Floats dout = RandomFloats(rows * width, 17);
  Floats dqkv(rows * stride, 0.0f);
  ops_.AttentionBackward(shape, qkv.data(), qkv.data() + width,
                         qkv.data() + 2 * width, stride, out.data(),
                         dout.data(), width, logsumexp.data(), dqkv.data(),
                         dqkv.data() + width, dqkv.data() + 2 * width);
  std::vector<size_t> coordinates = SampleCoordinates(qkv.size(), 400, 3);
  const Doubles numeric = NumericGradient(
      [&](const Doubles& point) {
        return ReferenceAttention(shape, split(point, 0), split(point, 1),
                                  split(point, 2), stride)
            .out;
      },
      all, ToDoubles(dout), &coordinates);
  ExpectGradient(dqkv, numeric, coordinates, 1e-4, "attention backward");
}

// ------------------------------------------------------------- SwiGLU

TEST_P(CpuOpsTest, SwiGluForwardAndBackward) {
  const int64_t count = 5003;
  const Floats gate = RandomFloats(count, 18, 3.0f);
  const Floats up = RandomFloats(count, 19);
  Floats out(count);
  ops_.SwiGluForward(count, gate.data(), up.data(), out.data());
  Doubles expected(count);
  for (int64_t i = 0; i < count; ++i) {
    expected[i] = gate[i] / (1.0 + std::exp(-double{gate[i]})) * up[i];
  }
  ExpectClose(out, expected, 1e-5, "swiglu");
  const Floats dout = RandomFloats(count, 20);
  Floats dgate(count), dup(count);
  ops_.SwiGluBackward(count, gate.data(), up.data(), dout.data(), dgate.data(),
                      dup.data());
  for (int64_t i = 0; i < count; ++i) {
    const double g = gate[i], s = 1.0 / (1.0 + std::exp(-g));
    ASSERT_NEAR(dgate[i], dout[i] * up[i] * (s + g * s * (1 - s)),
                1e-5 * (1 + std::abs(dgate[i])));
    ASSERT_NEAR(dup[i], dout[i] * g * s, 1e-5 * (1 + std::abs(dup[i])));
  }
}

// ------------------------------------------------------------- Router

struct RouterReference {
  Doubles probs;
  std::vector<int32_t> expert_index;
  Doubles gates;
};

RouterReference ReferenceRouter(int64_t tokens, int64_t experts, int64_t top_k,
                                const Doubles& logits) {
  RouterReference result{Doubles(tokens * experts), {}, {}};
  for (int64_t t = 0; t < tokens; ++t) {
    double max = -1e300, sum = 0;
    for (int64_t e = 0; e < experts; ++e)
      max = std::max(max, logits[t * experts + e]);
    for (int64_t e = 0; e < experts; ++e) {
      result.probs[t * experts + e] = std::exp(logits[t * experts + e] - max);
      sum += result.probs[t * experts + e];
    }
    for (int64_t e = 0; e < experts; ++e) result.probs[t * experts + e] /= sum;
    std::vector<int32_t> order(experts);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
      return result.probs[t * experts + a] > result.probs[t * experts + b];
    });
    double selected = 0;
    for (int64_t j = 0; j < top_k; ++j)
      selected += result.probs[t * experts + order[j]];
    for (int64_t j = 0; j < top_k; ++j) {
      result.expert_index.push_back(order[j]);
      result.gates.push_back(result.probs[t * experts + order[j]] / selected);
    }
  }
  return result;
}

TEST_P(CpuOpsTest, RouterForwardAndBackward) {
  const int64_t tokens = 40, experts = 8, top_k = 2;
  const Floats logits = RandomFloats(tokens * experts, 21, 2.0f);
  Floats probs(tokens * experts), gates(tokens * top_k);
  std::vector<int32_t> expert_index(tokens * top_k);
  ops_.RouterForward(tokens, experts, top_k, logits.data(), probs.data(),
                     expert_index.data(), gates.data());
  const RouterReference expected =
      ReferenceRouter(tokens, experts, top_k, ToDoubles(logits));
  ExpectClose(probs, expected.probs, 1e-6, "router probs");
  EXPECT_EQ(expert_index, expected.expert_index);
  ExpectClose(gates, expected.gates, 1e-6, "router gates");

  // Loss = sum dgates * gates + sum_t sum_e dprobs_per_expert[e] * probs[t,e].
  const Floats dgates = RandomFloats(tokens * top_k, 22);
  const Floats dprobs_per_expert = RandomFloats(experts, 23);
  Floats dlogits(tokens * experts);
  ops_.RouterBackward(tokens, experts, top_k, probs.data(), expert_index.data(),
                      gates.data(), dgates.data(), dprobs_per_expert,
                      dlogits.data());
  Doubles weights(dgates.begin(), dgates.end());
  for (int64_t t = 0; t < tokens; ++t) {
    weights.insert(weights.end(), dprobs_per_expert.begin(),
                   dprobs_per_expert.end());
  }
  std::vector<size_t> coordinates = SampleCoordinates(logits.size(), 400, 4);
  const Doubles numeric = NumericGradient(
      [&](const Doubles& point) {
        RouterReference r = ReferenceRouter(tokens, experts, top_k, point);
        Doubles outputs = r.gates;
        outputs.insert(outputs.end(), r.probs.begin(), r.probs.end());
        return outputs;
      },
      ToDoubles(logits), weights, &coordinates);
  ExpectGradient(dlogits, numeric, coordinates, 1e-4, "router backward");
}

TEST_P(CpuOpsTest, RouterBreaksTiesTowardTheLowerExpert) {
  const Floats logits = {1.0f, 3.0f, 3.0f, 3.0f};
  Floats probs(4), gates(2);
  std::vector<int32_t> expert_index(2);
  ops_.RouterForward(1, 4, 2, logits.data(), probs.data(), expert_index.data(),
                     gates.data());
  EXPECT_EQ(expert_index, (std::vector<int32_t>{1, 2}));
  EXPECT_FLOAT_EQ(gates[0], 0.5f);
}

// ---------------------------------------------- Permutation and combine

TEST_P(CpuOpsTest, ExpertLayoutGatherAndCombineRoundTrip) {
  const int64_t tokens = 33, experts = 5, top_k = 2, dim = 19;
  std::mt19937 rng(24);
  std::vector<int32_t> expert_index(tokens * top_k);
  for (int64_t t = 0; t < tokens; ++t) {
    expert_index[t * top_k] = static_cast<int32_t>(rng() % experts);
    expert_index[t * top_k + 1] = static_cast<int32_t>(
        (expert_index[t * top_k] + 1 + rng() % (experts - 1)) % experts);
  }
  std::vector<int32_t> assignment_row(tokens * top_k),
      row_token(tokens * top_k);
  std::vector<int64_t> offsets(experts + 1);
  ops_.ComputeExpertLayout(tokens, experts, top_k, expert_index.data(),
                           assignment_row.data(), row_token.data(),
                           absl::MakeSpan(offsets));
  EXPECT_EQ(offsets.front(), 0);
  EXPECT_EQ(offsets.back(), tokens * top_k);
  for (int64_t a = 0; a < tokens * top_k; ++a) {
    const int64_t row = assignment_row[a];
    EXPECT_EQ(row_token[row], a / top_k);
    EXPECT_GE(row, offsets[expert_index[a]]);
    EXPECT_LT(row, offsets[expert_index[a] + 1]);
  }
  for (int64_t r = 1; r < tokens * top_k; ++r) {
    // Stable: within an expert, rows follow token order.
    const bool same_expert =
        std::upper_bound(offsets.begin(), offsets.end(), r) ==
        std::upper_bound(offsets.begin(), offsets.end(), r - 1);
    if (same_expert) {
      EXPECT_LT(row_token[r - 1], row_token[r]);
    }
  }

  const Floats x = RandomFloats(tokens * dim, 25);
  Floats rows(tokens * top_k * dim);
  ops_.GatherRows(tokens * top_k, dim, x.data(), row_token.data(), rows.data());
  for (int64_t r = 0; r < tokens * top_k; ++r) {
    for (int64_t d = 0; d < dim; ++d) {
      ASSERT_EQ(rows[r * dim + d], x[row_token[r] * dim + d]);
    }
  }

  // combine(rows) with gates: out = residual + sum_j g_j rows[row(t, j)].
  const Floats expert_out = RandomFloats(tokens * top_k * dim, 26);
  const Floats gates = RandomFloats(tokens * top_k, 27);
  const Floats residual = RandomFloats(tokens * dim, 28);
  auto reference_combine = [&](const Doubles& out_rows, const Doubles& g) {
    Doubles out = ToDoubles(residual);
    for (int64_t t = 0; t < tokens; ++t) {
      for (int64_t j = 0; j < top_k; ++j) {
        for (int64_t d = 0; d < dim; ++d) {
          out[t * dim + d] += g[t * top_k + j] *
                              out_rows[assignment_row[t * top_k + j] * dim + d];
        }
      }
    }
    return out;
  };
  Floats combined = residual;  // in place, as the model does
  ops_.CombineRows(tokens, top_k, dim, expert_out.data(), assignment_row.data(),
                   gates.data(), combined.data(), combined.data());
  ExpectClose(combined,
              reference_combine(ToDoubles(expert_out), ToDoubles(gates)), 1e-6,
              "combine");

  const Floats dout = RandomFloats(tokens * dim, 29);
  Floats drows(tokens * top_k * dim), dgates(tokens * top_k);
  ops_.CombineRowsBackward(tokens, top_k, dim, expert_out.data(),
                           assignment_row.data(), gates.data(), dout.data(),
                           drows.data(), dgates.data());
  std::vector<size_t> row_coordinates = SampleCoordinates(drows.size(), 300, 5);
  ExpectGradient(drows,
                 NumericGradient(
                     [&](const Doubles& point) {
                       return reference_combine(point, ToDoubles(gates));
                     },
                     ToDoubles(expert_out), ToDoubles(dout), &row_coordinates),
                 row_coordinates, 1e-5, "combine drows");
  std::vector<size_t> gate_coordinates =
      SampleCoordinates(dgates.size(), 300, 6);
  ExpectGradient(dgates,
                 NumericGradient(
                     [&](const Doubles& point) {
                       return reference_combine(ToDoubles(expert_out), point);
                     },
                     ToDoubles(gates), ToDoubles(dout), &gate_coordinates),
                 gate_coordinates, 1e-5, "combine dgates");

  // Gather's backward: dx[t] += sum_j drows[row(t, j)].
  Floats dx = RandomFloats(tokens * dim, 30);
  const Floats dx_before = dx;
  ops_.GatherRowsBackward(tokens, top_k, dim, drows.data(),
                          assignment_row.data(), dx.data());
  Doubles expected_dx = ToDoubles(dx_before);
  for (int64_t r = 0; r < tokens * top_k; ++r) {
    for (int64_t d = 0; d < dim; ++d) {
      expected_dx[row_token[r] * dim + d] += drows[r * dim + d];
    }
  }
  ExpectClose(dx, expected_dx, 1e-6, "gather backward");

  // In chunks (negative rows skipped): the copies of slot j = 0 first, then
  // those of the other slots, sum in the same order as one pass, so all
  // three ops give bitwise what one pass gives.
  std::vector<int32_t> first_slot = assignment_row;
  std::vector<int32_t> other_slots = assignment_row;
  for (int64_t a = 0; a < tokens * top_k; ++a) {
    (a % top_k == 0 ? other_slots : first_slot)[a] = -1;
  }
  Floats chunked = residual;
  for (const std::vector<int32_t>* chunk : {&first_slot, &other_slots}) {
    ops_.CombineRows(tokens, top_k, dim, expert_out.data(), chunk->data(),
                     gates.data(), chunked.data(), chunked.data());
  }
  EXPECT_EQ(chunked, combined);
  Floats chunked_drows(drows.size(), 0.0f), chunked_dgates(dgates.size());
  Floats chunked_dx = dx_before;
  for (const std::vector<int32_t>* chunk : {&first_slot, &other_slots}) {
    ops_.CombineRowsBackward(tokens, top_k, dim, expert_out.data(),
                             chunk->data(), gates.data(), dout.data(),
                             chunked_drows.data(), chunked_dgates.data());
    ops_.GatherRowsBackward(tokens, top_k, dim, drows.data(), chunk->data(),
                            chunked_dx.data());
  }
  EXPECT_EQ(chunked_drows, drows);
  EXPECT_EQ(chunked_dgates, dgates);
  EXPECT_EQ(chunked_dx, dx);
}

// ------------------------------------------------------ Cross-entropy

TEST_P(CpuOpsTest, CrossEntropyForwardAndBackward) {
  const int64_t tokens = 9, vocab = 301;
  const Floats logits = RandomFloats(tokens * vocab, 31, 3.0f);
  std::vector<int32_t> targets(tokens);
  for (int64_t t = 0; t < tokens; ++t)
    targets[t] = static_cast<int32_t>((t * 37) % vocab);
  auto reference = [&](const Doubles& point) {
    Doubles losses(tokens);
    for (int64_t t = 0; t < tokens; ++t) {
      double max = -1e300, sum = 0;
      for (int64_t v = 0; v < vocab; ++v)
        max = std::max(max, point[t * vocab + v]);
      for (int64_t v = 0; v < vocab; ++v)
        sum += std::exp(point[t * vocab + v] - max);
      losses[t] = max + std::log(sum) - point[t * vocab + targets[t]];
    }
    return losses;
  };
  Floats losses(tokens), logsumexp(tokens);
  ops_.CrossEntropyForward(tokens, vocab, logits.data(), targets.data(),
                           losses.data(), logsumexp.data());
  ExpectClose(losses, reference(ToDoubles(logits)), 1e-5, "cross-entropy");

  const float scale = 1.0f / tokens;
  Floats grads = logits;
  ops_.CrossEntropyBackward(tokens, vocab, /*vocab_begin=*/0, targets.data(),
                            logsumexp.data(), scale, grads.data());
  std::vector<size_t> coordinates = SampleCoordinates(logits.size(), 400, 7);
  const Doubles numeric = NumericGradient(reference, ToDoubles(logits),
                                          Doubles(tokens, scale), &coordinates);
  ExpectGradient(grads, numeric, coordinates, 1e-5, "cross-entropy backward");
}

// Ring-DTP's blockwise form: folding blocks of columns (the last one short)
// gives the whole row's logsumexp and target logit, and the blockwise
// backward gives the plain backward's columns.
TEST_P(CpuOpsTest, CrossEntropyByBlocksMatchesTheWholeRow) {
  const int64_t tokens = 9, vocab = 301, block = 64;
  const Floats logits = RandomFloats(tokens * vocab, 31, 3.0f);
  std::vector<int32_t> targets(tokens);
  for (int64_t t = 0; t < tokens; ++t)
    targets[t] = static_cast<int32_t>((t * 37) % vocab);
  Floats losses(tokens), logsumexp(tokens);
  ops_.CrossEntropyForward(tokens, vocab, logits.data(), targets.data(),
                           losses.data(), logsumexp.data());
  const float scale = 0.25f;
  Floats whole_grads = logits;
  ops_.CrossEntropyBackward(tokens, vocab, 0, targets.data(), logsumexp.data(),
                            scale, whole_grads.data());

  Floats running(tokens, -std::numeric_limits<float>::infinity());
  Floats target_logits(tokens, 0.0f);
  for (int64_t begin = 0; begin < vocab; begin += block) {
    const int64_t width = std::min(block, vocab - begin);
    Floats columns(tokens * width), grads(tokens * width);
    for (int64_t t = 0; t < tokens; ++t) {
      std::copy_n(logits.begin() + t * vocab + begin, width,
                  columns.begin() + t * width);
    }
    ops_.CrossEntropyFoldBlock(tokens, width, begin, columns.data(),
                               targets.data(), running.data(),
                               target_logits.data());
    grads = columns;
    ops_.CrossEntropyBackward(tokens, width, begin, targets.data(),
                              logsumexp.data(), scale, grads.data());
    for (int64_t t = 0; t < tokens; ++t) {
      for (int64_t v = 0; v < width; ++v) {
        ASSERT_EQ(grads[t * width + v], whole_grads[t * vocab + begin + v])
            << "token " << t << " column " << begin + v;
      }
    }
  }
  for (int64_t t = 0; t < tokens; ++t) {
    EXPECT_NEAR(running[t], logsumexp[t], 1e-5f * std::abs(logsumexp[t]));
    EXPECT_NEAR(running[t] - target_logits[t], losses[t], 1e-5f);
  }
}

TEST_P(CpuOpsTest, AdamWMatchesTheSingleThreadedKernel) {
  const int64_t count = 20011;
  Floats params = RandomFloats(count, 32), m = RandomFloats(count, 33, 0.01f);
  Floats v(count, 1e-4f);
  const Floats grads = RandomFloats(count, 34, 0.1f);
  Floats params_serial = params, m_serial = m, v_serial = v;
  AdamWHyperparameters hyper;
  hyper.weight_decay = 0.1f;
  const AdamWCoefficients coefficients = ComputeAdamWCoefficients(hyper);
  ops_.AdamWUpdate(coefficients, count, params.data(), grads.data(), m.data(),
                   v.data());
  AdamWUpdate(coefficients, count, params_serial.data(), grads.data(),
              m_serial.data(), v_serial.data());
  EXPECT_EQ(params, params_serial);
  EXPECT_EQ(v, v_serial);
}

// Slices of three matrices of different shapes, the middle one starting
// mid-row: the grouped passes give what the single-threaded kernels give
// slice by slice (the sums of u^2 to float64 rounding, the rest bitwise).
TEST_P(CpuOpsTest, TieredPassesMatchTheSingleThreadedKernels) {
  struct Matrix {
    int64_t rows, columns, first, count;
  };
  const Matrix matrices[] = {
      {300, 256, 0, 300 * 256}, {64, 100, 37, 5000}, {7, 3, 0, 21}};
  std::vector<Floats> params, grads, momentum, sums, roots;
  for (int i = 0; i < 3; ++i) {
    params.push_back(RandomFloats(matrices[i].count, 40 + i));
    grads.push_back(RandomFloats(matrices[i].count, 50 + i, 0.1f));
    momentum.push_back(RandomFloats(matrices[i].count, 60 + i, 0.01f));
    sums.push_back(Floats(matrices[i].rows + matrices[i].columns, 0.0f));
    roots.push_back(
        RandomFloats(matrices[i].rows + matrices[i].columns, 70 + i, 0.01f));
    for (float& root : roots.back()) root = std::abs(root) + 1e-3f;
  }
  auto slices_of = [&](std::vector<Floats>& p, std::vector<Floats>& m,
                       std::vector<Floats>& s) {
    std::vector<TieredSlice> slices(3);
    for (int i = 0; i < 3; ++i) {
      TieredSlice& slice = slices[i];
      slice.count = matrices[i].count;
      slice.params = p[i].data();
      slice.grads = grads[i].data();
      slice.momentum = i == 2 ? nullptr : m[i].data();
      slice.row_roots = roots[i].data();
      slice.column_roots = roots[i].data() + matrices[i].rows;
      slice.first_element = matrices[i].first;
      slice.columns = matrices[i].columns;
      slice.row_sums = s[i].data();
      slice.column_sums = s[i].data() + matrices[i].rows;
      slice.decay = i != 1;
      slice.update_scale = 0.5f;
    }
    return slices;
  };
  std::vector<Floats> params_serial = params, momentum_serial = momentum,
                      sums_serial = sums;
  const std::vector<TieredSlice> grouped = slices_of(params, momentum, sums);
  const std::vector<TieredSlice> serial =
      slices_of(params_serial, momentum_serial, sums_serial);
  const TieredCoefficients coefficients =
      ComputeTieredCoefficients(0.01f, 0.9f, 0.95f, 1e-8f, 0.1f, 3);

  ops_.AccumulateSquares(grouped);
  std::vector<double> measured(3);
  ops_.TieredMeasure(coefficients, grouped, absl::MakeSpan(measured));
  ops_.TieredApply(coefficients, grouped);
  for (int i = 0; i < 3; ++i) {
    AccumulateSquares(serial[i]);
    EXPECT_NEAR(measured[i], TieredMeasure(coefficients, serial[i]),
                1e-6 * measured[i]);
    TieredApply(coefficients, serial[i]);
    EXPECT_EQ(sums[i], sums_serial[i]) << i;
    EXPECT_EQ(momentum[i], momentum_serial[i]) << i;
    EXPECT_EQ(params[i], params_serial[i]) << i;
  }
  // The row and column sums against float64.
  const Matrix& middle = matrices[1];
  std::vector<double> row_sums(middle.rows, 0.0), column_sums(middle.columns);
  for (int64_t k = 0; k < middle.count; ++k) {
    const int64_t element = middle.first + k;
    const double square = double{grads[1][k]} * grads[1][k] + 1e-30;
    row_sums[element / middle.columns] += square;
    column_sums[element % middle.columns] += square;
  }
  for (int64_t r = 0; r < middle.rows; ++r) {
    ASSERT_NEAR(sums[1][r], row_sums[r], 1e-5 * row_sums[r] + 1e-30) << r;
  }
  for (int64_t c = 0; c < middle.columns; ++c) {
    ASSERT_NEAR(sums[1][middle.rows + c], column_sums[c], 1e-5 * column_sums[c])
        << c;
  }

  // TieredUpdate: each slice measured, then applied with its own clip.
  std::vector<Floats> fused_params = params, fused_momentum = momentum,
                      fused_sums = sums;
  std::vector<TieredSlice> fused =
      slices_of(fused_params, fused_momentum, fused_sums);
  std::vector<TieredSlice> expected =
      slices_of(params_serial, momentum_serial, sums_serial);
  ops_.TieredUpdate(coefficients, fused, /*clip_threshold=*/1.0f);
  for (int i = 0; i < 3; ++i) {
    const double rms = std::sqrt(TieredMeasure(coefficients, expected[i]) /
                                 static_cast<double>(expected[i].count));
    expected[i].update_scale = static_cast<float>(1.0 / std::max(1.0, rms));
    TieredApply(coefficients, expected[i]);
    EXPECT_EQ(fused_params[i], params_serial[i]) << i;
  }
}

TEST_P(CpuOpsTest, LionMatchesTheSingleThreadedKernel) {
  const int64_t count = 70001;
  Floats params = RandomFloats(count, 80), m = RandomFloats(count, 81, 0.01f);
  const Floats grads = RandomFloats(count, 82, 0.1f);
  Floats params_serial = params, m_serial = m;
  const TieredCoefficients coefficients =
      ComputeTieredCoefficients(1e-3f, 0.9f, 0.99f, 0.0f, 0.1f, 1);
  TieredSlice slice;
  slice.count = count;
  slice.params = params.data();
  slice.grads = grads.data();
  slice.momentum = m.data();
  ops_.LionUpdate(coefficients, {slice});
  slice.params = params_serial.data();
  slice.momentum = m_serial.data();
  LionUpdate(coefficients, slice);
  EXPECT_EQ(params, params_serial);
  EXPECT_EQ(m, m_serial);
  // Every parameter moved by exactly lr (times the decay's shrink).
  EXPECT_NEAR(std::abs(params[0] - RandomFloats(1, 80)[0] * coefficients.decay),
              1e-3f, 1e-6f);
}

TEST(Bfloat16Test, RoundsToNearestEven) {
  EXPECT_EQ(FloatToBfloat16(1.0f), 0x3f80);
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: to even, 1.
  EXPECT_EQ(FloatToBfloat16(1.0f + 1.0f / 256), 0x3f80);
  // 1 + 3 * 2^-8 is halfway between 1 + 2^-7 and 1 + 2^-6: to even.
  EXPECT_EQ(FloatToBfloat16(1.0f + 3.0f / 256), 0x3f82);
  EXPECT_EQ(FloatToBfloat16(1.0f + 1.0f / 256 + 1.0f / 65536), 0x3f81);
  EXPECT_EQ(Bfloat16ToFloat(FloatToBfloat16(-2.5f)), -2.5f);
  EXPECT_TRUE(std::isnan(Bfloat16ToFloat(FloatToBfloat16(std::nanf("")))));
  EXPECT_TRUE(std::isinf(Bfloat16ToFloat(
      FloatToBfloat16(std::numeric_limits<float>::infinity()))));
  // The largest float rounds up to infinity, as float32 -> bfloat16 does.
  EXPECT_TRUE(std::isinf(
      Bfloat16ToFloat(FloatToBfloat16(std::numeric_limits<float>::max()))));
}

INSTANTIATE_TEST_SUITE_P(Threads, CpuOpsTest, ::testing::Values(1, 2, 3),
                         [](const auto& info) {
                           return std::to_string(info.param) + "_threads";
                         });

}  // namespace
}  // namespace plateau::kernels::cpu
