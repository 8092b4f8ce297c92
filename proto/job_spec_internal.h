// Shared by the two halves of //proto:job_spec: job_spec.cc (reading and
// rendering YAML) and job_spec_validation.cc (the rules). How values are
// spelled, in YAML and in messages, and the problems found in one spec. Not
// part of the library's API (job_spec.h).
#ifndef PLATEAU_PROTO_JOB_SPEC_INTERNAL_H_
#define PLATEAU_PROTO_JOB_SPEC_INTERNAL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/descriptor.h"
#include "proto/job.pb.h"

namespace plateau::job_spec_internal {

// google.protobuf.Duration's own limit (10000 years).
inline constexpr int64_t kMaxDurationSeconds = 315576000000;

// ---------------------------------------------------------------------------
// Enum spellings.

// The YAML name of enum value `number` ("adamw"), or "" for UNSPECIFIED and
// numbers the enum does not define. Every enum of the API names its zero
// value <PREFIX>UNSPECIFIED; the other values share that prefix.
std::string EnumYamlName(const google::protobuf::EnumDescriptor& type,
                         int number);

// "adamw|skewadam|adafactor|lion".
std::string EnumChoices(const google::protobuf::EnumDescriptor& type);

// ---------------------------------------------------------------------------
// Formatting values.

// The shortest decimal text that reads back as exactly `value`; whole numbers
// without an exponent.
std::string FormatDouble(double value);

// "1h30m", "90s", "2h"; "0s" for zero.
std::string FormatDurationSeconds(int64_t seconds);

// `text` in single quotes, shortened if long.
std::string Quote(absl::string_view text);

// ---------------------------------------------------------------------------
// Problems found in one spec.

// Every problem found so far, and the field paths they cover: validation does
// not check again a field whose value could not be read, nor anything under
// it, so each mistake is reported once.
class Problems {
 public:
  void Add(absl::string_view path, absl::string_view reason) {
    lines_.push_back(absl::StrCat(path, ": ", reason));
    reported_paths_.insert(std::string(path));
  }

  // True if `path`, or a section holding it, has been reported.
  bool Covers(absl::string_view path) const {
    while (true) {
      if (reported_paths_.contains(path)) return true;
      const size_t cut = path.find_last_of(".[");
      if (cut == absl::string_view::npos) return false;
      path = path.substr(0, cut);
    }
  }

  bool empty() const { return lines_.empty(); }
  const std::vector<std::string>& lines() const { return lines_; }

  // INVALID_ARGUMENT listing the problems one per line; OK if there are none.
  absl::Status ToStatus() const {
    if (lines_.empty()) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrJoin(lines_, "\n"));
  }

 private:
  std::vector<std::string> lines_;
  absl::flat_hash_set<std::string> reported_paths_;
};

// ---------------------------------------------------------------------------
// Validation (job_spec_validation.cc).

inline constexpr int64_t kMaxNodes = 1024;
inline constexpr int64_t kMaxDevicesPerNode = 64;

// Adds a problem for every rule of docs/ARCHITECTURE.md section 7 that `spec`
// breaks. Fields that `problems` already covers (their value could not be read)
// are not checked again.
void ValidateSpec(const v1::JobSpec& spec, Problems* problems);

}  // namespace plateau::job_spec_internal

#endif  // PLATEAU_PROTO_JOB_SPEC_INTERNAL_H_
