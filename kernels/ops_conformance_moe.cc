// The router, the expert layout, and the gathers and combines of a dispatch.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <utility>
#include <vector>

#include "kernels/ops_conformance.h"

namespace plateau::kernels::conformance {
namespace {

struct RouterReference {
  Doubles probs;
  Ints expert_index;
  Doubles gates;
  Doubles logsumexp;   // softmax
  Doubles score_sums;  // sigmoid
};

// expert_bias: empty, or added to the scores for the choice only.
RouterReference ReferenceRouter(int64_t tokens, int64_t experts, int64_t top_k,
                                const Doubles& logits,
                                const Doubles& expert_bias = {},
                                RouterScore kind = RouterScore::kSoftmax) {
  RouterReference result{Doubles(tokens * experts), {}, {}, {}, {}};
  Doubles scores(experts);
  for (int64_t t = 0; t < tokens; ++t) {
    double* p = result.probs.data() + t * experts;
    const double* row = logits.data() + t * experts;
    double sum = 0;
    if (kind == RouterScore::kSigmoid) {
      for (int64_t e = 0; e < experts; ++e) {
        scores[e] = 1.0 / (1.0 + std::exp(-row[e]));
        sum += scores[e];
      }
      for (int64_t e = 0; e < experts; ++e) p[e] = scores[e] / sum;
      result.score_sums.push_back(sum);
    } else {
      const double max = *std::max_element(row, row + experts);
      for (int64_t e = 0; e < experts; ++e) {
        p[e] = std::exp(row[e] - max);
        sum += p[e];
      }
      for (int64_t e = 0; e < experts; ++e) scores[e] = p[e] /= sum;
      result.logsumexp.push_back(max + std::log(sum));
    }
    Ints order(experts);
    std::iota(order.begin(), order.end(), 0);
    auto score = [&](int32_t e) {
      return expert_bias.empty() ? scores[e] : scores[e] + expert_bias[e];
    };
    std::stable_sort(order.begin(), order.end(),
                     [&](int32_t a, int32_t b) { return score(a) > score(b); });
    double selected = 0;
    for (int64_t j = 0; j < top_k; ++j) selected += p[order[j]];
    for (int64_t j = 0; j < top_k; ++j) {
      result.expert_index.push_back(order[j]);
      result.gates.push_back(p[order[j]] / selected);
    }
  }
  return result;
}

TEST_P(OpsConformanceTest, RouterForwardAndBackward) {
  const int64_t tokens = 40, experts = 8, top_k = 2;
  const Floats logits = RandomFloats(tokens * experts, 21, 2.0f);
  const Floats dgates = RandomFloats(tokens * top_k, 22);
  const Floats dprobs_per_expert = RandomFloats(experts, 23);
  DeviceFloats device_logits(backend(), logits),
      probs(backend(), tokens * experts), gates(backend(), tokens * top_k),
      device_dgates(backend(), dgates), dlogits(backend(), tokens * experts),
      logsumexp(backend(), tokens);
  DeviceInts expert_index(backend(), tokens * top_k);
  const RouterShape shape{tokens, experts, top_k};
  ops().RouterForward(shape, device_logits.get(), /*expert_bias=*/nullptr,
                      probs.get(), expert_index.get(), gates.get(),
                      logsumexp.get(), /*score_sums=*/nullptr);
  const RouterReference expected =
      ReferenceRouter(tokens, experts, top_k, ToDoubles(logits));
  ExpectClose(probs.Read(), expected.probs, 1e-6, "router probs");
  EXPECT_EQ(expert_index.Read(), expected.expert_index);
  ExpectClose(gates.Read(), expected.gates, 1e-6, "router gates");
  ExpectClose(logsumexp.Read(), expected.logsumexp, 1e-6, "router logsumexp");

  // Loss = sum dgates * gates + sum_t sum_e dprobs_per_expert[e] * probs[t,e]
  // + (z_loss_scale / 2) sum_t logsumexp[t]^2, without the load-balancing
  // term (an empty span) and without the z-loss (a null logsumexp).
  const float z_loss_scale = 0.3f;
  const std::vector<size_t> coordinates =
      SampleCoordinates(logits.size(), 400, 4);
  for (const auto& [load_balancing, z_loss] :
       std::vector<std::pair<bool, bool>>{
           {true, false}, {false, false}, {false, true}, {true, true}}) {
    const absl::Span<const float> per_expert =
        load_balancing ? absl::MakeConstSpan(dprobs_per_expert)
                       : absl::Span<const float>();
    ops().RouterBackward(shape, probs.get(), expert_index.get(), gates.get(),
                         device_dgates.get(), per_expert,
                         z_loss ? logsumexp.get() : nullptr, z_loss_scale,
                         /*score_sums=*/nullptr, dlogits.get());
    Doubles weights(dgates.begin(), dgates.end());
    for (int64_t t = 0; t < tokens; ++t) {
      for (int64_t e = 0; e < experts; ++e) {
        weights.push_back(load_balancing ? dprobs_per_expert[e] : 0.0);
      }
    }
    weights.insert(weights.end(), tokens, z_loss ? z_loss_scale / 2 : 0.0);
    ExpectGradient(dlogits.Read(),
                   NumericGradient(
                       [&](const Doubles& point) {
                         RouterReference r =
                             ReferenceRouter(tokens, experts, top_k, point);
                         Doubles outputs = r.gates;
                         outputs.insert(outputs.end(), r.probs.begin(),
                                        r.probs.end());
                         for (const double value : r.logsumexp) {
                           outputs.push_back(value * value);
                         }
                         return outputs;
                       },
                       ToDoubles(logits), weights, coordinates),
                   coordinates, 1e-4, "RouterBackward");
  }
}

// Aux-loss-free balancing: the bias moves which experts are chosen, not
// the gates (renormalised probabilities) nor the gradient's form, which
// holds with the choice held fixed.
TEST_P(OpsConformanceTest, RouterChoosesByProbabilityPlusExpertBias) {
  const int64_t tokens = 40, experts = 8, top_k = 2;
  const Floats logits = RandomFloats(tokens * experts, 24, 2.0f);
  const Floats dgates = RandomFloats(tokens * top_k, 25);
  Floats expert_bias = RandomFloats(experts, 26, 0.3f);
  DeviceFloats device_logits(backend(), logits),
      device_bias(backend(), expert_bias), probs(backend(), tokens * experts),
      gates(backend(), tokens * top_k), device_dgates(backend(), dgates),
      dlogits(backend(), tokens * experts);
  DeviceInts expert_index(backend(), tokens * top_k);
  const RouterShape shape{tokens, experts, top_k};
  ops().RouterForward(shape, device_logits.get(), device_bias.get(),
                      probs.get(), expert_index.get(), gates.get(),
                      /*logsumexp=*/nullptr, /*score_sums=*/nullptr);
  const Doubles bias = ToDoubles(expert_bias);
  const RouterReference expected =
      ReferenceRouter(tokens, experts, top_k, ToDoubles(logits), bias);
  EXPECT_EQ(expert_index.Read(), expected.expert_index);
  EXPECT_NE(
      expected.expert_index,
      ReferenceRouter(tokens, experts, top_k, ToDoubles(logits)).expert_index)
      << "the bias changes no choice: the case tests nothing";
  ExpectClose(probs.Read(), expected.probs, 1e-6, "router probs");
  ExpectClose(gates.Read(), expected.gates, 1e-6, "router gates");

  ops().RouterBackward(shape, probs.get(), expert_index.get(), gates.get(),
                       device_dgates.get(), absl::Span<const float>(),
                       /*logsumexp=*/nullptr, 0.0f, /*score_sums=*/nullptr,
                       dlogits.get());
  const std::vector<size_t> coordinates =
      SampleCoordinates(logits.size(), 400, 5);
  ExpectGradient(
      dlogits.Read(),
      NumericGradient(
          [&](const Doubles& point) {
            return ReferenceRouter(tokens, experts, top_k, point, bias).gates;
          },
          ToDoubles(logits), ToDoubles(dgates), coordinates),
      coordinates, 1e-4, "RouterBackward with an expert bias");
}

// The sigmoid router: scores s = sigmoid(logits) choose (with a bias, which
// moves choices), probs = s / sum s, and the gradient through both, with
// and without the load-balancing term; logits large enough to saturate
// some sigmoids.
TEST_P(OpsConformanceTest, SigmoidRouterForwardAndBackward) {
  const int64_t tokens = 40, experts = 8, top_k = 3;
  const RouterShape shape{tokens, experts, top_k, RouterScore::kSigmoid};
  Floats logits = RandomFloats(tokens * experts, 27, 2.0f);
  logits[5] = 30.0f;
  logits[6] = -30.0f;
  const Floats dgates = RandomFloats(tokens * top_k, 28);
  const Floats dprobs_per_expert = RandomFloats(experts, 29);
  const Floats expert_bias = RandomFloats(experts, 30, 0.2f);
  const Doubles bias = ToDoubles(expert_bias);
  DeviceFloats device_logits(backend(), logits),
      device_bias(backend(), expert_bias), probs(backend(), tokens * experts),
      gates(backend(), tokens * top_k), device_dgates(backend(), dgates),
      dlogits(backend(), tokens * experts), score_sums(backend(), tokens);
  DeviceInts expert_index(backend(), tokens * top_k);
  ops().RouterForward(shape, device_logits.get(), device_bias.get(),
                      probs.get(), expert_index.get(), gates.get(),
                      /*logsumexp=*/nullptr, score_sums.get());
  const RouterReference expected = ReferenceRouter(
      tokens, experts, top_k, ToDoubles(logits), bias, RouterScore::kSigmoid);
  EXPECT_EQ(expert_index.Read(), expected.expert_index);
  EXPECT_NE(expected.expert_index,
            ReferenceRouter(tokens, experts, top_k, ToDoubles(logits), {},
                            RouterScore::kSigmoid)
                .expert_index)
      << "the bias changes no choice";
  EXPECT_NE(expected.expert_index,
            ReferenceRouter(tokens, experts, top_k, ToDoubles(logits), bias)
                .expert_index)
      << "the softmax chooses the same experts";
  ExpectClose(probs.Read(), expected.probs, 1e-6, "sigmoid router probs");
  ExpectClose(gates.Read(), expected.gates, 1e-6, "sigmoid router gates");
  ExpectClose(score_sums.Read(), expected.score_sums, 1e-6,
              "sigmoid router score sums");

  const std::vector<size_t> coordinates =
      SampleCoordinates(logits.size(), 400, 6);
  for (const bool load_balancing : {false, true}) {
    ops().RouterBackward(shape, probs.get(), expert_index.get(), gates.get(),
                         device_dgates.get(),
                         load_balancing ? absl::MakeConstSpan(dprobs_per_expert)
                                        : absl::Span<const float>(),
                         /*logsumexp=*/nullptr, 0.0f, score_sums.get(),
                         dlogits.get());
    Doubles weights(dgates.begin(), dgates.end());
    for (int64_t t = 0; t < tokens; ++t) {
      for (int64_t e = 0; e < experts; ++e) {
        weights.push_back(load_balancing ? dprobs_per_expert[e] : 0.0);
      }
    }
    ExpectGradient(
        dlogits.Read(),
        NumericGradient(
            [&](const Doubles& point) {
              RouterReference r = ReferenceRouter(tokens, experts, top_k, point,
                                                  bias, RouterScore::kSigmoid);
              Doubles outputs = r.gates;
              outputs.insert(outputs.end(), r.probs.begin(), r.probs.end());
              return outputs;
            },
            ToDoubles(logits), weights, coordinates),
        coordinates, 1e-4, "sigmoid RouterBackward");
  }
}

TEST_P(OpsConformanceTest, RouterBreaksTiesTowardTheLowerExpert) {
  const int64_t tokens = 700, experts = 6, top_k = 2;
  Floats logits = RandomFloats(tokens * experts, 19);
  // Every tenth token has all-equal logits; token 1 ties its top two.
  for (int64_t t = 0; t < tokens; t += 10) {
    std::fill_n(logits.begin() + t * experts, experts, 0.25f);
  }
  std::fill_n(logits.begin() + experts, experts, 1.0f);
  logits[experts + 3] = logits[experts + 4] = 3.0f;
  DeviceFloats device_logits(backend(), logits),
      probs(backend(), tokens * experts), gates(backend(), tokens * top_k);
  DeviceInts expert_index(backend(), tokens * top_k);
  ops().RouterForward({tokens, experts, top_k}, device_logits.get(),
                      /*expert_bias=*/nullptr, probs.get(), expert_index.get(),
                      gates.get(), /*logsumexp=*/nullptr,
                      /*score_sums=*/nullptr);
  const Ints chosen = expert_index.Read();
  EXPECT_EQ(
      chosen,
      ReferenceRouter(tokens, experts, top_k, ToDoubles(logits)).expert_index);
  EXPECT_EQ(chosen[0], 0);
  EXPECT_EQ(chosen[1], 1);
  EXPECT_EQ(chosen[2], 3);
  EXPECT_EQ(chosen[3], 4);
  EXPECT_FLOAT_EQ(gates.Read()[2], 0.5f);
}

// NaN logits (a diverged step) still route every token to real experts,
// distinct ones: nothing downstream indexes outside the expert bank.
TEST_P(OpsConformanceTest, RouterPicksRealExpertsEvenFromNaNLogits) {
  const int64_t tokens = 3, experts = 5, top_k = 2;
  Floats logits = RandomFloats(tokens * experts, 19);
  logits[1] = std::nanf("");
  for (int64_t e = 0; e < experts; ++e) logits[experts + e] = std::nanf("");
  DeviceFloats device_logits(backend(), logits),
      probs(backend(), tokens * experts), gates(backend(), tokens * top_k);
  DeviceInts expert_index(backend(), tokens * top_k);
  ops().RouterForward({tokens, experts, top_k}, device_logits.get(),
                      /*expert_bias=*/nullptr, probs.get(), expert_index.get(),
                      gates.get(), /*logsumexp=*/nullptr,
                      /*score_sums=*/nullptr);
  const Ints chosen = expert_index.Read();
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t j = 0; j < top_k; ++j) {
      EXPECT_GE(chosen[t * top_k + j], 0) << t;
      EXPECT_LT(chosen[t * top_k + j], experts) << t;
    }
    EXPECT_NE(chosen[t * top_k], chosen[t * top_k + 1]) << t;
  }
}

