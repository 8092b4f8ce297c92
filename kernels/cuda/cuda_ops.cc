#include "kernels/cuda/cuda_ops.h"

#include <algorithm>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/cublas_library.h"
#include "kernels/cuda/cuda_ops_internal.h"
#include "kernels/cuda/device.h"
#include "kernels/cuda/kernels.h"

namespace plateau::kernels::cuda {

absl::StatusOr<std::unique_ptr<CudaOps>> CudaOps::Create(
    const CudaOpsOptions& options) {
  if (options.scratch == nullptr) {
    return absl::InvalidArgumentError("CudaOps needs a scratch arena");
  }
  absl::StatusOr<CudaDeviceInfo> device = FindCudaDevice(options.device);
  if (!device.ok()) return device.status();
  absl::Status status =
      CudaStatus(cudaSetDevice(options.device), "cudaSetDevice");
  if (!status.ok()) return status;
  absl::StatusOr<const CublasLibrary*> cublas = LoadCublas();
  if (!cublas.ok()) return cublas.status();
  cublasHandle_t blas = nullptr;
  const cublasStatus_t created = (*cublas)->create(&blas);
  if (created != CUBLAS_STATUS_SUCCESS) {
    return absl::InternalError(absl::StrCat("cublasCreate failed: ",
                                            (*cublas)->status_string(created)));
  }
  std::unique_ptr<CudaOps> ops(new CudaOps(options, *cublas, blas));
  if (!ops->CheckBlas(ops->cublas_.set_stream(blas, ops->compute_stream_),
                      "cublasSetStream")) {
    return ops->status();
  }
  return ops;
}

CudaOps::CudaOps(const CudaOpsOptions& options, const CublasLibrary* cublas,
                 cublasHandle_t blas)
    : device_(options.device),
      matmul_precision_(options.matmul_precision),
      scratch_(options.scratch),
      cublas_(*cublas),
      blas_(blas) {}

CudaOps::~CudaOps() {
  cudaSetDevice(device_);
  cudaDeviceSynchronize();
  absl::MutexLock lock(&lanes_mutex_);
  for (const std::unique_ptr<CopyLane>& lane : lanes_) {
    cudaEventDestroy(lane->kernels_done);
    cudaStreamDestroy(lane->stream);
  }
  cublas_.destroy(blas_);
}

absl::Status CudaOps::status() const {
  absl::MutexLock lock(&error_mutex_);
  return first_error_;
}

absl::Status CudaOps::Synchronize() {
  if (!failed()) Check(cudaStreamSynchronize(compute_stream_), "synchronize");
  return status();
}

void CudaOps::Fail(absl::Status status) {
  absl::MutexLock lock(&error_mutex_);
  if (first_error_.ok()) {
    first_error_ = std::move(status);
    failed_.store(true, std::memory_order_release);
  }
}

bool CudaOps::Check(cudaError_t error, const char* what) {
  if (error == cudaSuccess) return true;
  Fail(absl::InternalError(absl::StrCat("CUDA device ", device_, ": ", what,
                                        " failed: ", cudaGetErrorName(error),
                                        " (", cudaGetErrorString(error), ")")));
  return false;
}

bool CudaOps::CheckBlas(cublasStatus_t status, const char* what) {
  if (status == CUBLAS_STATUS_SUCCESS) return true;
  Fail(absl::InternalError(
      absl::StrCat("CUDA device ", device_, ": ", what,
                   " failed: ", cublas_.status_string(status))));
  return false;
}

char* CudaOps::Scratch(int64_t bytes, const char* what) {
  absl::StatusOr<void*> reserved =
      scratch_->Reserve(std::max<int64_t>(bytes, 1));
  if (!reserved.ok()) {
    Fail(absl::Status(
        reserved.status().code(),
        absl::StrCat("scratch for ", what, ": ", reserved.status().message())));
    return nullptr;
  }
  return static_cast<char*>(*reserved);
}

bool CudaOps::Upload(const void* host, int64_t bytes, void* device,
                     const char* what) {
  if (bytes == 0) return true;
  return Check(cudaMemcpyAsync(device, host, static_cast<size_t>(bytes),
                               cudaMemcpyHostToDevice, compute_stream_),
               what);
}

bool CudaOps::Download(const void* device, int64_t bytes, void* host,
                       const char* what) {
  return Check(cudaMemcpyAsync(host, device, static_cast<size_t>(bytes),
                               cudaMemcpyDeviceToHost, compute_stream_),
               what) &&
         Check(cudaStreamSynchronize(compute_stream_), what);
}

// ---- Copies ----

CudaOps::CopyLane* CudaOps::TakeLane() {
  {
    absl::MutexLock lock(&lanes_mutex_);
    if (!free_lanes_.empty()) {
      CopyLane* lane = free_lanes_.back();
      free_lanes_.pop_back();
      return lane;
    }
  }
  auto lane = std::make_unique<CopyLane>();
  if (!Check(cudaSetDevice(device_), "cudaSetDevice") ||
      !Check(cudaStreamCreateWithFlags(&lane->stream, cudaStreamNonBlocking),
             "cudaStreamCreateWithFlags") ||
      !Check(
          cudaEventCreateWithFlags(&lane->kernels_done, cudaEventDisableTiming),
          "cudaEventCreateWithFlags")) {
    return nullptr;
  }
  absl::MutexLock lock(&lanes_mutex_);
  lanes_.push_back(std::move(lane));
  return lanes_.back().get();
}

void CudaOps::ReturnLane(CopyLane* lane) {
  absl::MutexLock lock(&lanes_mutex_);
  free_lanes_.push_back(lane);
}

void CudaOps::CopyOnLane(int64_t bytes, const void* source, void* destination,
                         cudaMemcpyKind kind) {
  if (failed()) {
    if (kind == cudaMemcpyDeviceToHost) std::memset(destination, 0, bytes);
    return;
  }
  if (bytes == 0) return;
  CopyLane* lane = TakeLane();
  if (lane == nullptr) return;
  // The lane waits for every kernel queued so far: the bytes read are
  // written, and the bytes overwritten no longer read, by them.
  const bool copied =
      Check(cudaSetDevice(device_), "cudaSetDevice") &&
      Check(cudaEventRecord(lane->kernels_done, compute_stream_),
            "cudaEventRecord") &&
      Check(cudaStreamWaitEvent(lane->stream, lane->kernels_done, 0),
            "cudaStreamWaitEvent") &&
      Check(
          cudaMemcpyAsync(destination, source, static_cast<size_t>(bytes), kind,
                          lane->stream),
          kind == cudaMemcpyDeviceToHost ? "copy to host" : "copy from host") &&
      Check(cudaStreamSynchronize(lane->stream), "copy synchronize");
  ReturnLane(lane);
  if (!copied && kind == cudaMemcpyDeviceToHost) {
    std::memset(destination, 0, bytes);
  }
}

void CudaOps::CopyFromHost(int64_t bytes, const void* host, void* device) {
  CopyOnLane(bytes, host, device, cudaMemcpyHostToDevice);
}

void CudaOps::CopyToHost(int64_t bytes, const void* device, void* host) {
  CopyOnLane(bytes, device, host, cudaMemcpyDeviceToHost);
}

}  // namespace plateau::kernels::cuda
