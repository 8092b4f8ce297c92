#include "engine/parallel/nccl_communicator.h"

#include <cuda_runtime_api.h>

#include <cstring>
#include <exception>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "engine/parallel/communicator_checks.h"
#include "engine/parallel/nccl_library.h"
#include "kernels/cuda/device.h"

namespace plateau::engine {
namespace {

using kernels::cuda::CudaStatus;

// REQUIRES: LoadNccl() succeeded (Create checks it before anything else).
const NcclLibrary& Nccl() { return **LoadNccl(); }

// Polling interval of every wait: short next to a collective, long next to
// a spin.
constexpr absl::Duration kPollInterval = absl::Microseconds(20);

absl::Status NcclStatus(ncclResult_t result, const std::string& what,
                        ncclComm_t comm) {
  const char* last = Nccl().last_error(comm);
  const std::string text =
      absl::StrCat(what, ": ", Nccl().error_string(result),
                   last != nullptr && last[0] != '\0' ? " (" : "",
                   last != nullptr ? last : "",
                   last != nullptr && last[0] != '\0' ? ")" : "");
  switch (result) {
    case ncclInvalidArgument:
    case ncclInvalidUsage:
      return absl::InvalidArgumentError(text);
    case ncclSystemError:
    case ncclRemoteError:
      return absl::UnavailableError(text);
    default:
      return absl::InternalError(text);
  }
}

// Waits while a non-blocking communicator reports ncclInProgress (the
// previous call's work is not yet enqueued, or init is not done).
absl::Status AwaitNccl(ncclComm_t comm, ncclResult_t result,
                       const std::string& what, absl::Time deadline) {
  while (result == ncclInProgress) {
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat(what, ": timed out waiting for NCCL"));
    }
    absl::SleepFor(kPollInterval);
    ncclResult_t state = ncclSuccess;
    const ncclResult_t query = Nccl().async_error(comm, &state);
    result = query != ncclSuccess ? query : state;
  }
  if (result != ncclSuccess) return NcclStatus(result, what, comm);
  return absl::OkStatus();
}

// Waits until the default stream is idle, watching for NCCL errors.
absl::Status AwaitStream(ncclComm_t comm, const std::string& what,
                         absl::Time deadline) {
  while (true) {
    const cudaError_t error = cudaStreamQuery(nullptr);
    if (error == cudaSuccess) return absl::OkStatus();
    if (error != cudaErrorNotReady) return CudaStatus(error, what.c_str());
    // Not an error, but the thread's last error now: forgotten, so that
    // the next kernel launch does not report it as its own.
    static_cast<void>(cudaGetLastError());
    ncclResult_t state = ncclSuccess;
    const ncclResult_t query = Nccl().async_error(comm, &state);
    if (query != ncclSuccess) return NcclStatus(query, what, comm);
    if (state != ncclSuccess && state != ncclInProgress) {
      return NcclStatus(state, what, comm);
    }
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat(what, ": timed out waiting for completion"));
    }
    absl::SleepFor(kPollInterval);
  }
}

// The store's errors are Gloo exceptions; a wait that runs out is a timeout.
template <typename Body>
absl::Status CatchStore(const std::string& what, Body&& body) {
  try {
    body();
    return absl::OkStatus();
  } catch (const std::exception& e) {
    const std::string message = e.what();
    const std::string lower = absl::AsciiStrToLower(message);
    if (absl::StrContains(lower, "timeout") ||
        absl::StrContains(lower, "timed out")) {
      return absl::DeadlineExceededError(absl::StrCat(what, ": ", message));
    }
    return absl::UnavailableError(absl::StrCat(what, ": ", message));
  } catch (...) {
    return absl::UnavailableError(absl::StrCat(what, ": unknown exception"));
  }
}

