// shard_layout.hpp — the shard layout of a run: how many ranks, how many share a node, the ranks
// a parameter is sharded over (the shard group), the ranks that hold the same shard (the
// replicate group) and each unit's padding. Worked out once per run by the backend
// (BackendInfo::training.shard_layout, from its options and the Topology) and consumed by its engine (its
// process groups), its closed form (expected_bytes), its memory estimate and the report
// (config.shard_layout), so that none of them derives the shard group from bare ints again.
// Owns: the value type, its group arithmetic and its JSON form. Must not: know a particular
// backend's rule (each backend's folder has its own: FSDP1 HYBRID_SHARD shards within a node,
// torch/distributed/fsdp/_init_utils.py _init_process_group_state_for_hybrid_shard; FSDP2 HSDP
// within the mesh's dp_shard dimension; ZeRO-3 and FULL_SHARD over the world; DDP not at all),
// create process groups (backends/fsdp_family/process_groups.hpp does) or allocate anything.
#pragma once
#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <vector>

#include "backends/topology.hpp"

namespace zb::backends {

struct ShardLayout {
  int world = 1;           // ranks in the job
  int ranks_per_node = 1;  // ranks sharing a node
  // Ranks a parameter is sharded over: W (FSDP1 FULL_SHARD / SHARD_GRAD_OP, ZeRO-3), the node or
  // hybrid_shard_group_size (HYBRID_SHARD), the mesh's dp_shard (FSDP2); 1 unsharded (DDP,
  // NO_SHARD, a world of one).
  int shard_size = 1;
  // The engine builds a shard and a replicate process group of its own (FSDP1 HYBRID_SHARD, FSDP2
  // HSDP with dp_replicate > 1) instead of sharding (or replicating) over the world's group.
  bool separate_groups = false;
  // Per unit (0 = the root: embedding, final norm, LM head; then each block): its parameter
  // elements, and its elements once padded as the backend pads them (FSDP1: the flat parameter to
  // a multiple of S; ZeRO-3: each parameter to a multiple of W; FSDP2: each parameter's dim 0 to a
  // multiple of S rows) — a multiple of shard_size, every rank holding unit_padded[u] / shard_size.
  std::vector<int64_t> unit_numel, unit_padded;

  int replicate_size() const { return shard_size > 0 ? world / shard_size : 1; }
  // Shard groups are consecutive blocks of shard_size ranks; replicate groups take the same
  // position in every block (FSDP1 _init_intra_and_inter_node_groups; FSDP2's
  // init_device_mesh(("dp_replicate", "dp_shard")): arange(W).view(R, S), rows and columns).
  std::vector<int> shard_group(int rank) const;
  std::vector<int> replicate_group(int rank) const;
  int shard_index(int rank) const { return shard_size > 0 ? rank % shard_size : 0; }
  int64_t unit_padding(int unit) const { return unit_padded.at(size_t(unit)) - unit_numel.at(size_t(unit)); }
  // Padded elements every rank holds of each unit, summed: sum_u unit_padded[u] / shard_size.
  int64_t shard_numel() const;
  Topology topology() const { return Topology(world, ranks_per_node); }
};

// Throws std::logic_error unless the layout is consistent (shard_size divides world, every
// unit's padded size is a multiple of shard_size and at least its numel): the gate every
// backend's hook passes through (BackendInfo callers use it via layout_for).
void check_layout(const ShardLayout& l);

// config.shard_layout (reports/SCHEMA.md): world, ranks_per_node, shard_group {size, ranks (rank
// 0's)}, replicate_group {size, ranks (rank 0's)}, unit_padding [elements per unit].
nlohmann::json to_json(const ShardLayout& l);

}  // namespace zb::backends
