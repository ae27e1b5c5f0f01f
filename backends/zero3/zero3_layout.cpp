// zero3_layout.cpp — see zero3_layout.hpp (moved out of zero3_engine.cpp unchanged, so the
// engine, its closed form and the memory estimate read the same partitions).
#include "backends/zero3/zero3_layout.hpp"

#include <algorithm>

#include "backends/zero3/zero3_qgz.hpp"
#include "backends/zero3/zero3_zeropp.hpp"
#include "backends/zero3/zero3_padding.hpp"

#include "models/llama.hpp"
#include "runtime/errors.hpp"

namespace zb::backends::zero3 {

namespace {
at::ScalarType dtype_named(const std::string& name, at::ScalarType fallback) {
  if (name.empty()) return fallback;
  return name == "fp32" ? at::kFloat : name == "fp16" ? at::kHalf : at::kBFloat16;
}
}  // namespace

Dtypes dtypes_for(const std::string& precision, const Zero3Options& o) {
  if (precision != "bf16" && precision != "fp32" && precision != "fp16")
    throw UsageError("--precision for zero3 must be bf16, fp16 or fp32, got '" + precision + "'");
  // get_data_types: fp16 ("fp16": enabled) -> torch.float16, bf16 -> bfloat16, else fp32.
  const auto model = precision == "bf16" ? at::kBFloat16 : precision == "fp16" ? at::kHalf : at::kFloat;
  return {model, dtype_named(o.communication_data_type, model), dtype_named(o.grad_accum_dtype, model)};
}

int64_t ipg_buffer_bytes(const Zero3Options& o, const Dtypes& d) {
  return o.contiguous_gradients ? o.reduce_bucket_size * int64_t(c10::elementSize(d.comm)) : 0;
}

// _partition_param: pad each parameter to a multiple of W; rank r keeps [r*P, (r+1)*P).
// _create_fp16_sub_groups: consecutive parameters until their partitions reach sub_group_size.
std::vector<ParamLayout> param_layouts(const models::ModelConfig& cfg, int world, const Zero3Options& o,
                                       int* sub_groups) {
  std::vector<ParamLayout> out;
  int64_t offset = 0, in_group = 0, total_part = 0;
  const auto units = models::unit_param_specs(cfg);
  for (int u = 0; u < int(units.size()); ++u)
    for (int i = 0; i < int(units[size_t(u)].size()); ++i) total_part += partition_numel(units[size_t(u)][size_t(i)].numel(), world);
  int group = 0;
  for (int u = 0; u < int(units.size()); ++u) {
    for (int i = 0; i < int(units[size_t(u)].size()); ++i) {
      const auto& spec = units[size_t(u)][size_t(i)];
      ParamLayout p;
      p.unit = u;
      p.index = i;
      p.shape = spec.shape;
      p.numel = spec.numel();
      p.part_numel = partition_numel(p.numel, world);  // zero3_padding.hpp
      p.padded = p.part_numel * world;
      p.part_offset = offset;
      p.persistent = p.numel <= o.stage3_param_persistence_threshold;
      offset += p.part_numel;
      p.sub_group = group;
      in_group += p.part_numel;
      out.push_back(p);
      if (o.sub_group_size < total_part && in_group >= o.sub_group_size) {
        ++group;
        in_group = 0;
      }
    }
  }
  *sub_groups = in_group > 0 || out.empty() ? group + 1 : group;
  // ds_id: the embedding (the root unit's first weight), the blocks, then the root's others.
  int next = 0;
  for (auto& p : out)
    if (p.unit == 0 && p.index == 0) p.ds_id = next++;
  for (auto& p : out)
    if (p.unit != 0) p.ds_id = next++;
  for (auto& p : out)
    if (p.unit == 0 && p.index != 0) p.ds_id = next++;
  return out;
}

std::vector<int> in_ds_id_order(std::vector<int> ids, const std::vector<ParamLayout>& layout) {
  std::sort(ids.begin(), ids.end(), [&](int a, int b) { return layout[size_t(a)].ds_id < layout[size_t(b)].ds_id; });
  return ids;
}

ShardLayout shard_layout(const EngineSpec& spec, const Topology& topo) {
  const auto& o = zero3_options(spec.options);
  ShardLayout l;
  l.world = topo.world;
  l.ranks_per_node = topo.ranks_per_node;
  l.shard_size = topo.world;  // primary partitions over the whole world (hpZ adds secondary ones; no MiCS)
  const int hpz = effective_hpz(o, topo.world);  // zero_hpz_partition_size must divide the world (zero3_zeropp.hpp)
  int groups = 1;
  const auto layouts = param_layouts(spec.model, l.shard_size, o, &groups);
  if (o.zero_quantized_weights && topo.world > 1) check_quantizable(layouts, hpz);  // qwZ: CUDAQuantizer's groups
  check_qgz_shapes(layouts, qgz_topology(o, topo.world, topo.ranks_per_node));  // qgZ: the swizzle kernel's shapes
  for (const auto& p : layouts) {
    if (size_t(p.unit) >= l.unit_numel.size()) {
      l.unit_numel.push_back(0);
      l.unit_padded.push_back(0);
    }
    l.unit_numel.back() += p.numel;
    l.unit_padded.back() += p.padded;
  }
  check_layout(l);
  return l;
}

}  // namespace zb::backends::zero3
