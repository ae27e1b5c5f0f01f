// launcher.cpp — fork/exec of N ranks with torchrun's variables (and, for another program's ranks,
// torchrun's agent store); failure propagation.
#include "runtime/launcher.hpp"

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>
#include <thread>

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "runtime/errors.hpp"
#include "runtime/subprocess.hpp"

namespace zb::runtime {

namespace {
volatile sig_atomic_t g_interrupted = 0;
void on_interrupt(int) { g_interrupted = 1; }

std::string describe(int rank, int status) {
  if (WIFEXITED(status)) return "rank " + std::to_string(rank) + " exited with code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    int sig = WTERMSIG(status);
    return "rank " + std::to_string(rank) + " was killed by signal " + std::to_string(sig) + " (" + strsignal(sig) + ")";
  }
  return "rank " + std::to_string(rank) + " ended with status " + std::to_string(status);
}

bool failed(int status) { return !(WIFEXITED(status) && WEXITSTATUS(status) == 0); }

// One rank's stderr pipe: what arrives is written to ours at once and its tail kept.
struct RankStderr {
  int fd = -1;           // read end, non-blocking; -1 once closed
  std::string tail;      // the last kTailBytes bytes it wrote
  static constexpr size_t kTailBytes = 8192;

  void drain() {
    char buf[4096];
    while (fd >= 0) {
      const ssize_t n = ::read(fd, buf, sizeof(buf));
      if (n > 0) {
        for (ssize_t off = 0; off < n;) {  // pass it through (a short write is retried)
          const ssize_t w = ::write(STDERR_FILENO, buf + off, size_t(n - off));
          if (w <= 0 && errno != EINTR) break;
          off += w > 0 ? w : 0;
        }
        tail.append(buf, size_t(n));
        if (tail.size() > kTailBytes) tail.erase(0, tail.size() - kTailBytes);
      } else if (n == 0 || (errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK)) {
        ::close(fd);  // the rank (and everything holding its stderr) is gone
        fd = -1;
      } else if (errno != EINTR) {
        return;  // nothing more for now
      }
    }
  }
};
// Reads what is there from a non-blocking fd into `out`; closes it (fd = -1) at end of file.
void read_available(int& fd, std::string& out) {
  char buf[4096];
  while (fd >= 0) {
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n > 0) {
      out.append(buf, size_t(n));
    } else if (n == 0 || (errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK)) {
      ::close(fd);
      fd = -1;
    } else if (errno != EINTR) {
      return;
    }
  }
}

constexpr const char* kFailureFdEnv = "ZEROBENCH_FAILURE_FD";
}  // namespace

void announce_rank_failure(int rank, const std::string& line) {
  const char* v = std::getenv(kFailureFdEnv);
  if (!v || !*v) return;
  // One write of at most PIPE_BUF bytes: atomic, so announcements never interleave and their order
  // in the pipe is the order the ranks failed in.
  std::string one = line.substr(0, 3000);
  std::replace(one.begin(), one.end(), '\n', ' ');
  const std::string msg = std::to_string(rank) + "\t" + one + "\n";
  const int fd = std::atoi(v);
  ssize_t w;
  do {
    w = ::write(fd, msg.data(), msg.size());
  } while (w < 0 && errno == EINTR);
}

std::string last_line(const std::string& text, size_t max_chars) {
  size_t end = text.size();
  while (true) {
    while (end > 0 && (text[end - 1] == '\n' || text[end - 1] == '\r' || text[end - 1] == ' ')) --end;
    if (end == 0) return "";
    const size_t nl = text.rfind('\n', end - 1);
    const size_t begin = nl == std::string::npos ? 0 : nl + 1;
    std::string line = text.substr(begin, end - begin);
    if (line.find_first_not_of(" \t\r") == std::string::npos) {
      end = begin;
      continue;
    }
    if (line.size() > max_chars) line = "..." + line.substr(line.size() - max_chars);
    return line;
  }
}

bool launched_by_zerobench() { return std::getenv("ZEROBENCH_LAUNCHED") != nullptr; }

