#include "engine/checkpoint/safetensors.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/file_util.h"
#include "common/status_macros.h"

namespace plateau::engine {
namespace {

using Json = nlohmann::json;
using OrderedJson = nlohmann::ordered_json;

constexpr size_t kLengthPrefixBytes = 8;
// The reference implementation's MAX_HEADER_SIZE.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;
constexpr size_t kDataAlignmentBytes = 8;
constexpr char kMetadataKey[] = "__metadata__";

struct DtypeInfo {
  SafetensorsDtype dtype;
  const char* name;
  size_t bytes;
};

constexpr DtypeInfo kDtypes[] = {
    {SafetensorsDtype::kBool, "BOOL", 1}, {SafetensorsDtype::kU8, "U8", 1},
    {SafetensorsDtype::kI8, "I8", 1},     {SafetensorsDtype::kI16, "I16", 2},
    {SafetensorsDtype::kU16, "U16", 2},   {SafetensorsDtype::kF16, "F16", 2},
    {SafetensorsDtype::kBF16, "BF16", 2}, {SafetensorsDtype::kI32, "I32", 4},
    {SafetensorsDtype::kU32, "U32", 4},   {SafetensorsDtype::kF32, "F32", 4},
    {SafetensorsDtype::kI64, "I64", 8},   {SafetensorsDtype::kU64, "U64", 8},
    {SafetensorsDtype::kF64, "F64", 8},
};

const DtypeInfo* FindDtype(SafetensorsDtype dtype) {
  for (const DtypeInfo& info : kDtypes) {
    if (info.dtype == dtype) return &info;
  }
  return nullptr;
}

std::string ShapeText(absl::Span<const int64_t> shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

// product(shape) * element_bytes, or an error text on a negative dimension
// or overflow.
absl::StatusOr<uint64_t> ShapeBytes(absl::Span<const int64_t> shape,
                                    size_t element_bytes) {
  uint64_t bytes = element_bytes;
  for (const int64_t dimension : shape) {
    if (dimension < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("negative dimension in shape ", ShapeText(shape)));
    }
    if (__builtin_mul_overflow(bytes, static_cast<uint64_t>(dimension),
                               &bytes)) {
      return absl::InvalidArgumentError(
          absl::StrCat("shape ", ShapeText(shape), " overflows 64 bits"));
    }
  }
  return bytes;
}

bool IsValidUtf8(const std::string& text) {
  try {
    Json(text).dump();  // throws type_error 316 on invalid UTF-8
    return true;
  } catch (const Json::exception&) {
    return false;
  }
}

absl::Status CheckTensorView(const TensorView& tensor) {
  if (tensor.name.empty()) return absl::InvalidArgumentError("empty name");
  if (tensor.name == kMetadataKey) {
    return absl::InvalidArgumentError("the name __metadata__ is reserved");
  }
  if (!IsValidUtf8(tensor.name)) {
    return absl::InvalidArgumentError("name is not valid UTF-8");
  }
  const DtypeInfo* info = FindDtype(tensor.dtype);
  if (info == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown dtype value ", static_cast<int>(tensor.dtype)));
  }
  ASSIGN_OR_RETURN(const uint64_t expected_bytes,
                   ShapeBytes(tensor.shape, info->bytes));
  if (expected_bytes != tensor.bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(info->name, " ", ShapeText(tensor.shape), " needs ",
                     expected_bytes, " bytes but the data has ", tensor.bytes));
  }
  if (tensor.data == nullptr && tensor.bytes > 0) {
    return absl::InvalidArgumentError("data is null");
  }
  return absl::OkStatus();
}

// The JSON header, padded with spaces so that the data region starts aligned.
absl::StatusOr<std::string> EncodeHeader(
    absl::Span<const TensorView> tensors,
    const std::map<std::string, std::string>& metadata) {
  OrderedJson header = OrderedJson::object();
  if (!metadata.empty()) {
    OrderedJson& metadata_json = header[kMetadataKey];
    metadata_json = OrderedJson::object();
    for (const auto& [key, value] : metadata) metadata_json[key] = value;
  }
  absl::flat_hash_set<absl::string_view> names;
  uint64_t offset_bytes = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TensorView& tensor = tensors[i];
    if (absl::Status status = CheckTensorView(tensor); !status.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor ", i, " '", tensor.name, "': ", status.message()));
    }
    if (!names.insert(tensor.name).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("duplicate tensor name '", tensor.name, "'"));
    }
    header[tensor.name] = {
        {"dtype", SafetensorsDtypeName(tensor.dtype)},
        {"shape", tensor.shape},
        {"data_offsets",
         OrderedJson::array({offset_bytes, offset_bytes + tensor.bytes})}};
    offset_bytes += tensor.bytes;
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const OrderedJson::exception& error) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot encode the header: ", error.what()));
  }
  const size_t end_bytes = kLengthPrefixBytes + text.size();
  const size_t padded_end_bytes = (end_bytes + kDataAlignmentBytes - 1) /
                                  kDataAlignmentBytes * kDataAlignmentBytes;
  text.append(padded_end_bytes - end_bytes, ' ');
  return text;
}