TEST_P(OpsConformanceTest, ExpertLayoutIsAStableSortByExpert) {
  // 300 experts take a GPU radix sort two passes; 6000 assignments, two
  // tiles. Random slots may name one expert twice.
  for (const int64_t experts : {1, 5, 8, 300}) {
    const int64_t tokens = 3000, top_k = 2, assignments = tokens * top_k;
    const Ints expert_index = RandomInts(assignments, experts, 22);
    DeviceInts device_index(backend(), expert_index),
        assignment_row(backend(), assignments),
        row_token(backend(), assignments);
    std::vector<int64_t> offsets(experts + 1);
    ops().ComputeExpertLayout(tokens, experts, top_k, device_index.get(),
                              assignment_row.get(), row_token.get(),
                              absl::MakeSpan(offsets));
    // The reference: a counting sort, by token then slot within an expert.
    std::vector<int64_t> expected_offsets(experts + 1, 0);
    for (int32_t e : expert_index) ++expected_offsets[e + 1];
    std::partial_sum(expected_offsets.begin(), expected_offsets.end(),
                     expected_offsets.begin());
    std::vector<int64_t> next(expected_offsets.begin(),
                              expected_offsets.end() - 1);
    Ints expected_assignment_row(assignments), expected_row_token(assignments);
    for (int64_t a = 0; a < assignments; ++a) {
      const int64_t row = next[expert_index[a]]++;
      expected_assignment_row[a] = static_cast<int32_t>(row);
      expected_row_token[row] = static_cast<int32_t>(a / top_k);
    }
    EXPECT_EQ(offsets, expected_offsets) << experts << " experts";
    EXPECT_EQ(assignment_row.Read(), expected_assignment_row)
        << experts << " experts";
    EXPECT_EQ(row_token.Read(), expected_row_token) << experts << " experts";
  }
}

