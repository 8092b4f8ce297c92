#include "daemon/web/web_pages.h"

#include <algorithm>
#include <cstdint>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "common/byte_size.h"
#include "common/proto_time.h"
#include "nlohmann/json.hpp"
#include "proto/job_spec.h"
#include "proto/memory.pb.h"

namespace plateau::daemon {
namespace {

// "2026-12-04 06:01:02Z"; "-" when unset.
std::string FormatTime(const google::protobuf::Timestamp& time) {
  if (time.seconds() == 0 && time.nanos() == 0) return "-";
  return absl::FormatTime("%Y-%m-%d %H:%M:%SZ", FromProto(time),
                          absl::UTCTimeZone());
}

// An enum value's name without its prefix: "RUNNING".
std::string EnumName(const std::string& name, absl::string_view prefix) {
  return absl::StartsWith(name, prefix) ? name.substr(prefix.size()) : name;
}

std::string StateName(v1::JobState state) {
  return EnumName(v1::JobState_Name(state), "JOB_STATE_");
}

// <span class="state state-running">RUNNING</span>
std::string StateBadge(v1::JobState state) {
  const std::string name = StateName(state);
  return absl::StrCat("<span class=\"state state-", absl::AsciiStrToLower(name),
                      "\">", name, "</span>");
}

std::string ComponentName(int component) {
  return absl::AsciiStrToLower(
      EnumName(v1::MemoryComponent_Name(component), "MEMORY_COMPONENT_"));
}

// The components a chart or bar may show, in the enum's order.
const std::vector<int>& Components() {
  static const auto* const components = [] {
    auto* valid = new std::vector<int>;
    for (int c = v1::MemoryComponent_MIN + 1; c <= v1::MemoryComponent_MAX;
         ++c) {
      if (v1::MemoryComponent_IsValid(c)) valid->push_back(c);
    }
    return valid;
  }();
  return *components;
}

std::string ProgressText(const v1::Job& job) {
  if (job.progress().total_steps() == 0) return "-";
  return absl::StrCat(job.progress().step(), "/", job.progress().total_steps());
}

std::string LossText(const v1::Job& job) {
  if (job.progress().step() == 0) return "-";
  return absl::StrFormat("%.4f", job.progress().loss());
}

std::string Layout(absl::string_view title, absl::string_view page,
                   absl::string_view user, absl::string_view main) {
  return absl::StrCat(
      "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
      "<title>",
      HtmlEscape(title),
      " · Plateau</title>\n"
      "<meta name=\"viewport\" content=\"width=device-width, "
      "initial-scale=1\">\n"
      "<link rel=\"stylesheet\" href=\"/static/uPlot.min.css\">\n"
      "<link rel=\"stylesheet\" href=\"/static/plateau.css\">\n"
      "<script src=\"/static/uPlot.iife.min.js\" defer></script>\n"
      "<script src=\"/static/plateau.js\" defer></script>\n"
      "</head><body data-page=\"",
      page,
      "\">\n<header><nav><a class=\"brand\" href=\"/jobs\">Plateau</a>"
      "<a href=\"/jobs\">Jobs</a><a href=\"/nodes\">Nodes</a>"
      "<span class=\"user\">",
      HtmlEscape(user), "</span></nav></header>\n<main>\n", main,
      "</main></body></html>\n");
}

void AddField(std::string* out, absl::string_view label,
              absl::string_view value_html) {
  absl::StrAppend(out, "<dt>", label, "</dt><dd>", value_html, "</dd>");
}

std::string AttemptText(const v1::Job& job) {
  if (job.attempt() == 0) return "- (not scheduled yet)";
  std::string text =
      absl::StrCat(job.attempt(), " (", job.restarts(),
                   job.restarts() == 1 ? " restart" : " restarts");
  if (job.preemptions() > 0) {
    absl::StrAppend(&text, ", ", job.preemptions(),
                    job.preemptions() == 1 ? " preemption" : " preemptions");
  }
  return absl::StrCat(text, ")");
}

std::string Summary(const v1::Job& job) {
  std::string out = "<section id=\"job-summary\"><dl>";
  AddField(&out, "Name", HtmlEscape(job.spec().name()));
  AddField(&out, "Owner", HtmlEscape(job.owner()));
  AddField(&out, "Priority", absl::StrCat(job.spec().priority()));
  AddField(&out, "Attempt", AttemptText(job));
  AddField(&out, "Submitted", FormatTime(job.submit_time()));
  AddField(&out, "Started", FormatTime(job.start_time()));
  AddField(&out, "Ended", FormatTime(job.end_time()));
  const v1::JobProgress& progress = job.progress();
  AddField(&out, "Progress",
           absl::StrCat(ProgressText(job), " steps, loss ", LossText(job),
                        absl::StrFormat(", %.0f tokens/s",
                                        progress.tokens_per_second())));
  if (progress.checkpoint_step() > 0) {
    AddField(&out, "Checkpoint",
             absl::StrCat("step ", progress.checkpoint_step(), ": ",
                          HtmlEscape(progress.checkpoint_location())));
  }
  if (job.state() == v1::JOB_STATE_QUEUED && !job.wait_reason().empty()) {
    AddField(
        &out, "Waiting",
        absl::StrCat(job.queue_position() > 0
                         ? absl::StrCat("position ", job.queue_position(), ": ")
                         : "",
                     HtmlEscape(job.wait_reason())));
  }
  if (!job.last_error().empty()) {
    AddField(&out, "Last error", HtmlEscape(job.last_error()));
  }
  return absl::StrCat(out, "</dl></section>\n");
}

std::string Allocation(const v1::Job& job) {
  std::string out = "<section id=\"job-allocation\"><h2>Allocation</h2>";
  if (job.allocation().nodes().empty()) {
    return absl::StrCat(out,
                        "<p class=\"empty\">No devices held.</p></section>\n");
  }
  absl::StrAppend(&out,
                  "<table><thead><tr><th>Node</th><th>Devices</th>"
                  "<th>Ranks</th></tr></thead><tbody>");
  for (const v1::NodeAllocation& node : job.allocation().nodes()) {
    const int devices = node.device_indices_size();
    absl::StrAppend(&out, "<tr><td>", HtmlEscape(node.node()), "</td><td>",
                    absl::StrJoin(node.device_indices(), ", "), "</td><td>",
                    devices <= 1
                        ? absl::StrCat(node.first_rank())
                        : absl::StrCat(node.first_rank(), "-",
                                       node.first_rank() + devices - 1),
                    "</td></tr>");
  }
  return absl::StrCat(out, "</tbody></table></section>\n");
}

// Each rank's device peaks by component as one stacked bar. The
// components' peaks fall at different times, so they may add up to more
// than the pool's own peak: the bar is scaled to the larger of that sum and
// the device's capacity.
std::string MemoryBars(const v1::Job& job) {
  std::string out = "<div id=\"memory-bars\">";
  if (job.memory().empty()) {
    return absl::StrCat(out,
                        "<p class=\"empty\">No memory reported yet.</p></div>");
  }
  std::vector<bool> shown(v1::MemoryComponent_ARRAYSIZE, false);
  for (const v1::RankMemory& rank : job.memory()) {
    int64_t sum = 0;
    for (const v1::MemoryUsage& usage : rank.usage()) {
      if (usage.pool() == v1::MEMORY_POOL_DEVICE) sum += usage.peak_bytes();
    }
    const double scale = static_cast<double>(
        std::max<int64_t>({sum, rank.device_capacity_bytes(), 1}));
    const std::string total =
        absl::StrCat(FormatBytes(rank.device_peak_bytes()), " of ",
                     FormatBytes(rank.device_capacity_bytes()));
    absl::StrAppend(&out,
                    "<div class=\"memory-rank\"><span "
                    "class=\"memory-rank-label\">rank ",
                    rank.rank(),
                    "</span><div class=\"memory-bar\" title=\"device peak ",
                    total, "\">");
    for (const int component : Components()) {
      int64_t peak = 0;
      for (const v1::MemoryUsage& usage : rank.usage()) {
        if (usage.pool() == v1::MEMORY_POOL_DEVICE &&
            usage.component() == component) {
          peak = usage.peak_bytes();
        }
      }
      if (peak <= 0) continue;
      shown[component] = true;
      const std::string name = ComponentName(component);
      absl::StrAppend(
          &out, "<div class=\"segment component-", name, "\" style=\"width:",
          absl::StrFormat("%.2f", 100.0 * static_cast<double>(peak) / scale),
          "%\" title=\"", name, ": ", FormatBytes(peak), "\"></div>");
    }
    absl::StrAppend(&out, "</div><span class=\"memory-rank-total\">", total,
                    "</span></div>");
  }
  absl::StrAppend(&out, "<ul class=\"memory-legend\">");
  for (const int component : Components()) {
    if (!shown[component]) continue;
    const std::string name = ComponentName(component);
    absl::StrAppend(&out, "<li><span class=\"swatch component-", name,
                    "\"></span>", name, "</li>");
  }
  return absl::StrCat(out, "</ul></div>");
}

std::string History(const std::vector<v1::JobEvent>& events) {
  std::string out =
      "<section id=\"job-history\"><h2>History</h2><table "
      "id=\"history-table\"><thead><tr><th>Time</th><th>Event</th>"
      "<th>Attempt</th><th>Message</th></tr></thead><tbody>";
  for (const v1::JobEvent& event : events) {
    absl::StrAppend(
        &out, "<tr><td>", FormatTime(event.time()), "</td><td>",
        EnumName(v1::JobEventKind_Name(event.kind()), "JOB_EVENT_KIND_"),
        "</td><td>", event.attempt(), "</td><td>", HtmlEscape(event.message()),
        "</td></tr>");
  }
  return absl::StrCat(out, "</tbody></table></section>\n");
}

// The charts' data (see daemon/web/static/plateau.js), with "</" written
// as "<\/" so that no string can end the script element.
std::string ChartData(const v1::Job& job,
                      const std::vector<v1::ProgressSample>& samples) {
  nlohmann::json data;
  data["job"] = {{"id", job.id()},
                 {"state", StateName(job.state())},
                 {"live", job.state() == v1::JOB_STATE_SCHEDULED ||
                              job.state() == v1::JOB_STATE_RUNNING ||
                              job.state() == v1::JOB_STATE_PREEMPTING ||
                              job.state() == v1::JOB_STATE_CANCELLING}};
  nlohmann::json components = nlohmann::json::array();
  for (const int component : Components()) {
    components.push_back(ComponentName(component));
  }
  data["components"] = components;
  nlohmann::json points = nlohmann::json::array();
  for (const v1::ProgressSample& sample : samples) {
    nlohmann::json peaks = nlohmann::json::array();
    for (const int component : Components()) {
      peaks.push_back(component < sample.component_peak_bytes_size()
                          ? sample.component_peak_bytes(component)
                          : 0);
    }
    points.push_back(
        {{"t",
          absl::ToDoubleSeconds(FromProto(sample.time()) - absl::UnixEpoch())},
         {"attempt", sample.attempt()},
         {"step", sample.step()},
         {"loss",
          sample.step() > 0 ? nlohmann::json(sample.loss()) : nlohmann::json()},
         {"validation_loss", sample.has_validation_loss()
                                 ? nlohmann::json(sample.validation_loss())
                                 : nlohmann::json()},
         {"tokens_per_second", sample.tokens_per_second()},
         {"device_peak_bytes", sample.device_peak_bytes()},
         {"component_peak_bytes", peaks}});
  }
  data["samples"] = points;
  return absl::StrReplaceAll(
      data.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace),
      {{"</", "<\\/"}});
}

}  // namespace

