// AdamW against its formula (kernels/adamw.h) in float64; the tiered
// optimizers' passes against the single-threaded kernels of kernels/cpu,
// over slices that cut rows, with every kind of momentum and second moment.
#include <cmath>
#include <cstdlib>
#include <vector>

#include "kernels/cpu/tiered_update.h"
#include "kernels/ops_conformance.h"

namespace plateau::kernels::conformance {
namespace {

TEST_P(OpsConformanceTest, AdamWMatchesItsFormula) {
  const int64_t count = 100003;
  AdamWHyperparameters hyper;
  hyper.learning_rate = 1e-2f;
  hyper.weight_decay = 0.1f;
  hyper.step = 3;
  const AdamWCoefficients coefficients = ComputeAdamWCoefficients(hyper);
  const Floats params = RandomFloats(count, 32);
  const Floats m = RandomFloats(count, 33, 0.01f);
  const Floats grads = RandomFloats(count, 34, 0.1f);
  Floats v(count);
  for (int64_t i = 0; i < count; ++i) v[i] = 1e-4f * std::abs(params[i]);
  DeviceFloats device_params(backend(), params), device_grads(backend(), grads),
      device_m(backend(), m), device_v(backend(), v);
  ops().AdamWUpdate(coefficients, count, device_params.get(),
                    device_grads.get(), device_m.get(), device_v.get());
  Doubles expected_params(count), expected_m(count), expected_v(count);
  const double lr = hyper.learning_rate, beta1 = hyper.beta1,
               beta2 = hyper.beta2;
  const double correction1 = 1 - std::pow(beta1, 3.0);
  const double correction2 = 1 - std::pow(beta2, 3.0);
  for (int64_t i = 0; i < count; ++i) {
    const double g = grads[i];
    expected_m[i] = beta1 * m[i] + (1 - beta1) * g;
    expected_v[i] = beta2 * v[i] + (1 - beta2) * g * g;
    expected_params[i] =
        params[i] * (1 - lr * hyper.weight_decay) -
        lr / correction1 * expected_m[i] /
            (std::sqrt(expected_v[i]) / std::sqrt(correction2) + hyper.epsilon);
  }
  ExpectClose(device_params.Read(), expected_params, 1e-5, "AdamW params");
  ExpectClose(device_m.Read(), expected_m, 1e-6, "AdamW m");
  ExpectClose(device_v.Read(), expected_v, 1e-6, "AdamW v");
}

// One tensor's state for the tiered passes, on the host.
struct TieredTensor {
  int64_t rows, columns;
  Floats params, grads, momentum, second_moment, row_roots, column_roots,
      row_sums, column_sums, row_statistics, column_statistics;
  std::vector<uint16_t> momentum_bfloat16;
};

TieredTensor MakeTensor(int64_t rows, int64_t columns, int seed) {
  TieredTensor t;
  t.rows = rows;
  t.columns = columns;
  const int64_t count = rows * columns;
  t.params = RandomFloats(count, seed);
  t.grads = RandomFloats(count, seed + 1, 0.1f);
  t.momentum = RandomFloats(count, seed + 2, 0.01f);
  t.second_moment = RandomFloats(count, seed + 3, 1e-3f);
  for (float& v : t.second_moment) v = std::abs(v);
  t.row_roots = RandomFloats(rows, seed + 4);
  t.column_roots = RandomFloats(columns, seed + 5);
  for (float& v : t.row_roots) v = 0.1f + std::abs(v);
  for (float& v : t.column_roots) v = 0.1f + std::abs(v);
  t.row_sums = RandomFloats(rows, seed + 6);
  t.column_sums = RandomFloats(columns, seed + 7);
  t.row_statistics = t.row_roots;
  t.column_statistics = t.column_roots;
  for (float m : t.momentum) t.momentum_bfloat16.push_back(FloatToBfloat16(m));
  return t;
}

// The same tensor's arrays on the device.
struct DeviceTensor {
  DeviceTensor(ConformanceBackend& backend, const TieredTensor& t)
      : params(backend, t.params),
        grads(backend, t.grads),
        momentum(backend, t.momentum),
        second_moment(backend, t.second_moment),
        row_roots(backend, t.row_roots),
        column_roots(backend, t.column_roots),
        row_sums(backend, t.row_sums),
        column_sums(backend, t.column_sums),
        row_statistics(backend, t.row_statistics),
        column_statistics(backend, t.column_statistics),
        momentum_bfloat16(backend, t.momentum_bfloat16) {}
  DeviceFloats params, grads, momentum, second_moment, row_roots, column_roots,
      row_sums, column_sums, row_statistics, column_statistics;
  DeviceArray<uint16_t> momentum_bfloat16;
};

template <typename T>
T* Data(std::vector<T>& v) {
  return v.data();
}
template <typename T>
T* Data(DeviceArray<T>& v) {
  return v.get();
}

enum class Kind { kExact, kFactored, kFactoredBfloat16Momentum, kNoMomentum };

// Elements [begin, end) of the tensor as a slice of `kind`, pointing into
// the host arrays or the device ones.
template <typename Arrays>
TieredSlice SliceOf(Arrays& a, const TieredTensor& t, Kind kind, int64_t begin,
                    int64_t end, bool whole) {
  auto at = [](auto& array, int64_t offset) { return Data(array) + offset; };
  TieredSlice s;
  s.count = end - begin;
  s.params = at(a.params, begin);
  s.grads = at(a.grads, begin);
  s.decay = begin % 2 == 0;
  s.update_scale = 0.75f;
  s.second_moment_scale = 1.7f;
  s.first_element = begin;
  s.rows = t.rows;
  s.columns = t.columns;
  if (kind == Kind::kFactoredBfloat16Momentum) {
    s.momentum_bfloat16 = at(a.momentum_bfloat16, begin);
  } else if (kind != Kind::kNoMomentum) {
    s.momentum = at(a.momentum, begin);
  }
  if (kind == Kind::kExact) {
    s.second_moment = at(a.second_moment, begin);
  } else {
    s.row_roots = Data(a.row_roots);
    s.column_roots = Data(a.column_roots);
    s.row_sums = Data(a.row_sums);
    s.column_sums = Data(a.column_sums);
    if (whole) {
      s.row_statistics = Data(a.row_statistics);
      s.column_statistics = Data(a.column_statistics);
    }
  }
  return s;
}

void ExpectSameState(DeviceTensor& device, const TieredTensor& host,
                     double tolerance) {
  ExpectClose(device.params.Read(), ToDoubles(host.params), tolerance,
              "params");
  ExpectClose(device.momentum.Read(), ToDoubles(host.momentum), tolerance,
              "momentum");
  ExpectClose(device.second_moment.Read(), ToDoubles(host.second_moment),
              tolerance, "second moment");
  ExpectClose(device.row_sums.Read(), ToDoubles(host.row_sums), tolerance,
              "row sums");
  ExpectClose(device.column_sums.Read(), ToDoubles(host.column_sums), tolerance,
              "column sums");
  ExpectClose(device.row_statistics.Read(), ToDoubles(host.row_statistics),
              tolerance, "row statistics");
  ExpectClose(device.column_statistics.Read(),
              ToDoubles(host.column_statistics), tolerance,
              "column statistics");
  // Rounding to bfloat16 can turn float differences (fused multiply-adds or
  // not) into one bfloat16 ulp: adjacent bit patterns.
  const std::vector<uint16_t> momentum = device.momentum_bfloat16.Read();
  for (size_t i = 0; i < momentum.size(); ++i) {
    ASSERT_LE(std::abs(int{momentum[i]} - int{host.momentum_bfloat16[i]}), 1)
        << "bfloat16 momentum at " << i;
  }
}

TieredCoefficients Coefficients() {
  return ComputeTieredCoefficients(1e-2f, 0.9f, 0.99f, 1e-8f, 0.1f, 4);
}

TEST_P(OpsConformanceTest, TieredPassesOverSlicesThatCutRows) {
  for (Kind kind : {Kind::kExact, Kind::kFactored,
                    Kind::kFactoredBfloat16Momentum, Kind::kNoMomentum}) {
    // Two tensors, the larger cut in three slices mid-row.
    TieredTensor small = MakeTensor(3, 5, 40), large = MakeTensor(170, 130, 50);
    DeviceTensor device_small(backend(), small), device_large(backend(), large);
    const int64_t cuts[] = {0, 77, 20000, large.rows * large.columns};
    std::vector<TieredSlice> host_slices = {
        SliceOf(small, small, kind, 0, 15, false)};
    std::vector<TieredSlice> device_slices = {
        SliceOf(device_small, small, kind, 0, 15, false)};
    for (int i = 0; i < 3; ++i) {
      host_slices.push_back(
          SliceOf(large, large, kind, cuts[i], cuts[i + 1], false));
      device_slices.push_back(
          SliceOf(device_large, large, kind, cuts[i], cuts[i + 1], false));
    }
    if (kind != Kind::kExact) {
      // The small tensor's sums, then each of the large one's slices alone
      // (slices sharing sums are not in one call).
      for (size_t i = 0; i < host_slices.size(); ++i) {
        ops().AccumulateSquares(absl::MakeConstSpan(&device_slices[i], 1));
        cpu::AccumulateSquares(host_slices[i]);
      }
    }
    std::vector<double> sums(host_slices.size());
    ops().TieredMeasure(Coefficients(), device_slices, absl::MakeSpan(sums));
    for (size_t i = 0; i < sums.size(); ++i) {
      const double expected =
          cpu::TieredMeasure(Coefficients(), host_slices[i]);
      EXPECT_NEAR(sums[i], expected, 1e-4 * (1 + expected)) << i;
    }
    ops().TieredApply(Coefficients(), device_slices);
    for (const TieredSlice& slice : host_slices) {
      cpu::TieredApply(Coefficients(), slice);
    }
    ExpectSameState(device_small, small, 1e-4);
    ExpectSameState(device_large, large, 1e-4);
  }
}

TEST_P(OpsConformanceTest, TieredUpdateOfWholeTensors) {
  for (Kind kind :
       {Kind::kExact, Kind::kFactored, Kind::kFactoredBfloat16Momentum}) {
    TieredTensor a = MakeTensor(40, 70, 60), b = MakeTensor(1, 300, 70);
    DeviceTensor device_a(backend(), a), device_b(backend(), b);
    const std::vector<TieredSlice> device_slices = {
        SliceOf(device_a, a, kind, 0, 40 * 70, true),
        SliceOf(device_b, b, kind, 0, 300, true)};
    // A clip threshold that clips: the update's rms is well above it.
    ops().TieredUpdate(Coefficients(), device_slices, 0.05f);
    cpu::TieredUpdate(Coefficients(), SliceOf(a, a, kind, 0, 40 * 70, true),
                      0.05f);
    cpu::TieredUpdate(Coefficients(), SliceOf(b, b, kind, 0, 300, true), 0.05f);
    ExpectSameState(device_a, a, 1e-4);
    ExpectSameState(device_b, b, 1e-4);
  }
}

TEST_P(OpsConformanceTest, LionMatchesTheSingleThreadedKernel) {
  TieredTensor t = MakeTensor(100, 400, 80);
  const Floats params_before = t.params;
  DeviceTensor device(backend(), t);
  const std::vector<TieredSlice> device_slices = {
      SliceOf(device, t, Kind::kFactored, 0, 30000, false),
      SliceOf(device, t, Kind::kFactored, 30000, 40000, false)};
  ops().LionUpdate(Coefficients(), device_slices);
  cpu::LionUpdate(Coefficients(),
                  SliceOf(t, t, Kind::kFactored, 0, 30000, false));
  cpu::LionUpdate(Coefficients(),
                  SliceOf(t, t, Kind::kFactored, 30000, 40000, false));
  const Floats params = device.params.Read();
  ExpectClose(params, ToDoubles(t.params), 1e-6, "Lion params");
  ExpectClose(device.momentum.Read(), ToDoubles(t.momentum), 1e-6,
              "Lion momentum");
  // Every parameter moved by exactly lr, after the decay's shrink where it
  // applies (the first slice, which starts at an even element).
  EXPECT_NEAR(std::abs(params[0] - params_before[0] * Coefficients().decay),
              Coefficients().learning_rate, 1e-6);
}

}  // namespace
}  // namespace plateau::kernels::conformance
