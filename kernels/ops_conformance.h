// The contract of kernels/ops.h as one suite of tests that every backend
// runs: each op on random inputs, through the backend's own device memory,
// against a float64 reference (backward ops against central differences of
// the reference forward, so the backward formulas are checked, not restated),
// or against the exact float result where the order of a sum is the op's
// contract (embedding and gather backward, chunks of a dispatch). The tiered
// optimizers' references are the single-threaded kernels of kernels/cpu.
//
// A backend's test provides a ConformanceBackendFactory and instantiates the
// suite (kernels/cpu/cpu_ops_test.cc, kernels/cuda/cuda_ops_test.cc):
//   INSTANTIATE_TEST_SUITE_P(Cpu, OpsConformanceTest,
//                            ::testing::ValuesIn(factories),
//                            ConformanceBackendName);
// What only one backend has (thread counts, streams, recorded errors) stays
// in that backend's own test.
//
// Tolerances are relative to 1 + |expected|, float32 storage everywhere:
// 1e-6 to 2e-5 for forward ops (summation order, expf's ulps), 1e-4 for
// gradients against central differences, exact for integer outputs and the
// ops whose order is fixed.
#ifndef PLATEAU_KERNELS_OPS_CONFORMANCE_H_
#define PLATEAU_KERNELS_OPS_CONFORMANCE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gtest/gtest.h"
#include "kernels/ops.h"

namespace plateau::kernels::conformance {

// One backend under test: its ops and its device memory.
class ConformanceBackend {
 public:
  virtual ~ConformanceBackend() = default;
  virtual Ops& ops() = 0;
  // At least `bytes` (and at least one byte) of device memory.
  virtual void* AllocateDevice(int64_t bytes) = 0;
  virtual void FreeDevice(void* data) = 0;
  // Waits for the queued work; OK, or the backend's first error.
  virtual absl::Status Finish() = 0;
};

struct ConformanceBackendFactory {
  std::string name;  // the instantiation's suffix, e.g. "2_threads"
  // The backend, or FAILED_PRECONDITION (the case is skipped with the
  // reason) where this machine cannot run it.
  std::function<absl::StatusOr<std::unique_ptr<ConformanceBackend>>()> make;
};

std::string ConformanceBackendName(
    const ::testing::TestParamInfo<ConformanceBackendFactory>& info);
// gtest prints a case's parameter as its name.
void PrintTo(const ConformanceBackendFactory& factory, std::ostream* stream);

// A device array of `T`, filled and read through the backend's copies only.
template <typename T>
class DeviceArray {
 public:
  DeviceArray(ConformanceBackend& backend, const std::vector<T>& host)
      : backend_(backend),
        count_(host.size()),
        data_(backend.AllocateDevice(bytes())) {
    backend_.ops().CopyFromHost(bytes(), host.data(), data_);
  }
  // `count` zeros.
  DeviceArray(ConformanceBackend& backend, size_t count)
      : DeviceArray(backend, std::vector<T>(count)) {}
  ~DeviceArray() { backend_.FreeDevice(data_); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;

  T* get() { return static_cast<T*>(data_); }
  std::vector<T> Read() const {
    std::vector<T> host(count_);
    backend_.ops().CopyToHost(bytes(), data_, host.data());
    return host;
  }

 private:
  int64_t bytes() const { return static_cast<int64_t>(count_ * sizeof(T)); }

  ConformanceBackend& backend_;
  size_t count_;
  void* data_;
};

using DeviceFloats = DeviceArray<float>;
using DeviceInts = DeviceArray<int32_t>;
using DeviceBf16s = DeviceArray<uint16_t>;

using Doubles = std::vector<double>;
using Floats = std::vector<float>;
using Ints = std::vector<int32_t>;
using Bf16s = std::vector<uint16_t>;  // bf16 values as their bits

// bf16 as kernels/ops.h rounds it: nearest even at 8 bits of mantissa (NaN
// stays a quiet NaN). Written out here rather than taken from a backend, so
// that the suite checks every backend's rounding.
uint16_t ToBf16(float value);
Bf16s ToBf16(const Floats& values);
// Exactly.
float FromBf16(uint16_t value);
Floats FromBf16(const Bf16s& values);

// Normal(0, scale) floats; integers uniform in [0, limit).
Floats RandomFloats(int64_t count, int seed, float scale = 1.0f);
Ints RandomInts(int64_t count, int32_t limit, int seed);
Doubles ToDoubles(const Floats& values);

// |actual - expected| <= tolerance * (1 + |expected|) everywhere.
void ExpectClose(const Floats& actual, const Doubles& expected,
                 double tolerance, const char* what);
// Bitwise equal (NaN never is).
void ExpectSame(const Floats& actual, const Floats& expected, const char* what);

// `samples` coordinates of [0, count), sorted (all of them when fewer).
std::vector<size_t> SampleCoordinates(size_t count, size_t samples, int seed);
// d(sum_i weights[i] * f(x)[i]) / dx[j] by central differences in float64,
// for each of the coordinates j.
Doubles NumericGradient(const std::function<Doubles(const Doubles&)>& f,
                        Doubles x, const Doubles& weights,
                        const std::vector<size_t>& coordinates);
// analytic[coordinates[i]] against numeric[i].
void ExpectGradient(const Floats& analytic, const Doubles& numeric,
                    const std::vector<size_t>& coordinates, double tolerance,
                    const char* what);

class OpsConformanceTest
    : public ::testing::TestWithParam<ConformanceBackendFactory> {
 protected:
  void SetUp() override;
  void TearDown() override;

  ConformanceBackend& backend() { return *backend_; }
  Ops& ops() { return backend_->ops(); }

 private:
  std::unique_ptr<ConformanceBackend> backend_;
};

}  // namespace plateau::kernels::conformance

#endif  // PLATEAU_KERNELS_OPS_CONFORMANCE_H_
