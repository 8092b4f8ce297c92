#include "daemon/jobs/job_manager.h"

#include <algorithm>
#include <tuple>
#include <utility>

#include "absl/random/distributions.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/byte_size.h"
#include "common/proto_time.h"
#include "common/status_macros.h"
#include "daemon/jobs/job_summary.h"
#include "google/protobuf/util/time_util.h"
#include "proto/job_spec.h"

namespace plateau::daemon {
namespace {

constexpr char kJobPrefix[] = "job/";
constexpr char kLogPrefix[] = "log/";
// "logstate/<job id>": a Job holding only last_log_sequence, log_lines and
// log_truncated, written with every batch of worker lines so that a batch
// need not rewrite the whole record. On load the larger of it and the
// record's values wins (both only grow).
constexpr char kLogStatePrefix[] = "logstate/";
// "sample/<job id>/<time in ns, zero-padded>": ProgressSamples.
constexpr char kSamplePrefix[] = "sample/";
// "order/<job id>": the job's submission sequence number (decimal), which
// orders jobs newest first and never leaves plateaud: random ids tell
// nothing of how many jobs anyone submitted.
constexpr char kOrderPrefix[] = "order/";
// Page tokens are the last row's id behind this prefix, in web-safe
// base64: opaque to clients, and nothing a row did not show.
constexpr char kPageTokenPrefix[] = "after:";

std::string OrderKey(const std::string& job_id) {
  return absl::StrCat(kOrderPrefix, job_id);
}

std::string JobKey(const std::string& job_id) {
  return absl::StrCat(kJobPrefix, job_id);
}

std::string LogPrefix(const std::string& job_id) {
  return absl::StrCat(kLogPrefix, job_id, "/");
}

std::string LogStateKey(const std::string& job_id) {
  return absl::StrCat(kLogStatePrefix, job_id);
}

// The SUBMITTED (or PLANNED) event's account of the memory plan: "planned
// device peak 102.40 MiB of 1.00 GiB devices (schedules chosen: ring_dtp,
// sco)".
// Keeps with the job the precision its first attempt runs in, and why: for
// fp32 chosen over auto, the spec, YAML and plan planned in fp32.
void ChoosePrecision(v1::Precision precision, const std::string& reason,
                     v1::Job* job) {
  if (precision == v1::PRECISION_FP32 && job->has_fp32_alternative()) {
    v1::PlannedSpec& alternative = *job->mutable_fp32_alternative();
    *job->mutable_spec() = std::move(*alternative.mutable_spec());
    job->set_spec_yaml(std::move(*alternative.mutable_spec_yaml()));
    *job->mutable_plan() = std::move(*alternative.mutable_plan());
  }
  job->mutable_spec()->set_precision(precision);
  job->clear_fp32_alternative();
  job->set_precision_reason(reason);
  // An auto job's plan said it was not chosen yet.
  if (!job->plan().precision_reason().empty()) {
    job->mutable_plan()->set_precision_reason(reason);
  }
}

std::string PlanEventText(const v1::MemoryPlan& plan) {
  std::string summary = absl::StrCat(
      "planned device peak ", FormatBytes(plan.planned().device_peak_bytes()),
      " of ", FormatBytes(plan.device_memory_bytes()), " devices");
  if (plan.schedules_chosen()) {
    absl::StrAppend(&summary,
                    " (schedules chosen: ", plan.planned().schedules(), ")");
  }
  return summary;
}

// Zero-padded so that key order is sequence order.
std::string LogKey(const std::string& job_id, int64_t sequence) {
  return absl::StrFormat("%s%016d", LogPrefix(job_id), sequence);
}

// Jobs from before ids were random ("j-00000042") have no order key: their
// number was their sequence. 0 for any other id.
int64_t LegacySequenceOf(const std::string& job_id) {
  int64_t number = 0;
  if (job_id.size() == 10 && absl::StartsWith(job_id, "j-") &&
      absl::SimpleAtoi(job_id.substr(2), &number)) {
    return number;
  }
  return 0;
}

std::string SamplePrefix(const std::string& job_id) {
  return absl::StrCat(kSamplePrefix, job_id, "/");
}

// Early samples come every second; later ones a thousandth of the job's
// age apart, so their number grows with the log of its length.
absl::Duration SampleSpacing(absl::Duration age) {
  return std::max(absl::Seconds(1), age / 1000);
}

// The sample of `progress` for `job`, its memory as last recorded.
v1::ProgressSample SampleOf(const v1::Job& job, const v1::JobProgress& progress,
                            absl::Time now) {
  v1::ProgressSample sample;
  *sample.mutable_time() = ToProto(now);
  sample.set_attempt(job.attempt());
  sample.set_step(progress.step());
  sample.set_loss(progress.loss());
  sample.set_tokens_per_second(progress.tokens_per_second());
  sample.mutable_component_peak_bytes()->Resize(v1::MemoryComponent_ARRAYSIZE,
                                                0);
  for (const v1::RankMemory& rank : job.memory()) {
    sample.set_device_peak_bytes(
        std::max(sample.device_peak_bytes(), rank.device_peak_bytes()));
    for (const v1::MemoryUsage& usage : rank.usage()) {
      if (usage.pool() != v1::MEMORY_POOL_DEVICE) continue;
      int64_t& peak = (*sample.mutable_component_peak_bytes())[static_cast<int>(
          usage.component())];
      peak = std::max(peak, usage.peak_bytes());
    }
  }
  return sample;
}

bool IsFinal(v1::JobState state) {
  return state == v1::JOB_STATE_SUCCEEDED || state == v1::JOB_STATE_FAILED ||
         state == v1::JOB_STATE_CANCELLED;
}

// When a job ended; its last update for a record from before end_time was
// kept.
absl::Time EndTimeOf(const v1::Job& job) {
  return FromProto(job.has_end_time() ? job.end_time() : job.update_time());
}

bool IsLive(v1::JobState state) {
  return state == v1::JOB_STATE_SCHEDULED || state == v1::JOB_STATE_RUNNING ||
         state == v1::JOB_STATE_PREEMPTING || state == v1::JOB_STATE_CANCELLING;
}

// The deletes PruneEndedJobs puts in one batch beyond its first job's.
constexpr int64_t kMaxPrunedKeysPerBatch = 50'000;

// How far back recent_preemption_times reaches: the per-hour limit's window.
constexpr absl::Duration kPreemptionWindow = absl::Hours(1);

std::string DescribeAllocation(const v1::Allocation& allocation) {
  std::vector<std::string> nodes;
  for (const v1::NodeAllocation& node : allocation.nodes()) {
    nodes.push_back(absl::StrCat(
        node.node(), "[", absl::StrJoin(node.device_indices(), ","), "]"));
  }
  return absl::StrJoin(nodes, " ");
}

// Appends the attempt's layout to the job's, or extends the last entry when
// it is the same; keeps the last kMaxAttemptLayouts entries.
constexpr int kMaxAttemptLayouts = 64;
void RecordLayout(const v1::JobSpec& attempt_spec, v1::Job* job) {
  v1::AttemptLayout layout;
  layout.set_first_attempt(job->attempt());
  layout.set_last_attempt(job->attempt());
  layout.set_nodes(attempt_spec.resources().nodes());
  layout.set_devices_per_node(attempt_spec.resources().devices_per_node());
  layout.set_ep(attempt_spec.parallel().ep());
  layout.set_pp(attempt_spec.parallel().pp());
  layout.set_dp(attempt_spec.parallel().dp());
  auto& layouts = *job->mutable_attempt_layouts();
  if (!layouts.empty()) {
    v1::AttemptLayout& last = layouts[layouts.size() - 1];
    const auto shape = [](const v1::AttemptLayout& entry) {
      return std::make_tuple(entry.nodes(), entry.devices_per_node(),
                             entry.ep(), entry.pp(), entry.dp());
    };
    if (shape(last) == shape(layout)) {
      last.set_last_attempt(job->attempt());
      return;
    }
  }
  *layouts.Add() = std::move(layout);
  if (layouts.size() > kMaxAttemptLayouts) {
    layouts.DeleteSubrange(0, layouts.size() - kMaxAttemptLayouts);
  }
}

std::string IdempotencyKey(const std::string& owner, const std::string& key) {
  return absl::StrCat(owner, std::string(1, '\0'), key);
}

}  // namespace

std::string JobIdForBits(uint64_t bits) {
  // Crockford's base32, lower case: no i, l, o or u to misread.
  static constexpr char kDigits[] = "0123456789abcdefghjkmnpqrstvwxyz";
  std::string id = "j-";
  for (int shift = 60; shift >= 0; shift -= 5) {
    id += kDigits[(bits >> shift) & 31];
  }
  return id;
}

JobManager::JobManager(Store* store, Clock clock, const JobLimits& limits)
    : store_(store), clock_(std::move(clock)), limits_(limits) {}

absl::StatusOr<std::unique_ptr<JobManager>> JobManager::Open(
    Store* store, Clock clock, const JobLimits& limits) {
  std::unique_ptr<JobManager> manager(
      new JobManager(store, std::move(clock), limits));
  absl::Status parse_status;
  std::map<std::string, int64_t> sequences;
  std::vector<v1::Job> loaded;
  RETURN_IF_ERROR(store->Scan(
      kOrderPrefix, [&](absl::string_view key, absl::string_view value) {
        int64_t sequence = 0;
        if (!absl::SimpleAtoi(value, &sequence) || sequence <= 0) {
          parse_status = absl::DataLossError(
              absl::StrCat("unreadable job sequence under key ", key));
          return false;
        }
        sequences[std::string(key.substr(sizeof(kOrderPrefix) - 1))] = sequence;
        return true;
      }));
  RETURN_IF_ERROR(parse_status);
  absl::MutexLock lock(&manager->mutex_);
  RETURN_IF_ERROR(store->Scan(kJobPrefix, [&](absl::string_view key,
                                              absl::string_view value) {
    v1::Job job;
    if (!job.ParseFromArray(value.data(), static_cast<int>(value.size()))) {
      parse_status = absl::DataLossError(
          absl::StrCat("unreadable job record under key ", key));
      return false;
    }
    job.clear_wait_reason();
    job.clear_queue_position();
    if (!job.idempotency_key().empty()) {
      manager
          ->idempotency_[IdempotencyKey(job.owner(), job.idempotency_key())] =
          job.id();
    }
    loaded.push_back(std::move(job));
    return true;
  }));
  RETURN_IF_ERROR(parse_status);
  std::vector<v1::Job*> unordered;
  for (v1::Job& job : loaded) {
    auto found = sequences.find(job.id());
    const int64_t sequence =
        found != sequences.end() ? found->second : LegacySequenceOf(job.id());
    if (sequence <= 0) {
      unordered.push_back(&job);
      continue;
    }
    manager->next_sequence_ = std::max(manager->next_sequence_, sequence + 1);
    manager->PutLocked(std::move(job), sequence);
  }
  // Jobs without a sequence (none should be) go after the others.
  for (v1::Job* job : unordered) {
    manager->PutLocked(std::move(*job), manager->next_sequence_++);
  }
  RETURN_IF_ERROR(manager->LoadLogStatesLocked());
  return manager;
}

absl::Status JobManager::LoadLogStatesLocked() {
  absl::Status parse_status;
  RETURN_IF_ERROR(store_->Scan(kLogStatePrefix, [&](absl::string_view key,
                                                    absl::string_view value) {
    v1::Job state;
    if (!state.ParseFromArray(value.data(), static_cast<int>(value.size()))) {
      parse_status = absl::DataLossError(
          absl::StrCat("unreadable log state under key ", key));
      return false;
    }
    auto found =
        jobs_.find(std::string(key.substr(sizeof(kLogStatePrefix) - 1)));
    if (found == jobs_.end()) return true;
    v1::Job& job = found->second.job;
    job.set_last_log_sequence(
        std::max(job.last_log_sequence(), state.last_log_sequence()));
    job.set_log_lines(std::max(job.log_lines(), state.log_lines()));
    job.set_log_truncated(job.log_truncated() || state.log_truncated());
    return true;
  }));
  return parse_status;
}

void JobManager::AddEvent(v1::Job* job, v1::JobEventKind kind,
                          const std::string& message, WriteBatch* batch) const {
  v1::LogEntry entry;
  entry.set_sequence(job->last_log_sequence() + 1);
  job->set_last_log_sequence(entry.sequence());
  v1::JobEvent& event = *entry.mutable_event();
  event.set_job_id(job->id());
  event.set_sequence(entry.sequence());
  *event.mutable_time() = ToProto(clock_());
  event.set_kind(kind);
  event.set_state(job->state());
  event.set_attempt(job->attempt());
  event.set_message(message);
  *job->mutable_update_time() = event.time();
  batch->Put(LogKey(job->id(), entry.sequence()), entry.SerializeAsString());
}

absl::StatusOr<v1::Job> JobManager::FindSubmitted(
    const std::string& owner, const std::string& idempotency_key) const {
  absl::MutexLock lock(&mutex_);
  auto found = idempotency_.find(IdempotencyKey(owner, idempotency_key));
  if (found != idempotency_.end()) {
    auto job = jobs_.find(found->second);
    if (job != jobs_.end()) return job->second.job;
  }
  return absl::NotFoundError(
      absl::StrCat("no job of ", owner, " was submitted with that key"));
}

absl::StatusOr<v1::Job> JobManager::Submit(
    const v1::JobSpec& spec, const std::string& spec_yaml,
    const std::string& owner, const std::string& idempotency_key, bool* created,
    const v1::MemoryPlan* plan, const v1::PlannedSpec* fp32_alternative) {
  if (created != nullptr) *created = false;
  v1::Job job;
  int64_t sequence = 0;
  {
    absl::MutexLock lock(&mutex_);
    if (!idempotency_key.empty()) {
      auto found = idempotency_.find(IdempotencyKey(owner, idempotency_key));
      if (found != idempotency_.end()) {
        auto existing = jobs_.find(found->second);
        if (existing == jobs_.end()) {
          return absl::UnavailableError(
              "a submission with this idempotency key is in progress; retry");
        }
        return existing->second.job;
      }
    }
    RETURN_IF_ERROR(CheckActiveJobsLocked(owner));
    ++submitting_jobs_[owner];
    do {
      job.set_id(JobIdForBits(absl::Uniform<uint64_t>(random_)));
    } while (jobs_.count(job.id()) > 0);
    sequence = next_sequence_++;
    if (!idempotency_key.empty()) {
      idempotency_[IdempotencyKey(owner, idempotency_key)] = job.id();
    }
  }
  *job.mutable_spec() = spec;
  job.set_spec_yaml(spec_yaml);
  job.set_owner(owner);
  job.set_state(v1::JOB_STATE_QUEUED);
  job.set_idempotency_key(idempotency_key);
  *job.mutable_submit_time() = ToProto(clock_());
  *job.mutable_queue_time() = job.submit_time();
  job.mutable_progress()->set_total_steps(spec.train().steps());
  std::string message = absl::StrCat("submitted by ", owner);
  if (plan != nullptr) {
    *job.mutable_plan() = *plan;
    absl::StrAppend(&message, "; ", PlanEventText(*plan));
  }
  if (fp32_alternative != nullptr) {
    *job.mutable_fp32_alternative() = *fp32_alternative;
  }
  WriteBatch batch;
  AddEvent(&job, v1::JOB_EVENT_KIND_SUBMITTED, message, &batch);
  batch.Put(JobKey(job.id()), job.SerializeAsString());
  batch.Put(OrderKey(job.id()), absl::StrCat(sequence));
  // Submissions write concurrently: RocksDB commits their syncs together.
  const absl::Status written = store_->Write(batch, {.sync = true});
  absl::MutexLock lock(&mutex_);
  if (--submitting_jobs_[owner] == 0) submitting_jobs_.erase(owner);
  if (!written.ok()) {
    if (!idempotency_key.empty()) {
      idempotency_.erase(IdempotencyKey(owner, idempotency_key));
    }
    return written;
  }
  PutLocked(job, sequence);
  changed_.SignalAll();
  if (created != nullptr) *created = true;
  return job;
}

void JobManager::PutLocked(v1::Job job, int64_t sequence) {
  Entry& entry = jobs_[job.id()];
  if (entry.job.id().empty()) {
    entry.sequence = sequence;
    by_sequence_[sequence] = &entry;
  } else {
    ForgetCountsLocked(entry.job);
    state_index_[entry.job.state()].erase(entry.sequence);
  }
  CountLocked(job);
  state_index_[job.state()][entry.sequence] = &entry;
  changed_job_ids_.insert(job.id());
  entry.job = std::move(job);
  ++entry.version;
}

absl::Status JobManager::CheckActiveJobs(const std::string& owner) const {
  absl::MutexLock lock(&mutex_);
  return CheckActiveJobsLocked(owner);
}

absl::Status JobManager::CheckActiveJobsLocked(const std::string& owner) const {
  if (limits_.max_active_jobs_per_user <= 0) return absl::OkStatus();
  const auto active = active_jobs_.find(owner);
  const auto submitting = submitting_jobs_.find(owner);
  const int jobs =
      (active == active_jobs_.end() ? 0 : active->second) +
      (submitting == submitting_jobs_.end() ? 0 : submitting->second);
  if (jobs < limits_.max_active_jobs_per_user) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrCat(
      owner, " has ", jobs,
      " jobs that have not ended, the most one user may have (plateaud "
      "--max_active_jobs_per_user); cancel some or wait for them to end"));
}

