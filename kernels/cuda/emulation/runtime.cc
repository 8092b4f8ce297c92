// The emulated CUDA runtime (runtime_api.h): one device whose memory is
// guarded host memory, and streams that run everything at once.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

#include "kernels/cuda/emulation/runtime_api.h"

struct CUstream_st {
  unsigned int flags = 0;
};

struct CUevent_st {
  unsigned int flags = 0;
};

namespace plateau::kernels::cuda::emulation {
namespace {

// Device memory is one reserved range of address space (only what is used
// gets pages), blocks carved from it first-fit at cudaMalloc's alignment,
// each followed by canary bytes. One mprotect opens or closes all of it.
constexpr size_t kRegionBytes = size_t{1} << 40;
constexpr size_t kDeviceAlignment = 256;
constexpr size_t kCanaryBytes = 64;
constexpr unsigned char kCanary = 0xa5;

size_t PageBytes() {
  static const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return page;
}

size_t RoundUp(size_t value, size_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

// The bytes a block of `bytes` takes: its data, rounded up, then its canary.
size_t Footprint(size_t bytes) {
  return RoundUp(bytes, kDeviceAlignment) + kCanaryBytes;
}

class Device {
 public:
  static Device& Get() {
    static Device* device = new Device();
    return *device;
  }

  cudaError_t Allocate(void** pointer, size_t bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (bytes == 0) {
      *pointer = nullptr;
      return cudaSuccess;
    }
    if (static_cast<int64_t>(allocated_bytes_ + bytes) > capacity_bytes_) {
      return cudaErrorMemoryAllocation;
    }
    const size_t footprint = Footprint(bytes);
    size_t offset = used_bytes_;
    for (auto free = free_.begin(); free != free_.end(); ++free) {
      if (free->second < footprint) continue;
      offset = free->first;
      if (free->second > footprint) {
        free_[offset + footprint] = free->second - footprint;
      }
      free_.erase(free);
      break;
    }
    if (offset == used_bytes_) {
      if (used_bytes_ + footprint > kRegionBytes) {
        return cudaErrorMemoryAllocation;
      }
      used_bytes_ += footprint;
      const size_t mapped = RoundUp(used_bytes_, PageBytes());
      if (mapped > mapped_bytes_) {
        const size_t old = mapped_bytes_;
        mapped_bytes_ = mapped;
        if (Accessible()) {
          Protect(region_ + old, mapped - old, PROT_READ | PROT_WRITE);
        }
      }
    }
    char* start = region_ + offset;
    WithAccess([&] { std::memset(start + bytes, kCanary, footprint - bytes); });
    blocks_[start] = bytes;
    allocated_bytes_ += bytes;
    *pointer = start;
    return cudaSuccess;
  }

  cudaError_t Free(void* pointer) {
    if (pointer == nullptr) return cudaSuccess;
    std::lock_guard<std::mutex> lock(mutex_);
    auto found = blocks_.find(static_cast<char*>(pointer));
    if (found == blocks_.end()) return cudaErrorInvalidValue;
    WithAccess([&] { CheckCanary(found->first, found->second); });
    size_t offset = static_cast<size_t>(found->first - region_);
    size_t length = Footprint(found->second);
    allocated_bytes_ -= found->second;
    blocks_.erase(found);
    // Joined with the free ranges on either side.
    auto next = free_.find(offset + length);
    if (next != free_.end()) {
      length += next->second;
      free_.erase(next);
    }
    auto previous = free_.lower_bound(offset);
    if (previous != free_.begin()) {
      --previous;
      if (previous->first + previous->second == offset) {
        offset = previous->first;
        length += previous->second;
        free_.erase(previous);
      }
    }
    free_[offset] = length;
    return cudaSuccess;
  }

  cudaError_t AllocateHost(void** pointer, size_t bytes) {
    void* memory = std::aligned_alloc(64, RoundUp(bytes == 0 ? 1 : bytes, 64));
    if (memory == nullptr) return cudaErrorMemoryAllocation;
    std::lock_guard<std::mutex> lock(mutex_);
    host_blocks_[static_cast<char*>(memory)] = bytes;
    *pointer = memory;
    return cudaSuccess;
  }

  cudaError_t FreeHost(void* pointer) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto found = host_blocks_.find(static_cast<char*>(pointer));
    if (found == host_blocks_.end()) return cudaErrorInvalidValue;
    host_blocks_.erase(found);
    std::free(pointer);
    return cudaSuccess;
  }

  // Whether [pointer, pointer + bytes) lies in one device block.
  bool IsDeviceRange(const void* pointer, size_t bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    const char* start = static_cast<const char*>(pointer);
    auto after = blocks_.upper_bound(const_cast<char*>(start));
    if (after == blocks_.begin()) return false;
    --after;
    return start >= after->first &&
           start + bytes <= after->first + after->second;
  }

  cudaMemoryType TypeOf(const void* pointer) {
    if (IsDeviceRange(pointer, 1)) return cudaMemoryTypeDevice;
    std::lock_guard<std::mutex> lock(mutex_);
    const char* start = static_cast<const char*>(pointer);
    auto after = host_blocks_.upper_bound(const_cast<char*>(start));
    if (after == host_blocks_.begin()) return cudaMemoryTypeUnregistered;
    --after;
    return start < after->first + after->second ? cudaMemoryTypeHost
                                                : cudaMemoryTypeUnregistered;
  }

  void EnterAccess() {
    std::lock_guard<std::mutex> lock(mutex_);
    if (access_count_++ == 0 && protection_) {
      Protect(region_, mapped_bytes_, PROT_READ | PROT_WRITE);
    }
  }

  // The last scope to close checks every canary: device code writing past
  // a block's end is caught at the launch (or copy) that did it.
  void LeaveAccess() {
    std::lock_guard<std::mutex> lock(mutex_);
    if (--access_count_ > 0) return;
    for (const auto& [start, bytes] : blocks_) CheckCanary(start, bytes);
    if (protection_) Protect(region_, mapped_bytes_, PROT_NONE);
  }

  void SetProtection(bool on) {
    std::lock_guard<std::mutex> lock(mutex_);
    protection_ = on;
    Protect(region_, mapped_bytes_,
            Accessible() ? PROT_READ | PROT_WRITE : PROT_NONE);
  }

  void SetCapacity(int64_t bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    capacity_bytes_ = bytes;
  }

  void MemoryInfo(size_t* free_bytes, size_t* total_bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    *total_bytes = static_cast<size_t>(capacity_bytes_);
    *free_bytes = static_cast<size_t>(capacity_bytes_) - allocated_bytes_;
  }

  int64_t capacity_bytes() {
    std::lock_guard<std::mutex> lock(mutex_);
    return capacity_bytes_;
  }

 private:
  Device() {
    void* region = mmap(nullptr, kRegionBytes, PROT_NONE,
                        MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (region == MAP_FAILED) {
      std::perror("cuda emulation: reserving device address space");
      std::abort();
    }
    region_ = static_cast<char*>(region);
  }

  // REQUIRES: mutex_ held.
  bool Accessible() const { return !protection_ || access_count_ > 0; }

  // Runs `body` with device memory open. REQUIRES: mutex_ held.
  template <typename Body>
  void WithAccess(Body body) {
    const bool closed = !Accessible();
    if (closed) Protect(region_, mapped_bytes_, PROT_READ | PROT_WRITE);
    body();
    if (closed) Protect(region_, mapped_bytes_, PROT_NONE);
  }

  static void CheckCanary(const char* start, size_t bytes) {
    const size_t footprint = Footprint(bytes);
    for (size_t i = bytes; i < footprint; ++i) {
      if (static_cast<unsigned char>(start[i]) != kCanary) {
        std::fprintf(stderr,
                     "cuda emulation: device code wrote past the end of a "
                     "device block of %zu bytes (at byte %zu)\n",
                     bytes, i);
        std::abort();
      }
    }
  }

  static void Protect(char* start, size_t bytes, int access) {
    if (bytes > 0 && mprotect(start, bytes, access) != 0) {
      std::perror("cuda emulation: mprotect");
      std::abort();
    }
  }

  std::mutex mutex_;
  char* region_ = nullptr;
  size_t used_bytes_ = 0;           // of the region, ever
  size_t mapped_bytes_ = 0;         // used_bytes_ in whole pages
  std::map<size_t, size_t> free_;   // offset -> length, below used_bytes_
  std::map<char*, size_t> blocks_;  // start -> bytes asked
  std::map<char*, size_t> host_blocks_;
  size_t allocated_bytes_ = 0;
  int64_t capacity_bytes_ = int64_t{16} << 30;
  int access_count_ = 0;
  bool protection_ = true;
};

thread_local cudaError_t last_error = cudaSuccess;
thread_local int current_device = 0;

// What a copy of `kind` may touch: device ranges where the kind says device.
cudaError_t CheckCopy(void* destination, const void* source, size_t bytes,
                      cudaMemcpyKind kind) {
  Device& device = Device::Get();
  const bool to_device =
      kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
  const bool from_device =
      kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
  if (kind == cudaMemcpyDefault || bytes == 0) return cudaSuccess;
  if (to_device != device.IsDeviceRange(destination, bytes) ||
      from_device != device.IsDeviceRange(source, bytes)) {
    return cudaErrorInvalidValue;
  }
  return cudaSuccess;
}

}  // namespace

void SetDeviceMemoryBytes(int64_t bytes) { Device::Get().SetCapacity(bytes); }

void SetDeviceMemoryProtection(bool on) { Device::Get().SetProtection(on); }

DeviceAccessScope::DeviceAccessScope() { Device::Get().EnterAccess(); }

DeviceAccessScope::~DeviceAccessScope() { Device::Get().LeaveAccess(); }

void SetLastError(cudaError_t error) { last_error = error; }

// Every failed call leaves its error for cudaGetLastError, as CUDA's do.
cudaError_t Reported(cudaError_t error) {
  if (error != cudaSuccess) last_error = error;
  return error;
}

}  // namespace plateau::kernels::cuda::emulation

using plateau::kernels::cuda::emulation::Device;
using plateau::kernels::cuda::emulation::DeviceAccessScope;
using plateau::kernels::cuda::emulation::Reported;

const char* cudaGetErrorName(cudaError_t error) {
  switch (error) {
    case cudaSuccess:
      return "cudaSuccess";
    case cudaErrorInvalidValue:
      return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation:
      return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration:
      return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidDevice:
      return "cudaErrorInvalidDevice";
    case cudaErrorNoDevice:
      return "cudaErrorNoDevice";
    case cudaErrorInvalidResourceHandle:
      return "cudaErrorInvalidResourceHandle";
  }
  return "cudaErrorUnknown";
}

const char* cudaGetErrorString(cudaError_t error) {
  switch (error) {
    case cudaSuccess:
      return "no error";
    case cudaErrorInvalidValue:
      return "invalid argument";
    case cudaErrorMemoryAllocation:
      return "out of memory";
    case cudaErrorInvalidConfiguration:
      return "invalid configuration argument";
    case cudaErrorInvalidDevice:
      return "invalid device ordinal";
    case cudaErrorNoDevice:
      return "no CUDA-capable device is detected";
    case cudaErrorInvalidResourceHandle:
      return "invalid resource handle";
  }
  return "unknown error";
}

cudaError_t cudaGetLastError() {
  const cudaError_t error = plateau::kernels::cuda::emulation::last_error;
  plateau::kernels::cuda::emulation::last_error = cudaSuccess;
  return error;
}

cudaError_t cudaGetDeviceCount(int* count) {
  *count = 1;
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* properties, int device) {
  if (device != 0) return Reported(cudaErrorInvalidDevice);
  std::memset(properties, 0, sizeof(*properties));
  std::snprintf(properties->name, sizeof(properties->name),
                "Plateau emulated GPU");
  properties->totalGlobalMem =
      static_cast<size_t>(Device::Get().capacity_bytes());
  properties->major = 9;
  properties->minor = 0;
  properties->multiProcessorCount = 4;
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
  if (device != 0) return Reported(cudaErrorInvalidDevice);
  plateau::kernels::cuda::emulation::current_device = device;
  return cudaSuccess;
}

cudaError_t cudaGetDevice(int* device) {
  *device = plateau::kernels::cuda::emulation::current_device;
  return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  Device::Get().MemoryInfo(free_bytes, total_bytes);
  return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize() { return cudaSuccess; }

cudaError_t cudaMalloc(void** pointer, size_t bytes) {
  return Reported(Device::Get().Allocate(pointer, bytes));
}

cudaError_t cudaFree(void* pointer) {
  return Reported(Device::Get().Free(pointer));
}

cudaError_t cudaHostAlloc(void** pointer, size_t bytes, unsigned int) {
  return Reported(Device::Get().AllocateHost(pointer, bytes));
}

cudaError_t cudaFreeHost(void* pointer) {
  return Reported(Device::Get().FreeHost(pointer));
}

cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* attributes,
                                     const void* pointer) {
  attributes->type = Device::Get().TypeOf(pointer);
  attributes->device = 0;
  attributes->devicePointer = attributes->type == cudaMemoryTypeUnregistered
                                  ? nullptr
                                  : const_cast<void*>(pointer);
  attributes->hostPointer = attributes->type == cudaMemoryTypeDevice
                                ? nullptr
                                : const_cast<void*>(pointer);
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void* destination, const void* source, size_t bytes,
                       cudaMemcpyKind kind) {
  const cudaError_t checked = plateau::kernels::cuda::emulation::CheckCopy(
      destination, source, bytes, kind);
  if (checked != cudaSuccess) return Reported(checked);
  DeviceAccessScope access;
  if (bytes > 0) std::memmove(destination, source, bytes);
  return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void* destination, const void* source, size_t bytes,
                            cudaMemcpyKind kind, cudaStream_t) {
  return Reported(cudaMemcpy(destination, source, bytes, kind));
}

cudaError_t cudaMemsetAsync(void* destination, int value, size_t bytes,
                            cudaStream_t) {
  if (bytes == 0) return cudaSuccess;
  if (!Device::Get().IsDeviceRange(destination, bytes)) {
    return Reported(cudaErrorInvalidValue);
  }
  DeviceAccessScope access;
  std::memset(destination, value, bytes);
  return cudaSuccess;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream,
                                      unsigned int flags) {
  *stream = new CUstream_st{flags};
  return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  delete stream;
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }

cudaError_t cudaStreamWaitEvent(cudaStream_t, cudaEvent_t event, unsigned int) {
  return Reported(event == nullptr ? cudaErrorInvalidResourceHandle
                                   : cudaSuccess);
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags) {
  *event = new CUevent_st{flags};
  return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  delete event;
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t) {
  return Reported(event == nullptr ? cudaErrorInvalidResourceHandle
                                   : cudaSuccess);
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  return Reported(event == nullptr ? cudaErrorInvalidResourceHandle
                                   : cudaSuccess);
}
