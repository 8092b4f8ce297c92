#include "engine/parallel/gloo_communicator.h"

#include <signal.h>

#include <chrono>
#include <cstring>
#include <exception>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/status_macros.h"
#include "engine/parallel/communicator_checks.h"
#include "gloo/allgather.h"
#include "gloo/allreduce.h"
#include "gloo/alltoallv.h"
#include "gloo/barrier.h"
#include "gloo/common/error.h"
#include "gloo/common/logging.h"
#include "gloo/context.h"
#include "gloo/math.h"
#include "gloo/rendezvous/context.h"
#include "gloo/rendezvous/prefix_store.h"
#include "gloo/transport/tcp/attr.h"
#include "gloo/transport/tcp/device.h"
#include "gloo/transport/unbound_buffer.h"
#include "gloo/types.h"

namespace plateau::engine {
namespace {

// Gloo's collectives use slot prefixes 0x01..0x08 (gloo/types.h); ours are
// far from them so that a tag can never address another op's messages.
constexpr uint8_t kReduceScatterSlotPrefix = 0x40;
constexpr uint8_t kPointToPointSlotPrefix = 0x41;

using ReduceFunction = void (*)(void*, const void*, const void*, size_t);

bool IsTimeoutMessage(const std::string& message) {
  const std::string lower = absl::AsciiStrToLower(message);
  return absl::StrContains(lower, "timed out") ||
         absl::StrContains(lower, "timeout");
}

// Gloo's errors: a timeout anywhere (store wait, socket, application wait)
// is DEADLINE_EXCEEDED; another I/O error (a peer closed its connection) is
// UNAVAILABLE; a failed Gloo assertion or anything else is INTERNAL.
absl::Status GlooErrorStatus(bool io_error, const std::string& context,
                             const std::string& message) {
  const std::string text = absl::StrCat(context, ": ", message);
  if (IsTimeoutMessage(message)) return absl::DeadlineExceededError(text);
  if (io_error) return absl::UnavailableError(text);
  return absl::InternalError(text);
}

std::string DescribeCall(absl::string_view op, const std::string& group_name,
                         int rank, int size, int peer) {
  std::string text = absl::StrCat(op, " on group '", group_name, "' (rank ",
                                  rank, " of ", size);
  if (peer >= 0) absl::StrAppend(&text, ", peer rank ", peer);
  absl::StrAppend(&text, ")");
  return text;
}

// Runs `body` (returning absl::Status) and turns whatever Gloo throws into a
// Status.
template <typename Body>
absl::Status CatchGloo(const std::string& context, Body&& body) {
  try {
    return body();
  } catch (const gloo::IoException& e) {
    return GlooErrorStatus(/*io_error=*/true, context, e.what());
  } catch (const gloo::EnforceNotMet& e) {
    return GlooErrorStatus(/*io_error=*/false, context, e.what());
  } catch (const std::exception& e) {
    return GlooErrorStatus(/*io_error=*/false, context, e.what());
  } catch (...) {
    return GlooErrorStatus(/*io_error=*/false, context,
                           "unknown exception from Gloo");
  }
}

// Gloo writes to its sockets without MSG_NOSIGNAL: when a peer closes its
// connections (as Gloo does on a timeout) the next write would kill this
// process with SIGPIPE instead of failing with EPIPE. Ignore SIGPIPE, unless
// the program installed its own handler.
void IgnoreSigpipeOnce() {
  static const bool done = [] {
    struct sigaction current = {};
    if (sigaction(SIGPIPE, nullptr, &current) == 0 &&
        current.sa_handler == SIG_DFL) {
      signal(SIGPIPE, SIG_IGN);
    }
    return true;
  }();
  (void)done;
}

// An unbound buffer needs a valid address even for zero bytes.
void* NonNull(void* data) {
  static char empty;
  return data != nullptr ? data : &empty;
}

}  // namespace

absl::StatusOr<std::unique_ptr<GlooCommunicator>> GlooCommunicator::Create(
    std::shared_ptr<gloo::rendezvous::Store> store,
    const std::string& group_name, int rank, int size, absl::Duration timeout,
    const std::string& interface_address) {
  if (store == nullptr) return absl::InvalidArgumentError("no store");
  RETURN_IF_ERROR(CheckGroupArguments(group_name, rank, size, timeout));
  if (size == 1) {
    return std::unique_ptr<GlooCommunicator>(
        new GlooCommunicator(group_name, rank, size, timeout, nullptr));
  }
  IgnoreSigpipeOnce();
  std::shared_ptr<gloo::Context> context;
  const absl::Status status = CatchGloo(
      absl::StrCat(DescribeCall("connect", group_name, rank, size, -1), " on ",
                   interface_address),
      [&] {
        gloo::transport::tcp::attr attr;
        attr.hostname = interface_address;
        std::shared_ptr<gloo::transport::Device> device =
            gloo::transport::tcp::CreateDevice(attr);
        gloo::rendezvous::PrefixStore prefixed(group_name, *store);
        auto mesh = std::make_shared<gloo::rendezvous::Context>(rank, size);
        mesh->setTimeout(absl::ToChronoMilliseconds(timeout));
        mesh->connectFullMesh(prefixed, device);
        context = std::move(mesh);
        return absl::OkStatus();
      });
  if (!status.ok()) return status;
  return std::unique_ptr<GlooCommunicator>(new GlooCommunicator(
      group_name, rank, size, timeout, std::move(context)));
}

GlooCommunicator::GlooCommunicator(std::string group_name, int rank, int size,
                                   absl::Duration timeout,
                                   std::shared_ptr<gloo::Context> context)
    : group_name_(std::move(group_name)),
      rank_(rank),
      size_(size),
      timeout_(timeout),
      context_(std::move(context)) {}

GlooCommunicator::~GlooCommunicator() = default;

template <typename Body>
absl::Status GlooCommunicator::Guarded(absl::string_view op, int peer,
                                       Body&& body) {
  const std::string context = DescribeCall(op, group_name_, rank_, size_, peer);
  if (!broken_.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        context,
        ": the group is unusable after an earlier error: ", broken_.message()));
  }
  absl::Status status = CatchGloo(context, std::forward<Body>(body));
  // Arguments are checked before; a failure here is the transport's, and it
  // can leave messages of this op in flight on some connections (Gloo closes
  // them all on a timeout): nothing later can be trusted.
  if (!status.ok()) broken_ = status;
  return status;
}

