// The watchdog: a rank that waits in a collective for longer than communication.timeout_s without
// any progress ends the job with a message naming the operation, what the rank was doing (step,
// bucket, checkpoint) and the peer it was waiting for, instead of waiting for ever on a peer that is
// alive but silent (a stopped process, a dead link). A dead process needs no watchdog: Open MPI ends
// the job when one exits. MPI gives no way to cancel a blocked collective, so the only way out is to
// end the job (MPI_Abort), as PyTorch's NCCL watchdog does.
//
// The transports mark their blocking waits with a CommWatch; code above them says what it is doing
// with a WatchActivity. Both are cheap (a few atomic stores) and do nothing while no watchdog runs.
#pragma once

#include <functional>
#include <string>

namespace qtrain {

// Starts the process's watchdog thread (or changes its timeout and action): when one thread has
// waited inside a CommWatch for `timeout_s` seconds without progress, `on_timeout` is called once, on
// the watchdog's thread, with the message (`who` names this process in it: "rank 2 on node7").
// timeout_s <= 0 stops watching.
void start_watchdog(double timeout_s, std::string who, std::function<void(const std::string& message)> on_timeout);
// Stops the thread (waits for it); watches continue to work as no-ops.
void stop_watchdog();

// The action of start_watchdog for MPI jobs: the message to stderr, then MPI_Abort of the whole job
// with exit code kWatchdogExitCode.
constexpr int kWatchdogExitCode = 124;
void abort_mpi_job(const std::string& message);

// Marks this thread as waiting in `operation` (a name with static storage, e.g. "all_reduce_sum")
// until destruction. Nested watches keep the outermost operation. progress() restarts the clock: a
// long transfer that keeps completing messages is not a hang.
class CommWatch {
 public:
  explicit CommWatch(const char* operation);
  ~CommWatch();
  CommWatch(const CommWatch&) = delete;
  CommWatch& operator=(const CommWatch&) = delete;

  // The rank this thread now waits for (-1: all of them, as in a library collective).
  void waiting_for(int peer);
  // A message arrived or a step of the operation finished.
  void progress();

 private:
  bool outermost_;
};

// What this thread is doing ("step 120, bucket 3 of 5", "checkpoint at step 400"), for the
// watchdog's message, until destruction (then the previous activity is back).
class WatchActivity {
 public:
  explicit WatchActivity(std::string what);
  ~WatchActivity();
  WatchActivity(const WatchActivity&) = delete;
  WatchActivity& operator=(const WatchActivity&) = delete;

 private:
  std::string previous_;
};

}  // namespace qtrain
