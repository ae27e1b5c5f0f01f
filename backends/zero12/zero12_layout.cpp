// zero12_layout.cpp — see zero12_layout.hpp.
#include "backends/zero12/zero12_layout.hpp"

#include "models/llama.hpp"
#include "runtime/errors.hpp"

namespace zb::backends::zero12 {

Dtypes dtypes_for(const std::string& precision, const Zero12Options& o) {
  if (precision != "bf16" && precision != "fp16" && precision != "fp32")
    throw UsageError("--precision for zero" + std::to_string(o.stage) + " must be bf16, fp16 or fp32, got '" + precision +
                     "'");
  check_precision(o, precision);
  auto dtype = [](const std::string& v) {
    return v == "bf16" ? at::kBFloat16 : v == "fp16" ? at::kHalf : at::kFloat;
  };
  const auto model = dtype(precision);
  const auto comm = o.communication_data_type.empty() ? model : dtype(o.communication_data_type);
  return {model, comm};
}

FlatLayout flat_layout(const models::ModelConfig& cfg, int world, bool round_robin) {
  FlatLayout l;
  l.world = world;
  const auto units = models::unit_param_specs(cfg);
  std::vector<std::pair<int, int>> order = {{0, 0}};  // model.embed_tokens
  for (int u = 1; u < int(units.size()); ++u)
    for (int i = 0; i < int(units[size_t(u)].size()); ++i) order.push_back({u, i});
  for (int i = 1; i < int(units[0].size()); ++i) order.push_back({0, i});  // model.norm, lm_head
  // _round_robin_reorder: partition_tensors[i % W] in order of first appearance of each key.
  std::vector<int> flat_pos(order.size());
  std::vector<size_t> sequence;
  if (round_robin) {
    for (int j = 0; j < world; ++j)
      for (size_t i = size_t(j); i < order.size(); i += size_t(world)) sequence.push_back(i);
  } else {
    for (size_t i = 0; i < order.size(); ++i) sequence.push_back(i);
  }
  for (size_t i : sequence) {
    FlatParam p;
    p.unit = order[i].first;
    p.index = order[i].second;
    p.numel = units[size_t(p.unit)][size_t(p.index)].numel();
    p.offset = l.numel;
    l.numel += p.numel;
    flat_pos[i] = int(l.params.size());
    l.params.push_back(p);
  }
  l.module_order = flat_pos;
  const int64_t alignment = kNcclStartAlignmentFactor * world;
  l.padded = (l.numel + alignment - 1) / alignment * alignment;
  l.partition = l.padded / world;
  return l;
}

std::vector<int> FlatLayout::params_in_partition(int rank) const {
  std::vector<int> out;
  const int64_t lo = int64_t(rank) * partition, hi = lo + partition;
  for (int i = 0; i < int(params.size()); ++i) {
    const auto& p = params[size_t(i)];
    // initialize_gradient_partition: starts inside, or starts before and reaches into it.
    if ((lo <= p.offset && p.offset < hi) || (p.offset < lo && lo < p.offset + p.numel)) out.push_back(i);
  }
  return out;
}

int64_t FlatLayout::grads_in_partition_numel(int rank) const {
  int64_t n = 0;
  for (int i : params_in_partition(rank)) n += params[size_t(i)].numel;
  return n;
}

ShardLayout shard_layout(const EngineSpec& spec, const Topology& topo) {
  ShardLayout l;
  l.world = topo.world;
  l.ranks_per_node = topo.ranks_per_node;
  l.shard_size = topo.world;
  // The real layout is one flat buffer with one pad at its end (flat_layout: padded - numel);
  // ShardLayout describes padding per unit, each a multiple of the shard size (check_layout), so
  // this view rounds each unit up. Nothing sizes memory from it (expected_bytes and the estimate
  // read flat_layout).
  for (const auto& u : models::unit_param_specs(spec.model)) {
    int64_t n = 0;
    for (const auto& p : u) n += p.numel();
    l.unit_numel.push_back(n);
    l.unit_padded.push_back((n + topo.world - 1) / topo.world * topo.world);
  }
  check_layout(l);
  return l;
}

}  // namespace zb::backends::zero12
