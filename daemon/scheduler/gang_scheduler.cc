#include "daemon/scheduler/gang_scheduler.h"

#include <algorithm>
#include <cstdint>
#include <deque>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/byte_size.h"

namespace plateau::daemon {
namespace {

int64_t JobDevices(const WaitingJob& job) {
  return int64_t{job.nodes} * job.devices_per_node;
}

// "1 node", "2 nodes".
std::string Count(int64_t n, absl::string_view noun) {
  return absl::StrCat(n, " ", noun, n == 1 ? "" : "s");
}

// "a", "a, b", "a, b, c and 2 more": keeps a message short however many.
std::string ShortList(const std::vector<std::string>& items) {
  constexpr size_t kMaxNamed = 3;
  const size_t named = std::min(items.size(), kMaxNamed);
  std::string list = absl::StrJoin(items.begin(), items.begin() + named, ", ");
  if (items.size() > named) {
    absl::StrAppend(&list, " and ", items.size() - named, " more");
  }
  return list;
}

// " of at least 1.20 GiB each" for a job with a memory need; "" without.
std::string MemoryNeed(int64_t min_device_memory_bytes) {
  if (min_device_memory_bytes <= 0) return "";
  return absl::StrCat(" of at least ", FormatBytes(min_device_memory_bytes),
                      " each");
}

// A wait for users: "45s", "12m", "2h5m", "3d4h" (rounded up).
std::string FormatWait(absl::Duration wait) {
  const int64_t seconds =
      absl::ToInt64Seconds(absl::Ceil(wait, absl::Seconds(1)));
  if (seconds < 60) return absl::StrCat(seconds, "s");
  const int64_t minutes = (seconds + 59) / 60;
  if (minutes < 60) return absl::StrCat(minutes, "m");
  if (minutes < 48 * 60) {
    const int64_t rest_minutes = minutes % 60;
    return rest_minutes == 0
               ? absl::StrCat(minutes / 60, "h")
               : absl::StrCat(minutes / 60, "h", rest_minutes, "m");
  }
  const int64_t hours = (minutes + 59) / 60;
  return hours % 24 == 0 ? absl::StrCat(hours / 24, "d")
                         : absl::StrCat(hours / 24, "d", hours % 24, "h");
}

// The free devices of the schedulable nodes during one pass. Nodes are
// indexed in name order and grouped by device memory into classes (a
// cluster has a few kinds of device, so a few classes); a job with a memory
// need uses the classes with at least that memory. Per class,
// `free_at_least[k]` (nodes with >= k free devices) makes "does it fit now"
// O(classes); it is updated as devices are taken, which costs O(devices
// taken) over the whole pass. `by_fit` orders the class's nodes with free
// devices by (free devices, index): best fit is a lower_bound in each class.
class FreePool {
 public:
  explicit FreePool(const std::vector<SchedulableNode>& nodes);

  int size() const { return static_cast<int>(nodes_.size()); }
  // -1 when `name` is not a schedulable node.
  int IndexOf(absl::string_view name) const;
  int free(int node) const { return free_[node]; }
  int total(int node) const { return nodes_[node]->total_devices; }
  // A negative memory (bad input) counts as 0, unknown, as in the classes.
  int64_t memory(int node) const {
    return std::max<int64_t>(nodes_[node]->device_memory_bytes, 0);
  }
  int total_free() const { return total_free_; }
  // Nodes with devices of at least `min_memory` bytes and at least
  // `devices` free devices now, and in total.
  int NodesWithFree(int devices, int64_t min_memory) const;
  int NodesWithTotal(int devices, int64_t min_memory) const;

  // Best fit: the `nodes` nodes with devices of at least `min_memory` bytes
  // and the fewest free devices that are still >= devices_per_node, ties by
  // name. REQUIRES: NodesWithFree(dpn, min_memory) >= nodes.
  std::vector<int> Choose(int nodes, int devices_per_node,
                          int64_t min_memory) const;
  // Takes the lowest free devices on each chosen node; by node name.
  std::vector<NodeDevices> Take(std::vector<int> chosen, int devices_per_node);

 private:
  struct MemoryClass {
    int64_t memory_bytes = 0;
    std::vector<int> free_at_least;
    std::vector<int> total_at_least;
    std::set<std::pair<int, int>> by_fit;  // (free devices, node), free > 0
  };

  static int Level(const std::vector<int>& at_least, int devices) {
    if (devices >= static_cast<int>(at_least.size())) return 0;
    return at_least[std::max(devices, 0)];
  }
  // The first class whose devices have at least `min_memory` bytes.
  size_t FirstClass(int64_t min_memory) const;