// A dispatch's permutation: token t's slot j goes to row
// assignment_row[t * top_k + j], a permutation of the rows.
struct Permutation {
  Ints assignment_row;
  Ints row_token;
};

Permutation RandomPermutation(int64_t tokens, int64_t top_k, int seed) {
  Permutation permutation{Ints(tokens * top_k), Ints(tokens * top_k)};
  std::iota(permutation.assignment_row.begin(),
            permutation.assignment_row.end(), 0);
  std::shuffle(permutation.assignment_row.begin(),
               permutation.assignment_row.end(), std::mt19937(seed));
  for (int64_t a = 0; a < tokens * top_k; ++a) {
    permutation.row_token[permutation.assignment_row[a]] =
        static_cast<int32_t>(a / top_k);
  }
  return permutation;
}

TEST_P(OpsConformanceTest, GatherAndCombineAndTheirBackward) {
  const int64_t tokens = 90, top_k = 2, dim = 33, rows = tokens * top_k;
  const Permutation permutation = RandomPermutation(tokens, top_k, 24);
  const Floats x = RandomFloats(tokens * dim, 25);
  const Floats expert_out = RandomFloats(rows * dim, 26);
  const Floats gates = RandomFloats(rows, 27);
  const Floats dout = RandomFloats(tokens * dim, 29);
  const Floats dx_before = RandomFloats(tokens * dim, 30);
  DeviceInts assignment_row(backend(), permutation.assignment_row),
      row_token(backend(), permutation.row_token);
  DeviceFloats device_x(backend(), x), device_expert_out(backend(), expert_out),
      device_gates(backend(), gates), device_dout(backend(), dout),
      gathered(backend(), rows * dim), combined(backend(), tokens * dim),
      drows(backend(), rows * dim), dgates(backend(), rows),
      dx(backend(), dx_before);

  ops().GatherRows(rows, dim, device_x.get(), row_token.get(), gathered.get());
  Floats expected(rows * dim);
  for (int64_t r = 0; r < rows; ++r) {
    std::copy_n(x.begin() + permutation.row_token[r] * dim, dim,
                expected.begin() + r * dim);
  }
  ExpectSame(gathered.Read(), expected, "GatherRows");

  // out = residual + sum_j g_j rows[row(t, j)], out of place and in place.
  auto reference_combine = [&](const Doubles& out_rows, const Doubles& g) {
    Doubles out = ToDoubles(x);
    for (int64_t t = 0; t < tokens; ++t) {
      for (int64_t j = 0; j < top_k; ++j) {
        const int64_t row = permutation.assignment_row[t * top_k + j];
        for (int64_t d = 0; d < dim; ++d) {
          out[t * dim + d] += g[t * top_k + j] * out_rows[row * dim + d];
        }
      }
    }
    return out;
  };
  ops().CombineRows(tokens, top_k, dim, device_expert_out.get(),
                    assignment_row.get(), device_gates.get(), device_x.get(),
                    combined.get());
  const Floats combined_out_of_place = combined.Read();
  ExpectClose(combined_out_of_place,
              reference_combine(ToDoubles(expert_out), ToDoubles(gates)), 1e-6,
              "CombineRows");
  DeviceFloats in_place(backend(), x);
  ops().CombineRows(tokens, top_k, dim, device_expert_out.get(),
                    assignment_row.get(), device_gates.get(), in_place.get(),
                    in_place.get());
  ExpectSame(in_place.Read(), combined_out_of_place, "CombineRows in place");

  ops().CombineRowsBackward(tokens, top_k, dim, device_expert_out.get(),
                            assignment_row.get(), device_gates.get(),
                            device_dout.get(), drows.get(), dgates.get());
  const Floats drows_read = drows.Read();
  const std::vector<size_t> row_coordinates =
      SampleCoordinates(drows_read.size(), 300, 5);
  ExpectGradient(drows_read,
                 NumericGradient(
                     [&](const Doubles& point) {
                       return reference_combine(point, ToDoubles(gates));
                     },
                     ToDoubles(expert_out), ToDoubles(dout), row_coordinates),
                 row_coordinates, 1e-5, "CombineRows drows");
  const std::vector<size_t> gate_coordinates = SampleCoordinates(rows, 300, 6);
  ExpectGradient(dgates.Read(),
                 NumericGradient(
                     [&](const Doubles& point) {
                       return reference_combine(ToDoubles(expert_out), point);
                     },
                     ToDoubles(gates), ToDoubles(dout), gate_coordinates),
                 gate_coordinates, 1e-5, "CombineRows dgates");

  // dx[t] += drows[row(t, 0)], then += drows[row(t, 1)]: in slot order.
  ops().GatherRowsBackward(tokens, top_k, dim, drows.get(),
                           assignment_row.get(), dx.get());
  Floats expected_dx = dx_before;
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t j = 0; j < top_k; ++j) {
      const int64_t row = permutation.assignment_row[t * top_k + j];
      for (int64_t d = 0; d < dim; ++d) {
        expected_dx[t * dim + d] += drows_read[row * dim + d];
      }
    }
  }
  ExpectSame(dx.Read(), expected_dx, "GatherRowsBackward");
}

