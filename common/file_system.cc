#include "common/file_system.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "common/file_util.h"

namespace plateau {
namespace {

class PosixWritableFile : public WritableFile {
 public:
  PosixWritableFile(std::string path, int fd)
      : path_(std::move(path)), fd_(fd) {}
  ~PosixWritableFile() override {
    if (fd_ >= 0) ::close(fd_);
  }

  absl::Status Append(absl::string_view bytes) override {
    const char* next = bytes.data();
    size_t left_bytes = bytes.size();
    while (left_bytes > 0) {
      const ssize_t written_bytes = ::write(fd_, next, left_bytes);
      if (written_bytes < 0) {
        if (errno == EINTR) continue;
        return PathError(errno, "cannot write", path_);
      }
      next += written_bytes;
      left_bytes -= static_cast<size_t>(written_bytes);
    }
    return absl::OkStatus();
  }

  absl::Status Sync() override {
    if (::fsync(fd_) != 0) return PathError(errno, "cannot fsync", path_);
    return absl::OkStatus();
  }

  absl::Status Close() override {
    const int result = ::close(fd_);
    fd_ = -1;
    if (result != 0) return PathError(errno, "cannot close", path_);
    return absl::OkStatus();
  }

 private:
  const std::string path_;
  int fd_;
};

class Posix : public FileSystem {
 public:
  absl::StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(
      const std::string& path, bool exclusive) override {
    const int flags =
        O_WRONLY | O_CREAT | O_CLOEXEC | (exclusive ? O_EXCL : O_TRUNC);
    const int fd = ::open(path.c_str(), flags, 0644);
    if (fd < 0) return PathError(errno, "cannot create", path);
    return std::make_unique<PosixWritableFile>(path, fd);
  }

  absl::Status CreateDirectory(const std::string& path) override {
    if (::mkdir(path.c_str(), 0755) != 0) {
      return PathError(errno, "cannot create directory", path);
    }
    return absl::OkStatus();
  }

  absl::Status Rename(const std::string& from, const std::string& to) override {
    if (std::rename(from.c_str(), to.c_str()) != 0) {
      return absl::ErrnoToStatus(
          errno, absl::StrCat("cannot rename ", from, " to ", to));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<bool> Exchange(const std::string& a,
                                const std::string& b) override {
    if (::renameat2(AT_FDCWD, a.c_str(), AT_FDCWD, b.c_str(),
                    RENAME_EXCHANGE) == 0) {
      return true;
    }
    if (errno == EINVAL || errno == ENOSYS || errno == ENOTSUP) return false;
    return absl::ErrnoToStatus(errno,
                               absl::StrCat("cannot exchange ", a, " and ", b));
  }

  absl::Status SyncDirectory(const std::string& path) override {
    const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return PathError(errno, "cannot open directory", path);
    const int result = ::fsync(fd);
    const int error_number = errno;
    ::close(fd);
    if (result != 0) {
      return PathError(error_number, "cannot fsync directory", path);
    }
    return absl::OkStatus();
  }

  absl::Status RemoveAll(const std::string& path) override {
    std::error_code error;
    std::filesystem::remove_all(path, error);
    if (error) return PathError(error.value(), "cannot remove", path);
    return absl::OkStatus();
  }

  absl::StatusOr<std::unique_ptr<MappedFile>> MapFile(
      const std::string& path) override {
    return MappedFile::Open(path);
  }
};

}  // namespace

FileSystem& PosixFileSystem() {
  static Posix* const file_system = new Posix();
  return *file_system;
}

absl::StatusOr<std::unique_ptr<WritableFile>>
FileSystemWrapper::NewWritableFile(const std::string& path, bool exclusive) {
  return base_.NewWritableFile(path, exclusive);
}

absl::Status FileSystemWrapper::CreateDirectory(const std::string& path) {
  return base_.CreateDirectory(path);
}

absl::Status FileSystemWrapper::Rename(const std::string& from,
                                       const std::string& to) {
  return base_.Rename(from, to);
}

absl::StatusOr<bool> FileSystemWrapper::Exchange(const std::string& a,
                                                 const std::string& b) {
  return base_.Exchange(a, b);
}

absl::Status FileSystemWrapper::SyncDirectory(const std::string& path) {
  return base_.SyncDirectory(path);
}

absl::Status FileSystemWrapper::RemoveAll(const std::string& path) {
  return base_.RemoveAll(path);
}

absl::StatusOr<std::unique_ptr<MappedFile>> FileSystemWrapper::MapFile(
    const std::string& path) {
  return base_.MapFile(path);
}

}  // namespace plateau
