// Elementwise ops, reductions, the embedding, RMSNorm (whole rows and per
// head), rotary embedding and SwiGLU.
#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include "kernels/ops_conformance.h"

namespace plateau::kernels::conformance {
namespace {

TEST_P(OpsConformanceTest, ElementwiseOpsAndReductions) {
  const int64_t count = 300001;  // many blocks and threads' parts, ragged
  const Floats a = RandomFloats(count, 4), b = RandomFloats(count, 5);
  DeviceFloats device_a(backend(), a), device_b(backend(), b),
      out(backend(), count);
  ops().Add(count, device_a.get(), device_b.get(), out.get());
  Floats expected(count);
  for (int64_t i = 0; i < count; ++i) expected[i] = a[i] + b[i];
  ExpectSame(out.Read(), expected, "Add");
  ops().Add(count, out.get(), device_b.get(), out.get());  // out aliases a
  for (int64_t i = 0; i < count; ++i) expected[i] += b[i];
  ExpectSame(out.Read(), expected, "Add in place");
  ops().Scale(count, 2.5f, out.get());
  for (float& value : expected) value *= 2.5f;
  ExpectSame(out.Read(), expected, "Scale");
  ops().Copy(count, device_a.get(), out.get());
  ExpectSame(out.Read(), a, "Copy");
  ops().Fill(7, -1.5f, out.get());  // only the first 7
  expected = a;
  std::fill_n(expected.begin(), 7, -1.5f);
  ExpectSame(out.Read(), expected, "Fill");

  double squares = 0, sum = 0;
  for (float value : a) {
    squares += double{value} * value;
    sum += value;
  }
  EXPECT_NEAR(ops().SumOfSquares(count, device_a.get()), squares,
              1e-9 * squares);
  EXPECT_NEAR(ops().Sum(count, device_a.get()), sum, 1e-9 * count);
  // Reductions are reproducible call to call.
  EXPECT_EQ(ops().SumOfSquares(count, device_a.get()),
            ops().SumOfSquares(count, device_a.get()));
  EXPECT_EQ(ops().Sum(count, device_a.get()), ops().Sum(count, device_a.get()));

  Floats positive(count);
  for (int64_t i = 0; i < count; ++i) positive[i] = std::abs(a[i]);
  DeviceFloats device_positive(backend(), positive);
  ops().SquareRoots(count, 0.5f, device_positive.get(), out.get());
  Doubles roots(count);
  for (int64_t i = 0; i < count; ++i) roots[i] = std::sqrt(0.5 * positive[i]);
  ExpectClose(out.Read(), roots, 1e-6, "SquareRoots");
  ops().SquareRoots(count, 0.5f, device_positive.get(),
                    device_positive.get());  // in place
  ExpectClose(device_positive.Read(), roots, 1e-6, "SquareRoots in place");
}

// The float64 contract holds where float would overflow: squares of values
// around 1e20 are about 1e40, above FLT_MAX (3.4e38).
TEST_P(OpsConformanceTest, SumOfSquaresDoesNotOverflowFloat) {
  const int64_t count = 3 * 4096 + 77;  // several parts and a ragged one
  Floats x = RandomFloats(count, 8);
  for (float& value : x) value *= 1e20f;
  long double expected = 0;
  for (float value : x) expected += static_cast<long double>(value) * value;
  DeviceFloats device_x(backend(), x);
  const double sum = ops().SumOfSquares(count, device_x.get());
  ASSERT_TRUE(std::isfinite(sum));
  EXPECT_NEAR(sum, static_cast<double>(expected),
              1e-12 * static_cast<double>(expected));
  // One element alone, far beyond float's range when squared.
  const float huge = 3e37f;
  DeviceFloats device_huge(backend(), Floats{huge});
  EXPECT_EQ(ops().SumOfSquares(1, device_huge.get()),
            double{huge} * double{huge});
}

TEST_P(OpsConformanceTest, ColumnSumsOverManyRows) {
  for (const int64_t columns : {7, 9, 300}) {
    const int64_t rows = 20000 / columns * 3;
    const Floats x = RandomFloats(rows * columns, 3 + columns);
    DeviceFloats device_x(backend(), x);
    std::vector<double> sums(columns);
    ops().ColumnSums(rows, columns, device_x.get(), absl::MakeSpan(sums));
    for (int64_t j = 0; j < columns; ++j) {
      double expected = 0;
      for (int64_t i = 0; i < rows; ++i) expected += x[i * columns + j];
      ASSERT_NEAR(sums[j], expected, 1e-9 * rows)
          << columns << " columns, " << j;
    }
  }
}

TEST_P(OpsConformanceTest, EmbeddingGathersAndAddsRepeatedIdsInTokenOrder) {
  // A vocabulary and token count that take a GPU sort several passes and
  // tiles; few distinct ids in the first half, so ids repeat many times.
  const int64_t vocab = 5000, tokens = 6000, dim = 40;
  Ints ids = RandomInts(tokens, vocab, 4);
  for (int64_t t = 0; t < tokens / 2; ++t) ids[t] %= 7;
  const Floats table = RandomFloats(vocab * dim, 5);
  const Floats dout = RandomFloats(tokens * dim, 6);
  const Floats dtable = RandomFloats(vocab * dim, 7);
  DeviceInts device_ids(backend(), ids);
  DeviceFloats device_table(backend(), table), device_dout(backend(), dout),
      device_dtable(backend(), dtable), out(backend(), tokens * dim);
  ops().EmbeddingForward(tokens, dim, device_ids.get(), device_table.get(),
                         out.get());
  Floats expected(tokens * dim);
  for (int64_t t = 0; t < tokens; ++t) {
    std::copy_n(table.begin() + ids[t] * dim, dim, expected.begin() + t * dim);
  }
  ExpectSame(out.Read(), expected, "EmbeddingForward");
  ops().EmbeddingBackward(tokens, dim, device_ids.get(), device_dout.get(),
                          device_dtable.get());
  // Each row's gradients added one token at a time, in token order: the
  // same sums on every backend and thread count.
  Floats expected_dtable = dtable;
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t d = 0; d < dim; ++d) {
      expected_dtable[ids[t] * dim + d] += dout[t * dim + d];
    }
  }
  ExpectSame(device_dtable.Read(), expected_dtable, "EmbeddingBackward");
}