  std::vector<const SchedulableNode*> nodes_;  // by name
  absl::flat_hash_map<absl::string_view, int> index_;
  std::vector<int> free_;             // free devices per node
  std::vector<int> taken_;            // free_device_indices taken in this pass
  std::vector<int> class_of_;         // per node, into classes_
  std::vector<MemoryClass> classes_;  // ascending memory_bytes
  int total_free_ = 0;
};

FreePool::FreePool(const std::vector<SchedulableNode>& nodes) {
  nodes_.reserve(nodes.size());
  for (const SchedulableNode& node : nodes) nodes_.push_back(&node);
  std::sort(nodes_.begin(), nodes_.end(),
            [](const SchedulableNode* a, const SchedulableNode* b) {
              return a->name < b->name;
            });
  int max_devices = 0;
  std::vector<int64_t> memories;
  for (const SchedulableNode* node : nodes_) {
    max_devices =
        std::max({max_devices, node->total_devices,
                  static_cast<int>(node->free_device_indices.size())});
    memories.push_back(std::max<int64_t>(node->device_memory_bytes, 0));
  }
  std::sort(memories.begin(), memories.end());
  memories.erase(std::unique(memories.begin(), memories.end()), memories.end());
  classes_.resize(memories.size());
  for (size_t c = 0; c < memories.size(); ++c) {
    classes_[c].memory_bytes = memories[c];
    classes_[c].free_at_least.assign(max_devices + 1, 0);
    classes_[c].total_at_least.assign(max_devices + 1, 0);
  }
  free_.resize(nodes_.size());
  taken_.assign(nodes_.size(), 0);
  class_of_.resize(nodes_.size());
  index_.reserve(nodes_.size());
  for (int i = 0; i < size(); ++i) {
    index_.emplace(nodes_[i]->name, i);
    class_of_[i] = static_cast<int>(FirstClass(memory(i)));
    MemoryClass& memory_class = classes_[class_of_[i]];
    free_[i] = static_cast<int>(nodes_[i]->free_device_indices.size());
    total_free_ += free_[i];
    for (int k = 0; k <= free_[i]; ++k) ++memory_class.free_at_least[k];
    for (int k = 0; k <= nodes_[i]->total_devices; ++k) {
      ++memory_class.total_at_least[k];
    }
    if (free_[i] > 0) memory_class.by_fit.emplace(free_[i], i);
  }
}

size_t FreePool::FirstClass(int64_t min_memory) const {
  return static_cast<size_t>(
      std::lower_bound(classes_.begin(), classes_.end(), min_memory,
                       [](const MemoryClass& memory_class, int64_t bytes) {
                         return memory_class.memory_bytes < bytes;
                       }) -
      classes_.begin());
}

int FreePool::NodesWithFree(int devices, int64_t min_memory) const {
  int nodes = 0;
  for (size_t c = FirstClass(min_memory); c < classes_.size(); ++c) {
    nodes += Level(classes_[c].free_at_least, devices);
  }
  return nodes;
}

int FreePool::NodesWithTotal(int devices, int64_t min_memory) const {
  int nodes = 0;
  for (size_t c = FirstClass(min_memory); c < classes_.size(); ++c) {
    nodes += Level(classes_[c].total_at_least, devices);
  }
  return nodes;
}

int FreePool::IndexOf(absl::string_view name) const {
  const auto it = index_.find(name);
  return it == index_.end() ? -1 : it->second;
}

std::vector<int> FreePool::Choose(int nodes, int devices_per_node,
                                  int64_t min_memory) const {
  // The best `nodes` of each class are the only candidates overall.
  std::vector<std::pair<int, int>> candidates;
  for (size_t c = FirstClass(min_memory); c < classes_.size(); ++c) {
    const std::set<std::pair<int, int>>& by_fit = classes_[c].by_fit;
    int taken = 0;
    for (auto it = by_fit.lower_bound({devices_per_node, 0});
         it != by_fit.end() && taken < nodes; ++it, ++taken) {
      candidates.push_back(*it);
    }
  }
  if (static_cast<int>(candidates.size()) > nodes) {
    std::partial_sort(candidates.begin(), candidates.begin() + nodes,
                      candidates.end());
    candidates.resize(nodes);
  }
  std::vector<int> chosen;
  chosen.reserve(candidates.size());
  for (const auto& [free, node] : candidates) chosen.push_back(node);
  return chosen;
}

std::vector<NodeDevices> FreePool::Take(std::vector<int> chosen,
                                        int devices_per_node) {
  std::sort(chosen.begin(), chosen.end());  // name order
  std::vector<NodeDevices> allocation;
  allocation.reserve(chosen.size());
  for (const int node : chosen) {
    MemoryClass& memory_class = classes_[class_of_[node]];
    const std::vector<int>& indices = nodes_[node]->free_device_indices;
    const auto first = indices.begin() + taken_[node];
    allocation.push_back({nodes_[node]->name,
                          std::vector<int>(first, first + devices_per_node)});
    memory_class.by_fit.erase({free_[node], node});
    for (int k = free_[node] - devices_per_node + 1; k <= free_[node]; ++k) {
      --memory_class.free_at_least[k];
    }
    free_[node] -= devices_per_node;
    taken_[node] += devices_per_node;
    total_free_ -= devices_per_node;
    if (free_[node] > 0) memory_class.by_fit.emplace(free_[node], node);
  }
  return allocation;
}

// Devices in use per user and their quotas.
class QuotaBook {
 public:
  explicit QuotaBook(const SchedulerInput& input);