// Rank 0 publishes a fresh unique id; the others wait for it.
absl::StatusOr<ncclUniqueId> ExchangeUniqueId(gloo::rendezvous::Store& store,
                                              const std::string& group_name,
                                              int rank,
                                              absl::Duration timeout) {
  const std::string key = group_name + "/nccl_id";
  ncclUniqueId id;
  if (rank == 0) {
    const ncclResult_t result = Nccl().unique_id(&id);
    if (result != ncclSuccess) {
      return NcclStatus(result, "ncclGetUniqueId", nullptr);
    }
    RETURN_IF_ERROR(CatchStore("publishing " + key, [&] {
      store.set(key, std::vector<char>(id.internal,
                                       id.internal + sizeof(id.internal)));
    }));
    return id;
  }
  std::vector<char> bytes;
  RETURN_IF_ERROR(CatchStore("waiting for " + key, [&] {
    store.wait({key}, absl::ToChronoMilliseconds(timeout));
    bytes = store.get(key);
  }));
  if (bytes.size() != sizeof(id.internal)) {
    return absl::InternalError(absl::StrCat(
        key, " holds ", bytes.size(), " bytes, not ", sizeof(id.internal)));
  }
  std::memcpy(id.internal, bytes.data(), bytes.size());
  return id;
}

absl::Status CheckDevice(int cuda_device) {
  RETURN_IF_ERROR(kernels::cuda::FindCudaDevice(cuda_device).status());
  return CudaStatus(cudaSetDevice(cuda_device), "cudaSetDevice");
}

}  // namespace

absl::StatusOr<std::unique_ptr<NcclCommunicator>> NcclCommunicator::Create(
    std::shared_ptr<gloo::rendezvous::Store> store,
    const std::string& group_name, int rank, int size, absl::Duration timeout,
    int cuda_device) {
  RETURN_IF_ERROR(kernels::cuda::RequireCudaDevice());
  RETURN_IF_ERROR(LoadNccl().status());
  if (store == nullptr) return absl::InvalidArgumentError("no store");
  RETURN_IF_ERROR(CheckGroupArguments(group_name, rank, size, timeout));
  const absl::Time deadline = absl::Now() + timeout;
  RETURN_IF_ERROR(CheckDevice(cuda_device));
  ASSIGN_OR_RETURN(const ncclUniqueId id,
                   ExchangeUniqueId(*store, group_name, rank, timeout));

  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // Every wait below is bounded by the deadline.
  ncclComm_t comm = nullptr;
  const std::string what =
      absl::StrCat("ncclCommInitRankConfig for group '", group_name, "' (rank ",
                   rank, " of ", size, ")");
  // Init first: AwaitNccl must see the handle it sets.
  const ncclResult_t init = Nccl().init_rank(&comm, size, id, rank, &config);
  absl::Status status = AwaitNccl(comm, init, what, deadline);
  void* scratch = nullptr;
  if (status.ok()) {
    status =
        CudaStatus(cudaMalloc(&scratch, 4 * sizeof(uint32_t)), "cudaMalloc");
  }
  if (status.ok()) {
    status =
        CudaStatus(cudaMemset(scratch, 0, 4 * sizeof(uint32_t)), "cudaMemset");
  }
  if (!status.ok()) {
    if (comm != nullptr) Nccl().abort(comm);
    cudaFree(scratch);
    return status;
  }
  return std::unique_ptr<NcclCommunicator>(
      new NcclCommunicator(group_name, rank, size, timeout, cuda_device, comm,
                           static_cast<uint32_t*>(scratch)));
}

NcclCommunicator::NcclCommunicator(std::string group_name, int rank, int size,
                                   absl::Duration timeout, int cuda_device,
                                   ncclComm* comm, uint32_t* device_scratch)
    : group_name_(std::move(group_name)),
      rank_(rank),
      size_(size),
      timeout_(timeout),
      cuda_device_(cuda_device),
      comm_(comm),
      device_scratch_(device_scratch) {}

NcclCommunicator::~NcclCommunicator() {
  cudaSetDevice(cuda_device_);
  if (comm_ != nullptr) {
    // Flush and free within the timeout; a peer gone missing means abort.
    const absl::Status finalized =
        AwaitNccl(comm_, Nccl().finalize(comm_), "ncclCommFinalize",
                  absl::Now() + timeout_);
    if (finalized.ok()) {
      Nccl().destroy(comm_);
    } else {
      Nccl().abort(comm_);
    }
  }
  cudaFree(device_scratch_);
}

std::string NcclCommunicator::Describe(const char* op, int peer) const {
  std::string text = absl::StrCat(op, " on NCCL group '", group_name_,
                                  "' (rank ", rank_, " of ", size_);
  if (peer >= 0) absl::StrAppend(&text, ", peer rank ", peer);
  return text + ")";
}

