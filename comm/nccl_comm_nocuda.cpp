// NCCL in builds without CUDA: make_communicator asks nccl_built() first, so this factory is only
// reached by a direct call and answers with the same user-facing error.
#include "comm/nccl_comm.h"

#include "framework/core/check.h"

namespace qtrain {

bool nccl_built() { return false; }

std::unique_ptr<Communicator> make_nccl_comm(Device) {
  input_error("communication.backend: nccl: this qtrain was built without CUDA/NCCL; use mpi or auto");
}

}  // namespace qtrain
