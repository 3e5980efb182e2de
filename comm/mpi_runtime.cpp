// MPI start-up: thread level, rank, size, local rank (via a shared-memory split), host name.
#include "comm/mpi_runtime.h"
#include "comm/transport_check.h"

#include <mpi.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "comm/mpi_transport_defaults.h"
#include "framework/core/check.h"

namespace qtrain {

namespace {
// The runtime of a process started alone, until start_mpi_on_demand() starts MPI in it.
MpiRuntime* g_deferred = nullptr;

bool mpi_initialized() {
  int initialized = 0;
  MPI_CHECK(MPI_Initialized(&initialized));
  return initialized != 0;
}
}  // namespace

bool launched_by_mpi() {
  // Open MPI's mpirun and prterun (OMPI_COMM_WORLD_SIZE), PMIx launchers such as srun --mpi=pmix
  // (PMIX_RANK), PMI-1/2 launchers such as MPICH's hydra and srun --mpi=pmi2 (PMI_RANK, PMI_FD).
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_FD"})
    if (std::getenv(name) != nullptr) return true;
  return false;
}

MpiRuntime::MpiRuntime(int* argc, char*** argv) {
  if (mpi_initialized() || launched_by_mpi()) {
    start(argc, argv);
    return;
  }
  // A world of one until a transport needs MPI: the facts MPI would give it.
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) std::snprintf(name, sizeof(name), "localhost");
  host_ = name;
  detail::set_error_origin(rank_, host_);
  g_deferred = this;
}

void MpiRuntime::start(int* argc, char*** argv) {
  if (!mpi_initialized()) {
    set_mpi_transport_defaults();
    int provided = 0;
    MPI_CHECK(MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided));
    thread_multiple_ = provided >= MPI_THREAD_MULTIPLE;
    owns_ = true;
  } else {
    int provided = 0;
    MPI_CHECK(MPI_Query_thread(&provided));
    thread_multiple_ = provided >= MPI_THREAD_MULTIPLE;
  }
  // Errors come back as codes so MPI_CHECK can report them with a location instead of aborting.
  MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
  MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank_));
  MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size_));
  MPI_Comm local;
  MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &local));
  MPI_CHECK(MPI_Comm_rank(local, &local_rank_));
  MPI_CHECK(MPI_Comm_size(local, &local_size_));
  MPI_CHECK(MPI_Comm_free(&local));
  char name[MPI_MAX_PROCESSOR_NAME];
  int length = 0;
  MPI_CHECK(MPI_Get_processor_name(name, &length));
  host_.assign(name, static_cast<size_t>(length));
  detail::set_error_origin(rank_, host_);
}

bool start_mpi_on_demand() {
  if (mpi_initialized()) return true;
  if (g_deferred == nullptr) return false;
  // MPI_Init_thread may be given no arguments (MPI-2 on): the singleton needs none.
  g_deferred->start(nullptr, nullptr);
  g_deferred = nullptr;
  return true;
}

MpiRuntime::~MpiRuntime() {
  if (g_deferred == this) g_deferred = nullptr;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (owns_ && !finalized) MPI_Finalize();
}

}  // namespace qtrain
