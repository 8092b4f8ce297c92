#include "common/read_roots.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <deque>
#include <filesystem>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace plateau {
namespace {

namespace fs = std::filesystem;

// Beneath a root, a job reads flat directories (a token dataset, a Hugging
// Face model): a deeper one, or a symlink loop, is refused.
constexpr int kMaxDepth = 16;
constexpr int kMaxEntries = 100000;

// A descriptor closed when it goes out of scope.
class Descriptor {
 public:
  explicit Descriptor(int fd) : fd_(fd) {}
  ~Descriptor() {
    if (fd_ >= 0) ::close(fd_);
  }
  Descriptor(const Descriptor&) = delete;
  Descriptor& operator=(const Descriptor&) = delete;
  int get() const { return fd_; }

 private:
  const int fd_;
};

std::string DescribeRoots(const std::vector<std::string>& roots) {
  std::vector<std::string> relative;
  std::vector<std::string> absolute;
  for (const std::string& root : roots) {
    (fs::path(root).is_absolute() ? absolute : relative).push_back(root + "/");
  }
  std::string text;
  if (!relative.empty()) {
    text = absl::StrCat(absl::StrJoin(relative, " and "),
                        " of the worker's work directory");
  }
  if (!absolute.empty()) {
    absl::StrAppend(&text, text.empty() ? "" : ", ",
                    absl::StrJoin(absolute, ", "));
  }
  return text;
}

// `path` as a root and the rest beneath it ("." for the root itself).
struct Placement {
  std::string root;
  std::string rest;
};

// Whether `path` has a ".." component or a NUL byte. Neither is allowed:
// the kernel resolves ".." after the symlink before it, which a lexical
// check cannot follow, and a NUL ends the path the kernel sees.
bool HasParentOrNul(const std::string& path) {
  if (path.find('\0') != std::string::npos) return true;
  for (const fs::path& part : fs::path(path)) {
    if (part == "..") return true;
  }
  return false;
}

std::optional<Placement> Place(const std::string& path,
                               const std::vector<std::string>& roots) {
  if (path.empty() || HasParentOrNul(path)) return std::nullopt;
  const fs::path normal = fs::path(path).lexically_normal();
  for (const std::string& root : roots) {
    const fs::path root_path = fs::path(root).lexically_normal();
    if (normal.is_absolute() != root_path.is_absolute()) continue;
    const fs::path rest = normal.lexically_relative(root_path);
    if (rest.empty() || *rest.begin() == "..") continue;
    std::string rest_text = rest.string();
    // "data/brown/" leaves an empty last element.
    while (rest_text.size() > 1 && rest_text.back() == '/')
      rest_text.pop_back();
    return Placement{root, rest_text.empty() ? "." : rest_text};
  }
  return std::nullopt;
}

// openat2(directory, path, RESOLVE_BENEATH): -1 with errno on failure.
int OpenBeneath(int directory, const std::string& path) {
  struct open_how how = {};
  how.flags = O_PATH | O_CLOEXEC;
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS;
  return static_cast<int>(
      ::syscall(SYS_openat2, directory, path.c_str(), &how, sizeof(how)));
}

}  // namespace

std::vector<std::string> ReadRoots::For(const std::string& user) const {
  std::vector<std::string> roots(std::begin(kWorkDirectoryReadRoots),
                                 std::end(kWorkDirectoryReadRoots));
  roots.insert(roots.end(), cluster.begin(), cluster.end());
  auto found = per_user.find(user);
  if (found != per_user.end()) {
    roots.insert(roots.end(), found->second.begin(), found->second.end());
  }
  return roots;
}

absl::Status CheckDeclaredReadRoot(absl::string_view where,
                                   const std::string& root) {
  const fs::path path(root);
  // Commas separate roots on the ranks' command line.
  if (!path.is_absolute() || path.lexically_normal() != path || root == "/" ||
      root.back() == '/' ||
      root.find_first_of(std::string(",\0", 2)) != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": '", root,
        "' is not a read root: give an absolute directory, without '..', "
        "'.', a comma or a trailing '/', other than /"));
  }
  return absl::OkStatus();
}

