// MPI start-up: thread level, rank, size, local rank (via a shared-memory split), host name.
#include "comm/mpi_runtime.h"
#include "comm/transport_check.h"

#include <mpi.h>

#include "comm/mpi_transport_defaults.h"
#include "framework/core/check.h"

namespace qtrain {

MpiRuntime::MpiRuntime(int* argc, char*** argv) {
  int initialized = 0;
  MPI_CHECK(MPI_Initialized(&initialized));
  if (!initialized) {
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

MpiRuntime::~MpiRuntime() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (owns_ && !finalized) MPI_Finalize();
}

}  // namespace qtrain
