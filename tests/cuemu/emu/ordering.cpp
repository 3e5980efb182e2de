#include "tests/cuemu/emu/ordering.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <vector>

#include "tests/cuemu/emu/memory.h"
#include "tests/cuemu/emu/scheduler.h"

namespace cuemu {
namespace {

struct Access {
  std::uintptr_t begin, end;
  bool write;
  std::uint64_t position;
  const char* what;  // a kernel's or call's name (string literals)
};

// `own_position` of the waiting stream is ordered after `on` up to `position`.
struct Wait {
  std::uint64_t own_position;
  CUstream_st* on;
  std::uint64_t position;
};

struct StreamState {
  bool non_blocking = false;
  std::uint64_t position = 0;
  std::vector<Access> pending;
  std::vector<Wait> waits;
};

struct State {
  std::mutex mutex;
  std::map<CUstream_st*, StreamState> streams;
};

State& state() {
  static State* s = new State;  // never destroyed: streams may be released from static destructors
  return *s;
}

void done_locked(State& st, CUstream_st* s, std::uint64_t position, int depth) {
  auto it = st.streams.find(s);
  if (it == st.streams.end() || depth > 64) return;
  StreamState& ss = it->second;
  std::erase_if(ss.pending, [&](const Access& a) { return a.position <= position; });
  std::vector<Wait> implied;
  std::erase_if(ss.waits, [&](const Wait& w) {
    if (w.own_position > position) return false;
    implied.push_back(w);
    return true;
  });
  for (const Wait& w : implied) done_locked(st, w.on, w.position, depth + 1);
}

}  // namespace

void set_stream_non_blocking(CUstream_st* s, bool non_blocking) {
  State& st = state();
  std::lock_guard<std::mutex> lock(st.mutex);
  st.streams[s].non_blocking = non_blocking;
}

void forget_stream(CUstream_st* s) {
  State& st = state();
  std::lock_guard<std::mutex> lock(st.mutex);
  st.streams.erase(s);
}

void stream_access(CUstream_st* s, const void* p, std::size_t bytes, bool write, const char* what) {
  if (p == nullptr) return;
  const std::size_t n = bytes != 0 ? bytes : bytes_to_allocation_end(p);
  if (n == 0) return;  // memory outside the emulator's allocations: host code's own
  const auto begin = reinterpret_cast<std::uintptr_t>(p), end = begin + n;
  State& st = state();
  std::lock_guard<std::mutex> lock(st.mutex);
  const auto it = st.streams.find(s);
  if (it != st.streams.end() && it->second.non_blocking) {
    StreamState& ss = it->second;
    ss.pending.push_back({begin, end, write, ++ss.position, what});
    return;
  }
  for (const auto& [other, os] : st.streams) {
    if (!os.non_blocking) continue;
    for (const Access& a : os.pending)
      if (a.begin < end && begin < a.end && (a.write || write))
        fail(
            "unordered access: %s %s [%p, +%zu bytes) on the legacy stream, which is not ordered with non-blocking "
            "stream %p, where %s may still %s [%p, +%zu bytes): synchronize that stream first (or make the legacy "
            "stream wait for an event recorded on it)",
            what, write ? "writes" : "reads", p, n, static_cast<void*>(other), a.what, a.write ? "write" : "read",
            reinterpret_cast<void*>(a.begin), static_cast<std::size_t>(a.end - a.begin));
  }
}

std::uint64_t stream_position(CUstream_st* s) {
  State& st = state();
  std::lock_guard<std::mutex> lock(st.mutex);
  const auto it = st.streams.find(s);
  return it == st.streams.end() ? 0 : it->second.position;
}

void stream_done_up_to(CUstream_st* s, std::uint64_t position) {
  State& st = state();
  std::lock_guard<std::mutex> lock(st.mutex);
  done_locked(st, s, position, 0);
}

void stream_done(CUstream_st* s) { stream_done_up_to(s, UINT64_MAX); }

void device_done() {
  State& st = state();
  std::lock_guard<std::mutex> lock(st.mutex);
  for (auto& [s, ss] : st.streams) {
    ss.pending.clear();
    ss.waits.clear();
  }
}

void stream_waits(CUstream_st* waiter, CUstream_st* s, std::uint64_t position) {
  State& st = state();
  std::lock_guard<std::mutex> lock(st.mutex);
  const auto w = st.streams.find(waiter);
  if (w != st.streams.end() && w->second.non_blocking) {
    w->second.waits.push_back({w->second.position, s, position});
    return;
  }
  done_locked(st, s, position, 0);  // the legacy stream's later work is ordered after it
}

}  // namespace cuemu