void JobManager::CountLocked(const v1::Job& job) {
  if (IsFinal(job.state())) {
    ended_jobs_[job.owner()].emplace(EndTimeOf(job), job.id());
  } else {
    ++active_jobs_[job.owner()];
  }
}

void JobManager::ForgetCountsLocked(const v1::Job& job) {
  if (IsFinal(job.state())) {
    auto ended = ended_jobs_.find(job.owner());
    if (ended == ended_jobs_.end()) return;
    ended->second.erase({EndTimeOf(job), job.id()});
    if (ended->second.empty()) ended_jobs_.erase(ended);
  } else if (--active_jobs_[job.owner()] == 0) {
    active_jobs_.erase(job.owner());
  }
}

absl::StatusOr<int> JobManager::PruneEndedJobs(int max_jobs) {
  // Ended jobs never change again, so the scans and the write run without
  // holding up transitions.
  const absl::Time now = clock_();
  const size_t keep =
      static_cast<size_t>(std::max(0, limits_.keep_ended_jobs_per_user));
  std::vector<v1::Job> victims;
  {
    absl::MutexLock lock(&mutex_);
    for (const auto& [owner, ended] : ended_jobs_) {
      size_t excess = keep > 0 && ended.size() > keep ? ended.size() - keep : 0;
      // Oldest first: once one is neither in excess nor expired, so are the
      // rest.
      for (const auto& [end_time, job_id] : ended) {
        if (static_cast<int>(victims.size()) >= max_jobs) break;
        const bool expired = limits_.keep_ended_for > absl::ZeroDuration() &&
                             end_time < now - limits_.keep_ended_for;
        if (excess == 0 && !expired) break;
        if (excess > 0) --excess;
        victims.push_back(jobs_.at(job_id).job);
      }
    }
  }
  if (victims.empty()) return 0;
  WriteBatch batch;
  int64_t deletes = 0;
  for (size_t i = 0; i < victims.size(); ++i) {
    // One job whole at least, then no more once the batch is large: its
    // WAL record must fit the flush room the space guard keeps.
    if (i > 0 && deletes >= kMaxPrunedKeysPerBatch) {
      victims.resize(i);
      break;
    }
    const v1::Job& job = victims[i];
    for (const std::string& key :
         {JobKey(job.id()), OrderKey(job.id()), LogStateKey(job.id())}) {
      batch.Delete(key);
      ++deletes;
    }
    for (const std::string& prefix :
         {LogPrefix(job.id()), SamplePrefix(job.id())}) {
      RETURN_IF_ERROR(
          store_->Scan(prefix, [&](absl::string_view key, absl::string_view) {
            batch.Delete(key);
            ++deletes;
            return true;
          }));
    }
  }
  // Unsynced: a deletion lost in a crash is made again by a later call.
  RETURN_IF_ERROR(store_->Write(batch, {.sync = false}));
  absl::MutexLock transition(&transitions_);
  absl::MutexLock lock(&mutex_);
  for (const v1::Job& job : victims) {
    ForgetCountsLocked(job);
    const int64_t sequence = jobs_.at(job.id()).sequence;
    state_index_[job.state()].erase(sequence);
    by_sequence_.erase(sequence);
    if (!job.idempotency_key().empty()) {
      idempotency_.erase(IdempotencyKey(job.owner(), job.idempotency_key()));
    }
    jobs_.erase(job.id());
    sample_states_.erase(job.id());
    changed_job_ids_.insert(job.id());
  }
  changed_.SignalAll();
  return static_cast<int>(victims.size());
}

