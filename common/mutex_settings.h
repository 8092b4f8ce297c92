// Debian builds abseil with Mutex deadlock detection on, which records every
// lock acquisition in a global graph: a cost on every lock of every thread.
// Binaries turn it off at start-up; tests keep it, to catch lock-order
// mistakes.
#ifndef PLATEAU_COMMON_MUTEX_SETTINGS_H_
#define PLATEAU_COMMON_MUTEX_SETTINGS_H_

#include "absl/synchronization/mutex.h"

namespace plateau {

inline void DisableMutexDeadlockDetection() {
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
}

}  // namespace plateau

#endif  // PLATEAU_COMMON_MUTEX_SETTINGS_H_