// The rows (and gates) of the assignments in `chunk` hold what they held
// before.
void ExpectRowsUntouched(const Ints& chunk, int64_t dim, const Floats& drows,
                         const Floats& drows_before, const Floats& dgates,
                         const Floats& dgates_before) {
  for (size_t a = 0; a < chunk.size(); ++a) {
    if (chunk[a] < 0) continue;
    const int64_t row = chunk[a];
    EXPECT_EQ(dgates[a], dgates_before[a]) << "assignment " << a;
    for (int64_t d = 0; d < dim; ++d) {
      ASSERT_EQ(drows[row * dim + d], drows_before[row * dim + d])
          << "row " << row;
    }
  }
}

TEST_P(OpsConformanceTest, GatherRowsBf16GathersTheRowsAsTheyAre) {
  const int64_t tokens = 90, top_k = 2, dim = 33, rows = tokens * top_k;
  const Permutation permutation = RandomPermutation(tokens, top_k, 34);
  const Bf16s x = ToBf16(RandomFloats(tokens * dim, 35));
  DeviceInts row_token(backend(), permutation.row_token);
  DeviceFloats float_x(backend(), FromBf16(x)), gathered(backend(), rows * dim);
  DeviceBf16s bf16_x(backend(), x), bf16_gathered(backend(), rows * dim);
  ops().GatherRows(rows, dim, float_x.get(), row_token.get(), gathered.get());
  ops().GatherRowsBf16(rows, dim, bf16_x.get(), row_token.get(),
                       bf16_gathered.get());
  EXPECT_EQ(bf16_gathered.Read(), ToBf16(gathered.Read()));
}

