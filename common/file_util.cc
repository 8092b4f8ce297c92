#include "common/file_util.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace plateau {
namespace {

absl::Status PathError(int error_number, const std::string& what,
                       const std::string& path) {
  return absl::ErrnoToStatus(error_number, absl::StrCat(what, " ", path));
}

// Closes the descriptor on scope exit.
class FileDescriptor {
 public:
  explicit FileDescriptor(int fd) : fd_(fd) {}
  ~FileDescriptor() {
    if (fd_ >= 0) ::close(fd_);
  }
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  int get() const { return fd_; }
  // Closes now and reports close()'s errno (0 on success).
  int Close() {
    const int result = ::close(fd_);
    fd_ = -1;
    return result == 0 ? 0 : errno;
  }

 private:
  int fd_;
};

namespace fs = std::filesystem;

absl::Status RenamePath(const std::string& from, const std::string& to) {
  if (std::rename(from.c_str(), to.c_str()) != 0) {
    return absl::ErrnoToStatus(
        errno, absl::StrCat("cannot rename ", from, " to ", to));
  }
  return absl::OkStatus();
}

// Writes every piece to `fd`, fsyncs it (kSynced) and closes it; `path` is
// for messages.
absl::Status WriteAllAndClose(FileDescriptor& fd,
                              absl::Span<const absl::string_view> pieces,
                              const std::string& path, Durability durability) {
  for (const absl::string_view piece : pieces) {
    const char* next = piece.data();
    size_t left_bytes = piece.size();
    while (left_bytes > 0) {
      const ssize_t written_bytes = ::write(fd.get(), next, left_bytes);
      if (written_bytes < 0) {
        if (errno == EINTR) continue;
        return PathError(errno, "cannot write", path);
      }
      next += written_bytes;
      left_bytes -= static_cast<size_t>(written_bytes);
    }
  }
  if (durability == Durability::kSynced && ::fsync(fd.get()) != 0) {
    return PathError(errno, "cannot fsync", path);
  }
  if (const int error_number = fd.Close(); error_number != 0) {
    return PathError(error_number, "cannot close", path);
  }
  return absl::OkStatus();
}

// Swaps two existing paths atomically. Returns false (and changes nothing)
// where the kernel or file system cannot, true on success.
absl::StatusOr<bool> ExchangePaths(const std::string& a, const std::string& b) {
  if (::renameat2(AT_FDCWD, a.c_str(), AT_FDCWD, b.c_str(), RENAME_EXCHANGE) ==
      0) {
    return true;
  }
  if (errno == EINVAL || errno == ENOSYS || errno == ENOTSUP) return false;
  return absl::ErrnoToStatus(errno,
                             absl::StrCat("cannot exchange ", a, " and ", b));
}

}  // namespace

absl::StatusOr<std::string> ReadFileToString(const std::string& path) {
  FileDescriptor fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) return PathError(errno, "cannot open", path);
  std::string content;
  char buffer[1 << 16];
  while (true) {
    const ssize_t read_bytes = ::read(fd.get(), buffer, sizeof(buffer));
    if (read_bytes < 0) {
      if (errno == EINTR) continue;
      return PathError(errno, "cannot read", path);
    }
    if (read_bytes == 0) break;
    content.append(buffer, static_cast<size_t>(read_bytes));
  }
  return content;
}

absl::Status WriteFileSynced(const std::string& path, const void* data,
                             size_t bytes) {
  const absl::string_view piece(static_cast<const char*>(data), bytes);
  return WriteFileSynced(path, absl::MakeConstSpan(&piece, 1));
}

absl::Status WriteFileSynced(const std::string& path,
                             absl::Span<const absl::string_view> pieces) {
  FileDescriptor fd(
      ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (fd.get() < 0) return PathError(errno, "cannot create", path);
  return WriteAllAndClose(fd, pieces, path, Durability::kSynced);
}

absl::Status WriteFileAtomically(const std::string& path,
                                 absl::Span<const absl::string_view> pieces,
                                 Durability durability) {
  const fs::path target(path);
  fs::path parent = target.parent_path();
  if (parent.empty()) parent = ".";
  std::string temp_path =
      (parent / ("." + target.filename().string() + ".tmp-XXXXXX")).string();
  FileDescriptor fd(::mkostemp(temp_path.data(), O_CLOEXEC));
  if (fd.get() < 0) {
    return PathError(errno, "cannot create a temporary file beside", path);
  }
  absl::Status status;
  if (::fchmod(fd.get(), 0644) != 0) {
    status = PathError(errno, "cannot chmod", temp_path);
  }
  if (status.ok()) {
    status = WriteAllAndClose(fd, pieces, temp_path, durability);
  }
  if (status.ok()) status = RenamePath(temp_path, path);
  if (!status.ok()) {
    ::unlink(temp_path.c_str());
    return status;
  }
  if (durability == Durability::kUnsynced) return absl::OkStatus();
  return SyncDirectory(parent.string());
}

absl::Status SyncDirectory(const std::string& path) {
  FileDescriptor fd(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (fd.get() < 0) return PathError(errno, "cannot open directory", path);
  if (::fsync(fd.get()) != 0) {
    return PathError(errno, "cannot fsync directory", path);
  }
  return absl::OkStatus();
}

std::string Sha256Hex(const void* data, size_t bytes) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int digest_bytes = 0;
  // EVP_Digest only fails on allocation failure inside OpenSSL.
  if (EVP_Digest(data, bytes, digest, &digest_bytes, EVP_sha256(), nullptr) !=
      1) {
    return "";
  }
  static constexpr char kHexDigits[] = "0123456789abcdef";
  std::string hex;
  hex.reserve(2 * digest_bytes);
  for (unsigned int i = 0; i < digest_bytes; ++i) {
    hex.push_back(kHexDigits[digest[i] >> 4]);
    hex.push_back(kHexDigits[digest[i] & 0xf]);
  }
  return hex;
}

absl::StatusOr<std::unique_ptr<MappedFile>> MappedFile::Open(
    const std::string& path) {
  FileDescriptor fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) return PathError(errno, "cannot open", path);
  struct stat file_status;
  if (::fstat(fd.get(), &file_status) != 0) {
    return PathError(errno, "cannot stat", path);
  }
  if (!S_ISREG(file_status.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, " is not a regular file"));
  }
  const size_t size_bytes = static_cast<size_t>(file_status.st_size);
  if (size_bytes == 0) {
    return std::unique_ptr<MappedFile>(new MappedFile(nullptr, 0));
  }
  void* mapping =
      ::mmap(nullptr, size_bytes, PROT_READ, MAP_PRIVATE, fd.get(), 0);
  if (mapping == MAP_FAILED) return PathError(errno, "cannot mmap", path);
  return std::unique_ptr<MappedFile>(
      new MappedFile(static_cast<const uint8_t*>(mapping), size_bytes));
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) {
    ::munmap(const_cast<uint8_t*>(data_), size_bytes_);
  }
}

