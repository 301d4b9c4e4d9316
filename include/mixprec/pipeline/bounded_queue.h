#pragma once
// BoundedQueue: the hand-over between two pipeline stages. A fixed capacity is what turns a slow
// consumer into backpressure instead of unbounded memory: a producer either waits for room
// (push) or learns at once that there is none (try_push) and can count the frame as dropped.
// close() ends the stream: pushes fail from then on, pops drain what is left and then return
// nothing, so every stage can shut down in order without losing an item already queued.
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include "mixprec/core/error.h"

namespace mixprec::pipeline {

template <class T>
class BoundedQueue {
 public:
  explicit BoundedQueue(std::size_t capacity) : capacity_(capacity) {
    MIXPREC_CHECK(capacity >= 1, "[BoundedQueue] capacity must be >= 1");
  }

  // Waits while the queue is full. False (item not taken) once the queue is closed.
  bool push(T item) {
    std::unique_lock lock(mutex_);
    not_full_.wait(lock, [&] { return closed_ || items_.size() < capacity_; });
    if (closed_) return false;
    items_.push_back(std::move(item));
    not_empty_.notify_one();
    return true;
  }

  // Never waits: false (item left untouched) when the queue is full or closed.
  bool try_push(T& item) {
    std::lock_guard lock(mutex_);
    if (closed_ || items_.size() >= capacity_) return false;
    items_.push_back(std::move(item));
    not_empty_.notify_one();
    return true;
  }

  // Waits for an item; nothing once the queue is closed and empty.
  std::optional<T> pop() {
    std::unique_lock lock(mutex_);
    not_empty_.wait(lock, [&] { return closed_ || !items_.empty(); });
    return take_locked();
  }

  // A batch: waits for a first item, then up to `max_delay` more for the batch to fill to
  // `max_items` (whatever is there when the delay runs out, or the queue closes). Empty only
  // when the queue is closed and drained.
  std::vector<T> pop_batch(std::size_t max_items, std::chrono::steady_clock::duration max_delay) {
    std::vector<T> batch;
    std::unique_lock lock(mutex_);
    not_empty_.wait(lock, [&] { return closed_ || !items_.empty(); });
    const auto deadline = std::chrono::steady_clock::now() + max_delay;
    while (batch.size() < max_items) {
      if (std::optional<T> item = take_locked()) {
        batch.push_back(std::move(*item));
        continue;
      }
      if (closed_ || batch.empty()) break;
      if (!not_empty_.wait_until(lock, deadline, [&] { return closed_ || !items_.empty(); }))
        break;  // the delay ran out: a partial batch
    }
    return batch;
  }

  void close() {
    std::lock_guard lock(mutex_);
    closed_ = true;
    not_empty_.notify_all();
    not_full_.notify_all();
  }

  std::size_t size() const {
    std::lock_guard lock(mutex_);
    return items_.size();
  }
  std::size_t capacity() const { return capacity_; }

 private:
  std::optional<T> take_locked() {
    if (items_.empty()) return std::nullopt;
    T item = std::move(items_.front());
    items_.pop_front();
    not_full_.notify_one();
    return item;
  }

  const std::size_t capacity_;
  mutable std::mutex mutex_;
  std::condition_variable not_empty_, not_full_;
  std::deque<T> items_;
  bool closed_ = false;
};

}  // namespace mixprec::pipeline
