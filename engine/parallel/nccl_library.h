// NCCL as NcclCommunicator calls it, loaded (dlopen of libnccl.so.2) the
// first time it is asked for rather than linked, as cuBLAS is
// (kernels/cuda/cublas_library.h): a process that never uses a GPU neither
// needs the library nor carries its thread-local storage.
#ifndef PLATEAU_ENGINE_PARALLEL_NCCL_LIBRARY_H_
#define PLATEAU_ENGINE_PARALLEL_NCCL_LIBRARY_H_

#include <nccl.h>

#include "absl/status/statusor.h"

namespace plateau::engine {

struct NcclLibrary {
  decltype(&ncclGetErrorString) error_string = nullptr;
  decltype(&ncclGetLastError) last_error = nullptr;
  decltype(&ncclCommGetAsyncError) async_error = nullptr;
  decltype(&ncclGetUniqueId) unique_id = nullptr;
  decltype(&ncclCommInitRankConfig) init_rank = nullptr;
  decltype(&ncclCommFinalize) finalize = nullptr;
  decltype(&ncclCommDestroy) destroy = nullptr;
  decltype(&ncclCommAbort) abort = nullptr;
  decltype(&ncclAllReduce) all_reduce = nullptr;
  decltype(&ncclReduceScatter) reduce_scatter = nullptr;
  decltype(&ncclAllGather) all_gather = nullptr;
  decltype(&ncclGroupStart) group_start = nullptr;
  decltype(&ncclGroupEnd) group_end = nullptr;
  decltype(&ncclSend) send = nullptr;
  decltype(&ncclRecv) recv = nullptr;
};

// The same library on every call; FAILED_PRECONDITION naming the library
// and dlerror's reason when it cannot be loaded.
absl::StatusOr<const NcclLibrary*> LoadNccl();

}  // namespace plateau::engine

#endif  // PLATEAU_ENGINE_PARALLEL_NCCL_LIBRARY_H_
