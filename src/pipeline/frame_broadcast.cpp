#include "mixprec/pipeline/frame_broadcast.h"

namespace mixprec::pipeline {

void FrameBroadcast::publish(std::shared_ptr<const EncodedFrames> frames) {
  {
    std::lock_guard lock(mutex_);
    newest_ = std::move(frames);  // the frame it replaces is freed by its last viewer
    ++sequence_;
  }
  published_.notify_all();
}

FrameBroadcast::Delivery FrameBroadcast::wait_newer(uint64_t after,
                                                    std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  published_.wait_for(lock, timeout, [&] { return closed_ || sequence_ > after; });
  if (closed_ || sequence_ <= after) return {};
  return {newest_, sequence_, after == 0 ? 0 : sequence_ - after - 1};
}

void FrameBroadcast::close() {
  {
    std::lock_guard lock(mutex_);
    closed_ = true;
  }
  published_.notify_all();
}

bool FrameBroadcast::closed() const {
  std::lock_guard lock(mutex_);
  return closed_;
}

std::optional<ViewerSeats::Seat> ViewerSeats::join() {
  int64_t taken = taken_.load();
  do {
    if (taken >= limit_) return std::nullopt;
  } while (!taken_.compare_exchange_weak(taken, taken + 1));
  return Seat(taken_);
}

}  // namespace mixprec::pipeline