// A backward that keeps no normed tensor gathers its rows from the norm's
// input and statistics: bitwise the rows RmsNormForward made, gathered, in
// either type.
TEST_P(OpsConformanceTest, GatherRmsNormedRowsAreTheNormedRowsGathered) {
  const int64_t tokens = 90, top_k = 2, dim = 33, rows = tokens * top_k;
  const Permutation permutation = RandomPermutation(tokens, top_k, 36);
  const Floats x = RandomFloats(tokens * dim, 37);
  const Floats weight = RandomFloats(dim, 38);
  DeviceInts row_token(backend(), permutation.row_token);
  DeviceFloats device_x(backend(), x), device_weight(backend(), weight),
      normed(backend(), tokens * dim), inverse_rms(backend(), tokens),
      expected(backend(), rows * dim), gathered(backend(), rows * dim);
  DeviceBf16s bf16_normed(backend(), tokens * dim),
      bf16_expected(backend(), rows * dim),
      bf16_gathered(backend(), rows * dim);
  ops().RmsNormForward(tokens, dim, device_x.get(), device_weight.get(), 1e-5f,
                       normed.get(), inverse_rms.get());
  ops().GatherRows(rows, dim, normed.get(), row_token.get(), expected.get());
  ops().RmsNormForwardToBf16(tokens, dim, device_x.get(), device_weight.get(),
                             1e-5f, bf16_normed.get(), inverse_rms.get());
  ops().GatherRowsBf16(rows, dim, bf16_normed.get(), row_token.get(),
                       bf16_expected.get());
  ops().GatherRmsNormedRows(rows, dim, device_x.get(), inverse_rms.get(),
                            device_weight.get(), row_token.get(),
                            gathered.get());
  ops().GatherRmsNormedRowsToBf16(rows, dim, device_x.get(), inverse_rms.get(),
                                  device_weight.get(), row_token.get(),
                                  bf16_gathered.get());
  EXPECT_EQ(gathered.Read(), expected.Read());
  EXPECT_EQ(bf16_gathered.Read(), bf16_expected.Read());
}

