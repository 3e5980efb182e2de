// Runs a piece of code in a child process and reports how it ended: the emulator aborts on faults a
// GPU would leave undefined, and these tests check that it does, and with which message.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <string>

namespace cuemu_test {

struct Death {
  bool aborted = false;
  std::string stderr_text;
};

template <typename F>
Death run_in_child(F f) {
  int fds[2];
  if (pipe(fds) != 0) return {};
  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    dup2(fds[1], 2);
    f();
    std::_Exit(0);
  }
  close(fds[1]);
  Death d;
  char buf[4096];
  ssize_t got;
  while ((got = read(fds[0], buf, sizeof buf)) > 0) d.stderr_text.append(buf, static_cast<size_t>(got));
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  d.aborted = WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT;
  return d;
}

}  // namespace cuemu_test