absl::StatusOr<v1::Job> JobManager::CopyOf(const std::string& job_id) const {
  absl::MutexLock lock(&mutex_);
  auto found = jobs_.find(job_id);
  if (found == jobs_.end()) {
    return absl::NotFoundError(absl::StrCat("no job ", job_id));
  }
  return found->second.job;
}

absl::StatusOr<v1::Job> JobManager::Get(const std::string& job_id) const {
  return CopyOf(job_id);
}

absl::StatusOr<std::string> JobManager::OwnerOf(
    const std::string& job_id) const {
  absl::MutexLock lock(&mutex_);
  auto found = jobs_.find(job_id);
  if (found == jobs_.end()) {
    return absl::NotFoundError(absl::StrCat("no job ", job_id));
  }
  return found->second.job.owner();
}

absl::StatusOr<JobPage> JobManager::List(const JobListFilter& filter) const {
  const std::set<v1::JobState> states(filter.states.begin(),
                                      filter.states.end());
  const int page_size = std::clamp(filter.page_size, 1, 1000);
  std::string after_id;
  if (!filter.page_token.empty()) {
    if (!absl::WebSafeBase64Unescape(filter.page_token, &after_id) ||
        !absl::StartsWith(after_id, kPageTokenPrefix) ||
        after_id.size() == sizeof(kPageTokenPrefix) - 1) {
      return absl::InvalidArgumentError(
          "page_token is not one that ListJobs gave; pass next_page_token as "
          "it came");
    }
    after_id.erase(0, sizeof(kPageTokenPrefix) - 1);
  }
  JobPage page;
  int64_t page_bytes = 0;
  absl::MutexLock lock(&mutex_);
  auto it = by_sequence_.rbegin();
  if (!after_id.empty()) {
    auto after = jobs_.find(after_id);
    // A token continues only a list that showed its job: another owner's
    // job reads as a deleted one, telling nothing of where it sits.
    if (after == jobs_.end() ||
        (!filter.owner.empty() && after->second.job.owner() != filter.owner)) {
      return absl::InvalidArgumentError(
          "page_token is no longer valid (the job it continues from was "
          "deleted); list again from the first page");
    }
    it = std::make_reverse_iterator(by_sequence_.find(after->second.sequence));
  }
  // Newest first: descending submission sequence.
  for (; it != by_sequence_.rend(); ++it) {
    const v1::Job& job = it->second->job;
    if (!states.empty() && !states.count(job.state())) continue;
    if (!filter.owner.empty() && job.owner() != filter.owner) continue;
    v1::Job row = filter.summaries ? JobSummary(job) : job;
    const int64_t row_bytes = static_cast<int64_t>(row.ByteSizeLong());
    const bool full = static_cast<int>(page.jobs.size()) == page_size ||
                      (filter.max_page_bytes > 0 && !page.jobs.empty() &&
                       page_bytes + row_bytes > filter.max_page_bytes);
    if (full) {
      std::string token;
      absl::WebSafeBase64Escape(
          absl::StrCat(kPageTokenPrefix, page.jobs.back().id()), &token);
      page.next_page_token = std::move(token);
      break;
    }
    page_bytes += row_bytes;
    page.jobs.push_back(std::move(row));
  }
  return page;
}

