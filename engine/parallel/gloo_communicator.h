// The CPU backend's Communicator: Gloo over TCP, one full mesh of
// connections per group. Rendezvous goes through a gloo::rendezvous::Store
// (plateaud's KV, a FileStore for standalone runs, a HashStore in tests)
// with every key prefixed by the group's name, so several groups can share
// one store.
//
// How each op maps onto Gloo, and why the sums are deterministic:
// - AllReduceSum: gloo::allreduce, ring algorithm. Every element's sum is
//   accumulated along the ring in an order fixed by the element count and the
//   group size, then copied to every rank: bitwise the same on every rank and
//   every run.
// - ReduceScatterSum: a ring reduce-scatter of our own on Gloo's unbound
//   buffers (Gloo's ReduceScatterHalvingDoubling is an old-style algorithm
//   that reduces in place over the whole input). Block b is summed in the
//   fixed order rank b+1, b+2, ..., b (mod size).
// - AllGather: gloo::allgather (ring). AllToAllV: gloo::alltoallv over bytes.
//   Barrier: gloo::barrier. Send/Receive: unbound buffers on a slot derived
//   from the tag. A Send returns once the peer has posted the matching
//   Receive, so two ranks that both send first wait out the timeout;
//   SendAndReceive posts both before waiting.
//   Message sizes must match on both sides: Gloo checks them on its I/O
//   thread and a mismatch terminates the process.
// Every op waits at most the group's timeout: a peer that stalls gives
// DEADLINE_EXCEEDED, one whose connection breaks gives UNAVAILABLE. After
// either, the group is unusable (Gloo has torn its connections down) and
// every later call returns FAILED_PRECONDITION naming the first error.
//
// A group of size 1 opens no connection; its collectives are local copies.
// Creating a larger group sets SIGPIPE to SIG_IGN for the process (unless the
// program handles it): Gloo writes to sockets without MSG_NOSIGNAL, and a
// peer that closes its connections must give an error, not kill this rank.
// Not thread-safe: one call at a time per communicator.
#ifndef PLATEAU_ENGINE_PARALLEL_GLOO_COMMUNICATOR_H_
#define PLATEAU_ENGINE_PARALLEL_GLOO_COMMUNICATOR_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "engine/parallel/communicator.h"
#include "engine/parallel/rank_groups.h"
#include "gloo/rendezvous/store.h"

namespace gloo {
class Context;
}  // namespace gloo

namespace plateau::engine {

class GlooCommunicator : public Communicator {
 public:
  // Connects rank `rank` of a group of `size` ranks: every rank of the group
  // must call this with the same group_name and size. The store's keys are
  // prefixed with group_name; a store must not be reused across attempts of a
  // job (FileStore refuses keys that already exist). The TCP listener binds to
  // interface_address. Returns DEADLINE_EXCEEDED when a member does not show
  // up within `timeout`, INVALID_ARGUMENT for a bad rank, size or timeout.
  static absl::StatusOr<std::unique_ptr<GlooCommunicator>> Create(
      std::shared_ptr<gloo::rendezvous::Store> store,
      const std::string& group_name, int rank, int size, absl::Duration timeout,
      const std::string& interface_address = "127.0.0.1");

  ~GlooCommunicator() override;
  GlooCommunicator(const GlooCommunicator&) = delete;
  GlooCommunicator& operator=(const GlooCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const std::string& group_name() const { return group_name_; }

  absl::Status AllReduceSum(float* data, int64_t count) override;
  absl::Status AllReduceSum(double* data, int64_t count) override;
  absl::Status ReduceScatterSum(const float* input, float* output,
                                int64_t count_per_rank) override;
  absl::Status AllGather(const float* input, float* output,
                         int64_t count_per_rank) override;
  absl::Status AllGather(const uint16_t* input, uint16_t* output,
                         int64_t count_per_rank) override;
  absl::Status AllToAllV(const void* send, absl::Span<const int64_t> send_bytes,
                         void* receive,
                         absl::Span<const int64_t> recv_bytes) override;
  absl::Status Send(const void* data, int64_t bytes, int peer,
                    uint32_t tag) override;
  absl::Status Receive(void* data, int64_t bytes, int peer,
                       uint32_t tag) override;
  absl::Status SendAndReceive(const void* send_data, int64_t send_bytes,
                              int send_peer, uint32_t send_tag, void* recv_data,
                              int64_t recv_bytes, int recv_peer,
                              uint32_t recv_tag) override;
  absl::Status Barrier() override;

 private:
  GlooCommunicator(std::string group_name, int rank, int size,
                   absl::Duration timeout,
                   std::shared_ptr<gloo::Context> context);

  template <typename T>
  absl::Status AllGatherImpl(const T* input, T* output, int64_t count_per_rank);
  template <typename T>
  absl::Status AllReduceSumImpl(const char* op, T* data, int64_t count);
  absl::Status RingReduceScatter(const float* input, float* output,
                                 int64_t count_per_rank);
  absl::Status CheckPeer(absl::string_view op, int peer) const;
  // Runs `body`, turning a Gloo exception into a Status naming `op`, the
  // group and `peer` (-1: unknown). Transport errors break the group.
  template <typename Body>
  absl::Status Guarded(absl::string_view op, int peer, Body&& body);
  // Tag of the next collective; every rank calls collectives in the same
  // order, so the tags agree.
  uint32_t NextCollectiveTag() { return next_collective_tag_++; }

  const std::string group_name_;
  const int rank_;
  const int size_;
  const absl::Duration timeout_;
  std::shared_ptr<gloo::Context> context_;  // Null when size_ == 1.
  uint32_t next_collective_tag_ = 0;
  absl::Status broken_;  // The first transport error; OK while usable.
};

// Joins each group of ConnectRankGroups as a GlooCommunicator through
// `store` (which must be specific to this job attempt); `timeout` is each
// group's timeout, interface_address this rank's TCP address.
GroupConnector GlooGroupConnector(
    std::shared_ptr<gloo::rendezvous::Store> store, absl::Duration timeout,
    const std::string& interface_address = "127.0.0.1");

}  // namespace plateau::engine

#endif  // PLATEAU_ENGINE_PARALLEL_GLOO_COMMUNICATOR_H_