int find_free_port() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) throw RunError("launcher: socket() failed: " + std::string(strerror(errno)));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    close(fd);
    throw RunError("launcher: cannot find a free port: " + std::string(strerror(errno)));
  }
  int port = ntohs(addr.sin_port);
  close(fd);
  return port;
}

const char* const kMasterListenFdEnv = "ZEROBENCH_MASTER_LISTEN_FD";

HeldPort hold_rendezvous_port(bool into_env) {
  HeldPort h;
  h.fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (h.fd < 0) throw RunError("launcher: socket() failed: " + std::string(strerror(errno)));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  if (bind(h.fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || listen(h.fd, SOMAXCONN) != 0 ||
      getsockname(h.fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    const std::string why = strerror(errno);
    ::close(h.fd);
    throw RunError("launcher: cannot hold a rendezvous port: " + why);
  }
  h.port = ntohs(addr.sin_port);
  if (into_env) {
    fcntl(h.fd, F_SETFD, 0);  // this process's TCPStore (rank 0) takes it over
    setenv("MASTER_ADDR", "127.0.0.1", 1);
    setenv("MASTER_PORT", std::to_string(h.port).c_str(), 1);
    setenv(kMasterListenFdEnv, std::to_string(h.fd).c_str(), 1);
  }
  return h;
}

std::vector<std::pair<std::string, std::string>> torchrun_worker_env(int rank, int nproc, const std::string& addr,
                                                                     int port) {
  const char* async = std::getenv("TORCH_NCCL_ASYNC_ERROR_HANDLING");
  return {{"RANK", std::to_string(rank)},
          {"GROUP_RANK", "0"},
          {"ROLE_RANK", std::to_string(rank)},
          {"ROLE_NAME", "default"},
          {"LOCAL_WORLD_SIZE", std::to_string(nproc)},
          {"WORLD_SIZE", std::to_string(nproc)},
          {"GROUP_WORLD_SIZE", "1"},
          {"ROLE_WORLD_SIZE", std::to_string(nproc)},
          {"MASTER_ADDR", addr},
          {"MASTER_PORT", std::to_string(port)},
          {"TORCHELASTIC_RESTART_COUNT", "0"},
          {"TORCHELASTIC_MAX_RESTARTS", "0"},
          {"TORCHELASTIC_RUN_ID", "zerobench-" + std::to_string(getpid())},
          {"TORCHELASTIC_USE_AGENT_STORE", "True"},
          {"TORCH_NCCL_ASYNC_ERROR_HANDLING", async ? async : "1"},
          {"LOCAL_RANK", std::to_string(rank)}};
}

LaunchResult launch_local(const LaunchOptions& opts) {
  const bool other = !opts.program.empty();
  const std::string exe = other ? opts.program : self_executable();
  // Held until every rank has exited: rank 0's TCPStore serves on it (masterListenFd), or, for
  // another program's ranks, the store this launcher hosts (torchrun's agent store).
  const HeldPort held = hold_rendezvous_port(/*into_env=*/false);
  struct CloseOnReturn {
    int fd;
    ~CloseOnReturn() {
      if (fd >= 0) ::close(fd);
    }
  } close_held{held.fd};
  const int port = held.port;
  const pid_t launcher_pid = getpid();
  c10::intrusive_ptr<c10d::Store> agent_store;
  if (other) {
    c10d::TCPStoreOptions so;
    so.port = uint16_t(port);
    so.isServer = true;
    so.waitWorkers = false;
    so.masterListenFd = dup(held.fd);  // the store closes its own copy
    if (opts.timeout.count() > 0) so.timeout = opts.timeout;
    try {
      agent_store = c10::make_intrusive<c10d::TCPStore>(opts.master_addr, so);
    } catch (const std::exception& e) {
      throw RunError("launcher: cannot host the ranks' TCPStore on port " + std::to_string(port) + ": " + e.what());
    }
  }
  int output_fd = -1;
  if (!opts.output_file.empty()) {
    output_fd = ::open(opts.output_file.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (output_fd < 0) throw RunError("launcher: cannot open " + opts.output_file + ": " + strerror(errno));
  }
  CloseOnReturn close_output{output_fd};

  struct sigaction sa {};
  sa.sa_handler = on_interrupt;
  sigemptyset(&sa.sa_mask);
  struct sigaction old_int {}, old_term {};
  sigaction(SIGINT, &sa, &old_int);
  sigaction(SIGTERM, &sa, &old_term);
  g_interrupted = 0;

  std::map<pid_t, int> rank_of;
  std::vector<RankStderr> err(size_t(opts.nproc));
  // One pipe all ranks announce their failure on (announce_rank_failure): its order is causal,
  // unlike the order the ranks are reaped in (a peer failing on a dead rank's closed connection
  // can exit first).
  int failure_fds[2];
  if (pipe2(failure_fds, O_CLOEXEC) != 0) throw RunError("launcher: pipe failed: " + std::string(strerror(errno)));
  for (int rank = 0; rank < opts.nproc; ++rank) {
    int fds[2];
    // O_CLOEXEC: no other rank inherits this pipe (dup2 below clears it on the rank's fd 2).
    if (pipe2(fds, O_CLOEXEC) != 0) throw RunError("launcher: pipe failed: " + std::string(strerror(errno)));
    // Another program's argv and environment, made here: this process runs the store's threads, so
    // the child only execs.
    std::vector<std::string> other_env;
    std::vector<char*> other_args, other_envp;
    if (other) {
      const auto vars = torchrun_worker_env(rank, opts.nproc, opts.master_addr, port);
      auto replaced = [&](const std::string& entry) {
        const std::string name = entry.substr(0, entry.find('='));
        if (name == kMasterListenFdEnv || name == "ZEROBENCH_LAUNCHED" || name == kFailureFdEnv) return true;
        return std::any_of(vars.begin(), vars.end(), [&](const auto& v) { return v.first == name; });
      };
      for (char** e = environ; *e; ++e)
        if (!replaced(*e)) other_env.emplace_back(*e);
      for (const auto& [name, value] : vars) other_env.push_back(name + "=" + value);
      for (auto& e : other_env) other_envp.push_back(e.data());
      other_envp.push_back(nullptr);
      for (const auto& a : opts.argv) other_args.push_back(const_cast<char*>(a.c_str()));
      other_args.push_back(nullptr);
    }
    pid_t pid = fork();
    if (pid < 0) throw RunError("launcher: fork failed: " + std::string(strerror(errno)));
    if (pid == 0) {
      // Child: die with the launcher, take torchrun's variables, exec ourselves.
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != launcher_pid) _exit(1);
      if (output_fd >= 0) {
        if (dup2(output_fd, STDOUT_FILENO) < 0 || dup2(output_fd, STDERR_FILENO) < 0) _exit(127);
      } else if (dup2(fds[1], STDERR_FILENO) < 0) {
        _exit(127);
      }
      signal(SIGINT, SIG_DFL);
      signal(SIGTERM, SIG_DFL);
      if (other) {  // torchrun's worker, the store in this launcher: built before the fork
        execvpe(exe.c_str(), other_args.data(), other_envp.data());
        _exit(127);
      }
      fcntl(failure_fds[1], F_SETFD, 0);  // kept across exec
      setenv(kFailureFdEnv, std::to_string(failure_fds[1]).c_str(), 1);
      setenv("RANK", std::to_string(rank).c_str(), 1);
      setenv("LOCAL_RANK", std::to_string(rank).c_str(), 1);
      setenv("WORLD_SIZE", std::to_string(opts.nproc).c_str(), 1);
      setenv("LOCAL_WORLD_SIZE", std::to_string(opts.nproc).c_str(), 1);
      setenv("MASTER_ADDR", opts.master_addr.c_str(), 1);
      setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
      if (rank == 0) {
        fcntl(held.fd, F_SETFD, 0);  // kept across exec: rank 0's TCPStore listens on it
        setenv(kMasterListenFdEnv, std::to_string(held.fd).c_str(), 1);
      } else {
        unsetenv(kMasterListenFdEnv);
      }
      setenv("ZEROBENCH_LAUNCHED", "1", 1);
      std::vector<char*> args;
      std::string arg0 = exe;
      args.push_back(arg0.data());
      std::vector<std::string> rest(opts.argv.begin() + (opts.argv.empty() ? 0 : 1), opts.argv.end());
      for (auto& a : rest) args.push_back(a.data());
      args.push_back(nullptr);
      execv(exe.c_str(), args.data());
      _exit(127);
    }
    ::close(fds[1]);
    fcntl(fds[0], F_SETFL, O_NONBLOCK);
    err[size_t(rank)].fd = fds[0];
    rank_of[pid] = rank;
  }
  ::close(failure_fds[1]);
  int failure_fd = failure_fds[0];
  fcntl(failure_fd, F_SETFL, O_NONBLOCK);
  std::string announced;

  LaunchResult result;
  const auto t0 = std::chrono::steady_clock::now();
  bool stopping = false;
  auto stop_deadline = std::chrono::steady_clock::time_point::max();
  auto signal_all = [&](int sig) {
    for (const auto& [pid, rank] : rank_of) kill(pid, sig);
  };
  auto begin_stop = [&]() {
    if (stopping) return;
    stopping = true;
    signal_all(SIGTERM);
    stop_deadline = std::chrono::steady_clock::now() + opts.grace;
  };

  while (!rank_of.empty()) {
    int status = 0;
    pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid > 0 && rank_of.count(pid)) {
      const int rank = rank_of[pid];
      rank_of.erase(pid);
      if (failed(status) && result.failed_rank < 0 && !stopping) {
        err[size_t(rank)].drain();  // all it wrote is in the pipe now
        result.failed_rank = rank;
        result.rank_error_line = last_line(err[size_t(rank)].tail);
        result.ended = describe(rank, status);
        result.message = result.ended;
        if (!result.rank_error_line.empty())
          result.message += (WIFEXITED(status) ? ": " : "; its last stderr line: ") + result.rank_error_line;
        result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : kExitFailed;
        result.signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
        begin_stop();
      }
      continue;
    }
    const auto now = std::chrono::steady_clock::now();
    if (g_interrupted && !stopping) {
      result.exit_code = 130;
      result.message = "interrupted; stopped all ranks";
      begin_stop();
    }
    if (opts.timeout.count() > 0 && now - t0 > opts.timeout && !stopping) {
      result.exit_code = 124;
      result.message = "timed out after " + std::to_string(opts.timeout.count() / 1000) + " s; stopped all ranks";
      begin_stop();
    }
    if (stopping && now > stop_deadline) signal_all(SIGKILL);
    // Wait up to 20 ms for output from any rank (the loop's tick), passing it through.
    std::vector<pollfd> fds;
    for (const auto& e : err)
      if (e.fd >= 0) fds.push_back({e.fd, POLLIN, 0});
    read_available(failure_fd, announced);
    if (fds.empty()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    } else if (poll(fds.data(), fds.size(), 20) > 0) {
      for (auto& e : err)
        if (e.fd >= 0) e.drain();
    }
  }
  for (auto& e : err) {
    e.drain();
    if (e.fd >= 0) ::close(e.fd);
  }
  read_available(failure_fd, announced);
  if (failure_fd >= 0) ::close(failure_fd);
  // The first announced failure is the cause (the first rank reaped may be a peer that failed on
  // its closed connection).
  if (const auto tab = announced.find('\t'); result.failed_rank >= 0 && tab != std::string::npos) {
    const int cause = std::atoi(announced.substr(0, tab).c_str());
    const std::string line = announced.substr(tab + 1, announced.find('\n') - tab - 1);
    if (cause != result.failed_rank && cause >= 0 && cause < opts.nproc) {
      result.message = "rank " + std::to_string(cause) + " failed first: " + line + " (then " + result.message + ")";
      result.failed_rank = cause;
      result.rank_error_line = line;
    }
  }
  sigaction(SIGINT, &old_int, nullptr);
  sigaction(SIGTERM, &old_term, nullptr);
  return result;
}

}  // namespace zb::runtime