std::vector<v1::Job> JobManager::JobsIn(
    const std::set<v1::JobState>& states) const {
  std::vector<v1::Job> jobs;
  VisitJobsIn(states, [&](const v1::Job& job) { jobs.push_back(job); });
  return jobs;
}

void JobManager::VisitJobsIn(
    const std::set<v1::JobState>& states,
    const std::function<void(const v1::Job&)>& visit) const {
  absl::MutexLock lock(&mutex_);
  std::vector<const Entry*> entries;
  for (v1::JobState state : states) {
    auto found = state_index_.find(state);
    if (found == state_index_.end()) continue;
    for (const auto& [sequence, entry] : found->second) {
      entries.push_back(entry);
    }
  }
  // Oldest first across the states too (each state's map is in order
  // already).
  if (states.size() > 1) {
    std::sort(entries.begin(), entries.end(),
              [](const Entry* a, const Entry* b) {
                return a->sequence < b->sequence;
              });
  }
  for (const Entry* entry : entries) visit(entry->job);
}

std::vector<std::string> JobManager::TakeChangedJobIds() {
  std::vector<std::pair<int64_t, std::string>> changed;
  {
    absl::MutexLock lock(&mutex_);
    changed.reserve(changed_job_ids_.size());
    for (const std::string& id : changed_job_ids_) {
      auto found = jobs_.find(id);
      changed.emplace_back(found == jobs_.end() ? 0 : found->second.sequence,
                           id);
    }
    changed_job_ids_.clear();
  }
  // A consumer that appends them to its own lists keeps those in
  // submission order, and so its passes read them in about the order they
  // consider them.
  std::sort(changed.begin(), changed.end());
  std::vector<std::string> ids;
  ids.reserve(changed.size());
  for (auto& [sequence, id] : changed) ids.push_back(std::move(id));
  return ids;
}