// The experts' input gradients stored as bf16 sum into their tokens'
// gradients bitwise as their exact float32 values do; a chunk's negative
// rows are skipped alike.
TEST_P(OpsConformanceTest, GatherRowsBackwardOfBf16RowsIsItsFloat32Values) {
  const int64_t tokens = 90, top_k = 3, dim = 37, rows = tokens * top_k;
  const Permutation permutation = RandomPermutation(tokens, top_k, 51);
  Ints assignment = permutation.assignment_row;
  for (int64_t a = 0; a < rows; a += 5) assignment[a] = -1;
  const Bf16s drows = ToBf16(RandomFloats(rows * dim, 52));
  const Floats dx_before = RandomFloats(tokens * dim, 53);
  DeviceInts assignment_row(backend(), assignment);
  DeviceBf16s bf16_drows(backend(), drows);
  DeviceFloats float_drows(backend(), FromBf16(drows)),
      from_float(backend(), dx_before), from_bf16(backend(), dx_before);
  ops().GatherRowsBackward(tokens, top_k, dim, float_drows.get(),
                           assignment_row.get(), from_float.get());
  ops().GatherRowsBackwardBf16(tokens, top_k, dim, bf16_drows.get(),
                               assignment_row.get(), from_bf16.get());
  const Floats expected = from_float.Read();
  ExpectSame(from_bf16.Read(), expected, "GatherRowsBackwardBf16");
  // And the float32 op did add the rows it was given.
  EXPECT_NE(expected, dx_before);
}

