// subprocess.cpp — see subprocess.hpp.
#include "runtime/subprocess.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <iostream>

#include "runtime/errors.hpp"

namespace zb::runtime {

namespace {
volatile sig_atomic_t g_stop = 0;
void on_stop(int) { g_stop = 1; }
}  // namespace

std::string self_executable() {
  char buf[4096];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) throw RunError("cannot resolve /proc/self/exe");
  buf[n] = 0;
  return buf;
}

SubprocessResult run_subprocess(const std::vector<std::string>& argv, std::chrono::milliseconds timeout) {
  int pipe_fds[2];
  if (pipe(pipe_fds) != 0) throw RunError(std::string("pipe failed: ") + strerror(errno));
  const pid_t parent = getpid();
  const auto t0 = std::chrono::steady_clock::now();
  pid_t pid = fork();
  if (pid < 0) throw RunError(std::string("fork failed: ") + strerror(errno));
  if (pid == 0) {
    setpgid(0, 0);  // its own group: a timeout kills the child and every rank it launched
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(1);
    dup2(pipe_fds[1], STDERR_FILENO);
    close(pipe_fds[0]);
    close(pipe_fds[1]);
    std::vector<char*> args;
    std::vector<std::string> copy = argv;
    for (auto& a : copy) args.push_back(a.data());
    args.push_back(nullptr);
    execv(copy[0].c_str(), args.data());
    _exit(127);
  }
  setpgid(pid, pid);
  close(pipe_fds[1]);
  fcntl(pipe_fds[0], F_SETFL, O_NONBLOCK);

  struct sigaction sa {}, old_int {}, old_term {};
  sa.sa_handler = on_stop;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, &old_int);
  sigaction(SIGTERM, &sa, &old_term);
  g_stop = 0;

  SubprocessResult r;
  std::string captured;
  bool killed = false;
  auto kill_deadline = std::chrono::steady_clock::time_point::max();
  int status = 0;
  // Once every writer has closed the pipe (a child that sends its stderr to a file closes it at
  // once), poll reports POLLHUP without waiting: the fd leaves the poll set (a negative fd is
  // ignored) and the 50 ms tick still paces the loop instead of a busy wait on waitpid.
  bool pipe_open = true;
  while (true) {
    ++r.wakeups;
    pollfd pfd{pipe_open ? pipe_fds[0] : -1, POLLIN, 0};
    if (poll(&pfd, 1, 50) > 0) {
      char buf[4096];
      ssize_t n;
      while ((n = read(pipe_fds[0], buf, sizeof(buf))) > 0) {
        std::cerr.write(buf, n);
        captured.append(buf, size_t(n));
        if (captured.size() > 16384) captured.erase(0, captured.size() - 16384);
      }
      if (n == 0) pipe_open = false;  // end of file: no writer is left
    }
    pid_t w = waitpid(pid, &status, WNOHANG);
    if (w == pid) break;
    const auto now = std::chrono::steady_clock::now();
    if (!killed && timeout.count() > 0 && now - t0 > timeout) {
      r.timed_out = true;
      killed = true;
      kill(-pid, SIGTERM);
      kill_deadline = now + std::chrono::seconds(3);
    }
    if (!killed && g_stop) {
      r.interrupted = true;
      killed = true;
      kill(-pid, SIGTERM);
      kill_deadline = now + std::chrono::seconds(3);
    }
    if (killed && now > kill_deadline) kill(-pid, SIGKILL);
  }
  kill(-pid, SIGKILL);  // anything its ranks left behind in the group
  close(pipe_fds[0]);
  sigaction(SIGINT, &old_int, nullptr);
  sigaction(SIGTERM, &old_term, nullptr);
  r.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (WIFEXITED(status)) {
    r.exit_code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    r.signal = WTERMSIG(status);
    r.exit_code = 128 + r.signal;
  }
  // Keep the last few non-empty lines.
  size_t pos = captured.size(), lines = 0;
  while (pos > 0 && lines < 6) {
    pos = captured.rfind('\n', pos - 1);
    if (pos == std::string::npos) {
      pos = 0;
      break;
    }
    ++lines;
  }
  r.stderr_tail = captured.substr(pos);
  return r;
}

}  // namespace zb::runtime
