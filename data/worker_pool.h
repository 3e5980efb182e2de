// WorkerPool: a fixed set of threads that run the iterations of one loop together, the calling thread
// included. The Loader uses it to decode and augment the samples of a batch in parallel. Iterations
// must be independent (each writes its own output), so results never depend on the scheduling.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace qtrain {

class WorkerPool {
 public:
  // `threads` >= 1 threads in all: threads - 1 helpers are started, the caller of parallel_for is the last.
  explicit WorkerPool(int threads);
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  int threads() const { return static_cast<int>(helpers_.size()) + 1; }

  // Calls fn(i) for every i in [0, n) and returns when all calls are done. When calls throw, every
  // other call still runs and the exception of the lowest i is rethrown, the same one under any
  // scheduling. Not reentrant: one parallel_for at a time.
  void parallel_for(int64_t n, const std::function<void(int64_t)>& fn);

 private:
  void helper_loop();
  void run_items();

  std::vector<std::thread> helpers_;
  std::mutex mutex_;
  std::condition_variable start_cv_, done_cv_;
  // The current loop, published under mutex_ with a new generation.
  const std::function<void(int64_t)>* fn_ = nullptr;
  int64_t n_ = 0;
  std::atomic<int64_t> next_{0};
  uint64_t generation_ = 0;
  int busy_ = 0;  // helpers still working on the current generation
  bool stopping_ = false;
  int64_t error_index_ = 0;
  std::exception_ptr error_;
};

}  // namespace qtrain
