// CpuPool: the CPU paths' own worker threads, for the work OpenBLAS does not parallelize (conv2d's
// im2col, scatters and per-thread GEMMs, batch norm, the elementwise layers). A Context owns one,
// sized from its thread count; the calling thread is lane 0, so a pool of n lanes starts n - 1 threads.
// A waiting thread (a worker between tasks, the caller for the workers to finish) polls for up to
// spin_us microseconds, then sleeps on a condition variable. The poll is for the chains of short
// passes of a training step: there a task follows the last one within microseconds, and waking a
// sleeping thread goes through the kernel each time (on a guest where system calls are costly, the
// MNIST MLP's step took 9% less with threads that poll, ../docs/performance.md). The bound keeps the
// cost where lanes share cores with other threads or processes (the loader, MPI ranks): a poll
// yields the core between rounds of checks and gives up after spin_us.
// run() allocates nothing (the task is passed as a pointer and a trampoline).
// Lanes are fixed: run(fn) calls fn(lane) once for each lane, so a caller that splits work by lane
// gets the same split, and the same results bit for bit, on every call with the same lane count.
#pragma once

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

namespace qtrain {

class CpuPool {
 public:
  static constexpr int kDefaultSpinUs = 100;
  explicit CpuPool(int lanes, int spin_us = kDefaultSpinUs);
  ~CpuPool();
  CpuPool(const CpuPool&) = delete;
  CpuPool& operator=(const CpuPool&) = delete;

  int lanes() const { return lanes_; }

  // Calls fn(lane) for every lane in [0, lanes()) (lane 0 on the calling thread) and returns when all
  // have finished; an exception from any lane is rethrown here. A call from inside a task (nested)
  // runs every lane on the calling thread, one after the other.
  template <typename F>
  void run(F&& fn) {
    using Fn = std::remove_reference_t<F>;
    void* arg = const_cast<void*>(static_cast<const void*>(&fn));
    run_erased([](void* f, int lane) { (*static_cast<Fn*>(f))(lane); }, arg);
  }

  // Splits [0, n) into lanes() contiguous ranges (lane l gets [n*l/L, n*(l+1)/L)) and calls
  // fn(begin, end) for each non-empty one. Ranges below `grain` items per lane use fewer lanes (so
  // small loops do not pay a wake-up); the split depends only on n, grain and lanes().
  template <typename F>
  void parallel_for(int64_t n, int64_t grain, F&& fn) {
    parallel_for_lanes(n, grain, [&](int, int64_t begin, int64_t end) { fn(begin, end); });
  }
  // parallel_for that also tells fn(lane, begin, end) which lane runs the range (lane < lanes()), for
  // work that needs a scratch buffer per lane.
  template <typename F>
  void parallel_for_lanes(int64_t n, int64_t grain, F&& fn) {
    const int64_t used = std::max<int64_t>(1, std::min<int64_t>(lanes_, grain > 0 ? n / grain : n));
    if (used <= 1) {
      if (n > 0) fn(0, int64_t{0}, n);
      return;
    }
    run([&](int lane) {
      if (lane >= used) return;
      const int64_t begin = n * lane / used, end = n * (lane + 1) / used;
      if (begin < end) fn(lane, begin, end);
    });
  }

 private:
  using Call = void (*)(void*, int);
  void run_erased(Call call, void* arg);
  void worker(int lane);
  // Polls `ready` for up to spin_us_; whether it became true.
  template <typename Ready>
  bool poll(Ready&& ready) const;

  int lanes_ = 1;
  int spin_us_ = 0;
  std::vector<std::thread> threads_;
  std::mutex mutex_;  // guards the sleeps, error_ and the hand-over of call_/arg_ to sleeping workers
  std::condition_variable start_cv_, done_cv_;
  // Bumped for each run() after call_/arg_ are set (release); workers wait for a new value.
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};  // workers still running the current task
  std::atomic<bool> stop_{false};
  Call call_ = nullptr;
  void* arg_ = nullptr;
  std::exception_ptr error_;
};

}  // namespace qtrain
