// dist_env.hpp — who am I in the job: rank discovery from the launcher's environment.
// Owns: reading torchrun, SLURM, Open MPI (and zerobench's own launcher, which sets torchrun's
// variables) into one DistEnv. Must not: open sockets or create process groups (process_group).
#pragma once
#include <functional>
#include <optional>
#include <string>

namespace zb::runtime {

struct DistEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  std::string source = "single";  // single | torchrun | slurm | openmpi
};

using EnvLookup = std::function<std::optional<std::string>(const std::string&)>;
EnvLookup process_env();

// Precedence: torchrun's RANK/WORLD_SIZE, then SLURM_PROCID/SLURM_NTASKS, then
// OMPI_COMM_WORLD_RANK/SIZE, else a single process. MASTER_ADDR/MASTER_PORT always win when set;
// under SLURM the default master is the first host of SLURM_JOB_NODELIST. Bad values throw
// UsageError naming the variable.
DistEnv discover_dist_env(const EnvLookup& env);

// "gpu[01-04,07],cpu3" -> "gpu01"; "node7" -> "node7".
std::string first_host_of_nodelist(const std::string& nodelist);
// The task count of node `node` in a SLURM tasks-per-node list ("2(x3),1"); UsageError if malformed.
int tasks_on_node(const std::string& tasks_per_node, int node);

}  // namespace zb::runtime
