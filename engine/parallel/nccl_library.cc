#include "engine/parallel/nccl_library.h"

#include "kernels/cuda/dynamic_library.h"

namespace plateau::engine {
namespace {

constexpr char kLibrary[] = "libnccl.so.2";

absl::StatusOr<NcclLibrary> Open() {
  absl::StatusOr<void*> opened = kernels::cuda::OpenLibrary(kLibrary, "NCCL");
  if (!opened.ok()) return opened.status();
  void* handle = *opened;
  auto Resolve = [](void* library, const char* name, auto* function) {
    return kernels::cuda::ResolveFunction(library, kLibrary, name, function);
  };
  NcclLibrary l;
  for (const absl::Status& status : {
           Resolve(handle, "ncclGetErrorString", &l.error_string),
           Resolve(handle, "ncclGetLastError", &l.last_error),
           Resolve(handle, "ncclCommGetAsyncError", &l.async_error),
           Resolve(handle, "ncclGetUniqueId", &l.unique_id),
           Resolve(handle, "ncclCommInitRankConfig", &l.init_rank),
           Resolve(handle, "ncclCommFinalize", &l.finalize),
           Resolve(handle, "ncclCommDestroy", &l.destroy),
           Resolve(handle, "ncclCommAbort", &l.abort),
           Resolve(handle, "ncclAllReduce", &l.all_reduce),
           Resolve(handle, "ncclReduceScatter", &l.reduce_scatter),
           Resolve(handle, "ncclAllGather", &l.all_gather),
           Resolve(handle, "ncclGroupStart", &l.group_start),
           Resolve(handle, "ncclGroupEnd", &l.group_end),
           Resolve(handle, "ncclSend", &l.send),
           Resolve(handle, "ncclRecv", &l.recv),
       }) {
    if (!status.ok()) return status;
  }
  return l;  // the handle stays open for the process
}

}  // namespace

absl::StatusOr<const NcclLibrary*> LoadNccl() {
  static const absl::StatusOr<NcclLibrary>* const library =
      new absl::StatusOr<NcclLibrary>(Open());
  if (!library->ok()) return library->status();
  return &**library;
}

}  // namespace plateau::engine
