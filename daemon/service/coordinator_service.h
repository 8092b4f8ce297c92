// plateau.v1.Coordinator: the user-facing API. Authenticates every call
// (users and admins only; nodes may not call it), validates specs (every
// problem, with its field path), enforces that users touch only their own jobs,
// and maps results to gRPC codes.
#ifndef PLATEAU_DAEMON_SERVICE_COORDINATOR_SERVICE_H_
#define PLATEAU_DAEMON_SERVICE_COORDINATOR_SERVICE_H_

#include "daemon/coordinator/coordinator.h"
#include "daemon/jobs/job_manager.h"
#include "daemon/jobs/job_mentions.h"
#include "daemon/metrics/daemon_metrics.h"
#include "daemon/service/auth.h"
#include "proto/coordinator.grpc.pb.h"

namespace plateau::daemon {

class CoordinatorService final : public v1::Coordinator::Service {
 public:
  // max_user_priority: the highest priority a user's job may ask for unless
  // the tokens file sets the user's own max_priority; admins' are unbounded.
  CoordinatorService(Coordinator* coordinator, JobManager* jobs,
                     const Authenticator* authenticator, DaemonMetrics* metrics,
                     int max_user_priority)
      : coordinator_(coordinator),
        jobs_(jobs),
        authenticator_(authenticator),
        metrics_(metrics),
        max_user_priority_(max_user_priority) {}

  grpc::Status SubmitJob(grpc::ServerContext* context,
                         const v1::SubmitJobRequest* request,
                         v1::SubmitJobResponse* response) override;
  grpc::Status GetJob(grpc::ServerContext* context,
                      const v1::GetJobRequest* request,
                      v1::Job* response) override;
  grpc::Status ListJobs(grpc::ServerContext* context,
                        const v1::ListJobsRequest* request,
                        v1::ListJobsResponse* response) override;
  grpc::Status CancelJob(grpc::ServerContext* context,
                         const v1::CancelJobRequest* request,
                         v1::Job* response) override;
  grpc::Status WatchJob(
      grpc::ServerContext* context, const v1::WatchJobRequest* request,
      grpc::ServerWriter<v1::WatchJobResponse>* writer) override;
  grpc::Status StreamLogs(grpc::ServerContext* context,
                          const v1::StreamLogsRequest* request,
                          grpc::ServerWriter<v1::LogEntry>* writer) override;
  grpc::Status ListNodes(grpc::ServerContext* context,
                         const v1::ListNodesRequest* request,
                         v1::ListNodesResponse* response) override;
  grpc::Status SetNodeDrain(grpc::ServerContext* context,
                            const v1::SetNodeDrainRequest* request,
                            v1::Node* response) override;
  grpc::Status PlanJob(grpc::ServerContext* context,
                       const v1::PlanJobRequest* request,
                       v1::PlanJobResponse* response) override;

 private:
  // The authenticated caller, if a user or an admin.
  absl::StatusOr<Principal> Caller(const grpc::ServerContext& context) const;
  // The job, if the caller may see it.
  absl::StatusOr<v1::Job> VisibleJob(const Principal& principal,
                                     const std::string& job_id) const;
  // Which jobs the caller may see named in another job's text
  // (daemon/jobs/job_mentions.h).
  JobShown ShownTo(const Principal& principal) const {
    return JobsShown(jobs_, principal.role == Role::kAdmin,
                     [principal](const std::string& owner) {
                       return principal.CanSeeJobsOf(owner);
                     });
  }

  Coordinator* const coordinator_;
  JobManager* const jobs_;
  const Authenticator* const authenticator_;
  DaemonMetrics* const metrics_;
  const int max_user_priority_;
};

}  // namespace plateau::daemon

#endif  // PLATEAU_DAEMON_SERVICE_COORDINATOR_SERVICE_H_