std::string HtmlEscape(absl::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string JobsHtml(const std::vector<v1::Job>& jobs,
                     const std::string& user) {
  std::string main = "<h1>Jobs</h1>\n";
  if (jobs.empty()) {
    return Layout("Jobs", "jobs", user,
                  absl::StrCat(main, "<p class=\"empty\">No jobs yet.</p>\n"));
  }
  absl::StrAppend(&main,
                  "<table id=\"jobs-table\"><thead><tr><th>ID</th><th>Name</th>"
                  "<th>Owner</th><th>State</th><th>Priority</th>"
                  "<th>Devices</th><th>Progress</th><th>Loss</th>"
                  "<th>Submitted</th></tr></thead><tbody>\n");
  for (const v1::Job& job : jobs) {
    const std::string id = HtmlEscape(job.id());
    absl::StrAppend(&main, "<tr data-job-id=\"", id, "\"><td><a href=\"/jobs/",
                    id, "\">", id, "</a></td><td>",
                    HtmlEscape(job.spec().name()), "</td><td>",
                    HtmlEscape(job.owner()), "</td><td>",
                    StateBadge(job.state()), "</td><td>", job.spec().priority(),
                    "</td><td>", NodesText(job.spec().resources()), "x",
                    job.spec().resources().devices_per_node(), "</td><td>",
                    ProgressText(job), "</td><td>", LossText(job), "</td><td>",
                    FormatTime(job.submit_time()), "</td></tr>\n");
  }
  absl::StrAppend(&main, "</tbody></table>\n");
  return Layout("Jobs", "jobs", user, main);
}

std::string JobHtml(const v1::Job& job, const std::vector<v1::JobEvent>& events,
                    const std::vector<v1::ProgressSample>& samples,
                    const std::string& user) {
  const std::string id = HtmlEscape(job.id());
  std::string main =
      absl::StrCat("<h1>Job ", id, " ", StateBadge(job.state()), "</h1>\n");
  absl::StrAppend(&main, Summary(job), Allocation(job));
  absl::StrAppend(&main,
                  "<section id=\"job-training\"><h2>Training</h2>"
                  "<div class=\"chart\" id=\"loss-chart\"></div>"
                  "<div class=\"chart\" id=\"throughput-chart\"></div>"
                  "</section>\n");
  absl::StrAppend(&main,
                  "<section id=\"job-memory\"><h2>Memory by component</h2>",
                  MemoryBars(job),
                  "<div class=\"chart\" id=\"memory-chart\"></div>"
                  "</section>\n");
  absl::StrAppend(&main, History(events));
  absl::StrAppend(&main,
                  "<script type=\"application/json\" id=\"plateau-data\">",
                  ChartData(job, samples), "</script>\n");
  return Layout(absl::StrCat("Job ", job.id()), "job", user, main);
}

std::string NodesHtml(const std::vector<v1::Node>& nodes,
                      const std::string& user, absl::Time now) {
  std::string main = "<h1>Nodes</h1>\n";
  if (nodes.empty()) {
    return Layout(
        "Nodes", "nodes", user,
        absl::StrCat(main, "<p class=\"empty\">No node has attached.</p>\n"));
  }
  absl::StrAppend(&main,
                  "<table id=\"nodes-table\"><thead><tr><th>Node</th>"
                  "<th>State</th><th>Devices</th><th>Device memory</th>"
                  "<th>Jobs</th><th>Heartbeat</th></tr></thead><tbody>\n");
  for (const v1::Node& node : nodes) {
    const std::string state =
        EnumName(v1::NodeState_Name(node.state()), "NODE_STATE_");
    int free = 0;
    int64_t memory = 0;
    int others = 0;
    std::vector<std::string> jobs;
    for (const v1::Device& device : node.devices()) {
      memory = memory == 0 ? device.memory_bytes()
                           : std::min(memory, device.memory_bytes());
      if (!device.allocated()) {
        ++free;
      } else if (device.allocated_job_id().empty()) {
        ++others;
      } else if (std::find(jobs.begin(), jobs.end(),
                           device.allocated_job_id()) == jobs.end()) {
        jobs.push_back(device.allocated_job_id());
      }
    }
    std::vector<std::string> links;
    for (const std::string& job : jobs) {
      const std::string id = HtmlEscape(job);
      links.push_back(absl::StrCat("<a href=\"/jobs/", id, "\">", id, "</a>"));
    }
    if (others > 0) {
      links.push_back(absl::StrCat(others, others == 1 ? " device" : " devices",
                                   " of other users' jobs"));
    }
    const std::string name = HtmlEscape(node.name());
    absl::StrAppend(
        &main, "<tr data-node=\"", name, "\"><td>", name,
        "</td><td><span class=\"node-state node-state-",
        absl::AsciiStrToLower(state), "\">", state, "</span>",
        node.drain_reason().empty()
            ? ""
            : absl::StrCat(" (", HtmlEscape(node.drain_reason()), ")"),
        "</td><td>", free, " of ", node.devices_size(), " free</td><td>",
        memory > 0 ? FormatBytes(memory) : "-", "</td><td>",
        links.empty() ? "-" : absl::StrJoin(links, ", "), "</td><td>",
        node.has_last_heartbeat()
            ? absl::StrCat(
                  absl::ToInt64Seconds(now - FromProto(node.last_heartbeat())),
                  "s ago")
            : "-",
        "</td></tr>\n");
  }
  absl::StrAppend(&main, "</tbody></table>\n");
  return Layout("Nodes", "nodes", user, main);
}

std::string LoginHtml(const std::string& error) {
  std::string main = "<h1>Sign in</h1>\n";
  if (!error.empty()) {
    absl::StrAppend(&main, "<p class=\"error\">", HtmlEscape(error), "</p>\n");
  }
  absl::StrAppend(
      &main,
      "<form id=\"login-form\" method=\"post\" action=\"/login\">"
      "<label for=\"token\">Token</label>"
      "<input type=\"password\" id=\"token\" name=\"token\" "
      "autocomplete=\"current-password\">"
      "<button type=\"submit\">Sign in</button></form>\n"
      "<p>The token is the one the CLI uses (PLATEAU_TOKEN); it is kept in "
      "a cookie of this site.</p>\n");
  return Layout("Sign in", "login", "", main);
}

std::string MessageHtml(const std::string& title, const std::string& message,
                        const std::string& user) {
  return Layout(title, "message", user,
                absl::StrCat("<h1>", HtmlEscape(title), "</h1>\n<p>",
                             HtmlEscape(message), "</p>\n"));
}

}  // namespace plateau::daemon
