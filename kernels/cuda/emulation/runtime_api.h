// The part of the CUDA runtime API that Plateau's CUDA code calls, for the
// emulated build: the same names, types and values as <cuda_runtime_api.h>,
// implemented on the CPU by runtime.cc for one emulated device.
//
// Work on every stream runs synchronously, in the calling thread, so streams
// and events only have to be valid handles. Device memory is host memory that
// the process cannot touch except while an emulated kernel, copy or cuBLAS
// call runs (SetDeviceMemoryProtection): host code that reads or writes a
// device pointer directly crashes at once, as on a GPU it would read garbage
// or fault. Blocks are 256-byte aligned, as cudaMalloc's, and followed by
// canary bytes that every kernel, copy and cuBLAS call is checked against:
// device code writing past the end of a buffer ends the process, naming the
// block's size. (Reads past the end are not caught.)
#ifndef PLATEAU_KERNELS_CUDA_EMULATION_RUNTIME_API_H_
#define PLATEAU_KERNELS_CUDA_EMULATION_RUNTIME_API_H_

#include <cstddef>
#include <cstdint>

enum cudaError_t {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInvalidConfiguration = 9,
  cudaErrorInvalidDevice = 101,
  cudaErrorNoDevice = 100,
  cudaErrorInvalidResourceHandle = 400,
};

enum cudaMemcpyKind {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4,
};

enum cudaMemoryType {
  cudaMemoryTypeUnregistered = 0,
  cudaMemoryTypeHost = 1,
  cudaMemoryTypeDevice = 2,
  cudaMemoryTypeManaged = 3,
};

struct cudaPointerAttributes {
  cudaMemoryType type;
  int device;
  void* devicePointer;
  void* hostPointer;
};

struct cudaDeviceProp {
  char name[256];
  size_t totalGlobalMem;
  int major;
  int minor;
  int multiProcessorCount;
};

struct CUstream_st;
struct CUevent_st;
using cudaStream_t = CUstream_st*;
using cudaEvent_t = CUevent_st*;

inline constexpr unsigned int cudaStreamNonBlocking = 0x01;
inline constexpr unsigned int cudaEventDisableTiming = 0x02;
inline constexpr unsigned int cudaHostAllocDefault = 0x00;

const char* cudaGetErrorName(cudaError_t error);
const char* cudaGetErrorString(cudaError_t error);
cudaError_t cudaGetLastError();

cudaError_t cudaGetDeviceCount(int* count);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* properties, int device);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaGetDevice(int* device);
cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes);
cudaError_t cudaDeviceSynchronize();

cudaError_t cudaMalloc(void** pointer, size_t bytes);
cudaError_t cudaFree(void* pointer);
cudaError_t cudaHostAlloc(void** pointer, size_t bytes, unsigned int flags);
cudaError_t cudaFreeHost(void* pointer);
cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* attributes,
                                     const void* pointer);

cudaError_t cudaMemcpy(void* destination, const void* source, size_t bytes,
                       cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void* destination, const void* source, size_t bytes,
                            cudaMemcpyKind kind, cudaStream_t stream);
cudaError_t cudaMemsetAsync(void* destination, int value, size_t bytes,
                            cudaStream_t stream);

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int flags);
cudaError_t cudaStreamDestroy(cudaStream_t stream);
cudaError_t cudaStreamSynchronize(cudaStream_t stream);
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event,
                                unsigned int flags);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags);
cudaError_t cudaEventDestroy(cudaEvent_t event);
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream);
cudaError_t cudaEventSynchronize(cudaEvent_t event);

namespace plateau::kernels::cuda::emulation {

// The emulated device's memory; 16 GiB unless set. Allocations beyond it
// fail with cudaErrorMemoryAllocation.
void SetDeviceMemoryBytes(int64_t bytes);
// On (the default): device memory is inaccessible to host code between
// emulated device calls. Tests that hand device buffers to host code on
// purpose (Gloo standing in for NCCL) turn it off.
void SetDeviceMemoryProtection(bool on);

// Makes device memory accessible while it lives (nested and concurrent
// scopes are counted). Every emulated kernel, copy and cuBLAS call runs in
// one.
class DeviceAccessScope {
 public:
  DeviceAccessScope();
  ~DeviceAccessScope();
  DeviceAccessScope(const DeviceAccessScope&) = delete;
  DeviceAccessScope& operator=(const DeviceAccessScope&) = delete;
};

// What cudaGetLastError returns next (launch errors are reported this way).
void SetLastError(cudaError_t error);

}  // namespace plateau::kernels::cuda::emulation

#endif  // PLATEAU_KERNELS_CUDA_EMULATION_RUNTIME_API_H_
