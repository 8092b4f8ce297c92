// Whole float32 tensors to read ranges of, wherever they are stored: a
// safetensors file (a version-1 checkpoint's, or a bare one) or the chunks
// of a sharded checkpoint (sharded_checkpoint.h). Loaders read through this
// so that they do not care which.
#ifndef PLATEAU_ENGINE_CHECKPOINT_TENSOR_SOURCE_H_
#define PLATEAU_ENGINE_CHECKPOINT_TENSOR_SOURCE_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "engine/checkpoint/safetensors.h"

namespace plateau::engine {

struct TensorInfo {
  SafetensorsDtype dtype = SafetensorsDtype::kF32;
  std::vector<int64_t> shape;
};

class TensorSource {
 public:
  virtual ~TensorSource() = default;
  // The file or directory, for messages.
  virtual const std::string& description() const = 0;
  // Every tensor, by name.
  virtual std::map<std::string, TensorInfo> Tensors() const = 0;
  // Copies elements [begin, begin + count) of F32 tensor `name`, in
  // row-major order, to `out`. INVALID_ARGUMENT for a tensor that is absent
  // or not F32, or a range outside it; DATA_LOSS for stored bytes that fail
  // their checksum.
  virtual absl::Status Read(const std::string& name, int64_t begin,
                            int64_t count, float* out) const = 0;
  // Bytes of stored data read so far (checksummed blocks included).
  virtual int64_t bytes_read() const = 0;
};

// A safetensors file's tensors. Borrows the reader.
class SafetensorsTensorSource : public TensorSource {
 public:
  explicit SafetensorsTensorSource(const SafetensorsReader& file)
      : file_(file) {}
  const std::string& description() const override { return file_.path(); }
  std::map<std::string, TensorInfo> Tensors() const override;
  absl::Status Read(const std::string& name, int64_t begin, int64_t count,
                    float* out) const override;
  int64_t bytes_read() const override { return bytes_read_.load(); }

 private:
  const SafetensorsReader& file_;
  mutable std::atomic<int64_t> bytes_read_{0};
};

}  // namespace plateau::engine

#endif  // PLATEAU_ENGINE_CHECKPOINT_TENSOR_SOURCE_H_
