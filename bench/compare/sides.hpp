// sides.hpp — the sides of `zerobench compare`: what each positional argument means, its label,
// and the `zerobench run` options it contributes. A side is a config file (an existing path:
// `--config FILE`, any accelerate YAML/JSON or DeepSpeed JSON) or a spec
// `backend:precision[:key=value,key=value]` whose keys are `zerobench run` flags without `--`.
// Owns: the spec grammar, labels (file stem or the spec, made unique), the workload flags a side
// may not set. Must not: run anything or read reports.
#pragma once
#include <string>
#include <utility>
#include <vector>

namespace zb::bench::compare {

using RunArgs = std::vector<std::pair<std::string, std::string>>;  // run flag (no "--") -> value

struct Side {
  std::string spec;   // as the user wrote it
  std::string label;  // file stem or the spec; unique among the sides
  bool is_file = false;
  RunArgs options;  // the side's own run options (config, or backend/precision/keys)
};

// Flags every side shares (compare's own options set them); a spec may not set them.
const std::vector<std::string>& workload_flags();

// Throws UsageError "side 'SPEC': ..." naming the bad part.
Side parse_side(const std::string& spec);

// Parses every side and makes the labels unique ("x", "x-2", ...). Throws UsageError.
std::vector<Side> parse_sides(const std::vector<std::string>& specs);

}  // namespace zb::bench::compare
