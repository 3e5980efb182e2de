// The table of `sync.type` names: the only place a new synchronization strategy has to be added
// besides its own files (train/CMakeLists.txt picks up every .cpp in sync/).
#include "train/sync/demo.h"
#include "train/sync/diloco.h"
#include "train/sync/every_step.h"

namespace qtrain {

const SyncRegistry& sync_registry() {
  static const SyncRegistry registry = [] {
    SyncRegistry r("sync strategy");
    r.add("every_step", make_every_step_sync);
    r.add("diloco", make_diloco_sync);
    r.add("demo", make_demo_sync);
    return r;
  }();
  return registry;
}

}  // namespace qtrain
