// What a node offers plateaud: its devices (from --devices and
// --device_memory) and its host memory.
#ifndef PLATEAU_WORKER_AGENT_DEVICES_H_
#define PLATEAU_WORKER_AGENT_DEVICES_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/node.pb.h"

namespace plateau::worker {

// "cpu:N" gives N CPU devices of device_memory_bytes each (the CPU backend's
// device pool cap, DESIGN.md section 5); "auto" is "cpu:1" while the engine
// trains on the CPU backend only. "cuda" is refused for the same reason.
// Errors name the flag and the accepted forms.
absl::StatusOr<std::vector<v1::Device>> DevicesOf(const std::string& flag,
                                                  int64_t device_memory_bytes);

// Physical memory of this machine.
int64_t HostMemoryBytes();

}  // namespace plateau::worker

#endif  // PLATEAU_WORKER_AGENT_DEVICES_H_
