// CpuPool: worker threads that poll briefly, then sleep on a condition variable, between tasks (see
// cpu_pool.h).
#include "framework/core/cpu_pool.h"

#include <sched.h>

#include <algorithm>
#include <chrono>

#include "framework/core/check.h"
#include "framework/core/float_env.h"

namespace qtrain {

namespace {
// True on a pool's worker threads and on a caller inside run(): a nested run() then runs serially
// instead of waiting for workers that are busy with the outer task.
thread_local bool t_in_pool = false;
}  // namespace

CpuPool::CpuPool(int lanes, int spin_us) : lanes_(std::max(1, lanes)), spin_us_(std::max(0, spin_us)) {
  QT_CHECK(lanes >= 1 && lanes <= 1024, "CpuPool: {} lanes, expected 1..1024", lanes);
  flush_subnormals();  // lane 0 is the constructing thread: it computes like the others
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

template <typename Ready>
bool CpuPool::poll(Ready&& ready) const {
  if (ready()) return true;
  if (spin_us_ == 0) return false;
  const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(spin_us_);
  for (;;) {
    // A few checks between clock reads; yielding lets a thread that shares this core run.
    for (int i = 0; i < 16; ++i) {
      if (ready()) return true;
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
    }
    if (std::chrono::steady_clock::now() >= until) return ready();
    sched_yield();
  }
}

void CpuPool::worker(int lane) {
  flush_subnormals();
  t_in_pool = true;
  uint64_t seen = 0;
  for (;;) {
    auto started = [&] {
      return stop_.load(std::memory_order_acquire) || generation_.load(std::memory_order_acquire) != seen;
    };
    if (!poll(started)) {
      std::unique_lock<std::mutex> lock(mutex_);
      start_cv_.wait(lock, started);
    }
    if (stop_.load(std::memory_order_acquire)) return;
    // call_/arg_ were written before the generation's release store that `started` acquired.
    seen = generation_.load(std::memory_order_acquire);
    const Call call = call_;
    void* const arg = arg_;
    try {
      call(arg, lane);
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!error_) error_ = std::current_exception();
    }
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      // Under the mutex: a caller that found pending_ > 0 under it is already waiting on done_cv_.
      std::lock_guard<std::mutex> lock(mutex_);
      done_cv_.notify_one();
    }
  }
}

void CpuPool::run_erased(Call call, void* arg) {
  if (lanes_ == 1 || t_in_pool) {
    for (int lane = 0; lane < lanes_; ++lane) call(arg, lane);
    return;
  }
  {
    // Under the mutex: a worker that found no new generation under it is already waiting on start_cv_.
    std::lock_guard<std::mutex> lock(mutex_);
    call_ = call;
    arg_ = arg;
    error_ = nullptr;
    pending_.store(lanes_ - 1, std::memory_order_relaxed);
    generation_.fetch_add(1, std::memory_order_release);
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
  auto finished = [&] { return pending_.load(std::memory_order_acquire) == 0; };
  std::unique_lock<std::mutex> lock(mutex_, std::defer_lock);
  if (!poll(finished)) {
    lock.lock();
    done_cv_.wait(lock, finished);
  } else {
    lock.lock();  // error_ is written under the mutex
  }
  if (!error) error = error_;
  error_ = nullptr;
  lock.unlock();
  if (error) std::rethrow_exception(error);
}

}  // namespace qtrain
