#include "tests/cuemu/emu/scheduler.h"

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <random>
#include <vector>

#include "tests/cuemu/emu/fiber.h"

// Every static __shared__ variable of the emulated sources lives in this section (see
// device_functions.h); its bounds come from the linker.
extern "C" char __start_cuemu_shared[] __attribute__((weak));
extern "C" char __stop_cuemu_shared[] __attribute__((weak));

namespace cuemu {

enum class Wait : uint8_t { Running, Ready, Warp, Block, Done };

struct ThreadState {
  FiberContext ctx;
  Wait wait = Wait::Ready;
  uint3v tid{};
  int linear = 0;
  // The collective or barrier this thread waits at.
  Site site{nullptr, 0};
  Collective op{};
  unsigned mask = 0;
  int arg = 0, width = 32;
  uint64_t value = 0, result = 0;
};

namespace {

struct Launch {
  const char* kernel = nullptr;
  Site site{};
  uint3v grid{}, block{}, block_idx{};
  void (*body)(void*) = nullptr;
  void* context = nullptr;
  std::vector<ThreadState> threads;
  FiberContext scheduler;
  ThreadState* running = nullptr;
};

thread_local Launch* g_launch = nullptr;
std::mutex g_launch_mutex;

const char* op_name(Collective op) {
  switch (op) {
    case Collective::ShflIdx: return "__shfl_sync";
    case Collective::ShflXor: return "__shfl_xor_sync";
    case Collective::ShflUp: return "__shfl_up_sync";
    case Collective::ShflDown: return "__shfl_down_sync";
    case Collective::Ballot: return "__ballot_sync";
    case Collective::Any: return "__any_sync";
    case Collective::All: return "__all_sync";
    case Collective::SyncWarp: return "__syncwarp";
  }
  return "?";
}

const char* wait_name(const ThreadState& t) {
  switch (t.wait) {
    case Wait::Warp: return op_name(t.op);
    case Wait::Block: return "__syncthreads";
    case Wait::Done: return "exit";
    default: return "running";
  }
}

// "kernel k (launched at f:l), block (x,y,z)": the prefix of every message about a launch.
void describe_launch(char* out, size_t size) {
  const Launch& l = *g_launch;
  std::snprintf(out, size, "kernel %s (launched at %s:%d), block (%u,%u,%u) of (%u,%u,%u), %u threads", l.kernel,
                l.site.file, l.site.line, l.block_idx.x, l.block_idx.y, l.block_idx.z, l.grid.x, l.grid.y, l.grid.z,
                l.block.x * l.block.y * l.block.z);
}

[[noreturn]] void fail_in_block(const char* what, const ThreadState& a, const ThreadState* b) {
  char where[512];
  describe_launch(where, sizeof where);
  if (b)
    fail("%s\n  in %s\n  thread (%u,%u,%u) at %s (%s:%d)\n  thread (%u,%u,%u) at %s (%s:%d)", what, where, a.tid.x, a.tid.y,
         a.tid.z, wait_name(a), a.site.file ? a.site.file : "-", a.site.line, b->tid.x, b->tid.y, b->tid.z, wait_name(*b),
         b->site.file ? b->site.file : "-", b->site.line);
  fail("%s\n  in %s\n  thread (%u,%u,%u) at %s (%s:%d)", what, where, a.tid.x, a.tid.y, a.tid.z, wait_name(a),
       a.site.file ? a.site.file : "-", a.site.line);
}

void fiber_entry() {
  Launch& l = *g_launch;
  fiber_started(l.scheduler);
  l.body(l.context);
  l.running->wait = Wait::Done;
  exit_fiber(l.running->ctx, l.scheduler);
}

// Gives control back to the block scheduler until this thread may go on.
void park(Wait wait) {
  Launch& l = *g_launch;
  l.running->wait = wait;
  switch_fiber(l.running->ctx, l.scheduler);
}

FiberStacks& stacks() {
  static thread_local FiberStacks s;
  return s;
}

// Resolves the collective all live lanes of a warp wait at.
void resolve_warp(ThreadState* lanes, int count) {
  const ThreadState& first = lanes[0];
  for (int l = 0; l < count; ++l) {
    const ThreadState& t = lanes[l];
    if (t.op != first.op || t.site.file != first.site.file || t.site.line != first.site.line)
      fail_in_block("lanes of one warp wait at different warp collectives (divergence)", first, &t);
    if (t.mask != first.mask) fail_in_block("lanes of one warp pass different masks to a warp collective", first, &t);
  }
  if (first.mask != 0xffffffffu || count != 32)
    fail_in_block(count != 32 ? "a full-mask warp collective in a warp of fewer than 32 threads (undefined in CUDA)"
                              : "a warp collective with a partial mask (not emulated: only full-warp masks are used)",
                  first, nullptr);
  uint64_t ballot = 0;
  bool all = true;
  for (int l = 0; l < 32; ++l) {
    ballot |= uint64_t{lanes[l].value != 0} << l;
    all = all && lanes[l].value != 0;
  }
  for (int l = 0; l < 32; ++l) {
    ThreadState& t = lanes[l];
    const int w = t.width;
    if (w < 1 || w > 32 || (w & (w - 1)) != 0) fail_in_block("a shuffle width that is not a power of two up to 32", t, nullptr);
    const int base = l / w * w;
    int src = l;
    switch (t.op) {
      case Collective::ShflIdx: src = base + (t.arg & (w - 1)); break;
      case Collective::ShflXor: src = l ^ t.arg; if (src < base || src >= base + w) src = l; break;
      case Collective::ShflUp: src = l - base >= t.arg ? l - t.arg : l; break;
      case Collective::ShflDown: src = l - base + t.arg < w ? l + t.arg : l; break;
      default: break;
    }
    switch (t.op) {
      case Collective::Ballot: t.result = ballot; break;
      case Collective::Any: t.result = ballot != 0; break;
      case Collective::All: t.result = all; break;
      case Collective::SyncWarp: t.result = 0; break;
      default: t.result = lanes[src].value;
    }
    t.wait = Wait::Ready;
  }
}

void poison_shared() {
  if (__start_cuemu_shared && __stop_cuemu_shared)
    std::memset(__start_cuemu_shared, schedule().poison, static_cast<size_t>(__stop_cuemu_shared - __start_cuemu_shared));
}

void run_block(Launch& l, std::mt19937_64& rng) {
  poison_shared();
  const int n = static_cast<int>(l.block.x * l.block.y * l.block.z);
  l.threads.assign(static_cast<size_t>(n), ThreadState{});
  FiberStacks& s = stacks();
  for (int i = 0; i < n; ++i) {
    ThreadState& t = l.threads[static_cast<size_t>(i)];
    t.linear = i;
    t.tid = {static_cast<unsigned>(i) % l.block.x, static_cast<unsigned>(i) / l.block.x % l.block.y,
             static_cast<unsigned>(i) / (l.block.x * l.block.y)};
    make_fiber(t.ctx, s.bottom(i), FiberStacks::size(), &fiber_entry);
  }
  const bool shuffled = schedule().seed != 0;
  const int warps = (n + 31) / 32;
  std::vector<int> ready, order;
  for (;;) {
    ready.clear();
    for (int w = 0; w < warps; ++w)
      for (int i = w * 32; i < std::min(n, w * 32 + 32); ++i)
        if (l.threads[static_cast<size_t>(i)].wait == Wait::Ready) {
          ready.push_back(w);
          break;
        }
    if (!ready.empty()) {
      // One warp runs ahead until each of its lanes waits or exits: warps race each other up to the
      // next __syncthreads, in index order or at random.
      const int w = shuffled ? ready[rng() % ready.size()] : ready[0];
      const int first = w * 32, count = std::min(32, n - first);
      order.resize(static_cast<size_t>(count));
      for (int i = 0; i < count; ++i) order[static_cast<size_t>(i)] = first + i;
      if (shuffled) std::shuffle(order.begin(), order.end(), rng);
      for (int i : order) {
        ThreadState& t = l.threads[static_cast<size_t>(i)];
        if (t.wait != Wait::Ready) continue;
        t.wait = Wait::Running;
        l.running = &t;
        switch_fiber(l.scheduler, t.ctx);
      }
      l.running = nullptr;
      ThreadState* lanes = &l.threads[static_cast<size_t>(first)];
      int at_warp = 0;
      const ThreadState* warp_waiter = nullptr;
      const ThreadState* other = nullptr;
      for (int i = 0; i < count; ++i) {
        if (lanes[i].wait == Wait::Warp) {
          ++at_warp;
          warp_waiter = &lanes[i];
        } else {
          other = &lanes[i];
        }
      }
      if (at_warp == count) resolve_warp(lanes, count);
      else if (at_warp > 0)
        fail_in_block("a warp collective reached by only part of a warp (the other lanes exited or wait at __syncthreads)",
                      *warp_waiter, other);
      continue;
    }
    int at_barrier = 0, done = 0;
    const ThreadState* waiting = nullptr;
    const ThreadState* exited = nullptr;
    for (const ThreadState& t : l.threads) {
      if (t.wait == Wait::Block) {
        ++at_barrier;
        if (!waiting) waiting = &t;
        else if (t.site.file != waiting->site.file || t.site.line != waiting->site.line)
          fail_in_block("threads of one block wait at different __syncthreads (divergent barrier)", *waiting, &t);
      } else if (t.wait == Wait::Done) {
        ++done;
        if (!exited) exited = &t;
      }
    }
    if (done == n) return;
    if (done > 0 && waiting) fail_in_block("__syncthreads after some threads of the block exited", *waiting, exited);
    if (at_barrier != n) fail_in_block("deadlock: no thread of the block can go on", l.threads[0], nullptr);
    for (ThreadState& t : l.threads) t.wait = Wait::Ready;
  }
}

uint64_t read_env(const char* name, uint64_t fallback) {
  const char* e = std::getenv(name);
  if (!e || !*e) return fallback;
  char* end = nullptr;
  const unsigned long long v = std::strtoull(e, &end, 0);
  if (*end != '\0') fail("%s=%s is not a number", name, e);
  return v;
}

}  // namespace

[[noreturn]] void fail(const char* fmt, ...) {
  std::fflush(stdout);
  std::fputs("cuemu: ", stderr);
  va_list args;
  va_start(args, fmt);
  std::vfprintf(stderr, fmt, args);
  va_end(args);
  std::fputc('\n', stderr);
  std::abort();
}

const Schedule& schedule() {
  static const Schedule s = [] {
    Schedule r;
    r.seed = read_env("CUEMU_SEED", 0);
    const uint64_t p = read_env("CUEMU_POISON", 0xFF);
    if (p > 0xFF) fail("CUEMU_POISON=%llu is not a byte", static_cast<unsigned long long>(p));
    r.poison = static_cast<unsigned char>(p);
    return r;
  }();
  return s;
}

ThreadState* current_thread() { return g_launch ? g_launch->running : nullptr; }

const uint3v& thread_index() {
  ThreadState* t = current_thread();
  if (!t) fail("threadIdx read outside a kernel");
  return t->tid;
}
const uint3v& block_index() { return g_launch->block_idx; }
const uint3v& block_dim() { return g_launch->block; }
const uint3v& grid_dim() { return g_launch->grid; }

void sync_block(Site site) {
  ThreadState* t = current_thread();
  if (!t) fail("__syncthreads() called outside a kernel (%s:%d)", site.file, site.line);
  t->site = site;
  park(Wait::Block);
}

uint64_t warp_collective(Site site, Collective op, unsigned mask, uint64_t value, int arg, int width) {
  ThreadState* t = current_thread();
  if (!t) fail("%s called outside a kernel (%s:%d)", op_name(op), site.file, site.line);
  t->site = site;
  t->op = op;
  t->mask = mask;
  t->value = value;
  t->arg = arg;
  t->width = width;
  park(Wait::Warp);
  return t->result;
}

void run_grid(const char* kernel, Site site, uint3v grid, uint3v block, void (*body)(void*), void* context) {
  if (g_launch) fail("kernel %s launched from inside kernel %s (dynamic parallelism is not emulated)", kernel, g_launch->kernel);
  std::lock_guard<std::mutex> lock(g_launch_mutex);
  Launch l;
  l.kernel = kernel;
  l.site = site;
  l.grid = grid;
  l.block = block;
  l.body = body;
  l.context = context;
  g_launch = &l;
  std::vector<uint3v> blocks;
  blocks.reserve(static_cast<size_t>(grid.x) * grid.y * grid.z);
  for (unsigned z = 0; z < grid.z; ++z)
    for (unsigned y = 0; y < grid.y; ++y)
      for (unsigned x = 0; x < grid.x; ++x) blocks.push_back({x, y, z});
  std::mt19937_64 rng(schedule().seed * 0x9E3779B97F4A7C15ull + 1);
  if (schedule().seed) std::shuffle(blocks.begin(), blocks.end(), rng);
  for (const uint3v& b : blocks) {
    l.block_idx = b;
    run_block(l, rng);
  }
  g_launch = nullptr;
}

}  // namespace cuemu