bool JobManager::IsLiveAttemptOn(const std::string& job_id, int32_t attempt,
                                 const std::string& node) const {
  absl::MutexLock lock(&mutex_);
  auto found = jobs_.find(job_id);
  if (found == jobs_.end()) return false;
  const v1::Job& job = found->second.job;
  if (job.attempt() != attempt || !IsLive(job.state())) return false;
  for (const v1::NodeAllocation& allocation : job.allocation().nodes()) {
    if (allocation.node() == node) return true;
  }
  return false;
}

std::map<v1::JobState, int64_t> JobManager::CountByState() const {
  std::map<v1::JobState, int64_t> counts;
  absl::MutexLock lock(&mutex_);
  for (const auto& [state, ids] : state_index_) {
    if (!ids.empty()) counts[state] = static_cast<int64_t>(ids.size());
  }
  return counts;
}

absl::Status JobManager::Commit(std::vector<v1::Job> jobs, WriteBatch batch,
                                bool sync) {
  for (const v1::Job& job : jobs) {
    batch.Put(JobKey(job.id()), job.SerializeAsString());
  }
  RETURN_IF_ERROR(store_->Write(batch, {.sync = sync}));
  absl::MutexLock lock(&mutex_);
  for (v1::Job& job : jobs) {
    auto found = jobs_.find(job.id());
    if (found != jobs_.end()) {
      job.set_wait_reason(found->second.job.wait_reason());
      job.set_queue_position(found->second.job.queue_position());
    }
    PutLocked(std::move(job));
  }
  changed_.SignalAll();
  return absl::OkStatus();
}

absl::StatusOr<v1::Job> JobManager::RequestCancel(const std::string& job_id,
                                                  const std::string& reason) {
  absl::MutexLock transition(&transitions_);
  ASSIGN_OR_RETURN(v1::Job job, CopyOf(job_id));
  if (IsFinal(job.state())) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", job_id, " has already ended (",
                     v1::JobState_Name(job.state()), ")"));
  }
  if (job.state() == v1::JOB_STATE_CANCELLING) return job;
  WriteBatch batch;
  const std::string message =
      reason.empty() ? "cancel requested" : "cancel requested: " + reason;
  if (job.state() == v1::JOB_STATE_QUEUED) {
    job.set_state(v1::JOB_STATE_CANCELLED);
    *job.mutable_end_time() = ToProto(clock_());
    AddEvent(&job, v1::JOB_EVENT_KIND_CANCELLED, message, &batch);
  } else {
    job.set_state(v1::JOB_STATE_CANCELLING);
    AddEvent(&job, v1::JOB_EVENT_KIND_CANCEL_REQUESTED, message, &batch);
  }
  RETURN_IF_ERROR(Commit({job}, std::move(batch), /*sync=*/true));
  return job;
}

absl::StatusOr<v1::Job> JobManager::RecordPlan(
    const std::string& job_id, const v1::JobSpec& spec,
    const std::string& spec_yaml, const v1::MemoryPlan& plan,
    const v1::PlannedSpec* fp32_alternative, bool* recorded) {
  absl::MutexLock transition(&transitions_);
  ASSIGN_OR_RETURN(v1::Job job, CopyOf(job_id));
  if (recorded != nullptr) *recorded = false;
  if (job.state() != v1::JOB_STATE_QUEUED || job.has_plan()) return job;
  *job.mutable_spec() = spec;
  job.set_spec_yaml(spec_yaml);
  *job.mutable_plan() = plan;
  if (fp32_alternative != nullptr) {
    *job.mutable_fp32_alternative() = *fp32_alternative;
  }
  WriteBatch batch;
  AddEvent(
      &job, v1::JOB_EVENT_KIND_PLANNED,
      absl::StrCat("a node that can hold it attached: ", PlanEventText(plan)),
      &batch);
  RETURN_IF_ERROR(Commit({job}, std::move(batch), /*sync=*/true));
  if (recorded != nullptr) *recorded = true;
  return job;
}

absl::StatusOr<v1::Job> JobManager::FailQueued(const std::string& job_id,
                                               const std::string& error) {
  absl::MutexLock transition(&transitions_);
  ASSIGN_OR_RETURN(v1::Job job, CopyOf(job_id));
  if (job.state() != v1::JOB_STATE_QUEUED) return job;
  job.set_state(v1::JOB_STATE_FAILED);
  job.set_last_error(error);
  job.clear_wait_reason();
  job.clear_queue_position();
  *job.mutable_end_time() = ToProto(clock_());
  WriteBatch batch;
  AddEvent(&job, v1::JOB_EVENT_KIND_FAILED, error, &batch);
  RETURN_IF_ERROR(Commit({job}, std::move(batch), /*sync=*/true));
  return job;
}

