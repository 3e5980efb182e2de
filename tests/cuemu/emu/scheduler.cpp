#include "tests/cuemu/emu/scheduler.h"

#include <algorithm>
#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <fcntl.h>
#include <unistd.h>
#include <xmmintrin.h>

#include "tests/cuemu/emu/counters.h"
#include "tests/cuemu/emu/fiber.h"

// Every static __shared__ variable of the emulated sources lives in this section (see
// device_functions.h); its bounds come from the linker.
extern "C" char __start_cuemu_shared[] __attribute__((weak));
extern "C" char __stop_cuemu_shared[] __attribute__((weak));

namespace cuemu {

enum class Wait : uint8_t { Running, Ready, Warp, Block, Done };

struct ThreadState {
  FiberContext ctx;
  int stack = -1;  // the fiber stack this thread runs on; taken when it first runs
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
  // Stacks not in use by a started, unfinished thread. A thread that runs to its end without waiting
  // frees its stack for the thread after the next, so kernels without barriers touch two hot stacks,
  // not hundreds.
  std::vector<int> free_stacks;
  FiberContext scheduler;
  bool scheduler_known = false;  // ASan: the scheduler's stack bounds learned (fiber_entry)
  FiberContext discard;          // ASan: the bounds of a fiber that started another, not needed
  // The lanes of the warp step in progress and the order in which they run (null: index order), with
  // the position of the next to consider: a lane that waits or exits switches straight to the next
  // Ready lane of the step, and only the last one back to the scheduler (half the switches).
  ThreadState* step_lanes = nullptr;
  const int* step_order = nullptr;
  int step_count = 0, step_next = 0;
  LaunchCost cost;  // counted when the launch ends (emu/counters.h)
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
    fail("%s\n  in %s\n  thread (%u,%u,%u) at %s (%s:%d)\n  thread (%u,%u,%u) at %s (%s:%d)", what, where, a.tid.x,
         a.tid.y, a.tid.z, wait_name(a), a.site.file ? a.site.file : "-", a.site.line, b->tid.x, b->tid.y, b->tid.z,
         wait_name(*b), b->site.file ? b->site.file : "-", b->site.line);
  fail("%s\n  in %s\n  thread (%u,%u,%u) at %s (%s:%d)", what, where, a.tid.x, a.tid.y, a.tid.z, wait_name(a),
       a.site.file ? a.site.file : "-", a.site.line);
}

FiberStacks& stacks() {
  static thread_local FiberStacks s;
  return s;
}

void fiber_entry();

// Makes t the running thread: its stack and starting frame on its first run, its geometry, the count.
void enter(Launch& l, ThreadState& t) {
  if (t.stack < 0) {
    t.stack = l.free_stacks.back();
    l.free_stacks.pop_back();
    make_fiber(t.ctx, stacks().bottom(t.stack), FiberStacks::size(t.stack), &fiber_entry);
  }
  t.wait = Wait::Running;
  ++l.cost.switches;
  g_geometry.thread = &t;
  g_geometry.thread_idx = t.tid;
}

// The next Ready lane of the step in progress (the others passed over), or null at its end. The same
// sequence as a loop over the step's order that checks each lane when it comes to it: only a lane
// itself changes its state while the step runs.
ThreadState* next_in_step(Launch& l) {
  while (l.step_next < l.step_count) {
    const int i = l.step_order != nullptr ? l.step_order[l.step_next] : l.step_next;
    ++l.step_next;
    if (l.step_lanes[i].wait == Wait::Ready) return &l.step_lanes[i];
  }
  return nullptr;
}

// Not instrumented by AddressSanitizer: before a call to a [[noreturn]] function (exit_fiber) ASan
// unpoisons the whole stack it leaves (__asan_handle_no_return: a sigaltstack system call and the
// shadow of the fiber's 512 KB stack, per CUDA thread), which was a third of the ASan runs' time. This
// frame has no locals in memory, so it leaves no poisoned shadow on the stack the next thread reuses;
// the body's frames have returned and unpoisoned theirs.
__attribute__((no_sanitize_address)) void fiber_entry() {
  Launch& l = *g_launch;
  // The first thread of a launch starts from the scheduler; later ones may start from another lane.
  fiber_started(l.scheduler_known ? l.discard : l.scheduler);
  l.scheduler_known = true;
  l.body(l.context);
  ThreadState* self = g_geometry.thread;
  self->wait = Wait::Done;
  ThreadState* next = next_in_step(l);
  if (next != nullptr) enter(l, *next);  // takes another stack than this one
  l.free_stacks.push_back(self->stack);  // free once the switch below has left it
  exit_fiber(self->ctx, next != nullptr ? next->ctx : l.scheduler);
}

// Gives control to the next lane of the step, or back to the block scheduler, until this thread may
// go on (whoever switches back here has entered it).
void park(Wait wait) {
  ThreadState* self = g_geometry.thread;
  self->wait = wait;
  Launch& l = *g_launch;
  ThreadState* next = next_in_step(l);
  if (next != nullptr) {
    enter(l, *next);
    switch_fiber(self->ctx, next->ctx);
  } else {
    switch_fiber(self->ctx, l.scheduler);
  }
}

// Runs the Ready lanes of `lanes` in `order` (null: index order), each until it waits or exits.
void run_step(Launch& l, ThreadState* lanes, int count, const int* order) {
  l.step_lanes = lanes;
  l.step_order = order;
  l.step_count = count;
  l.step_next = 0;
  ThreadState* first = next_in_step(l);
  if (first == nullptr) return;
  enter(l, *first);
  switch_fiber(l.scheduler, first->ctx);
  g_geometry.thread = nullptr;
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
    if (w < 1 || w > 32 || (w & (w - 1)) != 0)
      fail_in_block("a shuffle width that is not a power of two up to 32", t, nullptr);
    const int base = l / w * w;
    int src = l;
    switch (t.op) {
      case Collective::ShflIdx: src = base + (t.arg & (w - 1)); break;
      case Collective::ShflXor:
        src = l ^ t.arg;
        if (src < base || src >= base + w) src = l;
        break;
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
    std::memset(__start_cuemu_shared, schedule().poison,
                static_cast<size_t>(__stop_cuemu_shared - __start_cuemu_shared));
}

// Runs the lanes of warp w that can go on, each until it waits or exits, and resolves the warp's
// collective when all its lanes wait at one. Returns true while the warp can go on.
bool step_warp(Launch& l, int w, int n, bool shuffled, std::mt19937_64& rng, std::vector<int>& order) {
  const int first = w * 32, count = std::min(32, n - first);
  ThreadState* lanes = &l.threads[static_cast<size_t>(first)];
  if (shuffled) {
    order.resize(static_cast<size_t>(count));
    for (int i = 0; i < count; ++i) order[static_cast<size_t>(i)] = i;
    std::shuffle(order.begin(), order.end(), rng);
  }
  run_step(l, lanes, count, shuffled ? order.data() : nullptr);
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
  if (at_warp == 0) return false;  // every lane at __syncthreads or exited
  if (at_warp != count)
    fail_in_block("a warp collective reached by only part of a warp (the other lanes exited or wait at __syncthreads)",
                  *warp_waiter, other);
  resolve_warp(lanes, count);
  ++l.cost.collectives;
  return true;
}

void run_block(Launch& l, std::mt19937_64& rng) {
  poison_shared();
  const int n = static_cast<int>(l.block.x * l.block.y * l.block.z);
  ++l.cost.blocks;
  l.cost.threads += static_cast<std::uint64_t>(n);
  l.threads.resize(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    ThreadState& t = l.threads[static_cast<size_t>(i)];
    t.wait = Wait::Ready;
    t.site = {nullptr, 0};
    t.stack = -1;
    t.linear = i;
    t.tid = {static_cast<unsigned>(i) % l.block.x, static_cast<unsigned>(i) / l.block.x % l.block.y,
             static_cast<unsigned>(i) / (l.block.x * l.block.y)};
  }
  // Taken from the back: stack 0 first.
  l.free_stacks.resize(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) l.free_stacks[static_cast<size_t>(i)] = n - 1 - i;
  const bool shuffled = schedule().seed != 0;
  const int warps = (n + 31) / 32;
  std::vector<int> order, runnable;
  for (;;) {
    // Between two barriers: in index order each warp runs ahead until all its lanes wait at the
    // barrier or exit; shuffled, a random runnable warp takes one step (up to its next collective)
    // at a time, so warps interleave at every collective.
    if (shuffled) {
      runnable.resize(static_cast<size_t>(warps));
      for (int w = 0; w < warps; ++w) runnable[static_cast<size_t>(w)] = w;
      while (!runnable.empty()) {
        const size_t k = rng() % runnable.size();
        if (!step_warp(l, runnable[k], n, true, rng, order)) {
          runnable[k] = runnable.back();
          runnable.pop_back();
        }
      }
    } else {
      for (int w = 0; w < warps; ++w)
        while (step_warp(l, w, n, false, rng, order)) {
        }
    }
    int at_barrier = 0, done = 0;
    const ThreadState* waiting = nullptr;
    const ThreadState* exited = nullptr;
    for (const ThreadState& t : l.threads) {
      if (t.wait == Wait::Block) {
        ++at_barrier;
        if (!waiting)
          waiting = &t;
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
    ++l.cost.barriers;
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

__thread Geometry g_geometry;

const uint3v& thread_index_outside_kernel() { fail("threadIdx read outside a kernel"); }

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

namespace {

// CUEMU_LAUNCH_LOG=<file>: each distinct launch (its site, the kernel as written there, the threads
// per block) is appended to the file as one line, "quant/onebit.cu:92 pack_kernel 256", for the
// kernel resource check (tests/cuemu/tools/resource_check.cpp), which holds it against the registers
// and static shared memory ptxas reports for that kernel. Called under g_launch_mutex.
void log_launch(const char* kernel, Site site, uint3v block) {
  static const char* const path = std::getenv("CUEMU_LAUNCH_LOG");
  if (!path || !*path) return;
  static std::set<std::string> logged;
  char line[1024];
  const int len =
      std::snprintf(line, sizeof line, "%s:%d %s %u\n", site.file, site.line, kernel, block.x * block.y * block.z);
  if (len < 0 || static_cast<size_t>(len) >= sizeof line)
    fail("CUEMU_LAUNCH_LOG: the launch of %s at %s:%d does not fit in a line", kernel, site.file, site.line);
  if (!logged.insert(line).second) return;
  // The whole line in one write to a file opened for appending: the lines of processes that log at
  // once (ctest -j, the ranks of an mpirun) do not interleave.
  const int fd = ::open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) fail("CUEMU_LAUNCH_LOG=%s: %s", path, std::strerror(errno));
  const ssize_t written = ::write(fd, line, static_cast<size_t>(len));
  ::close(fd);
  if (written != len) fail("CUEMU_LAUNCH_LOG=%s: short write", path);
}

// qtrain's kernels are built with nvcc --ftz=true (docs/design.md, "Arithmetic"): every float
// operation of a kernel reads a subnormal operand as zero and flushes a subnormal result to zero. On
// x86 that is MXCSR's DAZ (bit 6) and FTZ (bit 15), set for the launch on the thread that runs it and
// restored after, so that a kernel flushes whatever the host thread's own flags (the fibers run with
// them: fiber.cpp does not switch MXCSR).
class FlushSubnormals {
 public:
  FlushSubnormals() : saved_(_mm_getcsr()) { _mm_setcsr(saved_ | kFtz | kDaz); }
  ~FlushSubnormals() { _mm_setcsr(saved_); }
  FlushSubnormals(const FlushSubnormals&) = delete;
  FlushSubnormals& operator=(const FlushSubnormals&) = delete;

 private:
  static constexpr unsigned kFtz = 1u << 15, kDaz = 1u << 6;
  unsigned saved_;
};

}  // namespace

void run_grid(const char* kernel, Site site, uint3v grid, uint3v block, void (*body)(void*), void* context) {
  if (g_launch)
    fail("kernel %s launched from inside kernel %s (dynamic parallelism is not emulated)", kernel, g_launch->kernel);
  std::lock_guard<std::mutex> lock(g_launch_mutex);
  log_launch(kernel, site, block);
  Launch l;
  l.kernel = kernel;
  l.site = site;
  l.grid = grid;
  l.block = block;
  l.body = body;
  l.context = context;
  g_launch = &l;
  g_geometry.block_dim = block;
  g_geometry.grid_dim = grid;
  std::vector<uint3v> blocks;
  blocks.reserve(static_cast<size_t>(grid.x) * grid.y * grid.z);
  for (unsigned z = 0; z < grid.z; ++z)
    for (unsigned y = 0; y < grid.y; ++y)
      for (unsigned x = 0; x < grid.x; ++x) blocks.push_back({x, y, z});
  std::mt19937_64 rng(schedule().seed * 0x9E3779B97F4A7C15ull + 1);
  if (schedule().seed) std::shuffle(blocks.begin(), blocks.end(), rng);
  const FlushSubnormals ftz;
  for (const uint3v& b : blocks) {
    l.block_idx = b;
    g_geometry.block_idx = b;
    run_block(l, rng);
  }
  g_launch = nullptr;
  count_launch(kernel, l.cost);
}

}  // namespace cuemu