// A bf16 dout (the residual stream's gradient under bf16) into a float32
// table: EmbeddingBackward of its exact values.
TEST_P(OpsConformanceTest, EmbeddingBackwardOfABf16GradientIsOfItsValues) {
  const int64_t vocab = 500, tokens = 3000, dim = 40;
  Ints ids = RandomInts(tokens, vocab, 14);
  for (int64_t t = 0; t < tokens / 2; ++t) ids[t] %= 7;
  const Bf16s dout = ToBf16(RandomFloats(tokens * dim, 15));
  const Floats dtable = RandomFloats(vocab * dim, 16);
  DeviceInts device_ids(backend(), ids);
  DeviceBf16s device_dout(backend(), dout);
  DeviceFloats widened_dout(backend(), FromBf16(dout)),
      from_bf16(backend(), dtable), from_float(backend(), dtable);
  ops().EmbeddingBackwardFromBf16(tokens, dim, device_ids.get(),
                                  device_dout.get(), from_bf16.get());
  ops().EmbeddingBackward(tokens, dim, device_ids.get(), widened_dout.get(),
                          from_float.get());
  const Floats expected = from_float.Read();
  ExpectSame(from_bf16.Read(), expected, "EmbeddingBackwardFromBf16");
  EXPECT_NE(expected, dtable);
}

TEST_P(OpsConformanceTest, EmbeddingOverABf16TableSumsEachRowOnceRounded) {
  const int64_t vocab = 5000, tokens = 6000, dim = 40;
  Ints ids = RandomInts(tokens, vocab, 8);
  for (int64_t t = 0; t < tokens / 2; ++t) ids[t] %= 7;
  const Bf16s table = ToBf16(RandomFloats(vocab * dim, 9));
  const Bf16s dout = ToBf16(RandomFloats(tokens * dim, 10, 0.01f));
  const Bf16s dtable = ToBf16(RandomFloats(vocab * dim, 11));
  DeviceInts device_ids(backend(), ids);
  DeviceBf16s device_table(backend(), table), device_dtable(backend(), dtable),
      out(backend(), tokens * dim), device_dout(backend(), dout);
  ops().EmbeddingForwardBf16(tokens, dim, device_ids.get(), device_table.get(),
                             out.get());
  Bf16s expected(tokens * dim);
  for (int64_t t = 0; t < tokens; ++t) {
    std::copy_n(table.begin() + ids[t] * dim, dim, expected.begin() + t * dim);
  }
  EXPECT_EQ(out.Read(), expected) << "EmbeddingForwardBf16";
  ops().EmbeddingBackwardBf16(tokens, dim, device_ids.get(), device_dout.get(),
                              device_dtable.get());
  // The float32 backward on the widened table, rounded once: a row
  // rounded after every token would differ (ids repeat ~430 times in the
  // first half, each adding about 1% of the row).
  Floats widened = FromBf16(dtable);
  const Floats dout_values = FromBf16(dout);
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t d = 0; d < dim; ++d) {
      widened[ids[t] * dim + d] += dout_values[t * dim + d];
    }
  }
  EXPECT_EQ(device_dtable.Read(), ToBf16(widened)) << "EmbeddingBackwardBf16";
}

