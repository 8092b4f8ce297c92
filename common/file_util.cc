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

#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace plateau {
namespace {

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

 private:
  int fd_;
};

namespace fs = std::filesystem;

// Appends every piece, fsyncs (kSynced) and closes.
absl::Status WriteAllAndClose(WritableFile& file,
                              absl::Span<const absl::string_view> pieces,
                              Durability durability) {
  for (const absl::string_view piece : pieces) {
    RETURN_IF_ERROR(file.Append(piece));
  }
  if (durability == Durability::kSynced) RETURN_IF_ERROR(file.Sync());
  return file.Close();
}

std::string ParentOf(const std::string& path) {
  const fs::path parent = fs::path(path).parent_path();
  return parent.empty() ? "." : parent.string();
}

// "<parent>/.<name>.<kind>-XXXXXX" beside `path`, X random letters and
// digits: names no two writers share, which `create` makes (exclusively,
// ALREADY_EXISTS on a clash).
template <typename Create>
absl::StatusOr<std::string> CreateUniqueSibling(const std::string& path,
                                                absl::string_view kind,
                                                const Create& create) {
  static constexpr char kLetters[] =
      "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  absl::BitGen random;
  absl::Status status;
  for (int attempt = 0; attempt < 16; ++attempt) {
    std::string name =
        absl::StrCat(ParentOf(path), "/.", fs::path(path).filename().string(),
                     ".", kind, "-");
    for (int i = 0; i < 6; ++i) {
      name.push_back(
          kLetters[absl::Uniform<size_t>(random, 0, sizeof(kLetters) - 1)]);
    }
    status = create(name);
    if (status.ok()) return name;
    if (!absl::IsAlreadyExists(status)) break;
  }
  return status;
}

}  // namespace

absl::Status PathError(int error_number, absl::string_view what,
                       const std::string& path) {
  return absl::ErrnoToStatus(error_number, absl::StrCat(what, " ", path));
}

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
                             size_t bytes, FileSystem& file_system) {
  const absl::string_view piece(static_cast<const char*>(data), bytes);
  return WriteFileSynced(path, absl::MakeConstSpan(&piece, 1), file_system);
}

absl::Status WriteFileSynced(const std::string& path,
                             absl::Span<const absl::string_view> pieces,
                             FileSystem& file_system) {
  ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> file,
                   file_system.NewWritableFile(path, /*exclusive=*/false));
  return WriteAllAndClose(*file, pieces, Durability::kSynced);
}

absl::Status WriteFileAtomically(const std::string& path,
                                 absl::Span<const absl::string_view> pieces,
                                 Durability durability,
                                 FileSystem& file_system) {
  std::unique_ptr<WritableFile> file;
  absl::StatusOr<std::string> temp_path = CreateUniqueSibling(
      path, "tmp", [&](const std::string& name) -> absl::Status {
        ASSIGN_OR_RETURN(file,
                         file_system.NewWritableFile(name, /*exclusive=*/true));
        return absl::OkStatus();
      });
  if (!temp_path.ok()) {
    return absl::Status(temp_path.status().code(),
                        absl::StrCat("cannot create a temporary file beside ",
                                     path, ": ", temp_path.status().message()));
  }
  absl::Status status = WriteAllAndClose(*file, pieces, durability);
  if (status.ok()) status = file_system.Rename(*temp_path, path);
  if (!status.ok()) {
    file_system.RemoveAll(*temp_path).IgnoreError();
    return status;
  }
  if (durability == Durability::kUnsynced) return absl::OkStatus();
  return file_system.SyncDirectory(ParentOf(path));
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
                                                 const char* kind,
                                                 FileSystem& file_system) {
  const std::string parent = ParentOf(path);
  std::error_code error;
  fs::create_directories(parent, error);
  if (error) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot create directory ", parent, ": ", error.message()));
  }
  return CreateUniqueSibling(path, kind, [&](const std::string& name) {
    return file_system.CreateDirectory(name);
  });
}

namespace {

// The fallback for file systems without RENAME_EXCHANGE: for a moment
// `output` does not exist (it is the ".old" sibling).
absl::Status ReplaceNonEmptyDirectory(const std::string& staged,
                                      const std::string& output,
                                      FileSystem& file_system) {
  ASSIGN_OR_RETURN(const std::string old,
                   MakeSiblingDirectory(output, "old", file_system));
  if (absl::Status status = file_system.Rename(output, old); !status.ok()) {
    file_system.RemoveAll(old).IgnoreError();
    return status;
  }
  if (absl::Status status = file_system.Rename(staged, output); !status.ok()) {
    file_system.Rename(old, output).IgnoreError();  // put the old one back
    return status;
  }
  file_system.RemoveAll(old).IgnoreError();
  return absl::OkStatus();
}

}  // namespace

absl::Status ReplaceDirectory(const std::string& staged,
                              const std::string& output, bool overwrite,
                              FileSystem& file_system) {
  RETURN_IF_ERROR(CheckReplaceableDirectory(output, overwrite));
  std::error_code error;
  const bool replaces_non_empty =
      fs::is_directory(output, error) && !fs::is_empty(output, error);
  if (!replaces_non_empty) {
    // rename(2) replaces an empty directory atomically.
    RETURN_IF_ERROR(file_system.Rename(staged, output));
  } else {
    ASSIGN_OR_RETURN(const bool exchanged,
                     file_system.Exchange(staged, output));
    if (exchanged) {
      // `staged` is now the old directory: make the swap durable first.
      RETURN_IF_ERROR(file_system.SyncDirectory(ParentOf(output)));
      file_system.RemoveAll(staged).IgnoreError();
    } else {
      RETURN_IF_ERROR(ReplaceNonEmptyDirectory(staged, output, file_system));
    }
  }
  return file_system.SyncDirectory(ParentOf(output));
}

absl::Status WriteDirectoryAtomically(
    const std::string& output, bool overwrite,
    absl::FunctionRef<absl::Status(const std::string& staged)> write) {
  RETURN_IF_ERROR(CheckReplaceableDirectory(output, overwrite));
  ASSIGN_OR_RETURN(const std::string staged,
                   MakeSiblingDirectory(output, "tmp"));
  absl::Status status = write(staged);
  if (status.ok()) status = PosixFileSystem().SyncDirectory(staged);
  if (status.ok()) status = ReplaceDirectory(staged, output, overwrite);
  if (!status.ok()) {
    std::error_code ignored;
    fs::remove_all(staged, ignored);
  }
  return status;
}

}  // namespace plateau
