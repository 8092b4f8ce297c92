#include "engine/data/token_array.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "common/file_util.h"

namespace plateau::engine {
namespace {

constexpr absl::string_view kNpyMagic("\x93NUMPY", 6);

std::string WidthName(uint32_t bytes_per_token) {
  return bytes_per_token == 2 ? "uint16" : "uint32";
}

// The value after `'key':` in a .npy header's dict literal, up to the next
// top-level comma or closing brace; empty when the key is absent.
absl::string_view HeaderValue(absl::string_view header, absl::string_view key) {
  const std::string quoted = absl::StrCat("'", key, "':");
  const size_t at = header.find(quoted);
  if (at == absl::string_view::npos) return {};
  absl::string_view rest = header.substr(at + quoted.size());
  int depth = 0;
  size_t end = 0;
  for (; end < rest.size(); ++end) {
    const char c = rest[end];
    if (c == '(') ++depth;
    if (c == ')') --depth;
    if (depth == 0 && (c == ',' || c == '}')) break;
  }
  return absl::StripAsciiWhitespace(rest.substr(0, end));
}

struct NpyLayout {
  size_t data_offset = 0;
  uint32_t bytes_per_token = 0;
  int64_t tokens = 0;
};

absl::StatusOr<NpyLayout> ParseNpyHeader(const uint8_t* data, size_t size,
                                         const std::string& path) {
  const auto error = [&path](absl::string_view what) {
    return absl::InvalidArgumentError(
        absl::StrCat("token array ", path, ": ", what));
  };
  if (size < kNpyMagic.size() + 4) return error("truncated .npy header");
  const uint8_t major = data[6];
  size_t header_length = 0;
  size_t header_start = 0;
  if (major == 1) {
    header_length = data[8] | (size_t{data[9]} << 8);
    header_start = 10;
  } else if (major == 2 || major == 3) {
    if (size < 12) return error("truncated .npy header");
    header_length = data[8] | (size_t{data[9]} << 8) |
                    (size_t{data[10]} << 16) | (size_t{data[11]} << 24);
    header_start = 12;
  } else {
    return error(absl::StrCat(".npy format version ", major,
                              " is not one of 1, 2 and 3"));
  }
  if (header_length > size - header_start) {
    return error("truncated .npy header");
  }
  const absl::string_view header(
      reinterpret_cast<const char*>(data + header_start), header_length);
  NpyLayout layout;
  layout.data_offset = header_start + header_length;

  const absl::string_view descr = HeaderValue(header, "descr");
  if (descr == "'<u2'") {
    layout.bytes_per_token = 2;
  } else if (descr == "'<u4'") {
    layout.bytes_per_token = 4;
  } else {
    return error(absl::StrCat(
        "dtype ", descr.empty() ? "(none)" : descr,
        " is not one a token array can have: little-endian uint16 ('<u2') "
        "or uint32 ('<u4')"));
  }
  absl::string_view shape = HeaderValue(header, "shape");
  if (!absl::ConsumePrefix(&shape, "(") || !absl::ConsumeSuffix(&shape, ")")) {
    return error(absl::StrCat("shape ", shape.empty() ? "(none)" : shape,
                              " is not a tuple"));
  }
  std::vector<absl::string_view> dimensions =
      absl::StrSplit(shape, ',', absl::SkipWhitespace());
  uint64_t tokens = 0;
  if (dimensions.size() != 1 ||
      !absl::SimpleAtoi(absl::StripAsciiWhitespace(dimensions[0]), &tokens) ||
      tokens > static_cast<uint64_t>(INT64_MAX) / 4) {
    return error(absl::StrCat("shape (", shape,
                              ") is not one dimension; token arrays are 1-D"));
  }
  layout.tokens = static_cast<int64_t>(tokens);
  return layout;
}

}  // namespace

TokenArray::~TokenArray() = default;

void TokenArray::ReleaseBefore(int64_t index) const {
  if (file_ == nullptr || file_->data() == nullptr) return;
  const uintptr_t begin = reinterpret_cast<uintptr_t>(file_->data());
  const uintptr_t end = reinterpret_cast<uintptr_t>(ids_) +
                        static_cast<uintptr_t>(index) * bytes_per_token_;
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t whole_pages_end = end / page * page;
  if (whole_pages_end <= begin) return;
  // Advice only: the pages stay valid either way, so a refusal changes
  // nothing but what stays resident.
  madvise(reinterpret_cast<void*>(begin), whole_pages_end - begin,
          MADV_DONTNEED);
}

absl::StatusOr<std::unique_ptr<TokenArray>> TokenArray::Open(
    const std::string& path, uint32_t stated_bytes_per_token) {
  if (stated_bytes_per_token != 0 && stated_bytes_per_token != 2 &&
      stated_bytes_per_token != 4) {
    return absl::InvalidArgumentError(
        absl::StrCat("token arrays hold 2- or 4-byte ids, not ",
                     stated_bytes_per_token, "-byte ones"));
  }
  absl::StatusOr<std::unique_ptr<MappedFile>> file = MappedFile::Open(path);
  if (!file.ok()) {
    return absl::Status(
        file.status().code(),
        absl::StrCat("token array ", path, ": ", file.status().message()));
  }
  std::unique_ptr<TokenArray> array(new TokenArray());
  array->path_ = path;
  const uint8_t* data = (*file)->data();
  const size_t size = (*file)->size_bytes();
  const bool is_npy = size >= kNpyMagic.size() &&
                      absl::string_view(reinterpret_cast<const char*>(data),
                                        kNpyMagic.size()) == kNpyMagic;
  size_t offset = 0;
  if (is_npy) {
    absl::StatusOr<NpyLayout> layout = ParseNpyHeader(data, size, path);
    if (!layout.ok()) return layout.status();
    if (stated_bytes_per_token != 0 &&
        stated_bytes_per_token != layout->bytes_per_token) {
      return absl::InvalidArgumentError(
          absl::StrCat("token array ", path, " is a .npy of ",
                       WidthName(layout->bytes_per_token), " ids, not the ",
                       WidthName(stated_bytes_per_token), " stated"));
    }
    offset = layout->data_offset;
    array->bytes_per_token_ = layout->bytes_per_token;
    array->tokens_ = layout->tokens;
    const uint64_t expected = offset + static_cast<uint64_t>(layout->tokens) *
                                           array->bytes_per_token_;
    if (size != expected) {
      return absl::InvalidArgumentError(absl::StrCat(
          "token array ", path,
          size < expected ? " is truncated" : " is longer", ": ", size,
          " bytes where its header makes ", expected, " (", layout->tokens, " ",
          WidthName(array->bytes_per_token_), " ids)"));
    }
  } else {
    if (stated_bytes_per_token == 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "token array ", path,
          " has no .npy header: state the width of its ids (uint16 or "
          "uint32)"));
    }
    array->bytes_per_token_ = stated_bytes_per_token;
    if (size % stated_bytes_per_token != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "token array ", path, " holds ", size,
          " bytes, not a whole number of ", WidthName(stated_bytes_per_token),
          " ids (is the width right?)"));
    }
    array->tokens_ = static_cast<int64_t>(size / stated_bytes_per_token);
  }
  array->ids_ = data + offset;
  array->file_ = std::move(*file);
  return array;
}

}  // namespace plateau::engine