absl::Status CorruptError(const std::string& path, absl::string_view what) {
  return absl::DataLossError(
      absl::StrCat("safetensors file ", path, ": ", what));
}

// A non-negative integer JSON value that fits in T.
template <typename T>
bool GetUnsigned(const Json& value, T* out) {
  if (!value.is_number_unsigned()) return false;
  const uint64_t number = value.get<uint64_t>();
  if (number > static_cast<uint64_t>(std::numeric_limits<T>::max())) {
    return false;
  }
  *out = static_cast<T>(number);
  return true;
}

// One tensor's header entry; `data` is left null.
absl::StatusOr<TensorEntry> ParseTensorEntry(const std::string& name,
                                             const Json& value) {
  if (!value.is_object()) {
    return absl::DataLossError("the entry is not a JSON object");
  }
  TensorEntry entry;
  entry.name = name;
  const auto dtype = value.find("dtype");
  if (dtype == value.end() || !dtype->is_string()) {
    return absl::DataLossError("no \"dtype\" string");
  }
  absl::StatusOr<SafetensorsDtype> parsed_dtype =
      ParseSafetensorsDtype(dtype->get_ref<const std::string&>());
  if (!parsed_dtype.ok())
    return absl::DataLossError(parsed_dtype.status().message());
  entry.dtype = *parsed_dtype;
  const auto shape = value.find("shape");
  if (shape == value.end() || !shape->is_array()) {
    return absl::DataLossError("no \"shape\" array");
  }
  for (const Json& dimension : *shape) {
    int64_t size = 0;
    if (!GetUnsigned(dimension, &size)) {
      return absl::DataLossError(absl::StrCat(
          "\"shape\" ", shape->dump(), " holds a value that is not a size"));
    }
    entry.shape.push_back(size);
  }
  const auto offsets = value.find("data_offsets");
  uint64_t begin = 0;
  uint64_t end = 0;
  if (offsets == value.end() || !offsets->is_array() || offsets->size() != 2 ||
      !GetUnsigned((*offsets)[0], &begin) ||
      !GetUnsigned((*offsets)[1], &end)) {
    return absl::DataLossError(
        "no \"data_offsets\" array of two non-negative integers");
  }
  if (end < begin) {
    return absl::DataLossError(absl::StrCat("data_offsets [", begin, ", ", end,
                                            "] end before they begin"));
  }
  absl::StatusOr<uint64_t> expected_bytes =
      ShapeBytes(entry.shape, SafetensorsDtypeBytes(entry.dtype));
  if (!expected_bytes.ok()) {
    return absl::DataLossError(expected_bytes.status().message());
  }
  if (*expected_bytes != end - begin) {
    return absl::DataLossError(absl::StrCat(
        SafetensorsDtypeName(entry.dtype), " ", ShapeText(entry.shape),
        " needs ", *expected_bytes, " bytes but data_offsets [", begin, ", ",
        end, "] hold ", end - begin));
  }
  entry.data_offset_bytes = begin;
  entry.bytes = end - begin;
  return entry;
}