  // 0: unlimited.
  int64_t Limit(absl::string_view user) const;
  int64_t InUse(absl::string_view user) const;
  bool Allows(absl::string_view user, int64_t devices) const {
    const int64_t limit = Limit(user);
    return limit == 0 || InUse(user) + devices <= limit;
  }
  void Add(absl::string_view user, int64_t devices) {
    in_use_[user] += devices;
  }
  // Why `devices` more would exceed the user's quota.
  std::string Explain(absl::string_view user, int64_t devices) const;

 private:
  int64_t default_limit_ = 0;
  absl::flat_hash_map<absl::string_view, int64_t> limits_;
  absl::flat_hash_map<absl::string_view, int64_t> in_use_;
};

QuotaBook::QuotaBook(const SchedulerInput& input)
    : default_limit_(std::max(input.default_quota_devices, 0)) {
  for (const auto& [user, limit] : input.quota_devices) {
    limits_.emplace(user, std::max(limit, 0));
  }
  for (const RunningJob& job : input.running) {
    for (const NodeDevices& devices : job.allocation) {
      in_use_[job.owner] += static_cast<int64_t>(devices.device_indices.size());
    }
  }
}

int64_t QuotaBook::Limit(absl::string_view user) const {
  const auto it = limits_.find(user);
  return it == limits_.end() ? default_limit_ : it->second;
}

int64_t QuotaBook::InUse(absl::string_view user) const {
  const auto it = in_use_.find(user);
  return it == in_use_.end() ? 0 : it->second;
}

std::string QuotaBook::Explain(absl::string_view user, int64_t devices) const {
  const int64_t limit = Limit(user);
  if (devices > limit) {
    return absl::StrCat("needs ", Count(devices, "device"), "; user ", user,
                        "'s quota is ", limit);
  }
  return absl::StrCat("user ", user, " at quota: ", InUse(user), " of ", limit,
                      " devices in use, job needs ", devices);
}

// A job's devices on schedulable nodes, free again at `end`
// (InfiniteFuture: the job has no time limit).
struct Release {
  absl::Time end;
  absl::string_view job_id;
  std::vector<std::pair<int, int>> devices;  // (node, device count)
};

// The head job's reservation (EASY backfill): its earliest start, and the
// free devices per node at that time (the "shadow" state) that the
// backfilled jobs still running then must leave enough of.
class Reservation {
 public:
  Reservation(const WaitingJob& head, const FreePool& pool,
              std::vector<Release> releases, absl::Time now);

  // Unset: the head waits on a job without an end time.
  std::optional<absl::Time> start() const { return start_; }
  // Whether a job on `chosen` (devices_per_node each) ending at `end`
  // leaves the head able to start at start(): rules (a) and (b).
  bool Admits(const std::vector<int>& chosen, int devices_per_node,
              absl::Time end) const {
    return !HeldAtStart(end) ||
           shadow_capable_ - Spoiled(chosen, devices_per_node) >= head_nodes_;
  }
  // Whether a job ending at `end` still holds its devices at start().
  bool HeldAtStart(absl::Time end) const {
    return !start_.has_value() || end > *start_;
  }
  // Takes the devices of a job that is admitted and HeldAtStart.
  void Hold(const std::vector<int>& chosen, int devices_per_node);

 private:
  void Apply(const Release& release, const FreePool& pool);
  // Chosen nodes that could host the head at its start but not with
  // devices_per_node fewer devices.
  int Spoiled(const std::vector<int>& chosen, int devices_per_node) const;

