// The CUDA backend's Communicator: NCCL, one communicator per group, one
// CUDA device per rank. Buffers are device memory on that device. Ops are
// issued on the legacy default stream and the call returns when they have
// completed there, so the caller's earlier work on that stream is ordered
// before them and its later work after.
//
// Rendezvous: rank 0 puts ncclGetUniqueId's bytes under
// "<group_name>/nccl_id" in the store; the others wait for that key.
//
// No call hangs: the communicator is created non-blocking and every wait
// (init, enqueue, completion) polls NCCL's asynchronous error and the CUDA
// stream against the group's timeout. A timeout gives DEADLINE_EXCEEDED, a
// peer or network failure UNAVAILABLE; either aborts the NCCL communicator,
// and every later call returns FAILED_PRECONDITION.
//
// Mapping: AllReduceSum -> ncclAllReduce; ReduceScatterSum ->
// ncclReduceScatter; AllGather -> ncclAllGather; AllToAllV -> one
// ncclGroupStart/ncclSend/ncclRecv/ncclGroupEnd (zero-byte pairs skipped on
// both sides, the own block copied on the device); Barrier -> a one-float
// ncclAllReduce. Send/Receive -> ncclSend/ncclRecv of a 4-byte tag header
// then the data in one group: NCCL orders messages per peer, so the tag is
// only checked (INTERNAL on a mismatch). Sends block until the peer receives;
// SendAndReceive puts both directions in one group.
// NCCL's reductions are deterministic for a fixed group, message size and
// NCCL configuration (same algorithm and protocol choice on every run).
//
// Not thread-safe: one call at a time per communicator.
#ifndef PLATEAU_ENGINE_PARALLEL_NCCL_COMMUNICATOR_H_
#define PLATEAU_ENGINE_PARALLEL_NCCL_COMMUNICATOR_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "engine/parallel/communicator.h"
#include "gloo/rendezvous/store.h"

struct ncclComm;  // NCCL's opaque communicator (ncclComm_t).

namespace plateau::engine {

class NcclCommunicator : public Communicator {
 public:
  // Joins rank `rank` of a group of `size` ranks on CUDA device
  // `cuda_device`. FAILED_PRECONDITION "no CUDA device: ..." where there is
  // none; DEADLINE_EXCEEDED when the group is not complete within `timeout`.
  static absl::StatusOr<std::unique_ptr<NcclCommunicator>> Create(
      std::shared_ptr<gloo::rendezvous::Store> store,
      const std::string& group_name, int rank, int size, absl::Duration timeout,
      int cuda_device = 0);

  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }

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
  NcclCommunicator(std::string group_name, int rank, int size,
                   absl::Duration timeout, int cuda_device, ncclComm* comm,
                   uint32_t* device_scratch);

  // Of float32 values, or of bf16 ones.
  absl::Status AllGatherImpl(const void* input, void* output,
                             int64_t count_per_rank, bool bf16_values);
  // Fails fast on a broken group and makes the group's device current.
  absl::Status Begin(const char* op, int peer) const;
  // Waits until an NCCL call's work is enqueued, then until the stream is
  // done. On an error, aborts the communicator and remembers the error.
  absl::Status Finish(int nccl_result, const char* op, int peer);
  // The same, running `after_enqueue` (stream work of the op) in between.
  absl::Status Finish(int nccl_result, const char* op, int peer,
                      absl::FunctionRef<absl::Status()> after_enqueue);
  absl::Status AllReduceImpl(const char* op, void* data, int64_t count,
                             int nccl_type);
  absl::Status CheckPeer(const char* op, int peer) const;
  std::string Describe(const char* op, int peer) const;
  // INTERNAL unless the tag header last received is `expected`.
  absl::Status CheckReceivedTag(uint32_t expected, const std::string& what);

  const std::string group_name_;
  const int rank_;
  const int size_;
  const absl::Duration timeout_;
  const int cuda_device_;
  ncclComm* comm_;  // Null once aborted.
  // Device words: [0] tag sent, [1] tag received, [2] barrier float.
  uint32_t* device_scratch_;
  absl::Status broken_;  // The first communication error; OK while usable.
};

}  // namespace plateau::engine

#endif  // PLATEAU_ENGINE_PARALLEL_NCCL_COMMUNICATOR_H_