Doubles ReferenceRmsNorm(int64_t rows, int64_t dim, const Doubles& x,
                         const Doubles& weight, double epsilon) {
  Doubles out(rows * dim);
  for (int64_t r = 0; r < rows; ++r) {
    double mean_square = 0;
    for (int64_t j = 0; j < dim; ++j) {
      mean_square += x[r * dim + j] * x[r * dim + j];
    }
    mean_square /= dim;
    const double inverse_rms = 1.0 / std::sqrt(mean_square + epsilon);
    for (int64_t j = 0; j < dim; ++j) {
      out[r * dim + j] = x[r * dim + j] * inverse_rms * weight[j];
    }
  }
  return out;
}

TEST_P(OpsConformanceTest, RmsNormForwardAndBackward) {
  const int64_t rows = 300, dim = 100;
  const float epsilon = 1e-5f;
  const Floats x = RandomFloats(rows * dim, 9);
  const Floats weight = RandomFloats(dim, 10);
  const Floats dout = RandomFloats(rows * dim, 11);
  const Floats dx_before = RandomFloats(rows * dim, 12);
  const Floats dweight_before = RandomFloats(dim, 13);
  DeviceFloats device_x(backend(), x), device_weight(backend(), weight),
      device_dout(backend(), dout), device_dx(backend(), dx_before),
      device_dweight(backend(), dweight_before), out(backend(), rows * dim),
      inverse_rms(backend(), rows);
  ops().RmsNormForward(rows, dim, device_x.get(), device_weight.get(), epsilon,
                       out.get(), inverse_rms.get());
  ExpectClose(
      out.Read(),
      ReferenceRmsNorm(rows, dim, ToDoubles(x), ToDoubles(weight), epsilon),
      1e-5, "RmsNormForward");

  // The backward accumulates: subtract what was there.
  ops().RmsNormBackward(rows, dim, device_x.get(), device_weight.get(),
                        inverse_rms.get(), device_dout.get(), device_dx.get(),
                        device_dweight.get());
  Floats dx = device_dx.Read(), dweight = device_dweight.Read();
  for (size_t i = 0; i < dx.size(); ++i) dx[i] -= dx_before[i];
  for (size_t i = 0; i < dweight.size(); ++i) dweight[i] -= dweight_before[i];
  const std::vector<size_t> x_coordinates = SampleCoordinates(x.size(), 200, 1);
  ExpectGradient(dx,
                 NumericGradient(
                     [&](const Doubles& point) {
                       return ReferenceRmsNorm(rows, dim, point,
                                               ToDoubles(weight), epsilon);
                     },
                     ToDoubles(x), ToDoubles(dout), x_coordinates),
                 x_coordinates, 1e-4, "RmsNorm dx");
  const std::vector<size_t> weight_coordinates = SampleCoordinates(dim, dim, 2);
  ExpectGradient(dweight,
                 NumericGradient(
                     [&](const Doubles& point) {
                       return ReferenceRmsNorm(rows, dim, ToDoubles(x), point,
                                               epsilon);
                     },
                     ToDoubles(weight), ToDoubles(dout), weight_coordinates),
                 weight_coordinates, 1e-4, "RmsNorm dweight");
}

