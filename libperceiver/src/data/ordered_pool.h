// A bounded pool of worker threads that computes produce(0), produce(1), ... in parallel and
// hands the results out in index order. Used by perceiver-prep (clips → shards) and the loader
// (batches). Order makes the output independent of the number of workers and of timing; the
// window bounds memory: a worker never starts item i before item i - window was taken.
// A worker's exception is stored with its index and rethrown by the next() that reaches that
// index (STYLE.md §5), so the items before it are still delivered; the destructor stops the
// workers, joins them and never throws.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "perceiver/error.h"

namespace perceiver {

template <class R>
class OrderedPool {
 public:
  /// `count` < 0 means an endless sequence. `on_start` (optional) runs first in each worker
  /// thread (the loader binds its threads to their cores there).
  OrderedPool(int workers, int64_t window, int64_t count, std::function<R(int64_t)> produce,
              std::function<void()> on_start = {})
      : window_(window), count_(count), produce_(std::move(produce)) {
    PCV_CHECK(workers >= 1 && window >= 1, "OrderedPool needs at least one worker and a window of 1 (got ", workers,
              ", ", window, ")");
    threads_.reserve(size_t(workers));
    try {
      for (int w = 0; w < workers; ++w)
        threads_.emplace_back([this, on_start] {
          if (on_start) on_start();
          work();
        });
    } catch (...) {
      stop_and_join();
      throw;
    }
  }
  OrderedPool(const OrderedPool&) = delete;
  OrderedPool& operator=(const OrderedPool&) = delete;
  ~OrderedPool() { stop_and_join(); }

  /// Index of the item next() returns.
  int64_t next_index() const {
    std::lock_guard lock(m_);
    return next_take_;
  }

  /// Waits for the next item in order; rethrows the exception its worker threw (the item after
  /// it is next in line either way).
  R next() {
    std::unique_lock lock(m_);
    PCV_CHECK(count_ < 0 || next_take_ < count_, "OrderedPool: all ", count_, " items were taken");
    const int64_t i = next_take_;
    cv_.wait(lock, [&] { return done_.count(i) || errors_.count(i); });
    ++next_take_;
    if (auto e = errors_.find(i); e != errors_.end()) {
      std::exception_ptr error = e->second;
      errors_.erase(e);
      lock.unlock();
      cv_.notify_all();
      std::rethrow_exception(error);
    }
    auto it = done_.find(i);
    R r = std::move(it->second);
    done_.erase(it);
    lock.unlock();
    cv_.notify_all();
    return r;
  }

 private:
  void stop_and_join() noexcept {
    {
      std::lock_guard lock(m_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
  }

  bool finished() const { return count_ >= 0 && next_claim_ >= count_; }

  void work() {
    while (true) {
      std::unique_lock lock(m_);
      cv_.wait(lock, [&] { return stop_ || finished() || next_claim_ < next_take_ + window_; });
      if (stop_ || finished()) return;
      const int64_t i = next_claim_++;
      lock.unlock();
      try {
        R r = produce_(i);
        lock.lock();
        done_.emplace(i, std::move(r));
      } catch (...) {
        lock.lock();
        errors_.emplace(i, std::current_exception());
      }
      lock.unlock();
      cv_.notify_all();
    }
  }

  mutable std::mutex m_;
  std::condition_variable cv_;
  const int64_t window_, count_;
  std::function<R(int64_t)> produce_;
  std::map<int64_t, R> done_;
  std::map<int64_t, std::exception_ptr> errors_;
  int64_t next_claim_ = 0, next_take_ = 0;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace perceiver
