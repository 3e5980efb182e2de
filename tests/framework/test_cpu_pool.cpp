// CpuPool: every lane runs once per run(), parallel_for covers its range exactly with the fixed
// split, exceptions reach the caller, and a nested run() completes on the calling thread.
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

#include "framework/core/cpu_pool.h"
#include "framework/core/float_env.h"

using namespace qtrain;

TEST_CASE("CpuPool runs every lane once per call, many calls in a row", "[core][cpu_pool]") {
  for (int lanes : {1, 2, 3}) {
    CpuPool pool(lanes);
    REQUIRE(pool.lanes() == lanes);
    std::vector<int> counts(static_cast<size_t>(lanes), 0);
    for (int call = 0; call < 500; ++call) pool.run([&](int lane) { ++counts[static_cast<size_t>(lane)]; });
    for (int c : counts) REQUIRE(c == 500);
  }
}

TEST_CASE("CpuPool::parallel_for splits a range into fixed contiguous pieces", "[core][cpu_pool]") {
  CpuPool pool(3);
  std::vector<int> hits(100, 0);
  std::vector<std::pair<int64_t, int64_t>> pieces;
  std::mutex mutex;
  std::atomic<int> calls{0};
  pool.parallel_for(100, 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) ++hits[static_cast<size_t>(i)];
    std::lock_guard<std::mutex> lock(mutex);
    pieces.push_back({b, e});
    ++calls;
  });
  for (int h : hits) REQUIRE(h == 1);
  REQUIRE(calls == 3);
  std::sort(pieces.begin(), pieces.end());
  REQUIRE(pieces == std::vector<std::pair<int64_t, int64_t>>{{0, 33}, {33, 66}, {66, 100}});
  // Below the grain: one piece, on the calling thread.
  calls = 0;
  pool.parallel_for(100, 60, [&](int64_t b, int64_t e) {
    REQUIRE(b == 0);
    REQUIRE(e == 100);
    ++calls;
  });
  REQUIRE(calls == 1);
  pool.parallel_for(0, 1, [&](int64_t, int64_t) { ++calls; });
  REQUIRE(calls == 1);
}

TEST_CASE("CpuPool rethrows a lane's exception and stays usable", "[core][cpu_pool]") {
  CpuPool pool(2);
  REQUIRE_THROWS_WITH(pool.run([](int lane) {
    if (lane == 1) throw std::runtime_error("lane 1 failed");
  }),
                      "lane 1 failed");
  int sum = 0;
  pool.run([&](int lane) {
    if (lane == 0) sum += 1;
  });
  REQUIRE(sum == 1);
}

TEST_CASE("CpuPool runs a nested call on the calling thread", "[core][cpu_pool]") {
  CpuPool pool(2);
  std::vector<std::vector<int>> inner(2);
  pool.run([&](int outer) { pool.run([&](int lane) { inner[static_cast<size_t>(outer)].push_back(lane); }); });
  REQUIRE(inner[0] == std::vector<int>{0, 1});
  REQUIRE(inner[1] == std::vector<int>{0, 1});
}

TEST_CASE("CpuPool hands tasks over whether its threads poll or sleep between them", "[core][cpu_pool]") {
  // spin 0: every wait sleeps; 100 us: back-to-back calls are caught polling and calls after a pause
  // find the threads asleep; 200 ms: every wait of this test polls.
  for (int spin_us : {0, 100, 200000}) {
    CpuPool pool(3, spin_us);
    std::vector<int> counts(3, 0);
    for (int call = 0; call < 300; ++call) pool.run([&](int lane) { ++counts[static_cast<size_t>(lane)]; });
    for (int call = 0; call < 5; ++call) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      pool.run([&](int lane) { ++counts[static_cast<size_t>(lane)]; });
    }
    for (int c : counts) REQUIRE(c == 305);
    // A lane that outlasts the caller's poll: the caller sleeps until it finishes.
    std::atomic<int> done{0};
    pool.run([&](int lane) {
      if (lane == 2) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      ++done;
    });
    REQUIRE(done == 3);
    REQUIRE_THROWS_WITH(pool.run([](int lane) {
      if (lane == 1) throw std::runtime_error("lane 1 failed");
    }),
                        "lane 1 failed");
  }
}

// Every lane computes with subnormals flushed (framework/core/float_env.h), each setting the flags
// itself: the pool is built on a thread that keeps subnormals, so a lane that inherited its creator's
// flags would report them.
TEST_CASE("CpuPool's lanes compute with subnormals flushed, set by each lane itself", "[core][cpu_pool][float_env]") {
  if (!subnormals_flushable()) {
    WARN("no flush-to-zero mode on this architecture: nothing to check");
    return;
  }
  for (int lanes : {1, 2, 4}) {
    std::vector<int> flushed(static_cast<size_t>(lanes), -1);
    std::vector<unsigned long> words(static_cast<size_t>(lanes), 0);
    bool creator_flushed = true;
    // No Catch2 assertion on this thread (they are not thread-safe; a failing REQUIRE would throw here).
    std::thread creator([&] {
      keep_subnormals();
      creator_flushed = subnormals_flushed();
      CpuPool pool(lanes);
      for (int call = 0; call < 3; ++call)
        pool.run([&](int lane) {
          flushed[static_cast<size_t>(lane)] = subnormals_flushed() ? 1 : 0;
          words[static_cast<size_t>(lane)] = float_control_word();
        });
    });
    creator.join();
    REQUIRE_FALSE(creator_flushed);  // the probe tells the two modes apart
    for (int lane = 0; lane < lanes; ++lane) {
      INFO("lane " << lane << " of " << lanes << ", control word 0x" << std::hex << words[static_cast<size_t>(lane)]);
      CHECK(flushed[static_cast<size_t>(lane)] == 1);
    }
  }
}
