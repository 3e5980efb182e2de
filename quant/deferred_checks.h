// Deferred checks of the CUDA quantizers. Their kernels find errors (non-finite input, a scale beyond
// the float range, a malformed payload or one whose header differs from the receiver's) and report
// them in a status word. Read back after every encode and decode, each of those is a copy to the host
// and a wait for the stream: a ResNet's 330 tensors pay it several times per step. While a
// DeferredChecks is active on a thread, the quantizers called there on its context write their status
// into slots of one device area instead and return without waiting; settle() reads all of them back
// with one copy and one wait and raises the first error, of the type the quantizer raises when it
// checks at once, its message prefixed with what the caller tagged it with (the tensor, the peer).
//
// What changes for the caller: the error surfaces at settle() rather than at the call, and a decode
// of a malformed payload may already have written its output (a failed check ends the step anyway).
// An encode whose size the host needs (adaptive's count, Quantizer::encode) still reads its status
// at once; encoded into a slot (Quantizer::encode_slot) it defers like the others.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "framework/core/context.h"
#include "quant/encode_status.h"
#include "quant/header_check.h"

namespace qtrain {

class DeferredChecks {
 public:
  // For the encodes and decodes on `ctx` (a CUDA context; it must outlive this object).
  explicit DeferredChecks(Context& ctx);
  ~DeferredChecks();
  DeferredChecks(const DeferredChecks&) = delete;
  DeferredChecks& operator=(const DeferredChecks&) = delete;

  // While a Scope lives, the CUDA quantizers called on this thread with this object's context defer
  // their checks to it (scopes nest; the innermost wins).
  class Scope {
   public:
    explicit Scope(DeferredChecks& checks);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    DeferredChecks* previous_;
  };

  // Tags the checks deferred from now on; settle() hands a failing check's tag to its `describe`.
  void set_tag(uint64_t tag) { tag_ = tag; }
  // Checks deferred and not yet settled.
  size_t pending() const { return checks_.size(); }
  // Waits for the context's stream, reads every pending status back with one copy and runs the checks
  // in the order they were deferred. The first failure is raised with its message prefixed by
  // "describe(tag): " (when describe is given); the other pending checks are dropped with it.
  void settle(const std::function<std::string(uint64_t)>& describe = {});

  // For quant/'s launchers. The object deferring for `ctx` on this thread, or null.
  static DeferredChecks* active(const Context& ctx);
  // A zeroed status slot in device memory. When every slot is taken, settles first (a wait, and the
  // pending errors are raised then) and doubles the area, so that the next steps fit.
  EncodeStatus* take_slot();
  // Runs `check` on the status of `slot` (from take_slot) at settle().
  void defer(EncodeStatus* slot, std::function<void(const EncodeStatus&)> check);
  // The header check of the decode about to be launched (quant/header_check.h): a decode launcher
  // takes it to make it in its decode kernel; what is not taken, Quantizer's decode launches itself.
  void offer_header_check(const HeaderCheck& check) { header_ = check; }
  HeaderCheck take_header_check() {
    const HeaderCheck taken = header_;
    header_ = HeaderCheck{};
    return taken;
  }

 private:
  struct Pending {
    size_t slot;
    uint64_t tag;
    std::function<void(const EncodeStatus&)> check;
  };
  void allocate(size_t capacity);
  void release();

  Context& ctx_;
  EncodeStatus* device_ = nullptr;  // capacity_ slots, zero where not yet taken
  EncodeStatus* host_ = nullptr;    // pinned: the copy settle() reads
  size_t capacity_ = 0;
  size_t used_ = 0;
  uint64_t tag_ = 0;
  std::vector<Pending> checks_;
  std::function<std::string(uint64_t)> describe_;  // the last settle's, for an early settle in take_slot
  HeaderCheck header_;                             // offered and not yet taken (slot null: none)
};

}  // namespace qtrain