// Into a bf16 dx (the residual stream's gradient under bf16), from a
// float32 x or a bf16 one (a layer boundary): the float32 backward on the
// widened values, rounded once, and the same dweight.
TEST_P(OpsConformanceTest, RmsNormBackwardIntoBf16IsTheFloat32SumRounded) {
  const int64_t rows = 300, dim = 100;
  const Bf16s x = ToBf16(RandomFloats(rows * dim, 17));
  const Floats weight = RandomFloats(dim, 18);
  Floats inverse_rms = RandomFloats(rows, 19, 0.5f);
  for (float& value : inverse_rms) value = 1.0f + std::abs(value);
  const Floats dout = RandomFloats(rows * dim, 20);
  const Bf16s dx_before = ToBf16(RandomFloats(rows * dim, 21));
  const Floats dweight_before = RandomFloats(dim, 22);
  DeviceBf16s bf16_x(backend(), x), dx_of_float_x(backend(), dx_before),
      dx_of_bf16_x(backend(), dx_before);
  DeviceFloats float_x(backend(), FromBf16(x)),
      device_weight(backend(), weight),
      device_inverse_rms(backend(), inverse_rms), device_dout(backend(), dout),
      float_dx(backend(), FromBf16(dx_before)),
      float_dweight(backend(), dweight_before),
      dweight_of_float_x(backend(), dweight_before),
      dweight_of_bf16_x(backend(), dweight_before);
  ops().RmsNormBackward(rows, dim, float_x.get(), device_weight.get(),
                        device_inverse_rms.get(), device_dout.get(),
                        float_dx.get(), float_dweight.get());
  ops().RmsNormBackwardToBf16(rows, dim, float_x.get(), device_weight.get(),
                              device_inverse_rms.get(), device_dout.get(),
                              dx_of_float_x.get(), dweight_of_float_x.get());
  ops().RmsNormBackwardBf16(rows, dim, bf16_x.get(), device_weight.get(),
                            device_inverse_rms.get(), device_dout.get(),
                            dx_of_bf16_x.get(), dweight_of_bf16_x.get());
  const Bf16s expected = ToBf16(float_dx.Read());
  EXPECT_NE(expected, dx_before);
  EXPECT_EQ(dx_of_float_x.Read(), expected) << "RmsNormBackwardToBf16 dx";
  EXPECT_EQ(dx_of_bf16_x.Read(), expected) << "RmsNormBackwardBf16 dx";
  const Floats expected_dweight = float_dweight.Read();
  ExpectSame(dweight_of_float_x.Read(), expected_dweight,
             "RmsNormBackwardToBf16 dweight");
  ExpectSame(dweight_of_bf16_x.Read(), expected_dweight,
             "RmsNormBackwardBf16 dweight");
}

// The norm of a bf16 x (a layer boundary) is that of its widened values:
// the same statistics and the same rounded rows. A row of 100 values puts
// the rows at other alignments than a widened copy's.
TEST_P(OpsConformanceTest, RmsNormOfABf16InputIsTheNormOfItsValues) {
  const int64_t rows = 300, dim = 100;
  const float epsilon = 1e-5f;
  const Bf16s x = ToBf16(RandomFloats(rows * dim, 23));
  const Floats weight = RandomFloats(dim, 24);
  DeviceBf16s bf16_x(backend(), x), of_bf16(backend(), rows * dim),
      of_float(backend(), rows * dim);
  DeviceFloats float_x(backend(), FromBf16(x)),
      device_weight(backend(), weight), bf16_inverse_rms(backend(), rows),
      float_inverse_rms(backend(), rows);
  ops().RmsNormForwardToBf16(rows, dim, float_x.get(), device_weight.get(),
                             epsilon, of_float.get(), float_inverse_rms.get());
  ops().RmsNormForwardBf16(rows, dim, bf16_x.get(), device_weight.get(),
                           epsilon, of_bf16.get(), bf16_inverse_rms.get());
  EXPECT_EQ(of_bf16.Read(), of_float.Read()) << "RmsNormForwardBf16";
  ExpectSame(bf16_inverse_rms.Read(), float_inverse_rms.Read(),
             "RmsNormForwardBf16 inverse_rms");
}

// The heads of rows of the given stride, gathered as (rows * heads,
// head_dim) rows.
template <typename Values>
Values GatherHeads(const Values& x, int64_t rows, int64_t heads,
                   int64_t head_dim, int64_t stride) {
  Values gathered;
  for (int64_t r = 0; r < rows; ++r) {
    gathered.insert(gathered.end(), x.begin() + r * stride,
                    x.begin() + r * stride + heads * head_dim);
  }
  return gathered;
}