absl::Status NcclCommunicator::Begin(const char* op, int peer) const {
  if (!broken_.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        Describe(op, peer),
        ": the group is unusable after an earlier error: ", broken_.message()));
  }
  return CudaStatus(cudaSetDevice(cuda_device_), "cudaSetDevice");
}

absl::Status NcclCommunicator::Finish(int nccl_result, const char* op,
                                      int peer) {
  return Finish(nccl_result, op, peer, [] { return absl::OkStatus(); });
}

absl::Status NcclCommunicator::Finish(
    int nccl_result, const char* op, int peer,
    absl::FunctionRef<absl::Status()> after_enqueue) {
  const std::string what = Describe(op, peer);
  const absl::Time deadline = absl::Now() + timeout_;
  absl::Status status =
      AwaitNccl(comm_, static_cast<ncclResult_t>(nccl_result), what, deadline);
  if (status.ok()) status = after_enqueue();
  if (status.ok()) status = AwaitStream(comm_, what, deadline);
  if (!status.ok()) {
    // Whatever is still in flight cannot complete consistently any more.
    Nccl().abort(comm_);
    comm_ = nullptr;
    broken_ = status;
  }
  return status;
}

absl::Status NcclCommunicator::CheckPeer(const char* op, int peer) const {
  if (peer < 0 || peer >= size_ || peer == rank_) {
    return absl::InvalidArgumentError(
        absl::StrCat(Describe(op, -1), ": bad peer rank ", peer));
  }
  return absl::OkStatus();
}

absl::Status NcclCommunicator::AllReduceImpl(const char* op, void* data,
                                             int64_t count, int nccl_type) {
  RETURN_IF_ERROR(CheckBuffer(op, data, count, "elements"));
  if (count == 0) return absl::OkStatus();
  RETURN_IF_ERROR(Begin(op, -1));
  return Finish(Nccl().all_reduce(data, data, static_cast<size_t>(count),
                                  static_cast<ncclDataType_t>(nccl_type),
                                  ncclSum, comm_, nullptr),
                op, -1);
}

absl::Status NcclCommunicator::AllReduceSum(float* data, int64_t count) {
  return AllReduceImpl("AllReduceSum(float)", data, count, ncclFloat32);
}

absl::Status NcclCommunicator::AllReduceSum(double* data, int64_t count) {
  // Host memory (see communicator.h): staged through a device buffer.
  if (count < 0 || (count > 0 && data == nullptr)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "AllReduceSum(double): bad buffer of ", count, " elements"));
  }
  if (count == 0) return absl::OkStatus();
  RETURN_IF_ERROR(Begin("AllReduceSum(double)", -1));
  const size_t bytes = static_cast<size_t>(count) * sizeof(double);
  void* device = nullptr;
  const cudaError_t allocated = cudaMalloc(&device, bytes);
  if (allocated != cudaSuccess) {
    static_cast<void>(cudaGetLastError());  // not sticky: see AwaitStream
    return CudaStatus(allocated, "cudaMalloc");
  }
  absl::Status status = CudaStatus(
      cudaMemcpy(device, data, bytes, cudaMemcpyHostToDevice), "cudaMemcpy");
  if (status.ok()) {
    status = AllReduceImpl("AllReduceSum(double)", device, count, ncclFloat64);
  }
  if (status.ok()) {
    status = CudaStatus(cudaMemcpy(data, device, bytes, cudaMemcpyDeviceToHost),
                        "cudaMemcpy");
  }
  cudaFree(device);
  return status;
}

absl::Status NcclCommunicator::ReduceScatterSum(const float* input,
                                                float* output,
                                                int64_t count_per_rank) {
  RETURN_IF_ERROR(
      CheckPerRankBuffers("ReduceScatterSum", input, output, count_per_rank));
  if (count_per_rank == 0) return absl::OkStatus();
  RETURN_IF_ERROR(Begin("ReduceScatterSum", -1));
  return Finish(
      Nccl().reduce_scatter(input, output, static_cast<size_t>(count_per_rank),
                            ncclFloat32, ncclSum, comm_, nullptr),
      "ReduceScatterSum", -1);
}