  int head_nodes_;
  int head_devices_per_node_;
  // Per node: its devices have the memory the head needs.
  std::vector<bool> eligible_;
  std::optional<absl::Time> start_;
  std::vector<int> shadow_free_;  // per node
  int shadow_capable_ = 0;        // nodes with >= head_devices_per_node_
};

Reservation::Reservation(const WaitingJob& head, const FreePool& pool,
                         std::vector<Release> releases, absl::Time now)
    : head_nodes_(head.nodes), head_devices_per_node_(head.devices_per_node) {
  shadow_free_.resize(pool.size());
  eligible_.resize(pool.size());
  for (int node = 0; node < pool.size(); ++node) {
    shadow_free_[node] = pool.free(node);
    eligible_[node] = pool.memory(node) >= head.min_device_memory_bytes;
  }
  shadow_capable_ =
      pool.NodesWithFree(head_devices_per_node_, head.min_device_memory_bytes);
  std::sort(releases.begin(), releases.end(),
            [](const Release& a, const Release& b) {
              return std::tie(a.end, a.job_id) < std::tie(b.end, b.job_id);
            });
  // Release in end order until the head fits; then release everything else
  // that has ended by then, which gives the shadow state at the start.
  size_t next = 0;
  std::optional<absl::Time> fit_end;
  while (next < releases.size() && !fit_end.has_value()) {
    Apply(releases[next], pool);
    if (shadow_capable_ >= head_nodes_) fit_end = releases[next].end;
    ++next;
  }
  if (fit_end.has_value() && *fit_end != absl::InfiniteFuture()) {
    start_ = std::max(*fit_end, now);
  }
  const absl::Time horizon = start_.value_or(absl::InfiniteFuture());
  for (; next < releases.size() && releases[next].end <= horizon; ++next) {
    Apply(releases[next], pool);
  }
}

void Reservation::Apply(const Release& release, const FreePool& pool) {
  for (const auto& [node, devices] : release.devices) {
    const int before = shadow_free_[node];
    // Never above the node's size, even if the input double counts.
    shadow_free_[node] =
        std::min(before + devices, std::max(before, pool.total(node)));
    if (eligible_[node] && before < head_devices_per_node_ &&
        shadow_free_[node] >= head_devices_per_node_) {
      ++shadow_capable_;
    }
  }
}

int Reservation::Spoiled(const std::vector<int>& chosen,
                         int devices_per_node) const {
  int spoiled = 0;
  for (const int node : chosen) {
    const int free = shadow_free_[node];
    if (eligible_[node] && free >= head_devices_per_node_ &&
        free - devices_per_node < head_devices_per_node_) {
      ++spoiled;
    }
  }
  return spoiled;
}

void Reservation::Hold(const std::vector<int>& chosen, int devices_per_node) {
  shadow_capable_ -= Spoiled(chosen, devices_per_node);
  for (const int node : chosen) shadow_free_[node] -= devices_per_node;
}

// Whether the head fits once some running jobs have stopped: per node, the
// devices free now plus those of the jobs counted as stopping, and how many
// nodes that makes enough for the head. Counting a job in or out costs
// O(its nodes), so trying candidate victims one by one stays cheap.
class HeadFit {
 public:
  HeadFit(const WaitingJob& head, const FreePool& pool);

  bool fits() const { return capable_nodes_ >= head_.nodes; }
  void Add(const Release& job) { Change(job, 1); }
  void Remove(const Release& job) { Change(job, -1); }

 private:
  void Change(const Release& job, int sign);
  // Never above the node's size, even if the input double counts.
  bool Capable(int node) const {
    return pool_.memory(node) >= head_.min_device_memory_bytes &&
           std::min(devices_[node], pool_.total(node)) >=
               head_.devices_per_node;
  }

  const WaitingJob& head_;
  const FreePool& pool_;
  std::vector<int> devices_;  // per node: free now + coming free
  int capable_nodes_ = 0;
};

HeadFit::HeadFit(const WaitingJob& head, const FreePool& pool)
    : head_(head), pool_(pool), devices_(pool.size()) {
  for (int node = 0; node < pool.size(); ++node) {
    devices_[node] = pool.free(node);
    if (Capable(node)) ++capable_nodes_;
  }
}

void HeadFit::Change(const Release& job, int sign) {
  for (const auto& [node, devices] : job.devices) {
    const bool before = Capable(node);
    devices_[node] += sign * devices;
    capable_nodes_ += static_cast<int>(Capable(node)) - before;
  }
}

// One scheduling pass: considers the waiting jobs in order and builds the
// decision.
class Pass {
 public:
  explicit Pass(const SchedulerInput& input)
      : input_(input),
        pool_(input.nodes),
        quota_(input),
        waits_(input.waiting.size()) {}

  void Consider(const WaitingJob& job);
  // `by_id`: indices of input.waiting in job id order; `order`: in the
  // order they were considered.
  SchedulerDecision Finish(const std::vector<int>& by_id,
                           const std::vector<int>& order) &&;

