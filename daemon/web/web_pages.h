// The HTML of plateaud's web page (web_service.h serves it): the jobs, a
// job, the nodes and the sign-in form. Pure functions of what they are
// given: the caller has already chosen what its user may see. Every string
// that came from a user, a worker or a spec is escaped, and the data the
// charts draw travels as JSON in a <script type="application/json"> that
// daemon/web/static/plateau.js reads; nothing of it is ever run.
#ifndef PLATEAU_DAEMON_WEB_WEB_PAGES_H_
#define PLATEAU_DAEMON_WEB_WEB_PAGES_H_

#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "proto/job.pb.h"
#include "proto/node.pb.h"

namespace plateau::daemon {

// & < > " ' as entities.
std::string HtmlEscape(absl::string_view text);

// Newest first, as given.
std::string JobsHtml(const std::vector<v1::Job>& jobs, const std::string& user);

// `events` oldest first; `samples` oldest first (JobManager's).
std::string JobHtml(const v1::Job& job, const std::vector<v1::JobEvent>& events,
                    const std::vector<v1::ProgressSample>& samples,
                    const std::string& user);

// A device's allocated_job_id is shown as given: the caller clears those of
// jobs its user may not see (allocated still says the device is taken).
std::string NodesHtml(const std::vector<v1::Node>& nodes,
                      const std::string& user, absl::Time now);

// `error`: shown above the form ("" for none).
std::string LoginHtml(const std::string& error);

// A page that only says something: "Not found", "no job j-1".
std::string MessageHtml(const std::string& title, const std::string& message,
                        const std::string& user);

}  // namespace plateau::daemon

#endif  // PLATEAU_DAEMON_WEB_WEB_PAGES_H_
