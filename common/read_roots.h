// Where a job run by plateaud may read its data (`data.path`) and its
// starting model (`init_from`) from: its read roots. The work directory's
// data/ and models/ always (relative roots: a worker resolves them under its
// --work_dir), plus the absolute directories an operator declares for the
// cluster (plateaud --read_roots) and for the job's user (the tokens file's
// read_roots).
//
// Two checks, neither of which tells whether anything outside the roots
// exists: plateaud's at submit is lexical (a path outside every root, or
// with a `..` anywhere, is refused), and the rank's before it reads
// resolves the path and everything beneath it with openat2(RESOLVE_BENEATH),
// so that no symlink leads out either. The rank then reads by path: a user
// who can write beneath a root and swaps a symlink in between the check and
// the read is not stopped (docs/ARCHITECTURE.md section 11). A standalone
// `plateau-worker train` is its user's own process and is not confined.
#ifndef PLATEAU_COMMON_READ_ROOTS_H_
#define PLATEAU_COMMON_READ_ROOTS_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace plateau {

// The roots every job has, relative to the worker's work directory.
inline constexpr const char* kWorkDirectoryReadRoots[] = {"data", "models"};

struct ReadRoots {
  std::vector<std::string> cluster;                          // absolute
  std::map<std::string, std::vector<std::string>> per_user;  // absolute

  // The work directory's roots, the cluster's, then `user`'s.
  std::vector<std::string> For(const std::string& user) const;
};

// INVALID_ARGUMENT, naming `where`, unless `root` is an absolute, normal
// directory path other than "/", without a comma.
absl::Status CheckDeclaredReadRoot(absl::string_view where,
                                   const std::string& root);

// Lexically: PERMISSION_DENIED, naming `field` and the roots, unless `path`
// lies under one of `roots` (a relative path under a relative root, an
// absolute one under an absolute root) and has no `..` or NUL.
absl::Status CheckPathUnderReadRoots(absl::string_view field,
                                     const std::string& path,
                                     const std::vector<std::string>& roots);

// On the node, before reading: CheckPathUnderReadRoots, then `path` and
// every file and directory beneath it resolved from its root's directory
// with RESOLVE_BENEATH, symlinks followed only while they stay beneath it.
// PERMISSION_DENIED naming `field`, the entry and the roots for one that
// leads out; the file system's error for one missing inside a root;
// FAILED_PRECONDITION where the host refuses openat2.
absl::Status ResolveUnderReadRoots(absl::string_view field,
                                   const std::string& path,
                                   const std::vector<std::string>& roots);

}  // namespace plateau

#endif  // PLATEAU_COMMON_READ_ROOTS_H_