absl::StatusOr<std::map<std::string, std::string>> ParseMetadata(
    const Json& value) {
  if (!value.is_object()) {
    return absl::DataLossError("__metadata__ is not a JSON object");
  }
  std::map<std::string, std::string> metadata;
  for (const auto& [key, item] : value.items()) {
    if (!item.is_string()) {
      return absl::DataLossError(
          absl::StrCat("__metadata__ value of '", key, "' is not a string"));
    }
    metadata[key] = item.get<std::string>();
  }
  return metadata;
}

// Sorts by offset and checks that the tensors tile [0, data_bytes) exactly.
absl::Status CheckLayout(std::vector<TensorEntry>& tensors,
                         uint64_t data_bytes) {
  std::stable_sort(tensors.begin(), tensors.end(),
                   [](const TensorEntry& a, const TensorEntry& b) {
                     return std::make_pair(a.data_offset_bytes, a.bytes) <
                            std::make_pair(b.data_offset_bytes, b.bytes);
                   });
  uint64_t next_bytes = 0;
  const TensorEntry* previous = nullptr;
  for (const TensorEntry& tensor : tensors) {
    const uint64_t end = tensor.data_offset_bytes + tensor.bytes;
    if (end > data_bytes) {
      return absl::DataLossError(absl::StrCat(
          "tensor '", tensor.name, "' data_offsets [", tensor.data_offset_bytes,
          ", ", end, "] run past the end of the data region (", data_bytes,
          " bytes)"));
    }
    if (tensor.data_offset_bytes < next_bytes) {
      return absl::DataLossError(absl::StrCat(
          "tensor '", tensor.name, "' data_offsets [", tensor.data_offset_bytes,
          ", ", end, "] overlap tensor '", previous->name, "' (ending at ",
          next_bytes, ")"));
    }
    if (tensor.data_offset_bytes > next_bytes) {
      return absl::DataLossError(
          absl::StrCat("gap in the data region: bytes [", next_bytes, ", ",
                       tensor.data_offset_bytes, ") belong to no tensor"));
    }
    next_bytes = end;
    previous = &tensor;
  }
  if (next_bytes != data_bytes) {
    return absl::DataLossError(absl::StrCat("the tensors cover ", next_bytes,
                                            " bytes but the data region has ",
                                            data_bytes, " (trailing bytes)"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::string_view SafetensorsDtypeName(SafetensorsDtype dtype) {
  const DtypeInfo* info = FindDtype(dtype);
  return info == nullptr ? "unknown" : info->name;
}

size_t SafetensorsDtypeBytes(SafetensorsDtype dtype) {
  const DtypeInfo* info = FindDtype(dtype);
  return info == nullptr ? 0 : info->bytes;
}

absl::StatusOr<SafetensorsDtype> ParseSafetensorsDtype(absl::string_view name) {
  for (const DtypeInfo& info : kDtypes) {
    if (name == info.name) return info.dtype;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown dtype \"", name, "\""));
}

absl::Status WriteSafetensors(
    const std::string& path, absl::Span<const TensorView> tensors,
    const std::map<std::string, std::string>& metadata,
    FileSystem& file_system) {
  absl::StatusOr<std::string> header = EncodeHeader(tensors, metadata);
  if (!header.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot write safetensors file ", path, ": ",
                     header.status().message()));
  }
  char length[kLengthPrefixBytes];
  const uint64_t header_bytes = header->size();
  std::memcpy(length, &header_bytes, sizeof(length));  // little-endian host
  std::vector<absl::string_view> pieces = {
      absl::string_view(length, sizeof(length)), *header};
  for (const TensorView& tensor : tensors) {
    if (tensor.bytes == 0) continue;
    pieces.emplace_back(static_cast<const char*>(tensor.data), tensor.bytes);
  }
  return WriteFileAtomically(path, pieces, Durability::kSynced, file_system);
}

SafetensorsReader::SafetensorsReader(std::string path,
                                     std::unique_ptr<MappedFile> file)
    : path_(std::move(path)), file_(std::move(file)) {}

SafetensorsReader::~SafetensorsReader() = default;

absl::StatusOr<std::unique_ptr<SafetensorsReader>> SafetensorsReader::Open(
    const std::string& path) {
  ASSIGN_OR_RETURN(std::unique_ptr<MappedFile> file, MappedFile::Open(path));
  return FromMappedFile(path, std::move(file));
}

absl::StatusOr<std::unique_ptr<SafetensorsReader>>
SafetensorsReader::FromMappedFile(const std::string& path,
                                  std::unique_ptr<MappedFile> file) {
  if (file == nullptr) return absl::InvalidArgumentError("no mapped file");
  const uint8_t* bytes = file->data();
  const size_t size_bytes = file->size_bytes();
  if (size_bytes < kLengthPrefixBytes) {
    return CorruptError(path, absl::StrCat("the file has ", size_bytes,
                                           " bytes, fewer than the 8-byte "
                                           "header length"));
  }
  uint64_t header_bytes = 0;
  std::memcpy(&header_bytes, bytes, sizeof(header_bytes));
  if (header_bytes > kMaxHeaderBytes) {
    return CorruptError(path, absl::StrCat("header length ", header_bytes,
                                           " exceeds the limit of ",
                                           kMaxHeaderBytes, " bytes"));
  }
  if (header_bytes > size_bytes - kLengthPrefixBytes) {
    return CorruptError(path, absl::StrCat("header length ", header_bytes,
                                           " runs past the end of the file (",
                                           size_bytes, " bytes): truncated?"));
  }
  const char* header_text =
      reinterpret_cast<const char*>(bytes) + kLengthPrefixBytes;
  if (header_bytes == 0 || header_text[0] != '{') {
    return CorruptError(path, "the header does not start with '{'");
  }
  Json header;
  try {
    header = Json::parse(header_text, header_text + header_bytes);
  } catch (const Json::exception& error) {
    return CorruptError(
        path, absl::StrCat("the header is not valid JSON: ", error.what()));
  }
  if (!header.is_object()) {
    return CorruptError(path, "the header is not a JSON object");
  }
  std::unique_ptr<SafetensorsReader> reader(
      new SafetensorsReader(path, std::move(file)));
  for (const auto& [name, value] : header.items()) {
    if (name == kMetadataKey) {
      absl::StatusOr<std::map<std::string, std::string>> metadata =
          ParseMetadata(value);
      if (!metadata.ok())
        return CorruptError(path, metadata.status().message());
      reader->metadata_ = *std::move(metadata);
      continue;
    }
    absl::StatusOr<TensorEntry> entry = ParseTensorEntry(name, value);
    if (!entry.ok()) {
      return CorruptError(path, absl::StrCat("tensor '", name,
                                             "': ", entry.status().message()));
    }
    reader->tensors_.push_back(*std::move(entry));
  }
  const uint64_t data_start_bytes = kLengthPrefixBytes + header_bytes;
  if (absl::Status status =
          CheckLayout(reader->tensors_, size_bytes - data_start_bytes);
      !status.ok()) {
    return CorruptError(path, status.message());
  }
  const uint8_t* data_region = bytes + data_start_bytes;
  for (size_t i = 0; i < reader->tensors_.size(); ++i) {
    TensorEntry& tensor = reader->tensors_[i];
    tensor.data = data_region + tensor.data_offset_bytes;
    reader->index_by_name_.emplace(tensor.name, i);
  }
  return reader;
}

std::vector<std::string> SafetensorsReader::names() const {
  std::vector<std::string> names;
  names.reserve(tensors_.size());
  for (const TensorEntry& tensor : tensors_) names.push_back(tensor.name);
  return names;
}

const TensorEntry* SafetensorsReader::Find(absl::string_view name) const {
  const auto it = index_by_name_.find(name);
  return it == index_by_name_.end() ? nullptr : &tensors_[it->second];
}

}  // namespace plateau::engine
