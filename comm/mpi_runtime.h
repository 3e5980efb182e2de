// MpiRuntime: MPI initialization and teardown for one process, and the facts every rank needs at
// start-up (rank, world size, local rank on its host, host name). A process started without mpirun is
// an MPI singleton: a valid world of size 1.
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
  int rank_ = 0, size_ = 1, local_rank_ = 0, local_size_ = 1;
  std::string host_;
  bool thread_multiple_ = false;
  bool owns_ = false;
};

}  // namespace qtrain