absl::StatusOr<v1::Job> JobManager::Preempt(const std::string& job_id,
                                            const std::string& reason,
                                            const std::string& preemptor_id,
                                            const std::string& preemptor_reason,
                                            bool* preempted) {
  if (preempted != nullptr) *preempted = false;
  absl::MutexLock transition(&transitions_);
  ASSIGN_OR_RETURN(v1::Job job, CopyOf(job_id));
  if (job.state() != v1::JOB_STATE_SCHEDULED &&
      job.state() != v1::JOB_STATE_RUNNING) {
    return job;
  }
  const absl::Time now = clock_();
  std::vector<google::protobuf::Timestamp> recent;
  for (const google::protobuf::Timestamp& time :
       job.recent_preemption_times()) {
    if (FromProto(time) > now - kPreemptionWindow) recent.push_back(time);
  }
  recent.push_back(ToProto(now));
  job.mutable_recent_preemption_times()->Assign(recent.begin(), recent.end());
  job.set_preemptions(job.preemptions() + 1);
  job.set_state(v1::JOB_STATE_PREEMPTING);
  WriteBatch batch;
  AddEvent(&job, v1::JOB_EVENT_KIND_PREEMPTED,
           absl::StrCat("attempt ", job.attempt(), " preempted: ", reason,
                        "; it checkpoints at the next step boundary, stops "
                        "and is requeued"),
           &batch);
  std::vector<v1::Job> changed = {job};
  if (!preemptor_id.empty()) {
    absl::StatusOr<v1::Job> preemptor = CopyOf(preemptor_id);
    if (preemptor.ok() && preemptor->state() == v1::JOB_STATE_QUEUED) {
      AddEvent(&*preemptor, v1::JOB_EVENT_KIND_PREEMPTING, preemptor_reason,
               &batch);
      changed.push_back(*std::move(preemptor));
    }
  }
  RETURN_IF_ERROR(Commit(std::move(changed), std::move(batch), /*sync=*/true));
  if (preempted != nullptr) *preempted = true;
  return job;
}

absl::StatusOr<std::vector<v1::Job>> JobManager::Schedule(
    const std::vector<PlacedJob>& placements) {
  absl::MutexLock transition(&transitions_);
  std::vector<v1::Job> scheduled;
  WriteBatch batch;
  for (const PlacedJob& placement : placements) {
    ASSIGN_OR_RETURN(v1::Job job, CopyOf(placement.job_id));
    if (job.state() != v1::JOB_STATE_QUEUED) continue;
    // The scheduler places a job only at one of its AttemptNodeCounts; a
    // placement at another size leaves it queued.
    const absl::StatusOr<v1::JobSpec> attempt_spec =
        SpecForNodes(job.spec(), placement.allocation.nodes_size());
    if (!attempt_spec.ok()) continue;
    job.set_state(v1::JOB_STATE_SCHEDULED);
    job.set_attempt(job.attempt() + 1);
    *job.mutable_allocation() = placement.allocation;
    job.clear_wait_reason();
    job.clear_queue_position();
    job.clear_finished_nodes();
    *job.mutable_attempt_start_time() = ToProto(clock_());
    if (!job.has_start_time())
      *job.mutable_start_time() = job.attempt_start_time();
    std::string precision;
    if (placement.precision != v1::PRECISION_UNSPECIFIED &&
        job.precision_reason().empty()) {
      ChoosePrecision(placement.precision, placement.precision_reason, &job);
      precision = absl::StrCat(
          "; precision ",
          placement.precision == v1::PRECISION_FP32 ? "fp32" : "bf16", " (",
          placement.precision_reason, ")");
    }
    RecordLayout(*attempt_spec, &job);
    const std::string elastic =
        IsElastic(job.spec().resources())
            ? absl::StrCat("; elastic: ", attempt_spec->resources().nodes(),
                           " of ", job.spec().resources().nodes(),
                           " nodes, dp ", attempt_spec->parallel().dp())
            : "";
    AddEvent(
        &job, v1::JOB_EVENT_KIND_SCHEDULED,
        absl::StrCat("attempt ", job.attempt(), " on ",
                     DescribeAllocation(job.allocation()), elastic, precision),
        &batch);
    scheduled.push_back(std::move(job));
  }
  if (scheduled.empty()) return scheduled;
  RETURN_IF_ERROR(Commit(scheduled, std::move(batch), /*sync=*/true));
  return scheduled;
}

absl::Status JobManager::MarkRunning(const std::string& job_id,
                                     int32_t attempt) {
  absl::MutexLock transition(&transitions_);
  ASSIGN_OR_RETURN(v1::Job job, CopyOf(job_id));
  if (job.attempt() != attempt || job.state() != v1::JOB_STATE_SCHEDULED) {
    return absl::OkStatus();
  }
  job.set_state(v1::JOB_STATE_RUNNING);
  WriteBatch batch;
  AddEvent(&job, v1::JOB_EVENT_KIND_STARTED,
           absl::StrCat("attempt ", attempt, " running"), &batch);
  return Commit({job}, std::move(batch), /*sync=*/true);
}

absl::Status JobManager::RecordReadopted(const std::string& job_id,
                                         int32_t attempt,
                                         const std::string& node) {
  absl::MutexLock transition(&transitions_);
  ASSIGN_OR_RETURN(v1::Job job, CopyOf(job_id));
  if (job.attempt() != attempt || !IsLive(job.state())) {
    return absl::OkStatus();
  }
  WriteBatch batch;
  AddEvent(&job, v1::JOB_EVENT_KIND_READOPTED,
           absl::StrCat("attempt ", attempt, " re-adopted: node ", node,
                        " re-attached still running it"),
           &batch);
  return Commit({job}, std::move(batch), /*sync=*/true);
}

