#include "daemon/service/coordinator_service.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "daemon/service/rpc_support.h"
#include "google/protobuf/util/time_util.h"
#include "proto/job_spec.h"

namespace plateau::daemon {
namespace {

// How often streaming handlers look for changes and client cancellation.
constexpr absl::Duration kStreamPoll = absl::Milliseconds(500);

bool IsFinal(v1::JobState state) {
  return state == v1::JOB_STATE_SUCCEEDED || state == v1::JOB_STATE_FAILED ||
         state == v1::JOB_STATE_CANCELLED;
}

struct SubmittedSpec {
  v1::JobSpec spec;
  std::string yaml;  // as given, or rendered from the message
};

// The spec of a request with a spec_yaml-or-spec source: parsed and
// validated, every problem named.
template <typename Request>
absl::StatusOr<SubmittedSpec> SpecOf(const Request& request) {
  RETURN_IF_ERROR(
      CheckFieldSize("spec_yaml", request.spec_yaml(), kMaxSpecYamlBytes));
  switch (request.source_case()) {
    case Request::kSpecYaml: {
      ASSIGN_OR_RETURN(v1::JobSpec spec, ParseJobSpecYaml(request.spec_yaml()));
      return SubmittedSpec{std::move(spec), request.spec_yaml()};
    }
    case Request::kSpec:
      RETURN_IF_ERROR(ValidateJobSpec(request.spec()));
      return SubmittedSpec{request.spec(), JobSpecToYaml(request.spec())};
    default:
      return absl::InvalidArgumentError("give spec_yaml or spec");
  }
}

}  // namespace

absl::StatusOr<Principal> CoordinatorService::Caller(
    const grpc::ServerContext& context) const {
  ASSIGN_OR_RETURN(Principal principal, authenticator_->Authenticate(context));
  // Nodes attach and bootstrap ranks; the API is for users.
  RETURN_IF_ERROR(RequireRole(principal, {Role::kUser, Role::kAdmin}));
  return principal;
}

absl::StatusOr<v1::Job> CoordinatorService::VisibleJob(
    const Principal& principal, const std::string& job_id) const {
  RETURN_IF_ERROR(CheckFieldSize("job_id", job_id, kMaxNameBytes));
  absl::StatusOr<v1::Job> job = jobs_->Get(job_id);
  // Someone else's job reads as a missing one: ids do not leak whose they
  // are, or that they exist.
  if (!job.ok() || !principal.CanSeeJobsOf(job->owner())) {
    return absl::NotFoundError(absl::StrCat("no job ", job_id));
  }
  return job;
}

grpc::Status CoordinatorService::SubmitJob(grpc::ServerContext* context,
                                           const v1::SubmitJobRequest* request,
                                           v1::SubmitJobResponse* response) {
  RpcScope scope(metrics_, "SubmitJob");
  absl::StatusOr<Principal> principal = Caller(*context);
  if (!principal.ok()) return scope.Finish(principal.status());
  const absl::Status key_size = CheckFieldSize(
      "idempotency_key", request->idempotency_key(), kMaxNameBytes);
  if (!key_size.ok()) return scope.Finish(key_size);
  absl::StatusOr<SubmittedSpec> submitted = SpecOf(*request);
  if (!submitted.ok()) return scope.Finish(submitted.status());
  const v1::JobSpec& spec = submitted->spec;
  const std::string& yaml = submitted->yaml;
  if (principal->role != Role::kAdmin) {
    const int ceiling = authenticator_->MaxPriorityOf(principal->name)
                            .value_or(max_user_priority_);
    if (spec.priority() > ceiling) {
      return scope.Finish(absl::PermissionDeniedError(
          absl::StrCat("priority: ", spec.priority(), " is above ",
                       principal->name, "'s ceiling of ", ceiling,
                       " (the tokens file's max_priority, else plateaud's "
                       "--max_user_priority); use at most ",
                       ceiling, " or ask an admin to submit it")));
    }
  }
  absl::StatusOr<v1::Job> job = coordinator_->Submit(
      spec, yaml, principal->name, request->idempotency_key());
  if (!job.ok()) return scope.Finish(job.status());
  *response->mutable_job() = *std::move(job);
  return scope.Finish(absl::OkStatus());
}

grpc::Status CoordinatorService::GetJob(grpc::ServerContext* context,
                                        const v1::GetJobRequest* request,
                                        v1::Job* response) {
  RpcScope scope(metrics_, "GetJob");
  absl::StatusOr<Principal> principal = Caller(*context);
  if (!principal.ok()) return scope.Finish(principal.status());
  absl::StatusOr<v1::Job> job = VisibleJob(*principal, request->job_id());
  if (!job.ok()) return scope.Finish(job.status());
  HideUnshownJobs(ShownTo(*principal), &*job);
  *response = *std::move(job);
  return scope.Finish(absl::OkStatus());
}

grpc::Status CoordinatorService::ListJobs(grpc::ServerContext* context,
                                          const v1::ListJobsRequest* request,
                                          v1::ListJobsResponse* response) {
  RpcScope scope(metrics_, "ListJobs");
  absl::StatusOr<Principal> principal = Caller(*context);
  if (!principal.ok()) return scope.Finish(principal.status());
  JobListFilter filter;
  for (int state : request->states()) {
    filter.states.push_back(static_cast<v1::JobState>(state));
  }
  absl::Status sizes = CheckFieldSize("owner", request->owner(), kMaxNameBytes);
  if (sizes.ok()) {
    sizes = CheckFieldSize("page_token", request->page_token(), kMaxNameBytes);
  }
  if (!sizes.ok()) return scope.Finish(sizes);
  filter.owner = request->owner();
  if (principal->role != Role::kAdmin) {
    if (!filter.owner.empty() && filter.owner != principal->name) {
      return scope.Finish(absl::PermissionDeniedError(
          "only admins may list other users' jobs"));
    }
    filter.owner = principal->name;
  }
  filter.page_size = request->page_size() > 0
                         ? std::min(request->page_size(), kMaxPageSize)
                         : 100;
  filter.page_token = request->page_token();
  filter.summaries = true;
  filter.max_page_bytes = kMaxListPageBytes;
  absl::StatusOr<JobPage> page = jobs_->List(filter);
  if (!page.ok()) return scope.Finish(page.status());
  const JobShown shown = ShownTo(*principal);
  for (v1::Job& job : page->jobs) {
    HideUnshownJobs(shown, &job);
    *response->add_jobs() = std::move(job);
  }
  response->set_next_page_token(page->next_page_token);
  return scope.Finish(absl::OkStatus());
}

grpc::Status CoordinatorService::CancelJob(grpc::ServerContext* context,
                                           const v1::CancelJobRequest* request,
                                           v1::Job* response) {
  RpcScope scope(metrics_, "CancelJob");
  absl::StatusOr<Principal> principal = Caller(*context);
  if (!principal.ok()) return scope.Finish(principal.status());
  const absl::Status reason_size =
      CheckFieldSize("reason", request->reason(), kMaxReasonBytes);
  if (!reason_size.ok()) return scope.Finish(reason_size);
  absl::StatusOr<v1::Job> visible = VisibleJob(*principal, request->job_id());
  if (!visible.ok()) return scope.Finish(visible.status());
  absl::StatusOr<v1::Job> job = coordinator_->Cancel(
      request->job_id(),
      request->reason().empty()
          ? absl::StrCat("by ", principal->name)
          : absl::StrCat("by ", principal->name, ": ", request->reason()));
  if (!job.ok()) return scope.Finish(job.status());
  HideUnshownJobs(ShownTo(*principal), &*job);
  *response = *std::move(job);
  return scope.Finish(absl::OkStatus());
}

grpc::Status CoordinatorService::WatchJob(
    grpc::ServerContext* context, const v1::WatchJobRequest* request,
    grpc::ServerWriter<v1::WatchJobResponse>* writer) {
  RpcScope scope(metrics_, "WatchJob");
  absl::StatusOr<Principal> principal = Caller(*context);
  if (!principal.ok()) return scope.Finish(principal.status());
  // The version first, then the job: a change between the two is then seen
  // twice (harmless) rather than never (a final state missed, the watch
  // hanging on a job that will not change again).
  int64_t version = jobs_->Version(request->job_id());
  absl::StatusOr<v1::Job> job = VisibleJob(*principal, request->job_id());
  if (!job.ok()) return scope.Finish(job.status());
  const JobShown shown = ShownTo(*principal);
  HideUnshownJobs(shown, &*job);
  v1::WatchJobResponse snapshot;
  *snapshot.mutable_job() = *job;
  if (!writer->Write(snapshot)) return scope.Finish(absl::OkStatus());
  int64_t sequence = job->last_log_sequence();
  while (!IsFinal(job->state())) {
    if (context->IsCancelled()) {
      return scope.Finish(absl::CancelledError("the client went away"));
    }
    const int64_t now = jobs_->WaitForChange(job->id(), version, kStreamPoll);
    if (now == version) continue;
    version = now;  // read before the job, as above
    job = jobs_->Get(request->job_id());
    if (!job.ok()) return scope.Finish(job.status());
    HideUnshownJobs(shown, &*job);
    // One message per new event; a change without an event (progress)
    // sends the job alone.
    bool sent_event = false;
    absl::Status read =
        jobs_->ReadLog(job->id(), sequence, [&](const v1::LogEntry& entry) {
          sequence = entry.sequence();
          if (!entry.has_event()) return true;
          v1::WatchJobResponse update;
          *update.mutable_job() = *job;
          *update.mutable_event() = entry.event();
          HideUnshownJobs(shown, update.mutable_event());
          sent_event = true;
          return writer->Write(update);
        });
    if (!read.ok()) return scope.Finish(read);
    if (!sent_event) {
      v1::WatchJobResponse update;
      *update.mutable_job() = *job;
      if (!writer->Write(update)) break;
    }
  }
  return scope.Finish(absl::OkStatus());
}

grpc::Status CoordinatorService::StreamLogs(
    grpc::ServerContext* context, const v1::StreamLogsRequest* request,
    grpc::ServerWriter<v1::LogEntry>* writer) {
  RpcScope scope(metrics_, "StreamLogs");
  absl::StatusOr<Principal> principal = Caller(*context);
  if (!principal.ok()) return scope.Finish(principal.status());
  absl::StatusOr<v1::Job> job = VisibleJob(*principal, request->job_id());
  if (!job.ok()) return scope.Finish(job.status());
  const JobShown shown = ShownTo(*principal);
  int64_t sequence = request->after_sequence();
  bool open = true;
  while (open) {
    const int64_t version = jobs_->Version(job->id());
    // Whether the job had ended before this read: then the read was final.
    const bool ended = IsFinal(job->state());
    absl::Status read =
        jobs_->ReadLog(job->id(), sequence, [&](const v1::LogEntry& entry) {
          sequence = entry.sequence();
          if (entry.has_event() && shown) {
            v1::LogEntry shown_entry = entry;
            HideUnshownJobs(shown, shown_entry.mutable_event());
            open = writer->Write(shown_entry);
          } else {
            open = writer->Write(entry);
          }
          return open;
        });
    if (!read.ok()) return scope.Finish(read);
    if (!open || !request->follow() || ended) break;
    if (context->IsCancelled()) {
      return scope.Finish(absl::CancelledError("the client went away"));
    }
    jobs_->WaitForChange(job->id(), version, kStreamPoll);
    job = jobs_->Get(job->id());
    if (!job.ok()) return scope.Finish(job.status());
  }
  return scope.Finish(absl::OkStatus());
}

grpc::Status CoordinatorService::ListNodes(grpc::ServerContext* context,
                                           const v1::ListNodesRequest*,
                                           v1::ListNodesResponse* response) {
  RpcScope scope(metrics_, "ListNodes");
  absl::StatusOr<Principal> principal = Caller(*context);
  if (!principal.ok()) return scope.Finish(principal.status());
  // Which jobs hold which devices is each job's owner's business (and the
  // admins'): others see only that a device is taken.
  for (v1::Node& node : coordinator_->ListNodes([&](const std::string& owner) {
         return principal->CanSeeJobsOf(owner);
       })) {
    *response->add_nodes() = std::move(node);
  }
  *response->mutable_stop_grace_period() =
      google::protobuf::util::TimeUtil::NanosecondsToDuration(
          absl::ToInt64Nanoseconds(coordinator_->stop_grace_period()));
  response->set_checkpoint_write_bytes_per_second(
      coordinator_->checkpoint_write_bytes_per_second());
  return scope.Finish(absl::OkStatus());
}

grpc::Status CoordinatorService::SetNodeDrain(
    grpc::ServerContext* context, const v1::SetNodeDrainRequest* request,
    v1::Node* response) {
  RpcScope scope(metrics_, "SetNodeDrain");
  absl::StatusOr<Principal> principal = Caller(*context);
  if (!principal.ok()) return scope.Finish(principal.status());
  absl::Status allowed = RequireRole(*principal, {Role::kAdmin});
  if (allowed.ok()) {
    allowed = CheckFieldSize("node", request->node(), kMaxNameBytes);
  }
  if (allowed.ok()) {
    allowed = CheckFieldSize("reason", request->reason(), kMaxReasonBytes);
  }
  if (allowed.ok() && !request->drain() && !request->reason().empty()) {
    allowed = absl::InvalidArgumentError(
        "reason: applies to a drain only; an undrained node has none");
  }
  if (allowed.ok() && !request->drain() && request->preempt()) {
    allowed = absl::InvalidArgumentError(
        "preempt: applies to a drain only; resuming a node stops nothing");
  }
  if (!allowed.ok()) return scope.Finish(allowed);
  absl::StatusOr<v1::Node> node = coordinator_->SetNodeDrain(
      request->node(), request->drain(), request->reason(), request->preempt());
  if (!node.ok()) return scope.Finish(node.status());
  *response = *std::move(node);
  return scope.Finish(absl::OkStatus());
}

grpc::Status CoordinatorService::PlanJob(grpc::ServerContext* context,
                                         const v1::PlanJobRequest* request,
                                         v1::PlanJobResponse* response) {
  RpcScope scope(metrics_, "PlanJob");
  absl::StatusOr<Principal> principal = Caller(*context);
  if (!principal.ok()) return scope.Finish(principal.status());
  absl::StatusOr<SubmittedSpec> submitted = SpecOf(*request);
  if (!submitted.ok()) return scope.Finish(submitted.status());
  if (request->device_memory_bytes() < 0) {
    return scope.Finish(absl::InvalidArgumentError(
        absl::StrCat("device_memory_bytes: ", request->device_memory_bytes(),
                     " is negative; give 0 for the nodes' own")));
  }
  absl::StatusOr<plan::JobPlan> planned = coordinator_->Plan(
      submitted->spec, request->device_memory_bytes(), principal->name);
  if (!planned.ok()) return scope.Finish(planned.status());
  *response->mutable_plan() = std::move(planned->memory);
  *response->mutable_spec() = std::move(planned->spec);
  return scope.Finish(absl::OkStatus());
}

}  // namespace plateau::daemon
