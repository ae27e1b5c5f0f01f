// process_groups.hpp — the process groups a sharding engine runs its collectives on, built from
// the run's ShardLayout: with separate groups (FSDP1 HYBRID_SHARD, FSDP2 HSDP) a subgroup of this
// rank's shard group and one of its replicate group, otherwise the world (sharded over, or
// replicated across). Owns: that construction, once for every engine (it was written out in
// fsdp_engine.cpp and fsdp2_engine.cpp). Must not: decide the groups' sizes (the backend's
// BackendInfo::training.shard_layout does) or count collectives.
// Upstream: torch/distributed/fsdp/_init_utils.py _init_intra_and_inter_node_groups (shard
// groups of consecutive ranks, replicate groups across them); torch/distributed/device_mesh.py
// init_device_mesh(("dp_replicate", "dp_shard")): arange(W).view(R, S), rows and columns.
// Belongs to the PyTorch-FSDP family (backends/fsdp_family/), used by fsdp, fsdp2.
#pragma once
#include <string>

#include "backends/shard_layout.hpp"
#include "runtime/world.hpp"

namespace zb::backends::fsdp_family {

struct ShardGroups {
  runtime::World shard;      // the ranks this rank's parameters are sharded over (the world unless separate)
  runtime::World replicate;  // across shard groups; only with layout.separate_groups (default otherwise)
};

// Every rank calls it (subgroup creation is collective): "<prefix>_shard" first, then
// "<prefix>_replicate". Throws std::logic_error when the layout is not for this world.
ShardGroups shard_groups(const runtime::World& world, const ShardLayout& layout, const std::string& prefix);

}  // namespace zb::backends::fsdp_family
