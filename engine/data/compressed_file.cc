#include "engine/data/compressed_file.h"

#include <zlib.h>
#include <zstd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/status_macros.h"

namespace plateau::engine {

namespace {

constexpr size_t kChunkBytes = size_t{1} << 20;

}  // namespace

// The file's bytes as they are; the formats below decompress them.
class CorpusByteSource {
 public:
  CorpusByteSource(std::string path, std::FILE* file)
      : path_(std::move(path)), file_(file) {}
  virtual ~CorpusByteSource() { std::fclose(file_); }

  // Up to `capacity` more decompressed bytes into `buffer`; 0 at the end.
  virtual absl::StatusOr<size_t> Read(char* buffer, size_t capacity) {
    return ReadRaw(buffer, capacity);
  }

 protected:
  absl::StatusOr<size_t> ReadRaw(char* buffer, size_t capacity) {
    const size_t read = std::fread(buffer, 1, capacity, file_);
    if (read == 0 && std::ferror(file_)) {
      return absl::DataLossError(absl::StrCat("cannot read corpus file ", path_,
                                              ": ", std::strerror(errno)));
    }
    return read;
  }

  absl::Status NotOfItsFormat(absl::string_view format,
                              absl::string_view detail) const {
    return absl::InvalidArgumentError(absl::StrCat(
        "corpus file ", path_, " is not a whole ", format, " file: ", detail));
  }

 private:
  const std::string path_;
  std::FILE* const file_;
};

namespace {

// Every gzip member, one after another (as gzip -d does).
class GzipSource : public CorpusByteSource {
 public:
  using CorpusByteSource::CorpusByteSource;
  ~GzipSource() override {
    if (initialized_) inflateEnd(&stream_);
  }

  absl::StatusOr<size_t> Read(char* buffer, size_t capacity) override {
    if (!initialized_) {
      // 16 + MAX_WBITS: a gzip header and trailer, not a raw zlib stream.
      if (inflateInit2(&stream_, 16 + MAX_WBITS) != Z_OK) {
        return absl::InternalError("zlib: inflateInit2 failed");
      }
      initialized_ = true;
    }
    const uInt room =
        static_cast<uInt>(std::min<size_t>(capacity, kChunkBytes));
    stream_.next_out = reinterpret_cast<Bytef*>(buffer);
    stream_.avail_out = room;
    while (stream_.avail_out == room) {
      if (stream_.avail_in == 0) {
        ASSIGN_OR_RETURN(const size_t read,
                         ReadRaw(input_.data(), kChunkBytes));
        if (read == 0) {
          if (!in_member_) return 0;
          return NotOfItsFormat("gzip", "it ends mid-stream (truncated?)");
        }
        stream_.next_in = reinterpret_cast<Bytef*>(input_.data());
        stream_.avail_in = static_cast<uInt>(read);
      }
      const int result = inflate(&stream_, Z_NO_FLUSH);
      if (result == Z_STREAM_END) {
        in_member_ = false;
        inflateReset(&stream_);  // a next member may follow
      } else if (result == Z_OK ||
                 (result == Z_BUF_ERROR && stream_.avail_in == 0)) {
        in_member_ = true;
      } else {
        return NotOfItsFormat(
            "gzip", stream_.msg != nullptr ? stream_.msg : "corrupt data");
      }
    }
    return room - stream_.avail_out;
  }

 private:
  std::string input_ = std::string(kChunkBytes, '\0');
  z_stream stream_{};
  bool initialized_ = false;
  // A member has begun and not ended; an empty file is not a gzip file.
  bool in_member_ = true;
};

// Every zstd frame, one after another.
class ZstdSource : public CorpusByteSource {
 public:
  using CorpusByteSource::CorpusByteSource;
  ~ZstdSource() override { ZSTD_freeDStream(stream_); }

  absl::StatusOr<size_t> Read(char* buffer, size_t capacity) override {
    if (stream_ == nullptr && (stream_ = ZSTD_createDStream()) == nullptr) {
      return absl::InternalError("zstd: out of memory");
    }
    ZSTD_outBuffer out{buffer, capacity, 0};
    while (out.pos == 0) {
      if (in_.pos == in_.size && !input_ended_) {
        ASSIGN_OR_RETURN(const size_t read,
                         ReadRaw(input_.data(), kChunkBytes));
        in_ = ZSTD_inBuffer{input_.data(), read, 0};
        input_ended_ = read == 0;
      }
      // With no input left, the decoder may still hold output to flush.
      if (input_ended_ && frame_done_) return 0;
      const size_t result = ZSTD_decompressStream(stream_, &out, &in_);
      if (ZSTD_isError(result)) {
        return NotOfItsFormat("zstd", ZSTD_getErrorName(result));
      }
      frame_done_ = result == 0;
      if (input_ended_ && out.pos == 0 && !frame_done_) {
        return NotOfItsFormat("zstd", "it ends mid-frame (truncated?)");
      }
    }
    return out.pos;
  }

 private:
  std::string input_ = std::string(kChunkBytes, '\0');
  ZSTD_DStream* stream_ = nullptr;
  ZSTD_inBuffer in_{nullptr, 0, 0};
  bool input_ended_ = false;
  // The last frame is whole; an empty file is not a zstd file.
  bool frame_done_ = false;
};

}  // namespace

absl::StatusOr<std::unique_ptr<DecompressedLines>> DecompressedLines::Open(
    const std::string& path) {
  std::FILE* file = std::fopen(path.c_str(), "rb");
  if (file == nullptr) {
    const int error = errno;
    const std::string message = absl::StrCat("cannot open corpus file ", path,
                                             ": ", std::strerror(error));
    if (error == ENOENT) return absl::NotFoundError(message);
    return absl::InvalidArgumentError(message);
  }
  std::unique_ptr<CorpusByteSource> source;
  if (absl::EndsWith(path, ".gz")) {
    source = std::make_unique<GzipSource>(path, file);
  } else if (absl::EndsWith(path, ".zst")) {
    source = std::make_unique<ZstdSource>(path, file);
  } else {
    source = std::make_unique<CorpusByteSource>(path, file);
  }
  return std::unique_ptr<DecompressedLines>(
      new DecompressedLines(std::move(source)));
}

DecompressedLines::DecompressedLines(std::unique_ptr<CorpusByteSource> source)
    : source_(std::move(source)) {}

DecompressedLines::~DecompressedLines() = default;

absl::StatusOr<bool> DecompressedLines::Next(std::string* line) {
  while (true) {
    const size_t newline = pending_.find('\n', scanned_);
    if (newline != std::string::npos) {
      line->assign(pending_, pending_start_, newline - pending_start_);
      pending_start_ = scanned_ = newline + 1;
      return true;
    }
    scanned_ = pending_.size();
    if (ended_) {
      if (pending_start_ == pending_.size()) return false;
      line->assign(pending_, pending_start_, std::string::npos);
      pending_start_ = pending_.size();
      return true;
    }
    pending_.erase(0, pending_start_);
    scanned_ -= pending_start_;
    pending_start_ = 0;
    const size_t held = pending_.size();
    pending_.resize(held + kChunkBytes);
    absl::StatusOr<size_t> read = source_->Read(&pending_[held], kChunkBytes);
    pending_.resize(held + (read.ok() ? *read : 0));
    if (!read.ok()) return read.status();
    ended_ = *read == 0;
  }
}

}  // namespace plateau::engine