TEST_P(OpsConformanceTest, HeadRmsNormForwardAndBackward) {
  // Rows wider than their heads (a q, k, v row's q or k), in place; the
  // backward reads its input from rows of another stride.
  const int64_t rows = 300, heads = 3, head_dim = 40;
  const int64_t row_stride = 130, x_stride = 125;
  const float epsilon = 1e-6f;
  Floats x = RandomFloats(rows * x_stride, 20);
  for (float& value : x) value *= 4.0f;
  const Floats weight = RandomFloats(head_dim, 21);
  Floats rows_in = RandomFloats(rows * row_stride, 22);
  for (int64_t r = 0; r < rows; ++r) {
    std::copy_n(x.begin() + r * x_stride, heads * head_dim,
                rows_in.begin() + r * row_stride);
  }
  const Doubles gathered_x =
      ToDoubles(GatherHeads(x, rows, heads, head_dim, x_stride));
  auto reference = [&](const Doubles& input, const Doubles& w) {
    return ReferenceRmsNorm(rows * heads, head_dim, input, w, epsilon);
  };
  DeviceFloats device_rows(backend(), rows_in),
      device_weight(backend(), weight);
  ops().HeadRmsNormForward(rows, heads, head_dim, row_stride,
                           device_weight.get(), epsilon, device_rows.get());
  const Floats normed = device_rows.Read();
  ExpectClose(GatherHeads(normed, rows, heads, head_dim, row_stride),
              reference(gathered_x, ToDoubles(weight)), 1e-5,
              "HeadRmsNormForward");
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = heads * head_dim; j < row_stride; ++j) {
      ASSERT_EQ(normed[r * row_stride + j], rows_in[r * row_stride + j])
          << "a column past the heads changed: row " << r << ", column " << j;
    }
  }

  const Floats dout = RandomFloats(rows * row_stride, 23);
  const Floats dweight_before = RandomFloats(head_dim, 24);
  DeviceFloats device_x(backend(), x), device_dx(backend(), dout),
      device_dweight(backend(), dweight_before);
  ops().HeadRmsNormBackward(rows, heads, head_dim, device_x.get(), x_stride,
                            device_weight.get(), epsilon, row_stride,
                            device_dx.get(), device_dweight.get());
  const Floats dx_rows = device_dx.Read();
  Floats dweight = device_dweight.Read();
  for (int64_t j = 0; j < head_dim; ++j) dweight[j] -= dweight_before[j];
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = heads * head_dim; j < row_stride; ++j) {
      ASSERT_EQ(dx_rows[r * row_stride + j], dout[r * row_stride + j])
          << "a gradient past the heads changed: row " << r << ", column " << j;
    }
  }
  const Doubles gathered_dout =
      ToDoubles(GatherHeads(dout, rows, heads, head_dim, row_stride));
  const std::vector<size_t> x_coordinates =
      SampleCoordinates(gathered_x.size(), 200, 3);
  ExpectGradient(GatherHeads(dx_rows, rows, heads, head_dim, row_stride),
                 NumericGradient(
                     [&](const Doubles& point) {
                       return reference(point, ToDoubles(weight));
                     },
                     gathered_x, gathered_dout, x_coordinates),
                 x_coordinates, 1e-4, "HeadRmsNorm dx");
  const std::vector<size_t> weight_coordinates =
      SampleCoordinates(head_dim, head_dim, 4);
  ExpectGradient(
      dweight,
      NumericGradient(
          [&](const Doubles& point) { return reference(gathered_x, point); },
          ToDoubles(weight), gathered_dout, weight_coordinates),
      weight_coordinates, 1e-4, "HeadRmsNorm dweight");
}