 private:
  // A size a job may run at: an elastic job has several.
  struct JobSize {
    int nodes = 0;
    int64_t memory_bytes = 0;  // each device's need at that size
  };
  bool FitsNow(const WaitingJob& job, const JobSize& size) const;
  void Start(const WaitingJob& job, std::vector<int> chosen);
  // `sizes`: those its quota allows and the cluster can host, largest
  // first.
  void MakeHead(const WaitingJob& job, const std::vector<JobSize>& sizes);
  // Whether `job` may be chosen as a victim of `head`.
  bool IsVictimCandidate(const WaitingJob& head, const RunningJob& job) const;
  // Whether the stopping jobs and every candidate victim would make room
  // for `head`.
  bool PreemptionCouldFit(const WaitingJob& head,
                          const std::vector<Release>& releases) const;
  // Starts `job` at the largest of `sizes` (its quota allows each) that
  // fits now and backfills (gang_scheduler.h), or says why it waits.
  void Backfill(const WaitingJob& job, const std::vector<JobSize>& sizes);
  // Chooses the head's victims (see gang_scheduler.h) and makes their
  // releases end now; `releases` begin with input_.running's, in its order.
  // Returns the head's wait message: empty when it neither preempts nor
  // waits on stopping jobs only.
  std::string Preempt(const WaitingJob& head, std::vector<Release>& releases);
  // The head's user keeps room for the head while `job` runs on `devices`.
  bool LeavesHeadQuota(const WaitingJob& job, int64_t devices) const;
  std::vector<Release> Releases() const;
  void Wait(const WaitingJob& job, WaitKind kind, std::string message);
  size_t IndexOf(const WaitingJob& job) const {
    return static_cast<size_t>(&job - input_.waiting.data());
  }
  // kBehindJob, with one of the messages every job behind the head shares.
  void WaitBehind(const WaitingJob& job, const std::string& message) {
    waits_[IndexOf(job)] = {WaitKind::kBehindJob, &message};
  }