absl::StatusOr<v1::Job> JobManager::EndAttempt(const std::string& job_id,
                                               int32_t attempt,
                                               AttemptOutcome outcome,
                                               const std::string& error,
                                               bool* ended) {
  if (ended != nullptr) *ended = false;
  absl::MutexLock transition(&transitions_);
  ASSIGN_OR_RETURN(v1::Job job, CopyOf(job_id));
  if (job.attempt() != attempt || !IsLive(job.state())) return job;
  WriteBatch batch;
  job.clear_allocation();
  job.clear_finished_nodes();
  const bool cancelling = job.state() == v1::JOB_STATE_CANCELLING;
  const bool preempting = job.state() == v1::JOB_STATE_PREEMPTING;
  const std::string cause =
      error.empty() ? "the attempt stopped unexpectedly" : error;
  if (outcome == AttemptOutcome::kSucceeded) {
    job.set_state(v1::JOB_STATE_SUCCEEDED);
    *job.mutable_end_time() = ToProto(clock_());
    AddEvent(&job, v1::JOB_EVENT_KIND_SUCCEEDED,
             absl::StrCat("attempt ", attempt, " finished"), &batch);
  } else if (cancelling) {
    job.set_state(v1::JOB_STATE_CANCELLED);
    *job.mutable_end_time() = ToProto(clock_());
    AddEvent(&job, v1::JOB_EVENT_KIND_CANCELLED,
             absl::StrCat("attempt ", attempt, " stopped",
                          error.empty() ? "" : ": ", error),
             &batch);
  } else if (preempting && outcome != AttemptOutcome::kFailed) {
    job.set_state(v1::JOB_STATE_QUEUED);
    *job.mutable_queue_time() = ToProto(clock_());
    const int64_t step = job.progress().checkpoint_step();
    AddEvent(
        &job, v1::JOB_EVENT_KIND_REQUEUED,
        absl::StrCat("attempt ", attempt, " stopped for preemption",
                     error.empty() ? "" : ": ", error,
                     "; requeued without using a restart (", job.restarts(),
                     " of ", job.spec().train().max_restarts(), " used), ",
                     step > 0 ? absl::StrCat("resuming from step ", step)
                              : std::string("from the start")),
        &batch);
  } else if (outcome == AttemptOutcome::kNotStarted) {
    job.set_last_error(cause);
    AddEvent(&job, v1::JOB_EVENT_KIND_ATTEMPT_FAILED,
             absl::StrCat("attempt ", attempt, " never started: ", cause),
             &batch);
    job.set_state(v1::JOB_STATE_QUEUED);
    *job.mutable_queue_time() = ToProto(clock_());
    AddEvent(&job, v1::JOB_EVENT_KIND_REQUEUED,
             absl::StrCat("requeued without using a restart (", job.restarts(),
                          " of ", job.spec().train().max_restarts(), " used)"),
             &batch);
  } else {
    job.set_last_error(cause);
    if (job.restarts() < job.spec().train().max_restarts()) {
      AddEvent(&job, v1::JOB_EVENT_KIND_ATTEMPT_FAILED,
               absl::StrCat("attempt ", attempt, " failed: ", cause), &batch);
      job.set_restarts(job.restarts() + 1);
      job.set_state(v1::JOB_STATE_QUEUED);
      *job.mutable_queue_time() = ToProto(clock_());
      const int64_t step = job.progress().checkpoint_step();
      AddEvent(
          &job, v1::JOB_EVENT_KIND_REQUEUED,
          absl::StrCat("restart ", job.restarts(), " of ",
                       job.spec().train().max_restarts(),
                       step > 0 ? absl::StrCat(", resuming from step ", step)
                                : std::string(", from the start")),
          &batch);
    } else {
      job.set_state(v1::JOB_STATE_FAILED);
      *job.mutable_end_time() = ToProto(clock_());
      AddEvent(&job, v1::JOB_EVENT_KIND_FAILED,
               absl::StrCat("attempt ", attempt, " failed after ",
                            job.restarts(), " restarts: ", cause),
               &batch);
    }
  }
  RETURN_IF_ERROR(Commit({job}, std::move(batch), /*sync=*/true));
  if (ended != nullptr) *ended = true;
  return job;
}

absl::StatusOr<v1::Job> JobManager::RecordNodeFinished(
    const std::string& job_id, int32_t attempt, const std::string& node) {
  absl::MutexLock transition(&transitions_);
  ASSIGN_OR_RETURN(v1::Job job, CopyOf(job_id));
  if (job.attempt() != attempt || !IsLive(job.state()) ||
      std::find(job.finished_nodes().begin(), job.finished_nodes().end(),
                node) != job.finished_nodes().end()) {
    return job;
  }
  job.add_finished_nodes(node);
  RETURN_IF_ERROR(Commit({job}, WriteBatch(), /*sync=*/true));
  return job;
}

absl::Status JobManager::RecordProgress(const std::string& job_id,
                                        int32_t attempt,
                                        const v1::JobProgress& progress) {
  absl::MutexLock transition(&transitions_);
  ASSIGN_OR_RETURN(v1::Job job, CopyOf(job_id));
  if (job.attempt() != attempt || !IsLive(job.state())) {
    return absl::OkStatus();
  }
  v1::JobProgress& current = *job.mutable_progress();
  const int64_t checkpoint_step = current.checkpoint_step();
  const std::string checkpoint_location = current.checkpoint_location();
  current = progress;
  current.set_total_steps(job.spec().train().steps());
  current.set_checkpoint_step(checkpoint_step);
  current.set_checkpoint_location(checkpoint_location);
  const absl::Time now = clock_();
  *job.mutable_update_time() = ToProto(now);
  WriteBatch batch;
  SampleState state = sample_states_[job_id];
  const absl::Time started =
      FromProto(job.has_start_time() ? job.start_time() : job.submit_time());
  if (now - state.time >= SampleSpacing(now - started)) {
    v1::ProgressSample sample = SampleOf(job, progress, now);
    if (progress.validation_loss() != 0.0 &&
        progress.validation_loss() != state.validation_loss) {
      sample.set_validation_loss(progress.validation_loss());
      state.validation_loss = progress.validation_loss();
    }
    state.time = now;
    batch.Put(absl::StrFormat("%s%020d", SamplePrefix(job_id),
                              absl::ToUnixNanos(now)),
              sample.SerializeAsString());
  }
  RETURN_IF_ERROR(Commit({job}, std::move(batch), /*sync=*/false));
  sample_states_[job_id] = state;
  return absl::OkStatus();
}

absl::Status JobManager::RecordMemory(
    const std::string& job_id, int32_t attempt,
    const std::vector<v1::RankMemory>& ranks) {
  absl::MutexLock transition(&transitions_);
  ASSIGN_OR_RETURN(v1::Job job, CopyOf(job_id));
  if (job.attempt() != attempt || !IsLive(job.state())) {
    return absl::OkStatus();
  }
  std::map<int32_t, v1::RankMemory> by_rank;
  for (const v1::RankMemory& rank : job.memory()) by_rank[rank.rank()] = rank;
  for (const v1::RankMemory& rank : ranks) by_rank[rank.rank()] = rank;
  job.clear_memory();
  for (auto& [rank, memory] : by_rank) *job.add_memory() = std::move(memory);
  *job.mutable_update_time() = ToProto(clock_());
  return Commit({job}, WriteBatch(), /*sync=*/false);
}

