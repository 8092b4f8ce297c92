// A corpus file's lines, decompressed by its name as they are read: *.gz
// through zlib (a gzip file, several concatenated members too), *.zst
// through zstd (every frame), any other name as it is. Memory holds a chunk
// of the file and the longest line, whatever the file's size. Errors name
// the file and what is wrong with it (not found, unreadable, not of its
// format, truncated).
#ifndef PLATEAU_ENGINE_DATA_COMPRESSED_FILE_H_
#define PLATEAU_ENGINE_DATA_COMPRESSED_FILE_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace plateau::engine {

class CorpusByteSource;  // the file's bytes, decompressed (compressed_file.cc)

class DecompressedLines {
 public:
  static absl::StatusOr<std::unique_ptr<DecompressedLines>> Open(
      const std::string& path);
  ~DecompressedLines();
  DecompressedLines(const DecompressedLines&) = delete;
  DecompressedLines& operator=(const DecompressedLines&) = delete;

  // The next line, without its '\n', into *line: true; false after the
  // last one (a last line without '\n' is a line too).
  absl::StatusOr<bool> Next(std::string* line);

 private:
  explicit DecompressedLines(std::unique_ptr<CorpusByteSource> source);

  std::unique_ptr<CorpusByteSource> source_;
  std::string pending_;       // decompressed bytes not yet returned
  size_t pending_start_ = 0;  // where the next line starts in pending_
  size_t scanned_ = 0;        // pending_ holds no '\n' before this
  bool ended_ = false;
};

}  // namespace plateau::engine

#endif  // PLATEAU_ENGINE_DATA_COMPRESSED_FILE_H_
