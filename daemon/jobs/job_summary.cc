#include "daemon/jobs/job_summary.h"

namespace plateau::daemon {

v1::Job JobSummary(const v1::Job& job) {
  v1::Job summary;
  summary.set_id(job.id());
  v1::JobSpec& spec = *summary.mutable_spec();
  spec.set_name(job.spec().name());
  spec.set_priority(job.spec().priority());
  *spec.mutable_resources() = job.spec().resources();
  spec.mutable_train()->set_steps(job.spec().train().steps());
  summary.set_owner(job.owner());
  summary.set_state(job.state());
  summary.set_attempt(job.attempt());
  summary.set_restarts(job.restarts());
  summary.set_preemptions(job.preemptions());
  if (job.has_submit_time()) *summary.mutable_submit_time() = job.submit_time();
  if (job.has_start_time()) *summary.mutable_start_time() = job.start_time();
  if (job.has_end_time()) *summary.mutable_end_time() = job.end_time();
  if (job.has_update_time()) *summary.mutable_update_time() = job.update_time();
  if (job.has_attempt_start_time()) {
    *summary.mutable_attempt_start_time() = job.attempt_start_time();
  }
  if (job.has_queue_time()) *summary.mutable_queue_time() = job.queue_time();
  if (job.has_progress()) *summary.mutable_progress() = job.progress();
  summary.set_last_error(job.last_error());
  if (job.has_allocation()) *summary.mutable_allocation() = job.allocation();
  summary.set_wait_reason(job.wait_reason());
  summary.set_queue_position(job.queue_position());
  summary.set_last_log_sequence(job.last_log_sequence());
  summary.set_log_lines(job.log_lines());
  summary.set_log_truncated(job.log_truncated());
  summary.set_precision_reason(job.precision_reason());
  return summary;
}

}  // namespace plateau::daemon