absl::Status JobManager::AppendLogLines(
    const std::string& job_id, int32_t attempt,
    const std::vector<v1::WorkerLogLine>& lines) {
  absl::MutexLock transition(&transitions_);
  // The log's counters, from the in-memory record: transitions (which
  // rewrite it) are serialized with this under transitions_.
  v1::Job state;
  {
    absl::MutexLock lock(&mutex_);
    auto found = jobs_.find(job_id);
    if (found == jobs_.end()) {
      return absl::NotFoundError(absl::StrCat("no job ", job_id));
    }
    const v1::Job& job = found->second.job;
    if (job.attempt() != attempt || !IsLive(job.state())) {
      return absl::OkStatus();  // a stale attempt's or a finished job's lines
    }
    state.set_last_log_sequence(job.last_log_sequence());
    state.set_log_lines(job.log_lines());
    state.set_log_truncated(job.log_truncated());
  }
  WriteBatch batch;
  auto append = [&](const v1::WorkerLogLine& line) {
    v1::LogEntry entry;
    entry.set_sequence(state.last_log_sequence() + 1);
    state.set_last_log_sequence(entry.sequence());
    *entry.mutable_line() = line;
    batch.Put(LogKey(job_id, entry.sequence()), entry.SerializeAsString());
  };
  for (const v1::WorkerLogLine& line : lines) {
    if (state.log_lines() < limits_.max_log_lines_per_job) {
      append(line);
      state.set_log_lines(state.log_lines() + 1);
    } else if (!state.log_truncated()) {
      v1::WorkerLogLine note;
      note.set_job_id(job_id);
      note.set_attempt(attempt);
      note.set_node("plateaud");
      note.set_rank(-1);
      note.set_time_unix_micros(absl::ToUnixMicros(clock_()));
      note.set_text(absl::StrCat("plateaud: the log reached its cap of ",
                                 limits_.max_log_lines_per_job,
                                 " worker lines; later lines are dropped"));
      append(note);
      state.set_log_truncated(true);
    }
  }
  if (batch.empty()) return absl::OkStatus();
  batch.Put(LogStateKey(job_id), state.SerializeAsString());
  RETURN_IF_ERROR(store_->Write(batch, {.sync = false}));
  absl::MutexLock lock(&mutex_);
  Entry& entry = jobs_.at(job_id);
  entry.job.set_last_log_sequence(state.last_log_sequence());
  entry.job.set_log_lines(state.log_lines());
  entry.job.set_log_truncated(state.log_truncated());
  ++entry.version;
  changed_.SignalAll();
  return absl::OkStatus();
}

absl::Status JobManager::RecordCheckpoint(const std::string& job_id,
                                          int32_t attempt, int64_t step,
                                          const std::string& location) {
  absl::MutexLock transition(&transitions_);
  ASSIGN_OR_RETURN(v1::Job job, CopyOf(job_id));
  if (job.attempt() != attempt || IsFinal(job.state()) ||
      step <= job.progress().checkpoint_step()) {
    return absl::OkStatus();
  }
  job.mutable_progress()->set_checkpoint_step(step);
  job.mutable_progress()->set_checkpoint_location(location);
  WriteBatch batch;
  AddEvent(&job, v1::JOB_EVENT_KIND_CHECKPOINTED,
           absl::StrCat("checkpoint at step ", step, ": ", location), &batch);
  return Commit({job}, std::move(batch), /*sync=*/true);
}

void JobManager::SetQueue(const std::map<std::string, QueuedJob>& queue) {
  absl::MutexLock lock(&mutex_);
  bool any = false;
  for (const auto& [sequence, indexed] : state_index_[v1::JOB_STATE_QUEUED]) {
    const std::string& id = indexed->job.id();
    Entry& entry = jobs_.at(id);
    auto found = queue.find(id);
    const QueuedJob queued = found == queue.end() ? QueuedJob() : found->second;
    if (entry.job.wait_reason() != queued.wait_reason ||
        entry.job.queue_position() != queued.position) {
      entry.job.set_wait_reason(queued.wait_reason);
      entry.job.set_queue_position(queued.position);
      ++entry.version;
      any = true;
    }
  }
  if (any) changed_.SignalAll();
}

absl::StatusOr<std::vector<v1::ProgressSample>> JobManager::ProgressSamples(
    const std::string& job_id) const {
  RETURN_IF_ERROR(CopyOf(job_id).status());
  std::vector<v1::ProgressSample> samples;
  absl::Status parse_status;
  RETURN_IF_ERROR(
      store_->Scan(SamplePrefix(job_id),
                   [&](absl::string_view key, absl::string_view value) {
                     v1::ProgressSample& sample = samples.emplace_back();
                     if (!sample.ParseFromArray(
                             value.data(), static_cast<int>(value.size()))) {
                       parse_status = absl::DataLossError(absl::StrCat(
                           "unreadable progress sample under key ", key));
                       return false;
                     }
                     return true;
                   }));
  RETURN_IF_ERROR(parse_status);
  return samples;
}

absl::Status JobManager::ReadLog(
    const std::string& job_id, int64_t after_sequence,
    const std::function<bool(const v1::LogEntry&)>& visit) const {
  RETURN_IF_ERROR(CopyOf(job_id).status());
  absl::Status parse_status;
  const auto read = [&](absl::string_view key, absl::string_view value) {
    v1::LogEntry entry;
    if (!entry.ParseFromArray(value.data(), static_cast<int>(value.size()))) {
      parse_status = absl::DataLossError(
          absl::StrCat("unreadable log entry under key ", key));
      return false;
    }
    if (entry.sequence() <= after_sequence) return true;
    return visit(entry);
  };
  // A follower asks for the tail of a long log: seek to it.
  RETURN_IF_ERROR(after_sequence > 0
                      ? store_->ScanAfter(LogPrefix(job_id),
                                          LogKey(job_id, after_sequence), read)
                      : store_->Scan(LogPrefix(job_id), read));
  return parse_status;
}

int64_t JobManager::SubmissionOrder(const std::string& job_id) const {
  absl::MutexLock lock(&mutex_);
  auto found = jobs_.find(job_id);
  return found == jobs_.end() ? 0 : found->second.sequence;
}

int64_t JobManager::Version(const std::string& job_id) const {
  absl::MutexLock lock(&mutex_);
  auto found = jobs_.find(job_id);
  return found == jobs_.end() ? 0 : found->second.version;
}

int64_t JobManager::WaitForChange(const std::string& job_id, int64_t seen,
                                  absl::Duration timeout) const {
  const absl::Time deadline = absl::Now() + timeout;
  absl::MutexLock lock(&mutex_);
  while (true) {
    auto found = jobs_.find(job_id);
    const int64_t version = found == jobs_.end() ? 0 : found->second.version;
    if (version > seen || changed_.WaitWithDeadline(&mutex_, deadline)) {
      found = jobs_.find(job_id);
      return found == jobs_.end() ? 0 : found->second.version;
    }
  }
}

}  // namespace plateau::daemon
