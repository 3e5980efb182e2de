// The watchdog thread and the per-thread wait records it reads.
#include "comm/watchdog.h"

#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <vector>

#include <fmt/format.h>

namespace qtrain {
namespace {

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// One thread's wait, written by that thread and read by the watchdog.
struct Slot {
  std::atomic<int64_t> since_ns{0};  // when the wait began or last progressed; 0: not waiting
  std::atomic<const char*> operation{nullptr};
  std::atomic<int> peer{-1};
  int depth = 0;  // nested watches; only the owning thread touches it
  std::mutex activity_mutex;
  std::string activity;
};

// The live threads' slots. Never destroyed: a thread may end after static destruction began.
struct Registry {
  std::mutex mutex;
  std::vector<Slot*> slots;
};
Registry& registry() {
  static auto* r = new Registry;
  return *r;
}

// Registers the thread's slot on first use and removes it when the thread ends.
struct SlotOwner {
  Slot slot;
  SlotOwner() {
    std::lock_guard<std::mutex> lock(registry().mutex);
    registry().slots.push_back(&slot);
  }
  ~SlotOwner() {
    std::lock_guard<std::mutex> lock(registry().mutex);
    auto& s = registry().slots;
    s.erase(std::remove(s.begin(), s.end(), &slot), s.end());
  }
};

Slot& my_slot() {
  thread_local SlotOwner owner;
  return owner.slot;
}

struct Watchdog {
  std::mutex mutex;
  std::condition_variable cv;
  std::thread thread;
  bool stopping = false;
  double timeout_s = 0;
  std::string who;
  std::function<void(const std::string&)> on_timeout;
};
Watchdog& dog() {
  static auto* d = new Watchdog;  // never destroyed, like the registry
  return *d;
}

std::string describe(Slot& s, double waited_s, const Watchdog& d) {
  const char* op = s.operation.load();
  const int peer = s.peer.load();
  std::string activity;
  {
    std::lock_guard<std::mutex> lock(s.activity_mutex);
    activity = s.activity;
  }
  return fmt::format(
      "{}: watchdog: no progress for {:.1f} s in {} ({}), waiting for {}; communication.timeout_s is {:g}. A peer is "
      "stopped, stuck or unreachable: ending the job (resume from the last checkpoint with --resume)",
      d.who, waited_s, op ? op : "a collective", activity.empty() ? "outside training" : activity,
      peer >= 0 ? fmt::format("rank {}", peer) : std::string("every rank"), d.timeout_s);
}

void watch_loop() {
  Watchdog& d = dog();
  std::unique_lock<std::mutex> lock(d.mutex);
  const auto period = std::chrono::duration<double>(std::clamp(d.timeout_s / 4, 0.02, 1.0));
  const auto limit = static_cast<int64_t>(d.timeout_s * 1e9);
  while (!d.stopping) {
    d.cv.wait_for(lock, period);
    if (d.stopping) return;
    std::string message;
    {
      std::lock_guard<std::mutex> slots(registry().mutex);
      const int64_t now = now_ns();
      for (Slot* s : registry().slots) {
        const int64_t since = s->since_ns.load();
        if (since != 0 && now - since >= limit) {
          message = describe(*s, static_cast<double>(now - since) * 1e-9, d);
          break;
        }
      }
    }
    if (!message.empty()) {
      const auto action = d.on_timeout;
      lock.unlock();
      action(message);  // once: this thread ends here
      return;
    }
  }
}

}  // namespace

void start_watchdog(double timeout_s, std::string who, std::function<void(const std::string&)> on_timeout) {
  stop_watchdog();
  if (timeout_s <= 0) return;
  Watchdog& d = dog();
  std::lock_guard<std::mutex> lock(d.mutex);
  d.stopping = false;
  d.timeout_s = timeout_s;
  d.who = std::move(who);
  d.on_timeout = std::move(on_timeout);
  d.thread = std::thread(watch_loop);
}

void stop_watchdog() {
  Watchdog& d = dog();
  {
    std::lock_guard<std::mutex> lock(d.mutex);
    d.stopping = true;
  }
  d.cv.notify_all();
  if (d.thread.joinable()) d.thread.join();
}

void abort_mpi_job(const std::string& message) {
  std::fprintf(stderr, "error: %s\n", message.c_str());
  std::fflush(stderr);
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  // MPI_Abort reaches the other ranks through mpirun, which may itself wait on a host behind the
  // broken link: SIGALRM ends this process if the abort has not done so within 15 s.
  ::alarm(15);
  if (initialized && !finalized) MPI_Abort(MPI_COMM_WORLD, kWatchdogExitCode);
  std::_Exit(kWatchdogExitCode);  // MPI_Abort does not return; this process ends either way
}

CommWatch::CommWatch(const char* operation) {
  Slot& s = my_slot();
  outermost_ = s.depth++ == 0;
  if (!outermost_) return;
  s.operation.store(operation);
  s.peer.store(-1);
  s.since_ns.store(now_ns());
}

CommWatch::~CommWatch() {
  Slot& s = my_slot();
  --s.depth;
  if (outermost_) s.since_ns.store(0);
}

void CommWatch::waiting_for(int peer) { my_slot().peer.store(peer); }

void CommWatch::progress() {
  Slot& s = my_slot();
  if (s.depth > 0) s.since_ns.store(now_ns());
}

WatchActivity::WatchActivity(std::string what) {
  Slot& s = my_slot();
  std::lock_guard<std::mutex> lock(s.activity_mutex);
  previous_ = std::move(s.activity);
  s.activity = std::move(what);
}

WatchActivity::~WatchActivity() {
  Slot& s = my_slot();
  std::lock_guard<std::mutex> lock(s.activity_mutex);
  s.activity = std::move(previous_);
}

}  // namespace qtrain
