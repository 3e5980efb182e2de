// One CUDA thread of the emulator is a fiber: a stack of its own and a saved stack pointer, switched
// to and from the block scheduler by a few instructions (no system call, unlike swapcontext, which
// saves the signal mask: blocks of 1024 threads switch millions of times per test).
#pragma once

#include <cstddef>

namespace cuemu {

// Stacks for up to 1024 fibers, mapped once per host thread, each with a guard page below it so a
// kernel that overflows its stack faults instead of writing into its neighbour's.
class FiberStacks {
 public:
  FiberStacks();
  ~FiberStacks();
  FiberStacks(const FiberStacks&) = delete;
  FiberStacks& operator=(const FiberStacks&) = delete;
  // The bottom (lowest address) and size of fiber i's stack. The sizes differ by multiples of 64 bytes
  // so that the stacks' tops, where a switch pops its registers, fall in different cache sets: stacks a
  // fixed 132 KB apart put every top in the same set of L1 and L2, and a block of 256 threads missed
  // the cache at nearly every switch.
  char* bottom(int i) const;
  static std::size_t size(int i);

 private:
  char* base_ = nullptr;
};

// The saved state of one side of a switch.
struct FiberContext {
  void* sp = nullptr;
  // AddressSanitizer's bookkeeping of the stack in use (its fake stack of this context).
  void* asan_fake_stack = nullptr;
  const void* stack_bottom = nullptr;
  std::size_t stack_size = 0;
};

// Prepares `ctx` to start in entry() on the stack [bottom, bottom + size).
void make_fiber(FiberContext& ctx, char* bottom, std::size_t size, void (*entry)());
// Saves the running context in `from` and resumes `to`.
void switch_fiber(FiberContext& from, FiberContext& to);
// Called first thing in a fiber's entry function, after the switch that started it.
void fiber_started(FiberContext& from);
// Called by a fiber that ends: switches to `to` for good (its own stack is freed by ASan's view).
[[noreturn]] void exit_fiber(FiberContext& self, FiberContext& to);

}  // namespace cuemu