  const SchedulerInput& input_;
  FreePool pool_;
  QuotaBook quota_;
  SchedulerDecision decision_;
  std::vector<const WaitingJob*> started_;  // parallel to decision_.starts
  const WaitingJob* head_ = nullptr;
  // The head at the size it waits for (head_ itself when not elastic).
  WaitingJob head_shape_;
  std::optional<Reservation> reservation_;
  // Why jobs behind the head wait: it does not fit now; it has no time
  // limit; it would delay the head.
  std::string behind_message_;
  std::string behind_no_limit_message_;
  std::string behind_would_delay_message_;
  // Why each job not started waits; into decision_.waiting at the end.
  struct PendingWait {
    WaitKind kind = WaitKind::kResources;
    const std::string* message = nullptr;  // nullptr: started
  };
  std::vector<PendingWait> waits_;        // by index in input_.waiting
  std::deque<std::string> own_messages_;  // stable addresses
};

void Pass::Consider(const WaitingJob& job) {
  const int devices_per_node = job.devices_per_node;
  if (job.nodes < 1 || devices_per_node < 1) {
    return Wait(job, WaitKind::kNeverFits,
                "invalid size: nodes and devices_per_node must be >= 1");
  }
  // The sizes it may run at, most nodes first, less those the cluster can
  // never host and those its user's quota refuses.
  std::vector<JobSize> sizes = {{job.nodes, job.min_device_memory_bytes}};
  for (const int nodes : job.fewer_nodes) {
    if (nodes >= 1 && nodes < job.nodes) {
      sizes.push_back({nodes, job.fewer_nodes_device_memory_bytes});
    }
  }
  const JobSize smallest = sizes.back();
  sizes.erase(std::remove_if(sizes.begin(), sizes.end(),
                             [&](const JobSize& size) {
                               return pool_.NodesWithTotal(devices_per_node,
                                                           size.memory_bytes) <
                                      size.nodes;
                             }),
              sizes.end());
  if (sizes.empty()) {
    return Wait(
        job, WaitKind::kNeverFits,
        absl::StrCat(
            "never fits: needs ", Count(smallest.nodes, "node"), " with ",
            devices_per_node, " devices", MemoryNeed(smallest.memory_bytes),
            "; the cluster has ",
            pool_.NodesWithTotal(devices_per_node, smallest.memory_bytes)));
  }
  const JobSize hostable_smallest = sizes.back();
  sizes.erase(std::remove_if(sizes.begin(), sizes.end(),
                             [&](const JobSize& size) {
                               return !quota_.Allows(
                                   job.owner,
                                   int64_t{size.nodes} * devices_per_node);
                             }),
              sizes.end());
  if (sizes.empty()) {
    return Wait(job, WaitKind::kQuota,
                quota_.Explain(job.owner, int64_t{hostable_smallest.nodes} *
                                              devices_per_node));
  }
  if (head_ != nullptr) return Backfill(job, sizes);
  for (const JobSize& size : sizes) {
    if (FitsNow(job, size)) {
      return Start(
          job, pool_.Choose(size.nodes, devices_per_node, size.memory_bytes));
    }
  }
  MakeHead(job, sizes);
}

bool Pass::FitsNow(const WaitingJob& job, const JobSize& size) const {
  return pool_.NodesWithFree(job.devices_per_node, size.memory_bytes) >=
         size.nodes;
}

void Pass::Start(const WaitingJob& job, std::vector<int> chosen) {
  quota_.Add(job.owner,
             static_cast<int64_t>(chosen.size()) * job.devices_per_node);
  decision_.starts.push_back(
      {job.job_id, pool_.Take(std::move(chosen), job.devices_per_node)});
  started_.push_back(&job);
}

void Pass::MakeHead(const WaitingJob& waiting,
                    const std::vector<JobSize>& sizes) {
  head_ = &waiting;
  std::vector<Release> releases = Releases();
  const auto shape = [&waiting](const JobSize& size) {
    WaitingJob job = waiting;
    job.nodes = size.nodes;
    job.min_device_memory_bytes = size.memory_bytes;
    return job;
  };
  // The head reserves its largest size. An elastic head that preempts
  // reserves and preempts for the smallest size that preemption can make
  // fit: preempting for more would stop jobs in vain once that size fits
  // and it starts there.
  head_shape_ = shape(sizes.front());
  if (input_.preemption_priority_gap > 0 && sizes.size() > 1) {
    for (auto size = sizes.rbegin(); size != sizes.rend(); ++size) {
      WaitingJob candidate = shape(*size);
      if (PreemptionCouldFit(candidate, releases)) {
        head_shape_ = std::move(candidate);
        break;
      }
    }
  }
  const WaitingJob& job = head_shape_;
  std::string message;
  if (input_.preemption_priority_gap > 0) message = Preempt(job, releases);
  reservation_.emplace(job, pool_, std::move(releases), input_.now);
  decision_.reserved_job = job.job_id;
  decision_.reserved_start = reservation_->start();
  const std::string when =
      reservation_->start().has_value()
          ? absl::StrCat("reserved to start in ",
                         FormatWait(*reservation_->start() - input_.now))
          : "start time unknown: waits on jobs without a time limit";
  if (message.empty()) {
    message = absl::StrCat(
        "waiting for ", Count(JobDevices(job), "device"), " on ",
        Count(job.nodes, "node"), "; ", pool_.total_free(), " free (",
        Count(pool_.NodesWithFree(job.devices_per_node,
                                  job.min_device_memory_bytes),
              "node"),
        " with ", job.devices_per_node, MemoryNeed(job.min_device_memory_bytes),
        "); ", when);
    if (sizes.back().nodes < job.nodes) {
      absl::StrAppend(&message, "; elastic: as few as ",
                      Count(sizes.back().nodes, "node"), " would also do");
    }
  }
  Wait(waiting, WaitKind::kResources, std::move(message));
  behind_message_ = absl::StrCat("behind job ", job.job_id, " (", when, ")");
  behind_no_limit_message_ =
      absl::StrCat(behind_message_, "; needs a time limit to backfill");
  behind_would_delay_message_ =
      absl::StrCat(behind_message_, "; starting now would delay it");
}

void Pass::Backfill(const WaitingJob& job, const std::vector<JobSize>& sizes) {
  bool fits_now = false;
  for (const JobSize& size : sizes) {
    if (!FitsNow(job, size)) continue;
    fits_now = true;
    if (!job.time_limit.has_value()) break;
    std::vector<int> chosen =
        pool_.Choose(size.nodes, job.devices_per_node, size.memory_bytes);
    const absl::Time end = input_.now + *job.time_limit;
    const bool held = reservation_->HeldAtStart(end);
    if (!reservation_->Admits(chosen, job.devices_per_node, end) ||
        (held &&
         !LeavesHeadQuota(job, int64_t{size.nodes} * job.devices_per_node))) {
      continue;  // a smaller size may leave the head its devices
    }
    if (held) reservation_->Hold(chosen, job.devices_per_node);
    return Start(job, std::move(chosen));
  }
  if (!fits_now) return WaitBehind(job, behind_message_);
  if (!job.time_limit.has_value()) {
    return WaitBehind(job, behind_no_limit_message_);
  }
  WaitBehind(job, behind_would_delay_message_);
}

std::string Pass::Preempt(const WaitingJob& head,
                          std::vector<Release>& releases) {
  HeadFit fit(head, pool_);
  int64_t stopping_devices = 0;
  std::vector<std::string> stopping_ids;
  std::vector<int> candidates;  // indices into input_.running
  for (int i = 0; i < static_cast<int>(input_.running.size()); ++i) {
    const RunningJob& job = input_.running[i];
    if (job.stopping) {
      fit.Add(releases[i]);
      for (const auto& [node, devices] : releases[i].devices) {
        stopping_devices += devices;
      }
      if (!releases[i].devices.empty()) stopping_ids.push_back(job.job_id);
    } else if (IsVictimCandidate(head, job)) {
      candidates.push_back(i);
    }
  }
  std::sort(stopping_ids.begin(), stopping_ids.end());
  const std::string available =
      absl::StrCat(pool_.total_free(), " free",
                   stopping_devices > 0
                       ? absl::StrCat(", ", stopping_devices, " coming free")
                       : "");
  const std::string need = absl::StrCat(
      Count(JobDevices(head), "device"), " on ", Count(head.nodes, "node"),
      MemoryNeed(head.min_device_memory_bytes));
  if (fit.fits()) {
    return absl::StrCat(
        "waiting for ", need, "; ", available, " from stopping ",
        stopping_ids.size() == 1 ? "job " : "jobs ", ShortList(stopping_ids));
  }

  // Least lost first: lowest priority, then the latest started.
  std::sort(candidates.begin(), candidates.end(), [this](int a, int b) {
    const RunningJob& x = input_.running[a];
    const RunningJob& y = input_.running[b];
    return std::tie(x.priority, y.start_time, x.job_id) <
           std::tie(y.priority, x.start_time, y.job_id);
  });
  std::vector<int> added;
  for (const int candidate : candidates) {
    if (fit.fits()) break;
    fit.Add(releases[candidate]);
    added.push_back(candidate);
  }
  if (!fit.fits()) return "";
  // Greedy order may have taken victims that later ones made unnecessary
  // (or that free nothing the head can use); the last added go first, so
  // the ones the order prefers to spare are spared first.
  std::vector<int> victims;
  for (auto it = added.rbegin(); it != added.rend(); ++it) {
    fit.Remove(releases[*it]);
    if (fit.fits()) continue;
    fit.Add(releases[*it]);
    victims.push_back(*it);
  }
  std::sort(victims.begin(), victims.end(), [this](int a, int b) {
    return input_.running[a].job_id < input_.running[b].job_id;
  });

  const std::string why =
      absl::StrCat("job ", head.job_id, " (priority ", head.priority, ", user ",
                   head.owner, ") needs ", need, "; ", available);
  std::vector<std::string> named;
  for (const int victim : victims) {
    const RunningJob& job = input_.running[victim];
    releases[victim].end = input_.now;
    decision_.preemptions.push_back(
        {job.job_id, head.job_id,
         absl::StrCat(why, "; job ", job.job_id, " has priority ",
                      job.priority)});
    named.push_back(absl::StrCat(job.job_id, " (priority ", job.priority, ")"));
  }
  return absl::StrCat("preempting ", victims.size() == 1 ? "job " : "jobs ",
                      ShortList(named), " for ", need, "; starts once ",
                      victims.size() == 1 ? "it has" : "they have",
                      " checkpointed and stopped");
}

bool Pass::IsVictimCandidate(const WaitingJob& head,
                             const RunningJob& job) const {
  return !job.stopping &&
         int64_t{job.priority} <=
             int64_t{head.priority} - input_.preemption_priority_gap &&
         job.preemptible_from <= input_.now;
}

bool Pass::PreemptionCouldFit(const WaitingJob& head,
                              const std::vector<Release>& releases) const {
  HeadFit fit(head, pool_);
  for (size_t i = 0; i < input_.running.size(); ++i) {
    const RunningJob& job = input_.running[i];
    if (job.stopping || IsVictimCandidate(head, job)) fit.Add(releases[i]);
  }
  return fit.fits();
}

bool Pass::LeavesHeadQuota(const WaitingJob& job, int64_t devices) const {
  if (job.owner != head_->owner) return true;
  const int64_t limit = quota_.Limit(job.owner);
  return limit == 0 ||
         quota_.InUse(job.owner) + devices + JobDevices(head_shape_) <= limit;
}

// The running jobs and the jobs started so far in this pass.
std::vector<Release> Pass::Releases() const {
  std::vector<Release> releases;
  releases.reserve(input_.running.size() + started_.size());
  for (const RunningJob& job : input_.running) {
    // A stopping job's devices come free any moment now, whatever its time
    // limit said.
    Release release{job.stopping
                        ? input_.now
                        : job.expected_end.value_or(absl::InfiniteFuture()),
                    job.job_id,
                    {}};
    for (const NodeDevices& devices : job.allocation) {
      const int node = pool_.IndexOf(devices.node);
      if (node < 0) continue;  // not schedulable: frees nothing usable
      release.devices.emplace_back(
          node, static_cast<int>(devices.device_indices.size()));
    }
    releases.push_back(std::move(release));
  }
  for (size_t i = 0; i < started_.size(); ++i) {
    const WaitingJob& job = *started_[i];
    Release release{job.time_limit.has_value() ? input_.now + *job.time_limit
                                               : absl::InfiniteFuture(),
                    job.job_id,
                    {}};
    for (const NodeDevices& devices : decision_.starts[i].allocation) {
      release.devices.emplace_back(pool_.IndexOf(devices.node),
                                   job.devices_per_node);
    }
    releases.push_back(std::move(release));
  }
  return releases;
}

void Pass::Wait(const WaitingJob& job, WaitKind kind, std::string message) {
  own_messages_.push_back(std::move(message));
  waits_[IndexOf(job)] = {kind, &own_messages_.back()};
}

SchedulerDecision Pass::Finish(const std::vector<int>& by_id,
                               const std::vector<int>& order) && {
  if (!input_.explain_waiting) return std::move(decision_);
  std::vector<int> positions(input_.waiting.size(), 0);
  int waiting = 0;
  for (const int index : order) {
    if (waits_[index].message != nullptr) positions[index] = ++waiting;
  }
  // Inserting in key order with an end hint is amortised O(1) per job.
  for (const int index : by_id) {
    const PendingWait& wait = waits_[index];
    if (wait.message == nullptr) continue;
    decision_.waiting.emplace_hint(
        decision_.waiting.end(), input_.waiting[index].job_id,
        WaitReason{
            wait.kind,
            wait.kind == WaitKind::kBehindJob ? head_->job_id : std::string(),
            *wait.message, positions[index]});
  }
  return std::move(decision_);
}

// Indices of `jobs` in job id order. Ids share their first bytes ("j-"),
// so the bytes right after the common prefix are compared first as one
// big-endian integer; only ties compare whole ids.
std::vector<int> IdOrder(const std::vector<WaitingJob>& jobs) {
  size_t common = jobs.empty() ? 0 : jobs[0].job_id.size();
  for (const WaitingJob& job : jobs) {
    const std::string& first = jobs[0].job_id;
    common = std::min(common, job.job_id.size());
    common = static_cast<size_t>(
        std::mismatch(first.begin(), first.begin() + common, job.job_id.begin())
            .first -
        first.begin());
  }
  struct Entry {
    uint64_t key;
    int index;
  };
  std::vector<Entry> entries;
  entries.reserve(jobs.size());
  for (int i = 0; i < static_cast<int>(jobs.size()); ++i) {
    const std::string& id = jobs[i].job_id;
    uint64_t key = 0;
    for (size_t k = common; k < common + 8; ++k) {
      key =
          (key << 8) | (k < id.size() ? static_cast<unsigned char>(id[k]) : 0);
    }
    entries.push_back({key, i});
  }
  std::sort(entries.begin(), entries.end(),
            [&jobs](const Entry& a, const Entry& b) {
              if (a.key != b.key) return a.key < b.key;
              return jobs[a.index].job_id < jobs[b.index].job_id;
            });
  std::vector<int> order;
  order.reserve(entries.size());
  for (const Entry& entry : entries) order.push_back(entry.index);
  return order;
}

// Indices of `jobs` in scheduling order: priority desc, use per share asc,
// submit time asc, submission order asc, job id asc (`by_id` gives the id
// order).
std::vector<int> SchedulingOrder(const std::vector<WaitingJob>& jobs,
                                 const std::vector<int>& by_id) {
  // Compact keys sort faster than jobs reached through pointers.
  struct Key {
    int priority;
    int id_rank;
    double use_per_share;
    absl::Time submit_time;
    int64_t submission_order;
  };
  std::vector<Key> keys(jobs.size());
  for (int rank = 0; rank < static_cast<int>(by_id.size()); ++rank) {
    const WaitingJob& job = jobs[by_id[rank]];
    keys[rank] = {job.priority, rank, job.use_per_share, job.submit_time,
                  job.submission_order};
  }
  std::sort(keys.begin(), keys.end(), [](const Key& a, const Key& b) {
    if (a.priority != b.priority) return a.priority > b.priority;
    if (a.use_per_share != b.use_per_share) {
      return a.use_per_share < b.use_per_share;
    }
    if (a.submit_time != b.submit_time) return a.submit_time < b.submit_time;
    if (a.submission_order != b.submission_order) {
      return a.submission_order < b.submission_order;
    }
    return a.id_rank < b.id_rank;
  });
  std::vector<int> order;
  order.reserve(keys.size());
  for (const Key& key : keys) order.push_back(by_id[key.id_rank]);
  return order;
}

}  // namespace

SchedulerDecision Schedule(const SchedulerInput& input) {
  const std::vector<int> by_id = IdOrder(input.waiting);
  const std::vector<int> order = SchedulingOrder(input.waiting, by_id);
  Pass pass(input);
  for (const int index : order) pass.Consider(input.waiting[index]);
  return std::move(pass).Finish(by_id, order);
}

}  // namespace plateau::daemon
