// commands.hpp — the zerobench subcommands, each a function from parsed options to an exit code.
#pragma once
#include <string>
#include <vector>

#include "bench/run/run_options.hpp"

namespace zb::bench {

// `zerobench run`: launches --nproc ranks (or joins a torchrun/SLURM/MPI job), trains, and has
// rank 0 write the report and print its table. argv is the full command line (for relaunch).
int run_command(const RunOptions& opts, const std::vector<std::string>& argv);

struct ModelInfoOptions {
  RunOptions run;  // model flags, backend/precision for the byte formulas
  int world_size = 1;
  int64_t seq_len = 4096;
  bool json = false;
  // Offload rows: whether a rank fits in this much device memory, and (when > 0) the node's W
  // ranks in this much host memory (GiB).
  double device_memory_gib = 80;
  double host_memory_gib = 0;
};
// `zerobench model-info`: counts, FLOPs per token, model-state bytes per rank per backend mode.
int model_info_command(const ModelInfoOptions& opts);

}  // namespace zb::bench
