// ddp_layout.cpp — DDP's shard layout (BackendInfo::training.shard_layout): nothing is sharded (a shard
// group of one rank, no padding), every rank holds a whole replica and the gradient all-reduce
// runs over the world (torch/nn/parallel/distributed.py: the default process group). Must not:
// allocate anything.
#include "backends/ddp/ddp_engine.hpp"
#include "models/llama.hpp"

namespace zb::backends::ddp {

ShardLayout shard_layout(const EngineSpec& spec, const Topology& topo) {
  ShardLayout l;
  l.world = topo.world;
  l.ranks_per_node = topo.ranks_per_node;
  l.shard_size = 1;
  for (const auto& unit : models::unit_param_specs(spec.model)) {
    int64_t numel = 0;
    for (const auto& p : unit) numel += p.numel();
    l.unit_numel.push_back(numel);
    l.unit_padded.push_back(numel);
  }
  check_layout(l);
  return l;
}

}  // namespace zb::backends::ddp
