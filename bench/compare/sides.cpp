// sides.cpp — side specs and labels (see sides.hpp).
#include "bench/compare/sides.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <set>

#include "runtime/errors.hpp"

namespace zb::bench::compare {

namespace {
bool is_regular_file(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::string file_stem(const std::string& path) {
  const auto slash = path.rfind('/');
  std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
  const auto dot = name.rfind('.');
  if (dot != std::string::npos && dot > 0) name = name.substr(0, dot);
  return name;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    const auto pos = s.find(sep, start);
    out.push_back(s.substr(start, pos == std::string::npos ? std::string::npos : pos - start));
    if (pos == std::string::npos) return out;
    start = pos + 1;
  }
}
}  // namespace

const std::vector<std::string>& workload_flags() {
  static const std::vector<std::string> flags = {"nproc",
                                                 "model",
                                                 "model-dir",
                                                 "layers",
                                                 "hidden",
                                                 "heads",
                                                 "kv-heads",
                                                 "ffn",
                                                 "vocab",
                                                 "seq-len",
                                                 "micro-batch",
                                                 "grad-accum",
                                                 "steps",
                                                 "warmup",
                                                 "threads",
                                                 "device",
                                                 "data",
                                                 "batching",
                                                 "seed",
                                                 "timeout",
                                                 "out",
                                                 "profile",
                                                 "profile-steps",
                                                 "trace",
                                                 "quiet",
                                                 "config",
                                                 "accelerate-config",
                                                 "deepspeed-config",
                                                 "backend",
                                                 "precision"};
  return flags;
}

Side parse_side(const std::string& spec) {
  Side side;
  side.spec = spec;
  const std::string where = "side '" + spec + "': ";
  if (spec.empty()) throw UsageError("side '': empty (a config file or backend:precision[:key=value,...])");
  if (is_regular_file(spec)) {
    side.is_file = true;
    side.label = file_stem(spec);
    side.options.emplace_back("config", spec);
    return side;
  }
  const auto parts = split(spec, ':');
  if (parts.size() < 2 || parts.size() > 3)
    throw UsageError(where + "not an existing file and not backend:precision[:key=value,...]");
  if (parts[0].empty() || parts[1].empty())
    throw UsageError(where + "backend and precision must both be given (e.g. fsdp:mixed)");
  side.label = spec;
  side.options.emplace_back("backend", parts[0]);
  side.options.emplace_back("precision", parts[1]);
  if (parts.size() == 3) {
    if (parts[2].empty()) throw UsageError(where + "nothing after the second ':' (key=value,... expected)");
    std::set<std::string> seen;
    for (const auto& kv : split(parts[2], ',')) {
      const auto eq = kv.find('=');
      if (eq == std::string::npos || eq == 0 || eq + 1 == kv.size())
        throw UsageError(where + "'" + kv + "' is not key=value (a `zerobench run` flag without --, and its value)");
      std::string key = kv.substr(0, eq);
      if (key.rfind("--", 0) == 0) key = key.substr(2);
      if (key == "backend" || key == "precision")
        throw UsageError(where + "'" + key + "' is set by the spec's backend:precision part");
      if (key == "config" || key == "accelerate-config" || key == "deepspeed-config")
        throw UsageError(where + "'" + key + "': give the config file itself as a side");
      const auto& shared = workload_flags();
      if (std::find(shared.begin(), shared.end(), key) != shared.end())
        throw UsageError(where + "'" + key + "' is a workload flag every side shares: give --" + key +
                         " to compare itself (or a config file as the side)");
      if (!seen.insert(key).second) throw UsageError(where + "'" + key + "' given twice");
      side.options.emplace_back(key, kv.substr(eq + 1));
    }
  }
  return side;
}

std::vector<Side> parse_sides(const std::vector<std::string>& specs) {
  if (specs.size() < 2) throw UsageError("compare needs at least two sides (got " + std::to_string(specs.size()) + ")");
  std::vector<Side> sides;
  std::set<std::string> labels;
  for (const auto& spec : specs) {
    Side s = parse_side(spec);
    const std::string base = s.label;
    for (int n = 2; labels.count(s.label); ++n) s.label = base + "-" + std::to_string(n);
    labels.insert(s.label);
    sides.push_back(s);
  }
  return sides;
}

}  // namespace zb::bench::compare