Doubles ReferenceRotary(int64_t rows, int64_t seq_len, int64_t heads,
                        int64_t head_dim, int64_t stride, double theta,
                        Doubles x) {
  const int64_t half = head_dim / 2;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t position = r % seq_len;
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t i = 0; i < half; ++i) {
        const double angle =
            position *
            std::pow(theta, -2.0 * i / static_cast<double>(head_dim));
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

// At the default theta and at Qwen3's and Llama 3's larger ones.
TEST_P(OpsConformanceTest, RotaryForwardAndBackward) {
  for (const double theta : {10000.0, 500000.0, 1000000.0}) {
    SCOPED_TRACE(theta);
    const int64_t seq_len = 37, rows = 2 * seq_len, heads = 3, head_dim = 12;
    const int64_t stride = heads * head_dim + 5;  // a view inside wider rows
    const Floats x = RandomFloats(rows * stride, 14);
    DeviceFloats rotated(backend(), x);
    ops().RotaryForward(rows, 0, seq_len, heads, head_dim, stride, theta,
                        rotated.get());
    // The columns outside the view stay as they were.
    ExpectClose(rotated.Read(),
                ReferenceRotary(rows, seq_len, heads, head_dim, stride, theta,
                                ToDoubles(x)),
                1e-5, "RotaryForward");
    const Floats dout = RandomFloats(rows * stride, 15);
    DeviceFloats dx(backend(), dout);
    ops().RotaryBackward(rows, 0, seq_len, heads, head_dim, stride, theta,
                         dx.get());
    std::vector<size_t> coordinates;
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < heads * head_dim; ++c) {
        coordinates.push_back(r * stride + c);
      }
    }
    ExpectGradient(dx.Read(),
                   NumericGradient(
                       [&](const Doubles& point) {
                         return ReferenceRotary(rows, seq_len, heads, head_dim,
                                                stride, theta, point);
                       },
                       ToDoubles(x), ToDoubles(dout), coordinates),
                   coordinates, 1e-5, "RotaryBackward");

    // Rows rotated a piece at a time, each from its first row's position
    // (pieces that start mid-sequence and cross into the next), are bitwise
    // the whole's.
    DeviceFloats pieces(backend(), x), piece_grads(backend(), dout);
    for (const auto& [first_row, count] :
         std::vector<std::pair<int64_t, int64_t>>{{0, 5}, {5, 40}, {45, 29}}) {
      ops().RotaryForward(count, first_row, seq_len, heads, head_dim, stride,
                          theta, pieces.get() + first_row * stride);
      ops().RotaryBackward(count, first_row, seq_len, heads, head_dim, stride,
                           theta, piece_grads.get() + first_row * stride);
    }
    ExpectSame(pieces.Read(), rotated.Read(), "RotaryForward in pieces");
    ExpectSame(piece_grads.Read(), dx.Read(), "RotaryBackward in pieces");
  }
}

TEST_P(OpsConformanceTest, SwiGluForwardAndBackward) {
  const int64_t count = 5003;
  const Floats gate = RandomFloats(count, 18, 3.0f);
  const Floats up = RandomFloats(count, 19);
  const Floats dout = RandomFloats(count, 20);
  DeviceFloats device_gate(backend(), gate), device_up(backend(), up),
      device_dout(backend(), dout), out(backend(), count),
      dgate(backend(), count), dup(backend(), count);
  ops().SwiGluForward(count, device_gate.get(), device_up.get(), out.get());
  Doubles expected(count), expected_dgate(count), expected_dup(count);
  for (int64_t i = 0; i < count; ++i) {
    const double g = gate[i], sigmoid = 1.0 / (1.0 + std::exp(-g));
    expected[i] = g * sigmoid * up[i];
    expected_dgate[i] =
        dout[i] * up[i] * (sigmoid + g * sigmoid * (1 - sigmoid));
    expected_dup[i] = dout[i] * g * sigmoid;
  }
  ExpectClose(out.Read(), expected, 1e-5, "SwiGluForward");
  ops().SwiGluBackward(count, device_gate.get(), device_up.get(),
                       device_dout.get(), dgate.get(), dup.get());
  ExpectClose(dgate.Read(), expected_dgate, 1e-5, "SwiGlu dgate");
  ExpectClose(dup.Read(), expected_dup, 1e-5, "SwiGlu dup");
}

