// The fiber switch: x86-64 System V callee-saved registers pushed on the old stack, the stack pointer
// swapped, the registers popped from the new one, and a jump to the return address saved there. A jump,
// not `ret`: the return stack predicts the address of the last call on this stack, never the other
// fiber's, so every `ret` mispredicted; the indirect jump's target is predicted from its history (the
// fibers of a warp resume at the same collective), which took 28% off the emulated quantizer tests.
// x87/SSE control words are not switched: every fiber runs with the host thread's rounding mode, as
// every CUDA thread runs with round-to-nearest.
#include "tests/cuemu/emu/fiber.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
#define CUEMU_ASAN 1
#else
#define CUEMU_ASAN 0
#endif

#if !defined(__x86_64__)
#error "the CUDA emulator's fiber switch is written for x86-64"
#endif

extern "C" void cuemu_switch_stack(void** save_sp, void* load_sp);
asm(R"(
.text
.globl cuemu_switch_stack
.type cuemu_switch_stack,@function
cuemu_switch_stack:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  popq %rcx
  jmp *%rcx
.size cuemu_switch_stack, .-cuemu_switch_stack
.section .note.GNU-stack,"",@progbits
)");

namespace cuemu {
namespace {

constexpr int kMaxFibers = 1024;
// Kernels keep small frames, but AddressSanitizer's redzones and the Catch2/fmt code a failing check
// may reach inside a kernel's helpers need room.
constexpr std::size_t kStackBytes = CUEMU_ASAN ? 512 * 1024 : 128 * 1024;
const std::size_t kPage = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));

}  // namespace

FiberStacks::FiberStacks() {
  const std::size_t span = kStackBytes + kPage;
  void* p =
      mmap(nullptr, span * kMaxFibers, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) {
    std::fprintf(stderr, "cuemu: cannot map %d fiber stacks\n", kMaxFibers);
    std::abort();
  }
  base_ = static_cast<char*>(p);
  for (int i = 0; i < kMaxFibers; ++i) mprotect(base_ + span * static_cast<std::size_t>(i), kPage, PROT_NONE);
}

FiberStacks::~FiberStacks() { munmap(base_, (kStackBytes + kPage) * kMaxFibers); }

char* FiberStacks::bottom(int i) const { return base_ + (kStackBytes + kPage) * static_cast<std::size_t>(i) + kPage; }

std::size_t FiberStacks::size(int i) { return kStackBytes - 64 * static_cast<std::size_t>(i % 64); }

void make_fiber(FiberContext& ctx, char* bottom, std::size_t size, void (*entry)()) {
  // The first switch pops six registers and returns into entry(), with the stack aligned as after a call.
  auto top = (reinterpret_cast<std::uintptr_t>(bottom + size) & ~std::uintptr_t{15}) - 16;
  auto* slot = reinterpret_cast<void**>(top);
  slot[0] = reinterpret_cast<void*>(entry);
  slot[1] = nullptr;
  void** sp = slot - 6;
  for (int r = 0; r < 6; ++r) sp[r] = nullptr;
  ctx.sp = sp;
  ctx.asan_fake_stack = nullptr;
  ctx.stack_bottom = bottom;
  ctx.stack_size = size;
}

void switch_fiber(FiberContext& from, FiberContext& to) {
#if CUEMU_ASAN
  __sanitizer_start_switch_fiber(&from.asan_fake_stack, to.stack_bottom, to.stack_size);
#endif
  cuemu_switch_stack(&from.sp, to.sp);
#if CUEMU_ASAN
  // Back in `from`: the context that switched here is told apart by ASan itself.
  __sanitizer_finish_switch_fiber(from.asan_fake_stack, nullptr, nullptr);
#endif
}

void fiber_started(FiberContext& from) {
#if CUEMU_ASAN
  // Learn the scheduler's stack bounds, so switches back to it are announced correctly.
  __sanitizer_finish_switch_fiber(nullptr, &from.stack_bottom, &from.stack_size);
#else
  (void)from;
#endif
}

void exit_fiber(FiberContext& self, FiberContext& to) {
#if CUEMU_ASAN
  // A null fake-stack slot tells ASan this stack is finished.
  __sanitizer_start_switch_fiber(nullptr, to.stack_bottom, to.stack_size);
#endif
  cuemu_switch_stack(&self.sp, to.sp);
  __builtin_unreachable();
}

}  // namespace cuemu
