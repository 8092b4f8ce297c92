#include "worker/engine/parallel/nccl_library.h"

#include <dlfcn.h>

#include "absl/strings/str_cat.h"

namespace plateau::engine {
namespace {

constexpr char kLibrary[] = "libnccl.so.2";

template <typename Function>
absl::Status Resolve(void* handle, const char* name, Function* function) {
  *function = reinterpret_cast<Function>(dlsym(handle, name));
  if (*function != nullptr) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat(kLibrary, " has no ", name, ": ", dlerror()));
}

absl::StatusOr<NcclLibrary> Open() {
  void* handle = dlopen(kLibrary, RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot load NCCL (", kLibrary, "): ", dlerror()));
  }
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
