#include "client/cli.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <iostream>
#include <map>
#include <optional>
#include <set>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/args.h"
#include "client/commands.h"
#include "client/config.h"
#include "client/connection.h"
#include "client/exit_codes.h"
#include "client/format.h"
#include "client/plan_options.h"

ABSL_FLAG(std::string, coordinator, "",
          "plateaud's HOST:PORT (env PLATEAU_COORDINATOR; default "
          "127.0.0.1:7070)");
ABSL_FLAG(std::string, token_file, "",
          "file holding the bearer token (else env PLATEAU_TOKEN)");
ABSL_FLAG(bool, allow_plaintext_token, false,
          "send the token without TLS to a non-loopback plateaud");
ABSL_FLAG(std::string, ca_cert, "",
          "PEM file of root certificates: connect with TLS");
ABSL_FLAG(std::string, output, "table", "table or json (-o)");
ABSL_FLAG(bool, follow, false, "logs: follow until the job ends (-f)");
ABSL_FLAG(bool, watch, false, "submit: follow the job until it ends");
ABSL_FLAG(std::string, reason, "",
          "cancel: why, kept in the job's history; nodes drain: why, shown "
          "with the node");
ABSL_FLAG(bool, preempt, false,
          "nodes drain: also preempt the node's running jobs (they "
          "checkpoint and are requeued to run elsewhere)");
ABSL_FLAG(std::string, device_memory, "",
          "plan: each device's memory, e.g. 80GiB (default: the largest of "
          "plateaud's nodes)");
ABSL_FLAG(int, devices, 0,
          "plan: run on this many devices (default: the spec's ep x pp x dp)");
ABSL_FLAG(std::optional<double>, routing_skew, std::nullopt,
          "plan: the busiest expert's routed tokens over the mean expert's "
          "(default: the worst routing, every token on the same experts)");
ABSL_FLAG(double, margin, 0.05, "plan: the share of each device kept free");

