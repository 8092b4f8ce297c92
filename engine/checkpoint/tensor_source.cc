#include "engine/checkpoint/tensor_source.h"

#include <cstring>

#include "absl/strings/str_cat.h"

namespace plateau::engine {

std::map<std::string, TensorInfo> SafetensorsTensorSource::Tensors() const {
  std::map<std::string, TensorInfo> tensors;
  for (const TensorEntry& entry : file_.tensors()) {
    tensors[entry.name] = {entry.dtype, entry.shape};
  }
  return tensors;
}

absl::Status SafetensorsTensorSource::Read(const std::string& name,
                                           int64_t begin, int64_t count,
                                           float* out) const {
  const TensorEntry* entry = file_.Find(name);
  if (entry == nullptr || entry->dtype != SafetensorsDtype::kF32) {
    return absl::InvalidArgumentError(
        absl::StrCat(file_.path(), " has no F32 tensor ", name));
  }
  const int64_t elements = static_cast<int64_t>(entry->bytes / sizeof(float));
  if (begin < 0 || count < 0 || begin + count > elements) {
    return absl::InvalidArgumentError(
        absl::StrCat(file_.path(), ": elements [", begin, ", ", begin + count,
                     ") are outside ", name, "'s ", elements));
  }
  std::memcpy(out, static_cast<const float*>(entry->data) + begin,
              static_cast<size_t>(count) * sizeof(float));
  bytes_read_ += count * static_cast<int64_t>(sizeof(float));
  return absl::OkStatus();
}

}  // namespace plateau::engine