std::string TrimTrailingSlashes(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  return path;
}

absl::Status CheckReplaceableDirectory(const std::string& output,
                                       bool overwrite) {
  std::error_code error;
  const fs::file_status status = fs::symlink_status(output, error);
  if (status.type() == fs::file_type::not_found) return absl::OkStatus();
  if (error) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot inspect output directory ", output, ": ", error.message()));
  }
  if (status.type() != fs::file_type::directory) {
    return absl::FailedPreconditionError(
        absl::StrCat("output path ", output, " exists and is not a directory"));
  }
  const bool empty = fs::is_empty(output, error);
  if (error) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot list output directory ", output, ": ", error.message()));
  }
  if (!empty && !overwrite) {
    return absl::FailedPreconditionError(absl::StrCat(
        "output directory ", output,
        " already exists and is not empty; choose another directory or ask "
        "to overwrite it"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> MakeSiblingDirectory(const std::string& path,
                                                 const char* kind) {
  const fs::path output(path);
  fs::path parent = output.parent_path();
  if (parent.empty()) parent = ".";
  std::error_code error;
  fs::create_directories(parent, error);
  if (error) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot create directory ", parent.string(), ": ", error.message()));
  }
  std::string pattern =
      (parent / ("." + output.filename().string() + "." + kind + "-XXXXXX"))
          .string();
  if (::mkdtemp(pattern.data()) == nullptr) {
    return absl::ErrnoToStatus(
        errno, absl::StrCat("cannot create a directory beside ", path));
  }
  // mkdtemp makes it private (0700); outputs are meant to be shared.
  fs::permissions(pattern,
                  fs::perms::owner_all | fs::perms::group_read |
                      fs::perms::group_exec | fs::perms::others_read |
                      fs::perms::others_exec,
                  error);
  return pattern;
}

namespace {

// The fallback for file systems without RENAME_EXCHANGE: for a moment
// `output` does not exist (it is the ".old" sibling).
absl::Status ReplaceNonEmptyDirectory(const std::string& staged,
                                      const std::string& output) {
  absl::StatusOr<std::string> old = MakeSiblingDirectory(output, "old");
  if (!old.ok()) return old.status();
  std::error_code error;
  if (absl::Status status = RenamePath(output, *old); !status.ok()) {
    fs::remove(*old, error);
    return status;
  }
  if (absl::Status status = RenamePath(staged, output); !status.ok()) {
    RenamePath(*old, output).IgnoreError();  // put the old one back
    return status;
  }
  fs::remove_all(*old, error);
  return absl::OkStatus();
}

}  // namespace

absl::Status ReplaceDirectory(const std::string& staged,
                              const std::string& output, bool overwrite) {
  if (absl::Status status = CheckReplaceableDirectory(output, overwrite);
      !status.ok()) {
    return status;
  }
  std::error_code error;
  const bool replaces_non_empty =
      fs::is_directory(output, error) && !fs::is_empty(output, error);
  if (!replaces_non_empty) {
    // rename(2) replaces an empty directory atomically.
    if (absl::Status status = RenamePath(staged, output); !status.ok()) {
      return status;
    }
  } else {
    absl::StatusOr<bool> exchanged = ExchangePaths(staged, output);
    if (!exchanged.ok()) return exchanged.status();
    if (*exchanged) {
      // `staged` is now the old directory: make the swap durable first.
      fs::path parent = fs::path(output).parent_path();
      RETURN_IF_ERROR(SyncDirectory(parent.empty() ? "." : parent.string()));
      fs::remove_all(staged, error);
    } else {
      absl::Status status = ReplaceNonEmptyDirectory(staged, output);
      if (!status.ok()) return status;
    }
  }
  fs::path parent = fs::path(output).parent_path();
  return SyncDirectory(parent.empty() ? "." : parent.string());
}

}  // namespace plateau