namespace plateau::client {
namespace {

constexpr char kUsage[] =
    R"(plateau: the command-line client of plateaud, the Plateau coordinator.

Usage: plateau [flags] COMMAND [ARGS] [flags]

Commands:
  submit SPEC [--watch]         check the YAML job spec SPEC here, submit it
                                and print the job id; --watch then follows
                                the job until it ends
  ls [-o table|json]            list the jobs, newest first
  queue [-o table|json]         the queued jobs in the order plateaud will
                                start them, each with its place and why it
                                waits
  describe JOB [-o table|json]  one job: state, allocation, progress, memory
                                peaks, history and spec
  logs [-f] JOB                 the job's events and worker lines; -f follows
                                them until the job ends
  cancel JOB [--reason TEXT]    cancel a job and print its resulting state
  nodes [-o table|json]         the worker nodes and their devices
  nodes drain NODE [--reason TEXT] [--preempt]
                                admin: NODE takes no new work; its running
                                jobs go on, or with --preempt checkpoint at
                                the next step and are requeued to run
                                elsewhere (no restart used); the reason
                                shows with it
  nodes resume NODE             admin: NODE takes work again
  plan SPEC [-o table|json]     the memory plan of the YAML job spec SPEC:
                                every component's device peak without and
                                with the memory schedules (chosen here for
                                `schedules: auto`), whether it fits, and the
                                largest seq_len and batch_tokens that fit

Flags (before or after the command; --flag=value or --flag value):
  --coordinator HOST:PORT   plateaud's address (default 127.0.0.1:7070)
  --token_file FILE         the bearer token, sent as "authorization: Bearer
                            TOKEN" (else PLATEAU_TOKEN; never a flag itself)
  --ca_cert FILE            PEM root certificates: use TLS (default: none)
  --allow_plaintext_token   send the token without TLS to a plateaud that is
                            not on loopback (refused otherwise)
  -o, --output table|json   json: the protobuf JSON of the ListJobsResponse
                            (all pages; for queue, the queued jobs in
                            order), the Job, the ListNodesResponse, or
                            for plan {"plan": MemoryPlan, "schedules":
                            ScheduleSpec}
  -f, --follow              logs: follow until the job ends
  --watch                   submit: follow the job until it ends
  --reason TEXT             cancel: why, kept in the job's history; nodes
                            drain: why, shown with the node until resumed
  --preempt                 nodes drain: preempt the node's running jobs
  --device_memory SIZE      plan: each device's memory (2GiB, 80GB); default:
                            the largest of plateaud's nodes
  --devices N               plan: run on N devices, data parallelism taking
                            up the difference (default: the spec's)
  --routing_skew S          plan: for a router known to be this even, the
                            busiest expert's routed tokens over the mean
                            expert's (1 is uniform); default: the worst
                            routing, every token on the same experts
  --margin M                plan: the share of each device kept free
                            (default 0.05)
  -h, --help                this text

Settings come from the flags, else the environment (PLATEAU_COORDINATOR,
PLATEAU_TOKEN), else the config file $XDG_CONFIG_HOME/plateau/config.yaml
(~/.config/plateau/config.yaml, mode 0600 when it holds a token) with keys
coordinator, token, ca_cert and allow_plaintext_token.

While following a job, a terminal shows one live progress line; elsewhere
plain lines are printed.

Exit status:
  0  success; for submit --watch and logs -f: the job SUCCEEDED; for plan:
     the job fits its devices
  1  error (plateaud unreachable, failed call, bad file, invalid spec,
     unknown job); for plan: the job does not fit its devices
  2  usage error; for plan without --device_memory: plateaud cannot tell
     its nodes' device memory
  3  the followed job FAILED
  4  the followed job was CANCELLED
)";

// Flags every verb takes.
const std::set<std::string>& GlobalFlags() {
  static const auto* const flags = new std::set<std::string>{
      "coordinator", "token_file", "ca_cert", "allow_plaintext_token"};
  return *flags;
}

struct Verb {
  std::string operand;  // "" for none, else its name in messages
  std::set<std::string> flags;
};

const std::map<std::string, Verb>& Verbs() {
  static const auto* const verbs = new std::map<std::string, Verb>{
      {"submit", {"SPEC", {"watch"}}},
      {"ls", {"", {"output"}}},
      {"queue", {"", {"output"}}},
      {"describe", {"JOB", {"output"}}},
      {"logs", {"JOB", {"follow"}}},
      {"cancel", {"JOB", {"reason"}}},
      {"nodes", {"", {"output"}}},
      {"nodes drain", {"NODE", {"reason", "preempt", "output"}}},
      {"nodes resume", {"NODE", {"output"}}},
      {"plan",
       {"SPEC",
        {"output", "device_memory", "devices", "routing_skew", "margin"}}},
  };
  return *verbs;
}

int UsageError(absl::string_view message) {
  std::cerr << "plateau: " << message << "\nRun 'plateau --help' for usage.\n";
  return kExitUsage;
}

int Fail(absl::string_view message) {
  std::cerr << "plateau: " << TerminalSafe(message) << "\n";
  return kExitError;
}

int TerminalWidth() {
  winsize size{};
  if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &size) != 0) return 0;
  return size.ws_col;
}

absl::StatusOr<int> Dispatch(const std::string& verb,
                             const std::string& operand, Connection& connection,
                             const CommandOptions& options,
                             const plan::PlanOptions& plan_options) {
  if (verb == "plan") {
    return RunPlan(connection, options, operand, plan_options);
  }
  if (verb == "submit") {
    return RunSubmit(connection, options, operand, absl::GetFlag(FLAGS_watch));
  }
  if (verb == "ls") return RunList(connection, options);
  if (verb == "queue") return RunQueue(connection, options);
  if (verb == "describe") return RunDescribe(connection, options, operand);
  if (verb == "logs") {
    return RunLogs(connection, options, operand, absl::GetFlag(FLAGS_follow));
  }
  if (verb == "cancel") {
    return RunCancel(connection, options, operand, absl::GetFlag(FLAGS_reason));
  }
  if (verb == "nodes drain") {
    return RunDrain(connection, options, operand, /*drain=*/true,
                    absl::GetFlag(FLAGS_reason), absl::GetFlag(FLAGS_preempt));
  }
  if (verb == "nodes resume") {
    return RunDrain(connection, options, operand, /*drain=*/false, "",
                    /*preempt=*/false);
  }
  return RunNodes(connection, options);
}

}  // namespace

