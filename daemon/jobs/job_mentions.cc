#include "daemon/jobs/job_mentions.h"

#include <regex>
#include <utility>

#include "absl/strings/str_cat.h"

namespace plateau::daemon {
namespace {

constexpr char kAnother[] = "another user's job";

// Replaces each match of `pattern` in `text` by `replace(match)`.
std::string ReplaceEach(
    const std::string& text, const std::regex& pattern,
    const std::function<std::string(const std::smatch&)>& replace) {
  std::string out;
  auto last = text.cbegin();
  for (std::sregex_iterator it(text.cbegin(), text.cend(), pattern), end;
       it != end; ++it) {
    out.append(last, (*it)[0].first);
    out += replace(*it);
    last = (*it)[0].second;
  }
  out.append(last, text.cend());
  return out;
}

}  // namespace

JobShown JobsShown(const JobManager* jobs, bool admin,
                   std::function<bool(const std::string& owner)> sees_owner) {
  if (admin) return JobShown();
  return [jobs, sees_owner = std::move(sees_owner)](const std::string& job_id) {
    const absl::StatusOr<std::string> owner = jobs->OwnerOf(job_id);
    return owner.ok() && sees_owner(*owner);
  };
}

std::string HideUnshownJobs(absl::string_view text, const JobShown& shown) {
  if (!shown) return std::string(text);
  // The scheduler's "job J (priority P, user U)": the user goes too.
  static const std::regex kWithUser(
      R"(job (j-[0-9a-z]+) \(priority (-?[0-9]+), user [^)]*\))");
  // Any other mention: "job J", "jobs J (...), K (...)", a bare "J".
  static const std::regex kMention(R"((jobs? )?\b(j-[0-9a-z]+)\b)");
  const std::string named =
      ReplaceEach(std::string(text), kWithUser, [&](const std::smatch& match) {
        if (shown(match[1].str())) return match[0].str();
        return absl::StrCat(kAnother, " (priority ", match[2].str(), ")");
      });
  return ReplaceEach(named, kMention, [&](const std::smatch& match) {
    if (shown(match[2].str())) return match[0].str();
    return absl::StrCat(match[1].str() == "jobs " ? "jobs: " : "", kAnother);
  });
}

void HideUnshownJobs(const JobShown& shown, v1::Job* job) {
  if (!shown) return;
  job->set_wait_reason(HideUnshownJobs(job->wait_reason(), shown));
  job->set_last_error(HideUnshownJobs(job->last_error(), shown));
}

void HideUnshownJobs(const JobShown& shown, v1::JobEvent* event) {
  if (!shown) return;
  event->set_message(HideUnshownJobs(event->message(), shown));
}

}  // namespace plateau::daemon