absl::Status NcclCommunicator::AllGather(const float* input, float* output,
                                         int64_t count_per_rank) {
  return AllGatherImpl(input, output, count_per_rank, /*bf16_values=*/false);
}

absl::Status NcclCommunicator::AllGather(const uint16_t* input,
                                         uint16_t* output,
                                         int64_t count_per_rank) {
  return AllGatherImpl(input, output, count_per_rank, /*bf16_values=*/true);
}

absl::Status NcclCommunicator::AllGatherImpl(const void* input, void* output,
                                             int64_t count_per_rank,
                                             bool bf16_values) {
  RETURN_IF_ERROR(
      CheckPerRankBuffers("AllGather", input, output, count_per_rank));
  if (count_per_rank == 0) return absl::OkStatus();
  RETURN_IF_ERROR(Begin("AllGather", -1));
  return Finish(Nccl().all_gather(
                    input, output, static_cast<size_t>(count_per_rank),
                    bf16_values ? ncclBfloat16 : ncclFloat32, comm_, nullptr),
                "AllGather", -1);
}

absl::Status NcclCommunicator::AllToAllV(const void* send,
                                         absl::Span<const int64_t> send_bytes,
                                         void* receive,
                                         absl::Span<const int64_t> recv_bytes) {
  RETURN_IF_ERROR(
      CheckAllToAllV(send, send_bytes, receive, recv_bytes, rank_, size_));
  std::vector<int64_t> send_offsets(size_ + 1, 0);
  std::vector<int64_t> recv_offsets(size_ + 1, 0);
  for (int r = 0; r < size_; ++r) {
    send_offsets[r + 1] = send_offsets[r] + send_bytes[r];
    recv_offsets[r + 1] = recv_offsets[r] + recv_bytes[r];
  }
  RETURN_IF_ERROR(Begin("AllToAllV", -1));
  const char* send_base = static_cast<const char*>(send);
  char* recv_base = static_cast<char*>(receive);
  // Both sides agree on every size, so skipping zero-byte pairs is symmetric.
  ncclResult_t result = Nccl().group_start();
  for (int r = 0; r < size_ && result == ncclSuccess; ++r) {
    if (r == rank_) continue;
    if (send_bytes[r] > 0) {
      result = Nccl().send(send_base + send_offsets[r], send_bytes[r], ncclInt8,
                           r, comm_, nullptr);
    }
    if (result == ncclSuccess && recv_bytes[r] > 0) {
      result = Nccl().recv(recv_base + recv_offsets[r], recv_bytes[r], ncclInt8,
                           r, comm_, nullptr);
    }
  }
  const ncclResult_t group_end = Nccl().group_end();
  // The own block moves on the device once NCCL's work is enqueued (a
  // non-blocking communicator forbids stream work before that).
  return Finish(
      result == ncclSuccess ? group_end : result, "AllToAllV", -1, [&] {
        if (send_bytes[rank_] == 0) return absl::OkStatus();
        return CudaStatus(
            cudaMemcpyAsync(recv_base + recv_offsets[rank_],
                            send_base + send_offsets[rank_], send_bytes[rank_],
                            cudaMemcpyDeviceToDevice, nullptr),
            "cudaMemcpyAsync");
      });
}

absl::Status NcclCommunicator::Send(const void* data, int64_t bytes, int peer,
                                    uint32_t tag) {
  RETURN_IF_ERROR(CheckPeer("Send", peer));
  RETURN_IF_ERROR(CheckBuffer("Send", data, bytes, "bytes"));
  RETURN_IF_ERROR(Begin("Send", peer));
  RETURN_IF_ERROR(CudaStatus(cudaMemcpy(&device_scratch_[0], &tag, sizeof(tag),
                                        cudaMemcpyHostToDevice),
                             "cudaMemcpy"));
  ncclResult_t result = Nccl().group_start();
  if (result == ncclSuccess) {
    result =
        Nccl().send(&device_scratch_[0], 1, ncclUint32, peer, comm_, nullptr);
  }
  if (result == ncclSuccess && bytes > 0) {
    result = Nccl().send(data, bytes, ncclInt8, peer, comm_, nullptr);
  }
  const ncclResult_t group_end = Nccl().group_end();
  return Finish(result == ncclSuccess ? group_end : result, "Send", peer);
}