int RunCli(const std::vector<std::string>& args) {
  std::set<std::string> known = GlobalFlags();
  for (const auto& [name, verb] : Verbs()) {
    known.insert(verb.flags.begin(), verb.flags.end());
  }
  absl::StatusOr<ParsedArgs> parsed =
      ParseArgs(args, known, {{"o", "output"}, {"f", "follow"}});
  if (!parsed.ok()) return UsageError(parsed.status().message());
  if (parsed->help ||
      (parsed->positional.size() == 1 && parsed->positional[0] == "help")) {
    std::cout << kUsage;
    return kExitOk;
  }
  std::vector<std::string> positional = parsed->positional;
  if (positional.empty()) return UsageError("no command given");
  // `nodes drain NODE` and `nodes resume NODE`: verbs of two words.
  if (positional[0] == "nodes" && positional.size() > 1) {
    if (positional[1] != "drain" && positional[1] != "resume") {
      return UsageError(absl::StrCat("unknown nodes command '", positional[1],
                                     "'; expected drain or resume"));
    }
    positional[0] = absl::StrCat("nodes ", positional[1]);
    positional.erase(positional.begin() + 1);
  }
  const std::string& verb_name = positional[0];
  const auto verb = Verbs().find(verb_name);
  if (verb == Verbs().end()) {
    return UsageError(absl::StrCat("unknown command '", verb_name, "'"));
  }
  const size_t operands = verb->second.operand.empty() ? 0 : 1;
  if (positional.size() - 1 < operands) {
    return UsageError(absl::StrCat(verb_name, " needs ", verb->second.operand));
  }
  if (positional.size() - 1 > operands) {
    return UsageError(absl::StrCat("unexpected argument '",
                                   positional[operands + 1], "' after ",
                                   verb_name));
  }
  for (const std::string& flag : parsed->flags_given) {
    if (GlobalFlags().count(flag) == 0 && verb->second.flags.count(flag) == 0) {
      return UsageError(absl::StrCat(verb_name, " does not take --", flag));
    }
  }
  CommandOptions options;
  const std::string output = absl::GetFlag(FLAGS_output);
  if (output == "json") {
    options.output = OutputFormat::kJson;
  } else if (output != "table") {
    return UsageError(
        absl::StrCat("-o must be table or json, not '", output, "'"));
  }
  plan::PlanOptions plan_options;
  if (verb_name == "plan") {
    absl::StatusOr<plan::PlanOptions> parsed_plan = ParsePlanFlags(
        {absl::GetFlag(FLAGS_device_memory), absl::GetFlag(FLAGS_devices),
         absl::GetFlag(FLAGS_routing_skew), absl::GetFlag(FLAGS_margin)});
    if (!parsed_plan.ok()) return UsageError(parsed_plan.status().message());
    plan_options = *parsed_plan;
  }
  options.terminal = isatty(STDOUT_FILENO) == 1;
  if (options.terminal) options.terminal_width = TerminalWidth();

  ConfigSources sources;
  sources.flags.coordinator = absl::GetFlag(FLAGS_coordinator);
  if (!absl::GetFlag(FLAGS_token_file).empty()) {
    absl::StatusOr<std::string> token =
        ReadTokenFile(absl::GetFlag(FLAGS_token_file));
    if (!token.ok()) return Fail(token.status().message());
    sources.flags.token = *std::move(token);
  }
  sources.flags.ca_cert_file = absl::GetFlag(FLAGS_ca_cert);
  sources.flags.allow_plaintext_token =
      absl::GetFlag(FLAGS_allow_plaintext_token);
  sources.environment = ConfigFromEnvironment();
  sources.file_path = ConfigFilePathFromEnvironment();
  absl::StatusOr<ClientConfig> config = ResolveConfig(sources);
  if (!config.ok()) return Fail(config.status().message());
  absl::StatusOr<std::unique_ptr<Connection>> connection =
      Connection::Open(*config);
  if (!connection.ok()) return Fail(connection.status().message());

  const std::string operand = operands == 0 ? "" : positional[1];
  absl::StatusOr<int> status =
      Dispatch(verb_name, operand, **connection, options, plan_options);
  if (!status.ok()) return Fail(status.status().message());
  return *status;
}

}  // namespace plateau::client