// The ...ToBf16 forms store bitwise the float32 form's results, rounded.
TEST_P(OpsConformanceTest, ToBf16FormsRoundTheFloat32Results) {
  const int64_t rows = 70, dim = 100, count = rows * dim + 3;
  const Floats x = RandomFloats(count, 31, 2.0f);
  const Floats weight = RandomFloats(dim, 32);
  const Floats up = RandomFloats(count, 33);
  DeviceFloats device_x(backend(), x), device_weight(backend(), weight),
      device_up(backend(), up), out(backend(), count),
      inverse_rms(backend(), rows), bf16_inverse_rms(backend(), rows);
  DeviceBf16s bf16_out(backend(), count);

  ops().RmsNormForward(rows, dim, device_x.get(), device_weight.get(), 1e-5f,
                       out.get(), inverse_rms.get());
  ops().RmsNormForwardToBf16(rows, dim, device_x.get(), device_weight.get(),
                             1e-5f, bf16_out.get(), bf16_inverse_rms.get());
  Floats normed = out.Read();
  normed.resize(rows * dim);
  Bf16s bf16_normed = bf16_out.Read();
  bf16_normed.resize(rows * dim);
  EXPECT_EQ(bf16_normed, ToBf16(normed)) << "RmsNormForwardToBf16";
  ExpectSame(bf16_inverse_rms.Read(), inverse_rms.Read(),
             "RmsNormForwardToBf16's inverse_rms");

  ops().SwiGluForward(count, device_x.get(), device_up.get(), out.get());
  ops().SwiGluForwardToBf16(count, device_x.get(), device_up.get(),
                            bf16_out.get());
  EXPECT_EQ(bf16_out.Read(), ToBf16(out.Read())) << "SwiGluForwardToBf16";
}

// SwiGLU over bf16 gate and up (the experts' pre-activations under bf16):
// bitwise the float32 forms on their exact values, the backward's
// gradients rounded to bf16. 10,007 elements: more than a CPU block, and a
// vector's tail.
TEST_P(OpsConformanceTest, SwiGluOfBf16InputsIsSwiGluOfTheirValues) {
  const int64_t count = 10007;
  const Bf16s gate = ToBf16(RandomFloats(count, 51, 3.0f));
  const Bf16s up = ToBf16(RandomFloats(count, 52));
  const Floats dout = RandomFloats(count, 53);
  DeviceBf16s bf16_gate(backend(), gate), bf16_up(backend(), up),
      from_bf16(backend(), count), from_float(backend(), count),
      bf16_dgate(backend(), count), bf16_dup(backend(), count);
  DeviceFloats float_gate(backend(), FromBf16(gate)),
      float_up(backend(), FromBf16(up)), device_dout(backend(), dout),
      float_dgate(backend(), count), float_dup(backend(), count);
  ops().SwiGluForwardToBf16(count, float_gate.get(), float_up.get(),
                            from_float.get());
  ops().SwiGluForwardBf16(count, bf16_gate.get(), bf16_up.get(),
                          from_bf16.get());
  EXPECT_EQ(from_bf16.Read(), from_float.Read()) << "SwiGluForwardBf16";
  ops().SwiGluBackward(count, float_gate.get(), float_up.get(),
                       device_dout.get(), float_dgate.get(), float_dup.get());
  ops().SwiGluBackwardBf16(count, bf16_gate.get(), bf16_up.get(),
                           device_dout.get(), bf16_dgate.get(), bf16_dup.get());
  EXPECT_EQ(bf16_dgate.Read(), ToBf16(float_dgate.Read()))
      << "SwiGluBackwardBf16 dgate";
  EXPECT_EQ(bf16_dup.Read(), ToBf16(float_dup.Read()))
      << "SwiGluBackwardBf16 dup";
}

// SwiGLU's backward in place, gradients over gate and up (as the experts'
// backward runs it): bitwise what it writes elsewhere, in both forms.
// 10,007 elements: more than a CPU block, and a vector's tail.
TEST_P(OpsConformanceTest, SwiGluBackwardInPlaceIsTheSame) {
  const int64_t count = 10007;
  const Floats gate = RandomFloats(count, 61, 3.0f);
  const Floats up = RandomFloats(count, 62);
  const Floats dout = RandomFloats(count, 63);
  DeviceFloats device_gate(backend(), gate), device_up(backend(), up),
      device_dout(backend(), dout), dgate(backend(), count),
      dup(backend(), count);
  ops().SwiGluBackward(count, device_gate.get(), device_up.get(),
                       device_dout.get(), dgate.get(), dup.get());
  ops().SwiGluBackward(count, device_gate.get(), device_up.get(),
                       device_dout.get(), device_gate.get(), device_up.get());
  ExpectSame(device_gate.Read(), dgate.Read(), "SwiGluBackward dgate");
  ExpectSame(device_up.Read(), dup.Read(), "SwiGluBackward dup");

  DeviceBf16s bf16_gate(backend(), ToBf16(gate)),
      bf16_up(backend(), ToBf16(up)), bf16_dgate(backend(), count),
      bf16_dup(backend(), count);
  ops().SwiGluBackwardBf16(count, bf16_gate.get(), bf16_up.get(),
                           device_dout.get(), bf16_dgate.get(), bf16_dup.get());
  ops().SwiGluBackwardBf16(count, bf16_gate.get(), bf16_up.get(),
                           device_dout.get(), bf16_gate.get(), bf16_up.get());
  EXPECT_EQ(bf16_gate.Read(), bf16_dgate.Read()) << "SwiGluBackwardBf16 dgate";
  EXPECT_EQ(bf16_up.Read(), bf16_dup.Read()) << "SwiGluBackwardBf16 dup";
}

