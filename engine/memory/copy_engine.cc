#include "engine/memory/copy_engine.h"

#include <utility>

#include "kernels/tiered_update.h"

namespace plateau::engine {

CopyEngine::CopyEngine(kernels::Ops* ops)
    : ops_(ops), thread_([this] { Loop(); }) {}

CopyEngine::~CopyEngine() {
  {
    absl::MutexLock lock(&mutex_);
    stopping_ = true;
  }
  thread_.join();
}

CopyEngine::Ticket CopyEngine::ToHost(int64_t bytes, const void* device,
                                      void* host) {
  return Submit(
      [this, bytes, device, host] { ops_->CopyToHost(bytes, device, host); });
}

CopyEngine::Ticket CopyEngine::FromHost(int64_t bytes, const void* host,
                                        void* device) {
  return Submit(
      [this, bytes, host, device] { ops_->CopyFromHost(bytes, host, device); });
}

CopyEngine::Ticket CopyEngine::ToHostWidened(int64_t count,
                                             const uint16_t* device,
                                             uint16_t* bits, float* host) {
  return Submit([this, count, device, bits, host] {
    ops_->CopyToHost(count * int64_t{sizeof(uint16_t)}, device, bits);
    for (int64_t i = 0; i < count; ++i) {
      host[i] = kernels::Bfloat16ToFloat(bits[i]);
    }
  });
}

CopyEngine::Ticket CopyEngine::Submit(std::function<void()> copy) {
  absl::MutexLock lock(&mutex_);
  queue_.push_back(std::move(copy));
  return ++submitted_;
}

void CopyEngine::Wait(Ticket ticket) {
  struct Target {
    const Ticket* completed;
    Ticket ticket;
  };
  absl::MutexLock lock(&mutex_);
  Target target{&completed_, ticket};
  mutex_.Await(absl::Condition(
      +[](Target* target) { return *target->completed >= target->ticket; },
      &target));
}

void CopyEngine::Loop() {
  while (true) {
    std::function<void()> copy;
    {
      absl::MutexLock lock(&mutex_);
      mutex_.Await(absl::Condition(
          +[](CopyEngine* engine) ABSL_NO_THREAD_SAFETY_ANALYSIS {
            return engine->stopping_ || !engine->queue_.empty();
          },
          this));
      // Drains the queue before stopping: no submitted copy is dropped.
      if (queue_.empty()) return;
      copy = std::move(queue_.front());
      queue_.pop_front();
    }
    copy();
    absl::MutexLock lock(&mutex_);
    ++completed_;
  }
}

}  // namespace plateau::engine
