// WorkerPool: helpers sleep on start_cv_ until a new generation (loop) is published, take iterations
// from a shared atomic counter, and report on done_cv_ when the counter is exhausted. parallel_for
// waits for every helper, so a helper can never miss a generation or see a stale loop.
#include "data/worker_pool.h"

#include <limits>

#include "framework/core/float_env.h"

namespace qtrain {

WorkerPool::WorkerPool(int threads) {
  for (int i = 1; i < threads; ++i) helpers_.emplace_back(&WorkerPool::helper_loop, this);
}

WorkerPool::~WorkerPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  start_cv_.notify_all();
  for (auto& t : helpers_) t.join();
}

void WorkerPool::parallel_for(int64_t n, const std::function<void(int64_t)>& fn) {
  if (n <= 0) return;
  if (helpers_.empty() || n == 1) {
    std::exception_ptr first;
    for (int64_t i = 0; i < n; ++i) {
      try {
        fn(i);
      } catch (...) {
        if (!first) first = std::current_exception();
      }
    }
    if (first) std::rethrow_exception(first);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    fn_ = &fn;
    n_ = n;
    next_.store(0);
    error_ = nullptr;
    error_index_ = std::numeric_limits<int64_t>::max();
    busy_ = static_cast<int>(helpers_.size());
    ++generation_;
  }
  start_cv_.notify_all();
  run_items();
  std::exception_ptr error;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    done_cv_.wait(lock, [&] { return busy_ == 0; });
    fn_ = nullptr;
    error = error_;
    error_ = nullptr;
  }
  if (error) std::rethrow_exception(error);
}

void WorkerPool::run_items() {
  for (;;) {
    const int64_t i = next_.fetch_add(1);
    if (i >= n_) return;
    try {
      (*fn_)(i);
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (i < error_index_) {
        error_index_ = i;
        error_ = std::current_exception();
      }
    }
  }
}

void WorkerPool::helper_loop() {
  flush_subnormals();
  uint64_t seen = 0;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      start_cv_.wait(lock, [&] { return stopping_ || generation_ != seen; });
      if (stopping_) return;
      seen = generation_;
    }
    run_items();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      --busy_;
    }
    done_cv_.notify_all();
  }
}

}  // namespace qtrain
