// CpuPool: the CPU paths' own worker threads, for the work OpenBLAS does not parallelize (conv2d's
// im2col, scatters and per-thread GEMMs, batch norm, the elementwise layers). A Context owns one,
// sized from its thread count; the calling thread is lane 0, so a pool of n lanes starts n - 1 threads.
// Waiting is blocking (a mutex and condition variables), never spinning: on a machine with as many
// cores as lanes, shared with other processes (MPI ranks), a spinning waiter steals the core the
// lane it waits for needs. run() allocates nothing (the task is passed as a pointer and a trampoline).
// Lanes are fixed: run(fn) calls fn(lane) once for each lane, so a caller that splits work by lane
// gets the same split, and the same results bit for bit, on every call with the same lane count.
#pragma once

#include <algorithm>
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
  explicit CpuPool(int lanes);
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
    const int64_t used = std::max<int64_t>(1, std::min<int64_t>(lanes_, grain > 0 ? n / grain : n));
    if (used <= 1) {
      if (n > 0) fn(int64_t{0}, n);
      return;
    }
    run([&](int lane) {
      if (lane >= used) return;
      const int64_t begin = n * lane / used, end = n * (lane + 1) / used;
      if (begin < end) fn(begin, end);
    });
  }

 private:
  using Call = void (*)(void*, int);
  void run_erased(Call call, void* arg);
  void worker(int lane);

  int lanes_ = 1;
  std::vector<std::thread> threads_;
  std::mutex mutex_;
  std::condition_variable start_cv_, done_cv_;
  uint64_t generation_ = 0;  // bumped for each run(); workers wait for a new value
  int pending_ = 0;          // workers still running the current task
  bool stop_ = false;
  Call call_ = nullptr;
  void* arg_ = nullptr;
  std::exception_ptr error_;
};

}  // namespace qtrain