absl::Status GlooCommunicator::CheckPeer(absl::string_view op, int peer) const {
  if (peer < 0 || peer >= size_ || peer == rank_) {
    return absl::InvalidArgumentError(
        absl::StrCat(DescribeCall(op, group_name_, rank_, size_, -1),
                     ": bad peer rank ", peer));
  }
  return absl::OkStatus();
}

template <typename T>
absl::Status GlooCommunicator::AllReduceSumImpl(const char* op, T* data,
                                                int64_t count) {
  RETURN_IF_ERROR(CheckBuffer(op, data, count, "elements"));
  // Gloo rejects empty reductions; every rank sees the same count.
  if (count == 0 || size_ == 1) return absl::OkStatus();
  return Guarded(op, -1, [&] {
    gloo::AllreduceOptions options(context_);
    options.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
    options.setOutput(data, static_cast<size_t>(count));
    options.setReduceFunction(static_cast<ReduceFunction>(&gloo::sum<T>));
    options.setTag(NextCollectiveTag());
    options.setTimeout(absl::ToChronoMilliseconds(timeout_));
    gloo::allreduce(options);
    return absl::OkStatus();
  });
}

absl::Status GlooCommunicator::AllReduceSum(float* data, int64_t count) {
  return AllReduceSumImpl("AllReduceSum(float)", data, count);
}

absl::Status GlooCommunicator::AllReduceSum(double* data, int64_t count) {
  return AllReduceSumImpl("AllReduceSum(double)", data, count);
}

absl::Status GlooCommunicator::ReduceScatterSum(const float* input,
                                                float* output,
                                                int64_t count_per_rank) {
  RETURN_IF_ERROR(
      CheckPerRankBuffers("ReduceScatterSum", input, output, count_per_rank));
  if (count_per_rank == 0) return absl::OkStatus();
  if (size_ == 1) {
    std::memmove(output, input, count_per_rank * sizeof(float));
    return absl::OkStatus();
  }
  return Guarded("ReduceScatterSum", -1, [&] {
    return RingReduceScatter(input, output, count_per_rank);
  });
}

