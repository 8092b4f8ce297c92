// A corpus file's content, decompressed by its name: *.gz through zlib (a
// gzip file, several concatenated members too), *.zst through zstd (every
// frame), any other name as it is. Errors name the file and what is wrong
// with it (not found, unreadable, not of its format, truncated).
#ifndef PLATEAU_ENGINE_DATA_COMPRESSED_FILE_H_
#define PLATEAU_ENGINE_DATA_COMPRESSED_FILE_H_

#include <string>

#include "absl/status/statusor.h"

namespace plateau::engine {

absl::StatusOr<std::string> ReadDecompressedFile(const std::string& path);

}  // namespace plateau::engine

#endif  // PLATEAU_ENGINE_DATA_COMPRESSED_FILE_H_