absl::Status NcclCommunicator::Receive(void* data, int64_t bytes, int peer,
                                       uint32_t tag) {
  RETURN_IF_ERROR(CheckPeer("Receive", peer));
  RETURN_IF_ERROR(CheckBuffer("Receive", data, bytes, "bytes"));
  RETURN_IF_ERROR(Begin("Receive", peer));
  ncclResult_t result = Nccl().group_start();
  if (result == ncclSuccess) {
    result =
        Nccl().recv(&device_scratch_[1], 1, ncclUint32, peer, comm_, nullptr);
  }
  if (result == ncclSuccess && bytes > 0) {
    result = Nccl().recv(data, bytes, ncclInt8, peer, comm_, nullptr);
  }
  const ncclResult_t group_end = Nccl().group_end();
  RETURN_IF_ERROR(
      Finish(result == ncclSuccess ? group_end : result, "Receive", peer));
  return CheckReceivedTag(tag, Describe("Receive", peer));
}

absl::Status NcclCommunicator::CheckReceivedTag(uint32_t expected,
                                                const std::string& what) {
  uint32_t received = 0;
  RETURN_IF_ERROR(
      CudaStatus(cudaMemcpy(&received, &device_scratch_[1], sizeof(received),
                            cudaMemcpyDeviceToHost),
                 "cudaMemcpy"));
  if (received != expected) {
    return absl::InternalError(absl::StrCat(
        what, ": expected tag ", expected, " but got ", received,
        "; messages between two ranks must be received in the order they "
        "are sent"));
  }
  return absl::OkStatus();
}

absl::Status NcclCommunicator::SendAndReceive(
    const void* send_data, int64_t send_bytes, int send_peer, uint32_t send_tag,
    void* recv_data, int64_t recv_bytes, int recv_peer, uint32_t recv_tag) {
  RETURN_IF_ERROR(CheckPeer("SendAndReceive", send_peer));
  RETURN_IF_ERROR(CheckPeer("SendAndReceive", recv_peer));
  RETURN_IF_ERROR(
      CheckBuffer("SendAndReceive (send)", send_data, send_bytes, "bytes"));
  RETURN_IF_ERROR(
      CheckBuffer("SendAndReceive (receive)", recv_data, recv_bytes, "bytes"));
  RETURN_IF_ERROR(Begin("SendAndReceive", send_peer));
  RETURN_IF_ERROR(
      CudaStatus(cudaMemcpy(&device_scratch_[0], &send_tag, sizeof(send_tag),
                            cudaMemcpyHostToDevice),
                 "cudaMemcpy"));
  // One group: NCCL progresses the send and the receive together.
  ncclResult_t result = Nccl().group_start();
  if (result == ncclSuccess) {
    result = Nccl().send(&device_scratch_[0], 1, ncclUint32, send_peer, comm_,
                         nullptr);
  }
  if (result == ncclSuccess && send_bytes > 0) {
    result =
        Nccl().send(send_data, send_bytes, ncclInt8, send_peer, comm_, nullptr);
  }
  if (result == ncclSuccess) {
    result = Nccl().recv(&device_scratch_[1], 1, ncclUint32, recv_peer, comm_,
                         nullptr);
  }
  if (result == ncclSuccess && recv_bytes > 0) {
    result =
        Nccl().recv(recv_data, recv_bytes, ncclInt8, recv_peer, comm_, nullptr);
  }
  const ncclResult_t group_end = Nccl().group_end();
  RETURN_IF_ERROR(Finish(result == ncclSuccess ? group_end : result,
                         "SendAndReceive", send_peer));
  return CheckReceivedTag(recv_tag, Describe("SendAndReceive", recv_peer));
}

absl::Status NcclCommunicator::Barrier() {
  RETURN_IF_ERROR(Begin("Barrier", -1));
  float* word = reinterpret_cast<float*>(&device_scratch_[2]);
  return Finish(
      Nccl().all_reduce(word, word, 1, ncclFloat32, ncclSum, comm_, nullptr),
      "Barrier", -1);
}

}  // namespace plateau::engine