TEST_P(OpsConformanceTest, CopyToBf16RoundsToNearestEvenAndCopyBf16KeepsBits) {
  // Ties both ways, the largest finite values, infinities, NaN and
  // subnormals, then random values of every magnitude.
  Floats x = {1.00390625f,
              1.01171875f,
              -1.00390625f,
              3.3895314e38f,
              -3.4028235e38f,
              std::numeric_limits<float>::infinity(),
              -std::numeric_limits<float>::infinity(),
              std::numeric_limits<float>::quiet_NaN(),
              1e-40f,
              -1e-45f,
              0.0f,
              -0.0f};
  for (float value : RandomFloats(4099, 34, 1e3f)) x.push_back(value);
  DeviceFloats device_x(backend(), x);
  DeviceBf16s out(backend(), static_cast<int64_t>(x.size()));
  ops().CopyToBf16(static_cast<int64_t>(x.size()), device_x.get(), out.get());
  EXPECT_EQ(out.Read(), ToBf16(x));

  // CopyBf16 moves the bits as they are (NaN's too), here from the middle
  // of the array to an odd count.
  const int64_t first = 5, count = static_cast<int64_t>(x.size()) - first;
  DeviceBf16s copied(backend(), count);
  ops().CopyBf16(count, out.get() + first, copied.get());
  const Bf16s rounded = ToBf16(x);
  EXPECT_EQ(copied.Read(), Bf16s(rounded.begin() + first, rounded.end()));
}

// A piece of columns rounded into its place in wider rows: the other
// columns of the destination keep their bits.
TEST_P(OpsConformanceTest, CopyMatrixToBf16RoundsAPieceIntoItsPlace) {
  const int64_t rows = 37, columns = 11, x_stride = 20, out_stride = 16;
  const int64_t out_column = 3;
  const Floats x = RandomFloats(rows * x_stride, 35, 1e3f);
  const Bf16s before = ToBf16(RandomFloats(rows * out_stride, 36));
  DeviceFloats device_x(backend(), x);
  DeviceBf16s out(backend(), before);
  ops().CopyMatrixToBf16(rows, columns, device_x.get() + 2, x_stride,
                         out.get() + out_column, out_stride);
  Bf16s expected = before;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < columns; ++c) {
      expected[r * out_stride + out_column + c] =
          ToBf16(Floats{x[r * x_stride + 2 + c]})[0];
    }
  }
  EXPECT_EQ(out.Read(), expected);
}

TEST_P(OpsConformanceTest, CopyFromBf16WidensExactly) {
  // Every bf16 bit pattern but the NaNs (which compare unequal), so each
  // exponent, both signs, the subnormals and the infinities; an odd count
  // leaves a vector's tail.
  Bf16s x;
  for (uint32_t bits = 0; bits <= 0xffff; ++bits) {
    const uint16_t value = static_cast<uint16_t>(bits);
    if (!std::isnan(FromBf16(value))) x.push_back(value);
  }
  x.push_back(0x3f80);
  DeviceBf16s device_x(backend(), x);
  DeviceFloats out(backend(), x.size());
  ops().CopyFromBf16(static_cast<int64_t>(x.size()), device_x.get(), out.get());
  ExpectSame(out.Read(), FromBf16(x), "CopyFromBf16");
}

}  // namespace
}  // namespace plateau::kernels::conformance
