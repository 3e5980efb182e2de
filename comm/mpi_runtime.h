// MpiRuntime: MPI initialization and teardown for one process, and the facts every rank needs at
// start-up (rank, world size, local rank on its host, host name).
//
// A process started by a launcher (mpirun, srun with PMI or PMIx, MPICH's hydra: launched_by_mpi())
// joins its job at construction. A process started alone is a world of one, and MPI starts in it only
// when a transport asks for it (start_mpi_on_demand(): make_communicator with backend mpi or nccl), as
// an MPI singleton. Starting Open MPI's singleton spawns an orted and costs about 0.45 s (2-core AMD
// EPYC guest), which `qtrain --help`, `compare`, `eval` and every run on one process with the default
// backend (LocalComm) would otherwise pay for nothing.
#pragma once

#include <string>

namespace qtrain {

class MpiRuntime {
 public:
  MpiRuntime(int* argc, char*** argv);
  ~MpiRuntime();
  MpiRuntime(const MpiRuntime&) = delete;
  MpiRuntime& operator=(const MpiRuntime&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  int local_rank() const { return local_rank_; }  // rank among the processes on this host (GPU choice)
  int local_size() const { return local_size_; }  // processes on this host
  const std::string& host() const { return host_; }
  // True when the MPI library grants MPI_THREAD_MULTIPLE (a communication thread may call MPI).
  bool thread_multiple() const { return thread_multiple_; }

 private:
  friend bool start_mpi_on_demand();
  void start(int* argc, char*** argv);  // MPI_Init (unless already running) and the facts above

  int rank_ = 0, size_ = 1, local_rank_ = 0, local_size_ = 1;
  std::string host_;
  bool thread_multiple_ = false;
  bool owns_ = false;
};

// True when this process was started by an MPI launcher (its environment has the launcher's rank or
// PMI variables).
bool launched_by_mpi();

// Makes sure MPI is running: starts the singleton of a process whose MpiRuntime deferred it. False
// when MPI is not running and cannot start here (no MpiRuntime: a library user, e.g. the Python module).
bool start_mpi_on_demand();

}  // namespace qtrain
