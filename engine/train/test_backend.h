// The backend the engine's step tests train on, chosen by the test target
// (engine/train/BUILD): the CPU backend (test_backend_cpu.cc) or the
// CUDA one (test_backend_cuda.cc), on a GPU or emulated.
#ifndef PLATEAU_ENGINE_TRAIN_TEST_BACKEND_H_
#define PLATEAU_ENGINE_TRAIN_TEST_BACKEND_H_

#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/backend.h"

namespace plateau::engine {

// "cpu" or "cuda".
const char* TestBackendName();

// A fresh backend with 1 GiB of device memory and exact float32 math.
absl::StatusOr<std::unique_ptr<Backend>> MakeTestBackend();

// Before training `world` ranks, threads of this process talking Gloo over
// their device buffers. UNIMPLEMENTED where that cannot be: on a GPU
// (Gloo does not reach device memory; ranks there need a GPU each and NCCL)
// and without one. The emulated CUDA backend opens its device memory to host
// code for several ranks (Gloo reads it) and closes it for one.
absl::Status PrepareTestBackend(int world);

}  // namespace plateau::engine

#endif  // PLATEAU_ENGINE_TRAIN_TEST_BACKEND_H_
