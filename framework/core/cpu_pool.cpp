// CpuPool: worker threads that sleep on a condition variable between tasks (see cpu_pool.h).
#include "framework/core/cpu_pool.h"

#include <algorithm>

#include "framework/core/check.h"

namespace qtrain {

namespace {
// True on a pool's worker threads and on a caller inside run(): a nested run() then runs serially
// instead of waiting for workers that are busy with the outer task.
thread_local bool t_in_pool = false;
}  // namespace

CpuPool::CpuPool(int lanes) : lanes_(std::max(1, lanes)) {
  QT_CHECK(lanes >= 1 && lanes <= 1024, "CpuPool: {} lanes, expected 1..1024", lanes);
  threads_.reserve(static_cast<size_t>(lanes_ - 1));
  for (int lane = 1; lane < lanes_; ++lane) threads_.emplace_back([this, lane] { worker(lane); });
}

CpuPool::~CpuPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  start_cv_.notify_all();
  for (std::thread& t : threads_) t.join();
}

void CpuPool::worker(int lane) {
  t_in_pool = true;
  uint64_t seen = 0;
  for (;;) {
    Call call;
    void* arg;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      start_cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      call = call_;
      arg = arg_;
    }
    std::exception_ptr error;
    try {
      call(arg, lane);
    } catch (...) {
      error = std::current_exception();
    }
    std::lock_guard<std::mutex> lock(mutex_);
    if (error && !error_) error_ = error;
    if (--pending_ == 0) done_cv_.notify_one();
  }
}

void CpuPool::run_erased(Call call, void* arg) {
  if (lanes_ == 1 || t_in_pool) {
    for (int lane = 0; lane < lanes_; ++lane) call(arg, lane);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    call_ = call;
    arg_ = arg;
    pending_ = lanes_ - 1;
    error_ = nullptr;
    ++generation_;
  }
  start_cv_.notify_all();
  std::exception_ptr error;
  t_in_pool = true;
  try {
    call(arg, 0);
  } catch (...) {
    error = std::current_exception();
  }
  t_in_pool = false;
  std::unique_lock<std::mutex> lock(mutex_);
  done_cv_.wait(lock, [&] { return pending_ == 0; });
  if (!error) error = error_;
  error_ = nullptr;
  lock.unlock();
  if (error) std::rethrow_exception(error);
}

}  // namespace qtrain
