// topology.hpp — the shape of a job as the closed forms and the memory estimates need it: how
// many ranks, and how many of them share a node. Owns: that value type only. Must not: resolve
// a backend's groups (each backend derives its shard group from its options and this: FSDP1's
// HYBRID_SHARD shards within a node, _init_utils.py _init_process_group_state_for_hybrid_shard;
// FSDP2 HSDP within the mesh's dp_shard dimension) or read the environment (runtime/dist_env
// does; a running engine takes its World's size and local_size).
#pragma once

namespace zb::backends {

struct Topology {
  int world = 1;           // ranks in the job (torchrun WORLD_SIZE)
  int ranks_per_node = 1;  // torchrun LOCAL_WORLD_SIZE (SLURM_NTASKS_PER_NODE, ...)
  // A bare W is one node of W ranks: what a single-host run (zerobench's own launcher, a test's
  // in-process world) is, so `expected_bytes(spec, 3, 0)` keeps its meaning.
  Topology(int world_size) : world(world_size), ranks_per_node(world_size) {}  // NOLINT(google-explicit-constructor)
  // `per_node` <= 0: unknown, taken as one node.
  Topology(int world_size, int per_node) : world(world_size), ranks_per_node(per_node > 0 ? per_node : world_size) {}
  int nodes() const { return ranks_per_node > 0 ? (world + ranks_per_node - 1) / ranks_per_node : 1; }
};

}  // namespace zb::backends
