// launcher.hpp — the built-in local launcher behind `zerobench run --nproc N`.
// Owns: spawning N ranks of this very binary (or of another program: a crossval reference's Python
// ranks, LaunchOptions::program) with torchrun's environment on a free port,
// watching them, and tearing the whole group down when one fails; each rank's stderr goes through
// a pipe, passed on to ours as it comes and its tail kept, so the failing rank's own last line
// (its exception's what()) names the failure in the result — the rank that failed first, told by
// the order of the ranks' announcements on one shared pipe (announce_rank_failure), not by the order
// they were reaped in. Must not: know what the ranks do (they re-run the same command line with
// ZEROBENCH_LAUNCHED=1 set) or interpret what they print.
#pragma once
#include <chrono>
#include <string>
#include <vector>

namespace zb::runtime {

struct LaunchOptions {
  int nproc = 1;
  std::vector<std::string> argv;                    // argv[0] is replaced by this executable
  std::chrono::milliseconds grace{3000};            // SIGTERM → SIGKILL delay for survivors
  std::chrono::milliseconds timeout{0};             // 0 = none; else whole-job wall limit
  std::string master_addr = "127.0.0.1";
  // Another program's ranks (a Python reference's): empty runs this executable as above; else the
  // ranks exec `program` with `argv` as given (argv[0] kept) and torchrun's whole worker environment
  // (torchrun_worker_env), and the launcher hosts the job's TCPStore on the held port for the job's
  // life with TORCHELASTIC_USE_AGENT_STORE=True, as torchrun's agent does — every rank a client.
  std::string program;
  // Non-empty: each rank's stdout and stderr are appended to this file instead of passing through.
  std::string output_file;
};

// The variables torchrun's agent gives worker `rank` of a one-node job of `nproc` workers
// (torch/distributed/elastic/agent/server/local_elastic_agent.py, _start_workers), with the
// job's rendezvous at addr:port and its store in the agent (TORCHELASTIC_USE_AGENT_STORE=True).
std::vector<std::pair<std::string, std::string>> torchrun_worker_env(int rank, int nproc, const std::string& addr,
                                                                     int port);

struct LaunchResult {
  int exit_code = 0;      // 0 ok; the failed rank's exit code (1 if killed by a signal); 124 timeout
  int failed_rank = -1;   // first rank that failed, -1 if none
  int signal = 0;         // the signal that killed it (SIGKILL: typically the kernel's OOM killer), 0 if none
  std::string message;    // "rank 1 exited with code 1: <its last stderr line>" /
                          // "rank 0 was killed by signal 9 (Killed); its last stderr line: <line>" /
                          // "rank 1 failed first: <its line> (then rank 0 exited with code 1: <line>)"
  std::string ended;            // how the failed rank ended: "rank 1 exited with code 1" ("" if none failed)
  std::string rank_error_line;  // the failed rank's last non-empty stderr line ("" if none)
};

// The last non-empty line of `text` (trailing spaces and carriage returns dropped), at most
// `max_chars` characters (the line's end kept when longer).
std::string last_line(const std::string& text, size_t max_chars = 400);

// Inside a rank this launcher started: tells the launcher that this rank failed and why (`line`, its
// failure line), in the order of all ranks' announcements; a no-op elsewhere. Call it before the
// rank's teardown closes its connections.
void announce_rank_failure(int rank, const std::string& line);

// True inside a rank that the launcher started.
bool launched_by_zerobench();

// Runs the job and returns once every rank has exited; nothing is left running.
LaunchResult launch_local(const LaunchOptions& opts);

// A TCP port on 127.0.0.1 that was free a moment ago.
int find_free_port();

// The rendezvous port, held: a socket already listening on a free port (all interfaces, as
// TCPStore's server listens), handed to rank 0's TCPStore as TCPStoreOptions::masterListenFd
// through ZEROBENCH_MASTER_LISTEN_FD — torchrun's agent does the same with its store socket. A port
// merely found free can be taken by another process (a parallel test) before rank 0 binds it
// (EADDRINUSE at rendezvous); a held one cannot. Sets MASTER_ADDR/MASTER_PORT and the fd variable
// in this process's environment (a lone rank) unless `into_env` is false; returns {fd, port}.
struct HeldPort {
  int fd = -1;
  int port = 0;
};
HeldPort hold_rendezvous_port(bool into_env = true);
// The fd variable's name; world.cpp reads it on rank 0.
extern const char* const kMasterListenFdEnv;

}  // namespace zb::runtime
