#include "engine/data/compressed_file.h"

#include <zlib.h>
#include <zstd.h>

#include <cstdint>
#include <limits>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/file_util.h"

namespace plateau::engine {
namespace {

constexpr size_t kChunkBytes = size_t{1} << 20;

absl::Status NotOfItsFormat(const std::string& path, absl::string_view format,
                            absl::string_view detail) {
  return absl::InvalidArgumentError(absl::StrCat(
      "corpus file ", path, " is not a whole ", format, " file: ", detail));
}

// Every gzip member of `compressed`, one after another (as gzip -d does).
absl::StatusOr<std::string> Gunzip(const std::string& path,
                                   const std::string& compressed) {
  if (compressed.size() > std::numeric_limits<uInt>::max()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "corpus file ", path, " is over 4 GiB compressed; split it"));
  }
  std::string out;
  z_stream stream{};
  // 16 + MAX_WBITS: a gzip header and trailer, not a raw zlib stream.
  if (inflateInit2(&stream, 16 + MAX_WBITS) != Z_OK) {
    return absl::InternalError("zlib: inflateInit2 failed");
  }
  stream.next_in =
      reinterpret_cast<Bytef*>(const_cast<char*>(compressed.data()));
  stream.avail_in = static_cast<uInt>(compressed.size());
  std::string chunk(kChunkBytes, '\0');
  int result = Z_OK;
  while (true) {
    stream.next_out = reinterpret_cast<Bytef*>(chunk.data());
    stream.avail_out = static_cast<uInt>(chunk.size());
    result = inflate(&stream, Z_NO_FLUSH);
    out.append(chunk.data(), chunk.size() - stream.avail_out);
    if (result == Z_STREAM_END) {
      if (stream.avail_in == 0) break;
      inflateReset(&stream);  // the next member
      continue;
    }
    if (result != Z_OK) break;
    if (stream.avail_in == 0 && stream.avail_out != 0) break;  // truncated
  }
  const std::string message = stream.msg != nullptr ? stream.msg : "";
  inflateEnd(&stream);
  if (result != Z_STREAM_END) {
    return NotOfItsFormat(path, "gzip",
                          result == Z_OK || result == Z_BUF_ERROR
                              ? "it ends mid-stream (truncated?)"
                              : (message.empty() ? "corrupt data" : message));
  }
  return out;
}

// Every zstd frame of `compressed`, one after another.
absl::StatusOr<std::string> Unzstd(const std::string& path,
                                   const std::string& compressed) {
  ZSTD_DStream* stream = ZSTD_createDStream();
  if (stream == nullptr) return absl::InternalError("zstd: out of memory");
  ZSTD_inBuffer in{compressed.data(), compressed.size(), 0};
  std::string out;
  std::string chunk(kChunkBytes, '\0');
  size_t result = 0;
  while (in.pos < in.size) {
    ZSTD_outBuffer buffer{chunk.data(), chunk.size(), 0};
    result = ZSTD_decompressStream(stream, &buffer, &in);
    if (ZSTD_isError(result)) break;
    out.append(chunk.data(), buffer.pos);
  }
  // Flush what the last frame still holds.
  while (!ZSTD_isError(result) && result != 0) {
    ZSTD_outBuffer buffer{chunk.data(), chunk.size(), 0};
    result = ZSTD_decompressStream(stream, &buffer, &in);
    if (ZSTD_isError(result) || buffer.pos == 0) break;
    out.append(chunk.data(), buffer.pos);
  }
  ZSTD_freeDStream(stream);
  if (ZSTD_isError(result)) {
    return NotOfItsFormat(path, "zstd", ZSTD_getErrorName(result));
  }
  if (result != 0 || compressed.empty()) {
    return NotOfItsFormat(path, "zstd", "it ends mid-frame (truncated?)");
  }
  return out;
}

}  // namespace

absl::StatusOr<std::string> ReadDecompressedFile(const std::string& path) {
  absl::StatusOr<std::string> content = ReadFileToString(path);
  if (!content.ok()) return content.status();
  if (absl::EndsWith(path, ".gz")) return Gunzip(path, *content);
  if (absl::EndsWith(path, ".zst")) return Unzstd(path, *content);
  return content;
}

}  // namespace plateau::engine