// The experts' outputs stored as bf16 combine, and differentiate, bitwise as
// their exact float32 values do, the row gradients rounded to bf16 (from a
// bf16 dout, as the float32 op from its exact values); a chunk's negative
// rows are skipped alike.
TEST_P(OpsConformanceTest, CombineRowsOfBf16RowsIsCombineRowsOfTheirValues) {
  const int64_t tokens = 90, top_k = 3, dim = 37, rows = tokens * top_k;
  const Permutation permutation = RandomPermutation(tokens, top_k, 41);
  Ints assignment = permutation.assignment_row;
  for (int64_t a = 0; a < rows; a += 7) assignment[a] = -1;
  const Bf16s expert_out = ToBf16(RandomFloats(rows * dim, 42));
  const Floats residual = RandomFloats(tokens * dim, 43);
  const Floats gates = RandomFloats(rows, 44);
  const Bf16s dout = ToBf16(RandomFloats(tokens * dim, 45));
  DeviceInts assignment_row(backend(), assignment);
  DeviceBf16s bf16_rows(backend(), expert_out), bf16_dout(backend(), dout);
  DeviceFloats float_rows(backend(), FromBf16(expert_out)),
      device_gates(backend(), gates), float_dout(backend(), FromBf16(dout)),
      device_residual(backend(), residual), from_float(backend(), tokens * dim),
      from_bf16(backend(), tokens * dim), in_place(backend(), residual),
      float_drows(backend(), rows * dim), float_dgates(backend(), rows),
      bf16_dgates(backend(), rows);
  DeviceBf16s bf16_drows(backend(), rows * dim);

  ops().CombineRows(tokens, top_k, dim, float_rows.get(), assignment_row.get(),
                    device_gates.get(), device_residual.get(),
                    from_float.get());
  ops().CombineRowsBf16(tokens, top_k, dim, bf16_rows.get(),
                        assignment_row.get(), device_gates.get(),
                        device_residual.get(), from_bf16.get());
  ops().CombineRowsBf16(tokens, top_k, dim, bf16_rows.get(),
                        assignment_row.get(), device_gates.get(),
                        in_place.get(), in_place.get());
  ExpectSame(from_bf16.Read(), from_float.Read(), "CombineRowsBf16");
  ExpectSame(in_place.Read(), from_float.Read(), "CombineRowsBf16 in place");

  ops().CombineRowsBackward(tokens, top_k, dim, float_rows.get(),
                            assignment_row.get(), device_gates.get(),
                            float_dout.get(), float_drows.get(),
                            float_dgates.get());
  ops().CombineRowsBackwardBf16(
      tokens, top_k, dim, bf16_rows.get(), assignment_row.get(),
      device_gates.get(), bf16_dout.get(), bf16_drows.get(), bf16_dgates.get());
  const Floats float_drows_read = float_drows.Read();
  const Bf16s bf16_drows_read = bf16_drows.Read();
  const Floats float_dgates_read = float_dgates.Read(),
               bf16_dgates_read = bf16_dgates.Read();
  // Only the chunk's rows and gates are written.
  for (int64_t a = 0; a < rows; ++a) {
    const int64_t row = assignment[a];
    if (row < 0) continue;
    EXPECT_EQ(bf16_dgates_read[a], float_dgates_read[a]) << "dgates " << a;
    for (int64_t d = 0; d < dim; ++d) {
      EXPECT_EQ(bf16_drows_read[row * dim + d],
                ToBf16(float_drows_read[row * dim + d]))
          << "drows row " << row << " column " << d;
    }
  }
}

