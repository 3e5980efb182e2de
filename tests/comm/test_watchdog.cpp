// The watchdog (comm/watchdog.h) without MPI: its action gets a message naming the operation, the
// activity and the peer once a watch waits past the timeout; progress, idle threads, a stopped
// watchdog and timeout 0 never trigger it. The whole job's behaviour (a stopped rank under mpirun)
// is tests/e2e/mpi_watchdog.sh.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <mutex>
#include <string>
#include <thread>

#include "comm/watchdog.h"

using namespace qtrain;
using Catch::Contains;
using namespace std::chrono_literals;

namespace {

// What the watchdog's action saw (the action runs on the watchdog's thread).
struct Fired {
  std::mutex mutex;
  std::string message;
  std::atomic<int> count{0};
  std::function<void(const std::string&)> action() {
    return [this](const std::string& m) {
      std::lock_guard<std::mutex> lock(mutex);
      message = m;
      ++count;
    };
  }
  // Waits up to `limit` for the action (a bound against a hang, not a timing check).
  bool wait(std::chrono::seconds limit) {
    const auto end = std::chrono::steady_clock::now() + limit;
    while (count.load() == 0 && std::chrono::steady_clock::now() < end) std::this_thread::sleep_for(10ms);
    return count.load() > 0;
  }
};

}  // namespace

TEST_CASE("watchdog: a wait past the timeout names the operation, the activity and the peer", "[comm][watchdog]") {
  Fired fired;
  start_watchdog(0.2, "rank 1 of 4 on node7", fired.action());
  {
    const WatchActivity activity("step 7, exchange of bucket 2 of 3");
    CommWatch outer("all_to_all_streamed");
    {
      CommWatch inner("a streamed message");  // nested: the outermost operation is reported
      inner.waiting_for(3);
      REQUIRE(fired.wait(30s));
    }
  }
  stop_watchdog();
  std::lock_guard<std::mutex> lock(fired.mutex);
  CHECK(fired.count.load() == 1);  // once
  CHECK_THAT(fired.message, Contains("rank 1 of 4 on node7") && Contains("all_to_all_streamed") &&
                                Contains("step 7, exchange of bucket 2 of 3") && Contains("waiting for rank 3") &&
                                Contains("communication.timeout_s is 0.2") && Contains("--resume"));
}

TEST_CASE("watchdog: a library collective waits for every rank; no activity is said as such", "[comm][watchdog]") {
  Fired fired;
  start_watchdog(0.1, "rank 0 of 2 on a", fired.action());
  {
    CommWatch w("barrier");
    REQUIRE(fired.wait(30s));
  }
  stop_watchdog();
  std::lock_guard<std::mutex> lock(fired.mutex);
  CHECK_THAT(fired.message, Contains("in barrier (outside training), waiting for every rank"));
}

TEST_CASE("watchdog: progress, idle threads, a stopped watchdog and timeout 0 never trigger it", "[comm][watchdog]") {
  Fired fired;
  SECTION("progress restarts the clock") {
    // The watch lasts twice the timeout; each step is far shorter than it.
    start_watchdog(1.0, "r", fired.action());
    {
      CommWatch w("ring allreduce");
      for (int i = 0; i < 100; ++i) {
        std::this_thread::sleep_for(20ms);
        w.progress();
      }
    }
    std::this_thread::sleep_for(1500ms);  // idle: no watch is open
    stop_watchdog();
  }
  SECTION("a stopped watchdog") {
    start_watchdog(0.05, "r", fired.action());
    stop_watchdog();
    CommWatch w("barrier");
    std::this_thread::sleep_for(300ms);
  }
  SECTION("timeout 0 is off") {
    start_watchdog(0, "r", fired.action());
    CommWatch w("barrier");
    std::this_thread::sleep_for(300ms);
    stop_watchdog();
  }
  CHECK(fired.count.load() == 0);
}

TEST_CASE("watchdog: another thread's wait is reported with that thread's activity", "[comm][watchdog]") {
  Fired fired;
  const WatchActivity mine("the main thread's activity");
  start_watchdog(0.2, "r", fired.action());
  std::thread exchange([&] {
    const WatchActivity activity("step 3, exchange of bucket 1 of 1");
    CommWatch w("wait_any");
    w.waiting_for(2);
    fired.wait(30s);
  });
  exchange.join();
  stop_watchdog();
  std::lock_guard<std::mutex> lock(fired.mutex);
  REQUIRE(fired.count.load() == 1);
  CHECK_THAT(fired.message, Contains("wait_any (step 3, exchange of bucket 1 of 1), waiting for rank 2"));
}
