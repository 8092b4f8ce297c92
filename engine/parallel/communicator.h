// Collective and point-to-point communication among the ranks of a group:
// Gloo over TCP on the CPU backend, NCCL on the CUDA backend. Buffers are the
// backend's device memory, except for the double all-reduce (host). Every call
// is blocking and collective calls must be made by every rank of the group in
// the same order. A peer that dies or stalls turns into DEADLINE_EXCEEDED or
// UNAVAILABLE after the group's timeout, never a hang. After any error but
// INVALID_ARGUMENT the group is unusable (later calls return
// FAILED_PRECONDITION): connect a new one. Not thread-safe: one call at a time
// per communicator.
//
// Reductions are deterministic for a given group size: the same inputs give
// bitwise the same outputs on every run.
#ifndef PLATEAU_ENGINE_PARALLEL_COMMUNICATOR_H_
#define PLATEAU_ENGINE_PARALLEL_COMMUNICATOR_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace plateau::engine {

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;

  // data[i] = sum over ranks of data[i].
  virtual absl::Status AllReduceSum(float* data, int64_t count) = 0;
  // The same for doubles in host memory (small reductions: statistics,
  // counts, norms, agreement between ranks; a device backend stages them).
  virtual absl::Status AllReduceSum(double* data, int64_t count) = 0;
  // output (count_per_rank) = this rank's block of the sum over ranks of
  // input (size() * count_per_rank); blocks in rank order.
  virtual absl::Status ReduceScatterSum(const float* input, float* output,
                                        int64_t count_per_rank) = 0;
  // output (size() * count_per_rank) = every rank's input, in rank order.
  virtual absl::Status AllGather(const float* input, float* output,
                                 int64_t count_per_rank) = 0;
  // The same for bf16 values (bf16 weight storage's product weights).
  virtual absl::Status AllGather(const uint16_t* input, uint16_t* output,
                                 int64_t count_per_rank) = 0;
  // Sends send_bytes[r] bytes (consecutive in `send`, rank order) to rank r
  // and receives recv_bytes[r] bytes from rank r into `receive` (consecutive,
  // rank order). Both sides must agree on every size.
  virtual absl::Status AllToAllV(const void* send,
                                 absl::Span<const int64_t> send_bytes,
                                 void* receive,
                                 absl::Span<const int64_t> recv_bytes) = 0;
  // Point to point; `tag` tells apart messages between the same two ranks.
  // REQUIRES: peer != rank(). Send returns once the peer has received, so
  // two ranks must not both send to each other first; receives between two
  // ranks must come in the order of the sends.
  virtual absl::Status Send(const void* data, int64_t bytes, int peer,
                            uint32_t tag) = 0;
  virtual absl::Status Receive(void* data, int64_t bytes, int peer,
                               uint32_t tag) = 0;
  // Send to send_peer and Receive from recv_peer at once, as two pipeline
  // neighbours exchanging activations and gradients must (two plain Sends
  // facing each other would both wait). Either side may be matched by plain
  // Send/Receive calls of the peer.
  virtual absl::Status SendAndReceive(const void* send_data, int64_t send_bytes,
                                      int send_peer, uint32_t send_tag,
                                      void* recv_data, int64_t recv_bytes,
                                      int recv_peer, uint32_t recv_tag) = 0;
  virtual absl::Status Barrier() = 0;
};

}  // namespace plateau::engine

#endif  // PLATEAU_ENGINE_PARALLEL_COMMUNICATOR_H_