absl::Status CheckPathUnderReadRoots(absl::string_view field,
                                     const std::string& path,
                                     const std::vector<std::string>& roots) {
  if (Place(path, roots).has_value()) return absl::OkStatus();
  return absl::PermissionDeniedError(absl::StrCat(
      field, ": '", path,
      "' is not under the directories jobs may read: ", DescribeRoots(roots),
      ". Put it under one, or ask an operator to add a root (plateaud "
      "--read_roots, or your read_roots in its tokens file)"));
}

absl::Status ResolveUnderReadRoots(absl::string_view field,
                                   const std::string& path,
                                   const std::vector<std::string>& roots) {
  const std::optional<Placement> placement = Place(path, roots);
  if (!placement.has_value()) {
    return CheckPathUnderReadRoots(field, path, roots);
  }
  const Descriptor root(
      ::open(placement->root.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (root.get() < 0) {
    return absl::ErrnoToStatus(
        errno, absl::StrCat(field, ": its read root ", placement->root));
  }
  // Breadth first from the path itself: every entry beneath it, resolved
  // from the root, so a symlink may point anywhere that stays beneath it.
  std::deque<std::pair<std::string, int>> pending = {{placement->rest, 0}};
  int entries = 0;
  while (!pending.empty()) {
    auto [relative, depth] = std::move(pending.front());
    pending.pop_front();
    const std::string shown =
        relative == "." ? placement->root
                        : absl::StrCat(placement->root, "/", relative);
    const Descriptor entry(OpenBeneath(root.get(), relative));
    if (entry.get() < 0) {
      // Refused by the kernel (before Linux 5.6) or a seccomp filter: a
      // weaker check would tell what exists outside the roots.
      if (errno == ENOSYS || errno == EPERM) {
        return absl::FailedPreconditionError(absl::StrCat(
            field, ": this host refuses openat2 (", std::strerror(errno),
            "), which confining a job's reads needs: Linux 5.6 or later, "
            "and a container runtime whose seccomp profile allows it"));
      }
      if (errno == EXDEV) {
        return absl::PermissionDeniedError(
            absl::StrCat(field, ": ", shown, " leads outside ", placement->root,
                         " (a symlink out of it): jobs read only beneath ",
                         DescribeRoots(roots)));
      }
      return absl::ErrnoToStatus(errno, absl::StrCat(field, ": ", shown));
    }
    struct stat status;
    if (::fstat(entry.get(), &status) != 0) {
      return absl::ErrnoToStatus(errno, absl::StrCat(field, ": ", shown));
    }
    if (!S_ISDIR(status.st_mode)) continue;
    if (depth == kMaxDepth) {
      return absl::PermissionDeniedError(absl::StrCat(
          field, ": ", shown, " is nested more than ", kMaxDepth,
          " directories deep beneath ", path, " (or a symlink loops)"));
    }
    const int listing_fd =
        ::openat(entry.get(), ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (listing_fd < 0) {
      return absl::ErrnoToStatus(errno, absl::StrCat(field, ": ", shown));
    }
    DIR* listing = ::fdopendir(listing_fd);
    if (listing == nullptr) {
      ::close(listing_fd);
      return absl::ErrnoToStatus(errno, absl::StrCat(field, ": ", shown));
    }
    while (const struct dirent* child = ::readdir(listing)) {
      const std::string name = child->d_name;
      if (name == "." || name == "..") continue;
      if (++entries > kMaxEntries) {
        ::closedir(listing);
        return absl::PermissionDeniedError(
            absl::StrCat(field, ": ", path, " holds more than ", kMaxEntries,
                         " files and directories"));
      }
      pending.emplace_back(
          relative == "." ? name : absl::StrCat(relative, "/", name),
          depth + 1);
    }
    ::closedir(listing);
  }
  return absl::OkStatus();
}

}  // namespace plateau