// Ring reduce-scatter. At step s (0 .. size-2) rank r sends its partial sum
// of block (r-1-s) to rank r+1 and receives rank r-1's partial sum of block
// (r-2-s), to which it adds its own input. Block b thus starts at rank b+1
// and ends, complete, at rank b after size-1 steps, always summed in the same
// order. Scratch: two blocks; traffic: (size-1) blocks each way.
absl::Status GlooCommunicator::RingReduceScatter(const float* input,
                                                 float* output,
                                                 int64_t count_per_rank) {
  const size_t block_bytes = count_per_rank * sizeof(float);
  auto block = [&](int index) {
    return input + ((index % size_ + size_) % size_) * count_per_rank;
  };
  std::vector<float> partial(block(rank_ - 1),
                             block(rank_ - 1) + count_per_rank);
  std::vector<float> received(count_per_rank);
  std::unique_ptr<gloo::transport::UnboundBuffer> send_buffer =
      context_->createUnboundBuffer(partial.data(), block_bytes);
  std::unique_ptr<gloo::transport::UnboundBuffer> recv_buffer =
      context_->createUnboundBuffer(received.data(), block_bytes);
  const uint64_t slot =
      gloo::Slot::build(kReduceScatterSlotPrefix, NextCollectiveTag());
  const int next = (rank_ + 1) % size_;
  const int previous = (rank_ + size_ - 1) % size_;
  const std::chrono::milliseconds timeout =
      absl::ToChronoMilliseconds(timeout_);
  for (int step = 0; step < size_ - 1; ++step) {
    recv_buffer->recv(previous, slot);
    send_buffer->send(next, slot);
    if (!send_buffer->waitSend(timeout) || !recv_buffer->waitRecv(timeout)) {
      return absl::AbortedError("transfer aborted");
    }
    const float* own = block(rank_ - 2 - step);
    float* sum = step == size_ - 2 ? output : partial.data();
    for (int64_t i = 0; i < count_per_rank; ++i) sum[i] = received[i] + own[i];
  }
  return absl::OkStatus();
}

absl::Status GlooCommunicator::AllGather(const float* input, float* output,
                                         int64_t count_per_rank) {
  return AllGatherImpl(input, output, count_per_rank);
}

absl::Status GlooCommunicator::AllGather(const uint16_t* input,
                                         uint16_t* output,
                                         int64_t count_per_rank) {
  return AllGatherImpl(input, output, count_per_rank);
}

template <typename T>
absl::Status GlooCommunicator::AllGatherImpl(const T* input, T* output,
                                             int64_t count_per_rank) {
  RETURN_IF_ERROR(
      CheckPerRankBuffers("AllGather", input, output, count_per_rank));
  if (count_per_rank == 0) return absl::OkStatus();
  T* own_block = output + rank_ * count_per_rank;
  if (size_ == 1) {
    std::memmove(own_block, input, count_per_rank * sizeof(T));
    return absl::OkStatus();
  }
  return Guarded("AllGather", -1, [&] {
    gloo::AllgatherOptions options(context_);
    // Without an input Gloo gathers in place around output's own block.
    if (input != own_block) {
      options.setInput(const_cast<T*>(input),
                       static_cast<size_t>(count_per_rank));
    }
    options.setOutput(output, static_cast<size_t>(count_per_rank * size_));
    options.setTag(NextCollectiveTag());
    options.setTimeout(absl::ToChronoMilliseconds(timeout_));
    gloo::allgather(options);
    return absl::OkStatus();
  });
}

absl::Status GlooCommunicator::AllToAllV(const void* send,
                                         absl::Span<const int64_t> send_bytes,
                                         void* receive,
                                         absl::Span<const int64_t> recv_bytes) {
  RETURN_IF_ERROR(
      CheckAllToAllV(send, send_bytes, receive, recv_bytes, rank_, size_));
  if (size_ == 1) {
    if (send_bytes[0] > 0) std::memmove(receive, send, send_bytes[0]);
    return absl::OkStatus();
  }
  return Guarded("AllToAllV", -1, [&] {
    gloo::AlltoallvOptions options(context_);
    options.setInput(
        static_cast<char*>(NonNull(const_cast<void*>(send))),
        std::vector<int64_t>(send_bytes.begin(), send_bytes.end()));
    options.setOutput(
        static_cast<char*>(NonNull(receive)),
        std::vector<int64_t>(recv_bytes.begin(), recv_bytes.end()));
    options.setTag(NextCollectiveTag());
    options.setTimeout(absl::ToChronoMilliseconds(timeout_));
    gloo::alltoallv(options);
    return absl::OkStatus();
  });
}

