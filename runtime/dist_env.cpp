// dist_env.cpp — rank discovery (see dist_env.hpp).
#include "runtime/dist_env.hpp"

#include <cstdlib>

#include "runtime/errors.hpp"

namespace zb::runtime {

namespace {
int parse_int(const EnvLookup& env, const std::string& name, int fallback, int min_value) {
  auto v = env(name);
  if (!v || v->empty()) return fallback;
  try {
    size_t pos = 0;
    int x = std::stoi(*v, &pos);
    if (pos != v->size() || x < min_value) throw std::invalid_argument(*v);
    return x;
  } catch (const std::exception&) {
    throw UsageError("environment variable " + name + "='" + *v + "' is not a valid integer >= " +
                     std::to_string(min_value));
  }
}
}  // namespace

int tasks_on_node(const std::string& tasks_per_node, int node) {
  // "2(x3),1": counts per node, a count repeated k times written count(xk) (srun(1), OUTPUT
  // ENVIRONMENT VARIABLES, SLURM_STEP_TASKS_PER_NODE / SLURM_TASKS_PER_NODE).
  const auto bad = [&] { return UsageError("SLURM tasks per node '" + tasks_per_node + "' is not N[(xK)][,...]"); };
  int seen = 0;
  size_t i = 0;
  while (i < tasks_per_node.size()) {
    size_t end = tasks_per_node.find(',', i);
    if (end == std::string::npos) end = tasks_per_node.size();
    const std::string item = tasks_per_node.substr(i, end - i);
    int count = 0, repeat = 1;
    try {
      size_t pos = 0;
      count = std::stoi(item, &pos);
      if (pos < item.size()) {
        if (item.compare(pos, 2, "(x") != 0 || item.back() != ')') throw bad();
        size_t rpos = 0;
        const std::string r = item.substr(pos + 2, item.size() - pos - 3);
        repeat = std::stoi(r, &rpos);
        if (rpos != r.size()) throw bad();
      }
    } catch (const std::invalid_argument&) {
      throw bad();
    } catch (const std::out_of_range&) {
      throw bad();
    }
    if (count < 1 || repeat < 1) throw bad();
    if (node < seen + repeat) return count;
    seen += repeat;
    i = end + 1;
  }
  throw UsageError("SLURM tasks per node '" + tasks_per_node + "' lists " + std::to_string(seen) +
                   " nodes; this is node " + std::to_string(node));
}

EnvLookup process_env() {
  return [](const std::string& name) -> std::optional<std::string> {
    const char* v = std::getenv(name.c_str());
    return v ? std::optional<std::string>(v) : std::nullopt;
  };
}

std::string first_host_of_nodelist(const std::string& nodelist) {
  // Take the first comma-separated entry outside brackets, then expand its first range.
  std::string first;
  int depth = 0;
  for (char c : nodelist) {
    if (c == '[') ++depth;
    if (c == ']') --depth;
    if (c == ',' && depth == 0) break;
    first += c;
  }
  auto open = first.find('[');
  if (open == std::string::npos) return first;
  std::string prefix = first.substr(0, open);
  std::string inside = first.substr(open + 1, first.find(']') - open - 1);
  std::string head = inside.substr(0, inside.find_first_of(",-"));
  return prefix + head;
}

DistEnv discover_dist_env(const EnvLookup& env) {
  DistEnv d;
  if (env("RANK") && env("WORLD_SIZE")) {
    d.source = "torchrun";
    d.rank = parse_int(env, "RANK", 0, 0);
    d.world_size = parse_int(env, "WORLD_SIZE", 1, 1);
    d.local_rank = parse_int(env, "LOCAL_RANK", d.rank, 0);
    d.local_world_size = parse_int(env, "LOCAL_WORLD_SIZE", d.world_size, 1);
  } else if (env("SLURM_PROCID") && env("SLURM_NTASKS")) {
    d.source = "slurm";
    d.rank = parse_int(env, "SLURM_PROCID", 0, 0);
    d.world_size = parse_int(env, "SLURM_NTASKS", 1, 1);
    d.local_rank = parse_int(env, "SLURM_LOCALID", 0, 0);
    // SLURM_NTASKS_PER_NODE exists only when --ntasks-per-node was given; srun always sets the
    // step's layout, SLURM_STEP_TASKS_PER_NODE (and the job's, SLURM_TASKS_PER_NODE), e.g. "2(x2)",
    // read at this task's SLURM_NODEID.
    if (auto n = env("SLURM_NTASKS_PER_NODE"); n && !n->empty()) {
      d.local_world_size = parse_int(env, "SLURM_NTASKS_PER_NODE", d.world_size, 1);
    } else if (auto per = env("SLURM_STEP_TASKS_PER_NODE") ? env("SLURM_STEP_TASKS_PER_NODE") : env("SLURM_TASKS_PER_NODE");
               per && !per->empty()) {
      d.local_world_size = tasks_on_node(*per, parse_int(env, "SLURM_NODEID", 0, 0));
    } else {
      d.local_world_size = d.world_size;
    }
    if (auto nodes = env("SLURM_JOB_NODELIST"); nodes && !nodes->empty()) d.master_addr = first_host_of_nodelist(*nodes);
  } else if (env("OMPI_COMM_WORLD_RANK") && env("OMPI_COMM_WORLD_SIZE")) {
    d.source = "openmpi";
    d.rank = parse_int(env, "OMPI_COMM_WORLD_RANK", 0, 0);
    d.world_size = parse_int(env, "OMPI_COMM_WORLD_SIZE", 1, 1);
    d.local_rank = parse_int(env, "OMPI_COMM_WORLD_LOCAL_RANK", 0, 0);
    d.local_world_size = parse_int(env, "OMPI_COMM_WORLD_LOCAL_SIZE", d.world_size, 1);
  }
  if (auto addr = env("MASTER_ADDR"); addr && !addr->empty()) d.master_addr = *addr;
  d.master_port = parse_int(env, "MASTER_PORT", d.master_port, 1);
  if (d.master_port > 65535) throw UsageError("MASTER_PORT=" + std::to_string(d.master_port) + " is out of range");
  if (d.rank >= d.world_size)
    throw UsageError("rank " + std::to_string(d.rank) + " is not below world size " + std::to_string(d.world_size));
  return d;
}

}  // namespace zb::runtime
