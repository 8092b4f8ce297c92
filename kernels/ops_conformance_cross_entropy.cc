// Cross-entropy over the whole vocabulary and by blocks of it (Ring-DTP).
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/ops_conformance.h"

namespace plateau::kernels::conformance {
namespace {

constexpr int64_t kTokens = 50;
constexpr int64_t kVocab = 1001;  // odd: a ragged SIMD tail and block

Ints Targets() {
  Ints targets(kTokens);
  for (int64_t t = 0; t < kTokens; ++t) {
    targets[t] = static_cast<int32_t>((t * 37) % kVocab);
  }
  return targets;
}

Doubles ReferenceLosses(const Doubles& logits, const Ints& targets) {
  Doubles losses(kTokens);
  for (int64_t t = 0; t < kTokens; ++t) {
    const double* row = logits.data() + t * kVocab;
    const double max = *std::max_element(row, row + kVocab);
    double sum = 0;
    for (int64_t v = 0; v < kVocab; ++v) sum += std::exp(row[v] - max);
    losses[t] = max + std::log(sum) - row[targets[t]];
  }
  return losses;
}

TEST_P(OpsConformanceTest, CrossEntropyForwardAndBackward) {
  const Floats logits = RandomFloats(kTokens * kVocab, 31, 3.0f);
  const Ints targets = Targets();
  DeviceFloats device_logits(backend(), logits), losses(backend(), kTokens),
      logsumexp(backend(), kTokens);
  DeviceInts device_targets(backend(), targets);
  ops().CrossEntropyForward(kTokens, kVocab, device_logits.get(),
                            device_targets.get(), losses.get(),
                            logsumexp.get());
  const Doubles expected = ReferenceLosses(ToDoubles(logits), targets);
  ExpectClose(losses.Read(), expected, 1e-5, "cross-entropy losses");
  Doubles expected_logsumexp(kTokens);
  for (int64_t t = 0; t < kTokens; ++t) {
    expected_logsumexp[t] = expected[t] + logits[t * kVocab + targets[t]];
  }
  ExpectClose(logsumexp.Read(), expected_logsumexp, 1e-5,
              "cross-entropy logsumexp");

  const float scale = 1.0f / kTokens;
  ops().CrossEntropyBackward(kTokens, kVocab, /*vocab_begin=*/0,
                             device_targets.get(), logsumexp.get(), scale,
                             device_logits.get());
  const std::vector<size_t> coordinates =
      SampleCoordinates(logits.size(), 400, 7);
  ExpectGradient(
      device_logits.Read(),
      NumericGradient(
          [&](const Doubles& point) { return ReferenceLosses(point, targets); },
          ToDoubles(logits), Doubles(kTokens, scale), coordinates),
      coordinates, 1e-5, "cross-entropy backward");
}

// Folding blocks of columns (the last one short) gives the whole row's
// logsumexp and target logit, and each block's backward gives bitwise the
// plain backward's columns.
TEST_P(OpsConformanceTest, CrossEntropyByBlocksMatchesTheWholeRow) {
  const int64_t block = 300;
  const Floats logits = RandomFloats(kTokens * kVocab, 32, 3.0f);
  const Ints targets = Targets();
  DeviceFloats whole(backend(), logits), losses(backend(), kTokens),
      logsumexp(backend(), kTokens);
  DeviceInts device_targets(backend(), targets);
  ops().CrossEntropyForward(kTokens, kVocab, whole.get(), device_targets.get(),
                            losses.get(), logsumexp.get());
  const float scale = 0.25f;
  ops().CrossEntropyBackward(kTokens, kVocab, 0, device_targets.get(),
                             logsumexp.get(), scale, whole.get());
  const Floats whole_grads = whole.Read();

  DeviceFloats running(
      backend(), Floats(kTokens, -std::numeric_limits<float>::infinity()));
  DeviceFloats target_logits(backend(), Floats(kTokens, 0.0f));
  for (int64_t begin = 0; begin < kVocab; begin += block) {
    const int64_t width = std::min(block, kVocab - begin);
    Floats columns(kTokens * width), expected(kTokens * width);
    for (int64_t t = 0; t < kTokens; ++t) {
      std::copy_n(logits.begin() + t * kVocab + begin, width,
                  columns.begin() + t * width);
      std::copy_n(whole_grads.begin() + t * kVocab + begin, width,
                  expected.begin() + t * width);
    }
    DeviceFloats device_columns(backend(), columns);
    ops().CrossEntropyFoldBlock(kTokens, width, begin, device_columns.get(),
                                device_targets.get(), running.get(),
                                target_logits.get());
    ops().CrossEntropyBackward(kTokens, width, begin, device_targets.get(),
                               logsumexp.get(), scale, device_columns.get());
    ExpectSame(device_columns.Read(), expected, "blockwise backward");
  }
  const Floats folded = running.Read(), whole_logsumexp = logsumexp.Read();
  const Floats folded_targets = target_logits.Read(),
               whole_losses = losses.Read();
  for (int64_t t = 0; t < kTokens; ++t) {
    EXPECT_NEAR(folded[t], whole_logsumexp[t],
                1e-5f * (1 + std::abs(whole_logsumexp[t])))
        << t;
    EXPECT_EQ(folded_targets[t], logits[t * kVocab + targets[t]]) << t;
    EXPECT_NEAR(folded[t] - folded_targets[t], whole_losses[t],
                1e-5f * (1 + whole_losses[t]))
        << t;
  }
}

// Over bf16 logits, whole and by blocks: bitwise the float32 ops on the
// widened values, the backward's gradient rounded once.
TEST_P(OpsConformanceTest, CrossEntropyOfBf16LogitsIsOfTheirValues) {
  const int64_t block = 300;
  const Bf16s logits = ToBf16(RandomFloats(kTokens * kVocab, 33, 3.0f));
  const Ints targets = Targets();
  DeviceBf16s bf16_logits(backend(), logits);
  DeviceFloats float_logits(backend(), FromBf16(logits)),
      float_losses(backend(), kTokens), float_logsumexp(backend(), kTokens),
      bf16_losses(backend(), kTokens), bf16_logsumexp(backend(), kTokens);
  DeviceInts device_targets(backend(), targets);
  ops().CrossEntropyForward(kTokens, kVocab, float_logits.get(),
                            device_targets.get(), float_losses.get(),
                            float_logsumexp.get());
  ops().CrossEntropyForwardBf16(kTokens, kVocab, bf16_logits.get(),
                                device_targets.get(), bf16_losses.get(),
                                bf16_logsumexp.get());
  ExpectSame(bf16_losses.Read(), float_losses.Read(), "bf16 losses");
  ExpectSame(bf16_logsumexp.Read(), float_logsumexp.Read(), "bf16 logsumexp");

  const float scale = 0.25f;
  ops().CrossEntropyBackward(kTokens, kVocab, 0, device_targets.get(),
                             float_logsumexp.get(), scale, float_logits.get());
  ops().CrossEntropyBackwardBf16(kTokens, kVocab, 0, device_targets.get(),
                                 float_logsumexp.get(), scale,
                                 bf16_logits.get());
  EXPECT_EQ(bf16_logits.Read(), ToBf16(float_logits.Read()))
      << "CrossEntropyBackwardBf16";

  const Floats values = FromBf16(logits);
  DeviceFloats float_running(
      backend(), Floats(kTokens, -std::numeric_limits<float>::infinity()));
  DeviceFloats bf16_running(
      backend(), Floats(kTokens, -std::numeric_limits<float>::infinity()));
  DeviceFloats float_targets(backend(), Floats(kTokens, 0.0f)),
      bf16_targets(backend(), Floats(kTokens, 0.0f));
  for (int64_t begin = 0; begin < kVocab; begin += block) {
    const int64_t width = std::min(block, kVocab - begin);
    Floats columns(kTokens * width);
    for (int64_t t = 0; t < kTokens; ++t) {
      std::copy_n(values.begin() + t * kVocab + begin, width,
                  columns.begin() + t * width);
    }
    DeviceFloats float_columns(backend(), columns);
    DeviceBf16s bf16_columns(backend(), ToBf16(columns));
    ops().CrossEntropyFoldBlock(kTokens, width, begin, float_columns.get(),
                                device_targets.get(), float_running.get(),
                                float_targets.get());
    ops().CrossEntropyFoldBlockBf16(kTokens, width, begin, bf16_columns.get(),
                                    device_targets.get(), bf16_running.get(),
                                    bf16_targets.get());
    ops().CrossEntropyBackward(kTokens, width, begin, device_targets.get(),
                               float_logsumexp.get(), scale,
                               float_columns.get());
    ops().CrossEntropyBackwardBf16(kTokens, width, begin, device_targets.get(),
                                   float_logsumexp.get(), scale,
                                   bf16_columns.get());
    EXPECT_EQ(bf16_columns.Read(), ToBf16(float_columns.Read()))
        << "blockwise CrossEntropyBackwardBf16 from column " << begin;
  }
  ExpectSame(bf16_running.Read(), float_running.Read(), "bf16 folded");
  ExpectSame(bf16_targets.Read(), float_targets.Read(), "bf16 target logits");
}

}  // namespace
}  // namespace plateau::kernels::conformance