absl::Status GlooCommunicator::Send(const void* data, int64_t bytes, int peer,
                                    uint32_t tag) {
  RETURN_IF_ERROR(CheckPeer("Send", peer));
  RETURN_IF_ERROR(CheckBuffer("Send", data, bytes, "bytes"));
  return Guarded("Send", peer, [&] {
    std::unique_ptr<gloo::transport::UnboundBuffer> buffer =
        context_->createUnboundBuffer(NonNull(const_cast<void*>(data)), bytes);
    buffer->send(peer, gloo::Slot::build(kPointToPointSlotPrefix, tag));
    if (!buffer->waitSend(absl::ToChronoMilliseconds(timeout_))) {
      return absl::AbortedError(absl::StrCat("send of tag ", tag, " aborted"));
    }
    return absl::OkStatus();
  });
}

absl::Status GlooCommunicator::Receive(void* data, int64_t bytes, int peer,
                                       uint32_t tag) {
  RETURN_IF_ERROR(CheckPeer("Receive", peer));
  RETURN_IF_ERROR(CheckBuffer("Receive", data, bytes, "bytes"));
  return Guarded("Receive", peer, [&] {
    std::unique_ptr<gloo::transport::UnboundBuffer> buffer =
        context_->createUnboundBuffer(NonNull(data), bytes);
    buffer->recv(peer, gloo::Slot::build(kPointToPointSlotPrefix, tag));
    if (!buffer->waitRecv(absl::ToChronoMilliseconds(timeout_))) {
      return absl::AbortedError(
          absl::StrCat("receive of tag ", tag, " aborted"));
    }
    return absl::OkStatus();
  });
}

absl::Status GlooCommunicator::SendAndReceive(
    const void* send_data, int64_t send_bytes, int send_peer, uint32_t send_tag,
    void* recv_data, int64_t recv_bytes, int recv_peer, uint32_t recv_tag) {
  const std::string op = absl::StrCat("SendAndReceive(to rank ", send_peer,
                                      ", from rank ", recv_peer, ")");
  RETURN_IF_ERROR(CheckPeer(op, send_peer));
  RETURN_IF_ERROR(CheckPeer(op, recv_peer));
  RETURN_IF_ERROR(
      CheckBuffer(absl::StrCat(op, " (send)"), send_data, send_bytes, "bytes"));
  RETURN_IF_ERROR(CheckBuffer(absl::StrCat(op, " (receive)"), recv_data,
                              recv_bytes, "bytes"));
  return Guarded(op, -1, [&] {
    std::unique_ptr<gloo::transport::UnboundBuffer> send_buffer =
        context_->createUnboundBuffer(NonNull(const_cast<void*>(send_data)),
                                      send_bytes);
    std::unique_ptr<gloo::transport::UnboundBuffer> recv_buffer =
        context_->createUnboundBuffer(NonNull(recv_data), recv_bytes);
    // Both posted before either wait: neither side's send waits on the
    // other's receive.
    recv_buffer->recv(recv_peer,
                      gloo::Slot::build(kPointToPointSlotPrefix, recv_tag));
    send_buffer->send(send_peer,
                      gloo::Slot::build(kPointToPointSlotPrefix, send_tag));
    const std::chrono::milliseconds timeout =
        absl::ToChronoMilliseconds(timeout_);
    if (!send_buffer->waitSend(timeout) || !recv_buffer->waitRecv(timeout)) {
      return absl::AbortedError("transfer aborted");
    }
    return absl::OkStatus();
  });
}

absl::Status GlooCommunicator::Barrier() {
  if (size_ == 1) return absl::OkStatus();
  return Guarded("Barrier", -1, [&] {
    gloo::BarrierOptions options(context_);
    options.setTag(NextCollectiveTag());
    options.setTimeout(absl::ToChronoMilliseconds(timeout_));
    gloo::barrier(options);
    return absl::OkStatus();
  });
}

GroupConnector GlooGroupConnector(
    std::shared_ptr<gloo::rendezvous::Store> store, absl::Duration timeout,
    const std::string& interface_address) {
  return [store = std::move(store), timeout, interface_address](
             const std::string& group_name, int group_rank,
             int group_size) -> absl::StatusOr<std::unique_ptr<Communicator>> {
    ASSIGN_OR_RETURN(
        std::unique_ptr<GlooCommunicator> communicator,
        GlooCommunicator::Create(store, group_name, group_rank, group_size,
                                 timeout, interface_address));
    return std::unique_ptr<Communicator>(std::move(communicator));
  };
}

}  // namespace plateau::engine
