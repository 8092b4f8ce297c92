// The Hugging Face safetensors format, so that PyTorch and the HF tools read
// our weights and we read theirs (https://github.com/huggingface/safetensors).
//
// A file is:
//   bytes 0..7     uint64 N, the header length
//   bytes 8..8+N   a UTF-8 JSON object, padded with spaces:
//                    {"__metadata__": {"key": "value", ...},   (optional)
//                     "<name>": {"dtype": "F32", "shape": [2, 3],
//                                "data_offsets": [begin, end]}, ...}
//   bytes 8+N..    the data region: every tensor's bytes, row-major
// All integers are little-endian. Offsets are relative to the start of the
// data region. As in the reference implementation, N is below 100,000,000,
// the header starts with '{', and the tensors' [begin, end) ranges, taken in
// order of offset, tile the data region exactly: no gap, no overlap, nothing
// after the last one; each holds product(shape) * dtype size bytes.
//
// The writer pads the header so that the data region starts 8-byte aligned
// and packs the tensors in the order given, so a tensor is aligned to its
// element size when every tensor before it has a multiple of that many bytes
// (always the case for a file of F32 and I32 tensors only).
#ifndef PLATEAU_ENGINE_CHECKPOINT_SAFETENSORS_H_
#define PLATEAU_ENGINE_CHECKPOINT_SAFETENSORS_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/file_system.h"

namespace plateau {
class MappedFile;  // common/file_util.h
}  // namespace plateau

namespace plateau::engine {

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors data is read and written in place: needs little-endian"
#endif

// The element types, named in files as in the reference implementation. To
// add one, add it here and to the table in safetensors.cc.
enum class SafetensorsDtype {
  kBool,  // "BOOL", 1 byte
  kU8,    // "U8"
  kI8,    // "I8"
  kI16,   // "I16"
  kU16,   // "U16"
  kF16,   // "F16"
  kBF16,  // "BF16"
  kI32,   // "I32"
  kU32,   // "U32"
  kF32,   // "F32"
  kI64,   // "I64"
  kU64,   // "U64"
  kF64,   // "F64"
};

// "F32" etc.
absl::string_view SafetensorsDtypeName(SafetensorsDtype dtype);
size_t SafetensorsDtypeBytes(SafetensorsDtype dtype);
// INVALID_ARGUMENT for a name not in the table.
absl::StatusOr<SafetensorsDtype> ParseSafetensorsDtype(absl::string_view name);

// A tensor to write; borrows `data`, which holds `bytes` bytes that must
// equal product(shape) * SafetensorsDtypeBytes(dtype). A scalar has shape {}.
struct TensorView {
  std::string name;
  SafetensorsDtype dtype = SafetensorsDtype::kF32;
  std::vector<int64_t> shape;
  const void* data = nullptr;
  size_t bytes = 0;
};

// Writes the tensors, packed in the given order, and `metadata` (as
// "__metadata__", omitted when empty) to `path` atomically: a temporary file
// beside it is written, fsynced and renamed, then the directory is fsynced.
// INVALID_ARGUMENT for an empty, duplicate or reserved ("__metadata__") name,
// a name that is not UTF-8, a negative dimension, or a byte count that does
// not match the shape. The steps go through `file_system`.
absl::Status WriteSafetensors(
    const std::string& path, absl::Span<const TensorView> tensors,
    const std::map<std::string, std::string>& metadata = {},
    FileSystem& file_system = PosixFileSystem());

// A tensor in an open file. `data` points into the mapping and is valid as
// long as the reader is.
struct TensorEntry {
  std::string name;
  SafetensorsDtype dtype = SafetensorsDtype::kF32;
  std::vector<int64_t> shape;
  const void* data = nullptr;
  size_t bytes = 0;
  size_t data_offset_bytes = 0;  // from the start of the data region
};

// A safetensors file, mmapped read-only and validated in full when opened.
// Immutable afterwards: every method is const and thread-safe.
class SafetensorsReader {
 public:
  // NOT_FOUND etc. when the file cannot be read; DATA_LOSS, naming the file
  // and the fault, when it breaks any rule in the comment at the top.
  static absl::StatusOr<std::unique_ptr<SafetensorsReader>> Open(
      const std::string& path);
  // The same for a file already mapped; `path` is for messages.
  static absl::StatusOr<std::unique_ptr<SafetensorsReader>> FromMappedFile(
      const std::string& path, std::unique_ptr<MappedFile> file);

  ~SafetensorsReader();
  SafetensorsReader(const SafetensorsReader&) = delete;
  SafetensorsReader& operator=(const SafetensorsReader&) = delete;

  // Names in file order (by data offset).
  std::vector<std::string> names() const;
  // All tensors in file order.
  const std::vector<TensorEntry>& tensors() const { return tensors_; }
  // nullptr if there is no such tensor.
  const TensorEntry* Find(absl::string_view name) const;
  const std::map<std::string, std::string>& metadata() const {
    return metadata_;
  }
  const std::string& path() const { return path_; }

 private:
  SafetensorsReader(std::string path, std::unique_ptr<MappedFile> file);

  std::string path_;
  std::unique_ptr<MappedFile> file_;
  std::vector<TensorEntry> tensors_;
  absl::flat_hash_map<std::string, size_t> index_by_name_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace plateau::engine

#endif  // PLATEAU_ENGINE_CHECKPOINT_SAFETENSORS_H_
