// matrix.hpp — `zerobench matrix FILE.yaml --out DIR`: expand a base config and axes into cells,
// run each cell as its own `zerobench run` process group with a timeout, record every result
// (failed, OOM, timed-out cells included) and keep going; re-running resumes.
// Owns: the matrix file format (bench/matrices/README.md), cell ids, the index file.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace zb::bench {

struct MatrixCell {
  std::string id;                                   // file-name-safe, unique
  std::vector<std::pair<std::string, std::string>> options;  // run flag (no "--") -> value
};

struct MatrixSpec {
  std::string name;
  double timeout_s = 600;
  std::vector<MatrixCell> cells;
};

// Throws UsageError naming the file and the bad key or cell (options are checked by parsing
// each cell's command line exactly as `zerobench run` would).
MatrixSpec load_matrix(const std::string& path);

// The `zerobench run` arguments for a cell (without the program name).
std::vector<std::string> cell_run_args(const MatrixCell& cell);

// Parses a cell's arguments exactly as `zerobench run` would (flags, then config files resolved);
// throws UsageError "cell ID: ..." naming the bad option. `zerobench compare` checks its sides.
// Returns what the cell resolves to that sides of a comparison must hold equal.
struct ResolvedCell {
  std::string backend, precision;
  int64_t micro_batch = 0, grad_accum = 0;
};
ResolvedCell validate_cell(const MatrixCell& cell);

struct MatrixOptions {
  std::string file;
  std::string out_dir;
  bool force = false;         // re-run finished cells
  bool retry_failed = false;  // re-run cells whose report says failed/oom/timeout
  double timeout_s = 0;       // overrides the file's timeout_s when > 0
  bool dry_run = false;       // list cells and their commands, run nothing
};

// Exit 0 if every cell is ok, 1 if any failed, 2 for a bad file, 130 if interrupted.
int matrix_command(const MatrixOptions& opts);
// Runs an already expanded matrix (the precision study builds its own); same exit codes.
int run_matrix(const MatrixSpec& spec, const MatrixOptions& opts);

}  // namespace zb::bench