// PipelinedLLEP passes one chunk of the assignments at a time, the others'
// rows negative. Slot 0's copies first, then the other slots', add in the
// same order as one pass, so the chunks give bitwise what one pass gives, and
// the backward leaves the rows of other chunks as they were.
TEST_P(OpsConformanceTest, ChunksOfADispatchGiveBitwiseTheWholePass) {
  const int64_t tokens = 90, top_k = 2, dim = 33, rows = tokens * top_k;
  const Permutation permutation = RandomPermutation(tokens, top_k, 31);
  Ints first_slot = permutation.assignment_row;
  Ints other_slots = permutation.assignment_row;
  for (int64_t a = 0; a < rows; ++a) {
    (a % top_k == 0 ? other_slots : first_slot)[a] = -1;
  }
  const Floats residual = RandomFloats(tokens * dim, 32);
  const Floats expert_out = RandomFloats(rows * dim, 33);
  const Floats gates = RandomFloats(rows, 34);
  const Floats dout = RandomFloats(tokens * dim, 35);
  const Floats dx_before = RandomFloats(tokens * dim, 36);
  const Floats drows_before = RandomFloats(rows * dim, 37);
  const Floats dgates_before = RandomFloats(rows, 38);
  DeviceInts whole(backend(), permutation.assignment_row),
      first(backend(), first_slot), others(backend(), other_slots);
  DeviceFloats device_expert_out(backend(), expert_out),
      device_gates(backend(), gates), device_dout(backend(), dout);

  struct Pass {
    Floats combined, drows, dgates, dx;
  };
  auto run = [&](std::vector<DeviceInts*> chunks,
                 bool check_untouched) -> Pass {
    DeviceFloats combined(backend(), residual), drows(backend(), drows_before),
        dgates(backend(), dgates_before), dx(backend(), dx_before);
    for (DeviceInts* chunk : chunks) {
      ops().CombineRows(tokens, top_k, dim, device_expert_out.get(),
                        chunk->get(), device_gates.get(), combined.get(),
                        combined.get());
      ops().CombineRowsBackward(tokens, top_k, dim, device_expert_out.get(),
                                chunk->get(), device_gates.get(),
                                device_dout.get(), drows.get(), dgates.get());
      if (check_untouched) {
        // Only this chunk's rows so far: the other slots' are as they were.
        ExpectRowsUntouched(other_slots, dim, drows.Read(), drows_before,
                            dgates.Read(), dgates_before);
        check_untouched = false;
      }
      ops().GatherRowsBackward(tokens, top_k, dim, drows.get(), chunk->get(),
                               dx.get());
    }
    return Pass{combined.Read(), drows.Read(), dgates.Read(), dx.Read()};
  };
  const Pass one_pass = run({&whole}, false);
  const Pass chunked = run({&first, &others}, true);
  ExpectSame(chunked.combined, one_pass.combined, "CombineRows by chunks");
  ExpectSame(chunked.drows, one_pass.drows, "CombineRowsBackward drows");
  ExpectSame(chunked.dgates, one_pass.dgates, "CombineRowsBackward dgates");
  ExpectSame(chunked.dx, one_pass.dx, "GatherRowsBackward by chunks");
}

}  // namespace
}  // namespace plateau::kernels::conformance
