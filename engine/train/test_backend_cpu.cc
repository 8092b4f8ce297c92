#include "engine/train/test_backend.h"

namespace plateau::engine {

const char* TestBackendName() { return "cpu"; }

absl::StatusOr<std::unique_ptr<Backend>> MakeTestBackend() {
  return Backend::CreateCpu(1, int64_t{1} << 30);
}

absl::Status PrepareTestBackend(int /*world*/) { return absl::OkStatus(); }

}  // namespace plateau::engine
