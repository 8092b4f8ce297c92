// File helpers: whole-file reads, synced and atomic writes, read-only mmaps,
// SHA-256, and replacing a directory by a staged one. The writes take the
// FileSystem they go through (file_system.h; the real one by default), so
// that tests can inject a fault into any of their steps. Every error names
// the path and carries the errno text.
#ifndef PLATEAU_COMMON_FILE_UTIL_H_
#define PLATEAU_COMMON_FILE_UTIL_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/file_system.h"

namespace plateau {

// errno as the Status of a file operation: "<what> <path>: <strerror>", with
// the code absl::ErrnoToStatus gives it (NOT_FOUND, RESOURCE_EXHAUSTED, ...).
absl::Status PathError(int error_number, absl::string_view what,
                       const std::string& path);

absl::StatusOr<std::string> ReadFileToString(const std::string& path);

// Creates or truncates `path`, writes `bytes` bytes and fsyncs the file.
absl::Status WriteFileSynced(const std::string& path, const void* data,
                             size_t bytes,
                             FileSystem& file_system = PosixFileSystem());
// The same, writing the pieces one after another (no copy into one buffer).
absl::Status WriteFileSynced(const std::string& path,
                             absl::Span<const absl::string_view> pieces,
                             FileSystem& file_system = PosixFileSystem());

// kUnsynced skips the fsyncs: for files that only live processes read
// (status files, leases), where a crash may lose the file but never tears it.
enum class Durability { kSynced, kUnsynced };

// Writes the pieces to a new temporary file beside `path`, fsyncs it, renames
// it to `path` and fsyncs the directory (kSynced): readers see the old file or
// the whole new one, never a part. The temporary file is removed on failure.
absl::Status WriteFileAtomically(const std::string& path,
                                 absl::Span<const absl::string_view> pieces,
                                 Durability durability = Durability::kSynced,
                                 FileSystem& file_system = PosixFileSystem());

// The path without trailing slashes, so that it has a file name.
std::string TrimTrailingSlashes(std::string path);

// OK if `output` does not exist, is an empty directory, or is a non-empty
// directory and `overwrite` is set; else FailedPrecondition.
absl::Status CheckReplaceableDirectory(const std::string& path, bool overwrite);

// Creates an empty directory "<parent>/.<name>.<kind>-XXXXXX" beside `path`
// (mode 0755), creating the parent if needed. Returns its path.
absl::StatusOr<std::string> MakeSiblingDirectory(
    const std::string& path, const char* kind,
    FileSystem& file_system = PosixFileSystem());

// Renames the finished directory `staged` (beside `output`) to `output`,
// first checking CheckReplaceableDirectory. An absent or empty `output` is
// replaced atomically. A non-empty one is swapped atomically with `staged`
// (renameat2 RENAME_EXCHANGE) and then deleted; where the file system cannot
// swap, it is moved aside, replaced, then deleted (if the second rename
// fails, it is moved back). Syncs the parent.
absl::Status ReplaceDirectory(const std::string& staged,
                              const std::string& output, bool overwrite,
                              FileSystem& file_system = PosixFileSystem());

// A whole directory as one step: `write` fills an empty directory beside
// `output` (MakeSiblingDirectory), which is synced and put in place
// (ReplaceDirectory). On any error, `write`'s included, that directory is
// removed and `output` is left as it was.
absl::Status WriteDirectoryAtomically(
    const std::string& output, bool overwrite,
    absl::FunctionRef<absl::Status(const std::string& staged)> write);

// SHA-256 of the bytes as 64 lowercase hex digits (OpenSSL libcrypto).
std::string Sha256Hex(const void* data, size_t bytes);

// A read-only, private mmap of a whole file. Unmapped on destruction.
class MappedFile {
 public:
  static absl::StatusOr<std::unique_ptr<MappedFile>> Open(
      const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size_bytes() const { return size_bytes_; }

 private:
  MappedFile(const uint8_t* data, size_t size_bytes)
      : data_(data), size_bytes_(size_bytes) {}

  const uint8_t* data_;  // nullptr for an empty file
  size_t size_bytes_;
};

}  // namespace plateau

#endif  // PLATEAU_COMMON_FILE_UTIL_H_
