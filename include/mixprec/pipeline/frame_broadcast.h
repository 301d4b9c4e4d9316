#pragma once
// Fan-out of a live stream's frames to any number of viewers without ever slowing the producer.
//
// The producer publishes each frame once; the broadcast keeps only the newest. A viewer asks for
// "the newest frame after the one I sent last" and gets it, skipping whatever it was too slow
// to send: a slow viewer drops frames for itself only, and memory stays one frame (plus the ones
// viewers are still writing) whatever the number of viewers. Publishing takes a lock for a
// pointer swap, never waits for a viewer.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace mixprec::pipeline {

// One frame of every stream, encoded once for all viewers.
struct EncodedFrames {
  int64_t index = 0;              // the generator's frame number
  std::vector<std::string> jpeg;  // one image per stream
};

class FrameBroadcast {
 public:
  struct Delivery {
    std::shared_ptr<const EncodedFrames> frames;  // null: timed out, or closed
    uint64_t sequence = 0;                        // 1 for the first frame published, then 2, ...
    uint64_t skipped = 0;  // frames published since `after` that this viewer never got
  };

  // Makes `frames` the newest and wakes every waiting viewer.
  void publish(std::shared_ptr<const EncodedFrames> frames);

  // The newest frames with a sequence number above `after` (0: any), waiting up to `timeout`
  // for one. After close(), returns at once with no frames.
  Delivery wait_newer(uint64_t after, std::chrono::milliseconds timeout);

  // Wakes every viewer for good: the server is shutting down.
  void close();
  bool closed() const;

 private:
  mutable std::mutex mutex_;
  std::condition_variable published_;
  std::shared_ptr<const EncodedFrames> newest_;
  uint64_t sequence_ = 0;
  bool closed_ = false;
};

// At most `limit` viewers at a time: join() hands out a seat or refuses, and a seat frees itself
// when its holder goes away (RAII), whatever way the viewer's connection ends.
class ViewerSeats {
 public:
  explicit ViewerSeats(int64_t limit) : limit_(limit) {}

  class Seat {
   public:
    explicit Seat(std::atomic<int64_t>& taken) : taken_(&taken) {}
    Seat(Seat&& other) noexcept : taken_(std::exchange(other.taken_, nullptr)) {}
    Seat& operator=(Seat&&) = delete;
    Seat(const Seat&) = delete;
    ~Seat() {
      if (taken_) taken_->fetch_sub(1);
    }

   private:
    std::atomic<int64_t>* taken_;
  };

  std::optional<Seat> join();
  int64_t taken() const { return taken_.load(); }
  int64_t limit() const { return limit_; }

 private:
  const int64_t limit_;
  std::atomic<int64_t> taken_{0};
};

}  // namespace mixprec::pipeline
