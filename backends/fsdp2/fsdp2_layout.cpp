// fsdp2_layout.cpp — see fsdp2_layout.hpp (moved out of fsdp2_engine.cpp unchanged, so the
// memory estimate reads the same geometry the engine builds).
#include "backends/fsdp2/fsdp2_layout.hpp"

#include <algorithm>

#include "backends/fsdp2/fsdp2_offload.hpp"
#include "backends/fsdp_family/module_tree.hpp"
#include "runtime/errors.hpp"

namespace zb::backends::fsdp2 {

namespace {
// "bf16" / "fp32"; anything else ("none") is None, spelled at::ScalarType::Undefined here.
at::ScalarType dtype_named(const std::string& v) {
  if (v == "bf16") return at::kBFloat16;
  if (v == "fp32") return at::kFloat;
  return at::ScalarType::Undefined;
}

std::optional<at::ScalarType> none_if_undefined(at::ScalarType t) {
  if (t == at::ScalarType::Undefined) return std::nullopt;
  return t;
}
}  // namespace

Dtypes dtypes_for(const std::string& precision, const Fsdp2Options& o) {
  if (precision != "fp32" && precision != "low" && precision != "mixed" && precision != "fp16")
    throw UsageError("--precision for fsdp2 must be fp32, low, mixed or fp16, got '" + precision + "'");
  // The policy as given: accelerate's set_mixed_precision("bf16") builds
  // MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=bf16, output_dtype=bf16) for mixed; fp32 and
  // low ("no" mixed precision) pass MixedPrecisionPolicy() (fsdp2_prepare_model).
  at::ScalarType param = at::ScalarType::Undefined, reduce = dtype_named(o.reduce_dtype),
                 output = at::ScalarType::Undefined;
  if (precision == "mixed" || precision == "fp16") {  // fp16: set_mixed_precision("fp16"), the same policy in fp16
    const auto low = precision == "fp16" ? at::kHalf : at::kBFloat16;
    param = low;
    if (o.reduce_dtype.empty()) reduce = low;
    output = o.output_dtype.empty() ? low : dtype_named(o.output_dtype);
  } else if (!o.output_dtype.empty() && o.output_dtype != "none") {
    if (precision == "fp32")
      throw UsageError("--output-dtype " + o.output_dtype + " needs --precision low or mixed for fsdp2");
    output = dtype_named(o.output_dtype);
  }
  Dtypes d;
  d.orig = precision == "low" ? at::kBFloat16 : at::kFloat;
  // _fsdp_param.py init_dtype_attrs: reduce_dtype == param_dtype -> None; param_dtype == orig -> None.
  if (reduce == param) reduce = at::ScalarType::Undefined;
  if (param == d.orig) param = at::ScalarType::Undefined;
  d.param = none_if_undefined(param);
  d.reduce = none_if_undefined(reduce);
  d.output = none_if_undefined(output);
  return d;
}

// accelerate fsdp2_prepare_model: "low" shards the bf16-loaded model as is; "mixed" upcasts the
// bf16-loaded weights to fp32 sharded parameters. Sharded gradients and AdamW states are in the
// sharded parameters' dtype (foreach_reduce casts the reduce output to orig_dtype).
PrecisionPlan precision_plan(const EngineSpec& spec) {
  const auto d = dtypes_for(spec.precision, fsdp2_options(spec.options));
  PrecisionPlan p;
  p.load = spec.precision == "fp32" || spec.precision == "fp16" ? at::kFloat : at::kBFloat16;  // fp16: an fp32 load
  p.params = p.grads = p.optimizer_states = d.orig;
  p.compute = d.compute();
  p.reduce = d.comm_reduce();
  if (d.output) p.notes = "the root casts the loss to " + dtype_short_name(*d.output) + " (MixedPrecisionPolicy.output_dtype)";
  return p;
}

// ---------------------------------------------------------------- mesh and layouts

Mesh resolve_mesh(const Fsdp2Options& o, int world) {
  Mesh m;
  m.replicate = o.dp_replicate_size;
  m.shard = o.dp_shard_size;
  if (m.replicate == 0) m.replicate = m.shard > 0 && world % m.shard == 0 ? world / m.shard : -1;
  if (m.shard == 0) m.shard = world % m.replicate == 0 ? world / m.replicate : -1;
  if (m.replicate < 1 || m.shard < 1 || m.replicate * m.shard != world)
    throw UsageError("fsdp2 mesh dp_replicate_size " + std::to_string(o.dp_replicate_size) + " x dp_shard_size " +
                     std::to_string(o.dp_shard_size) + " does not match the world size " + std::to_string(world));
  return m;
}

ParamLayout layout_param(const models::ParamSpec& spec, int unit, int index, int shard_size, int shard_rank) {
  ParamLayout l;
  l.unit = unit;
  l.index = index;
  l.shape = spec.shape;
  l.numel = spec.numel();
  l.dim0 = spec.shape.at(0);
  l.row = l.dim0 > 0 ? l.numel / l.dim0 : 0;
  l.chunk_rows = (l.dim0 + shard_size - 1) / shard_size;
  l.local_rows = std::max<int64_t>(0, std::min(l.chunk_rows, l.dim0 - int64_t(shard_rank) * l.chunk_rows));
  return l;
}

// ---------------------------------------------------------------- groups (fully_shard calls)

bool wraps_blocks(const models::ModelConfig& cfg, const Fsdp2Options& o) {
  if (o.auto_wrap_policy != "SIZE_BASED_WRAP") return o.auto_wrap_policy == "TRANSFORMER_BASED_WRAP";
  const auto selected = fsdp_family::fsdp2_size_policy_modules(cfg, o.min_num_params);
  if (selected.empty()) return false;  // the root's groups alone, as NO_WRAP
  throw UsageError("fsdp2 auto_wrap_policy SIZE_BASED_WRAP with min_num_params " + std::to_string(o.min_num_params) +
                   " selects " + fsdp_family::module_list_text(selected) + " of " + cfg.preset +
                   " (accelerate's size policy: every module but the root with more parameters than that): "
                   "fully_shard groups other than the blocks and the root's are not implemented; zerobench runs "
                   "SIZE_BASED_WRAP when it selects nothing (as NO_WRAP) — raise min_num_params to at least " +
                   std::to_string(fsdp_family::module_tree(cfg).children.at(0).numel()) +
                   " (the decoder's `model`), or use TRANSFORMER_BASED_WRAP");
}

// FSDP states in the root module's named_modules() order (_fsdp_state.py _lazy_init all_states),
// which is also the order their pre-forwards run in.
std::vector<GroupSpec> group_specs(const models::ModelConfig& cfg, const Fsdp2Options& o) {
  const bool wrap_blocks = wraps_blocks(cfg, o);
  const int L = int(cfg.layers);
  std::vector<GroupSpec> out;
  GroupSpec root;
  root.kind = GroupKind::kRoot;
  root.reshard_after_forward_false = true;  // reshard_after_forward=None on the root
  auto add_blocks = [&](GroupSpec& g, int u) {
    for (int i : kHfBlockOrder) g.params.push_back({u, i});
  };
  auto push_block_groups = [&] {  // fully_shard(block) for each decoder block, in order
    for (int u = 1; u <= L; ++u) {
      GroupSpec b;
      b.kind = GroupKind::kBlock;
      b.unit = u;
      b.label = "unit" + std::to_string(u);
      add_blocks(b, u);
      out.push_back(b);
    }
  };
  if (o.grouping == "root") {
    // fully_shard(block) for each block, then fully_shard(model): the root group takes what is
    // left, in model.parameters() order: embedding, (blocks unless wrapped), final norm, LM head.
    root.label = wrap_blocks ? "unit0" : "root";
    root.params.push_back({0, 0});
    if (!wrap_blocks)
      for (int u = 1; u <= L; ++u) add_blocks(root, u);
    root.params.push_back({0, 1});
    root.params.push_back({0, 2});
    out.push_back(root);
    if (wrap_blocks) push_block_groups();
    return out;
  }
  // accelerate 1.15 fsdp2_prepare_model: blocks (auto-wrap policy), then fully_shard(embed_tokens),
  // then fully_shard([norm, lm_head], reshard_after_forward=False), then fully_shard(model) without
  // reshard_after_forward (None -> False for the root).
  root.label = "root";
  if (!wrap_blocks)
    for (int u = 1; u <= L; ++u) add_blocks(root, u);
  out.push_back(root);
  GroupSpec embed;
  embed.kind = GroupKind::kEmbed;
  embed.label = "embed";
  embed.params.push_back({0, 0});
  out.push_back(embed);
  if (wrap_blocks) push_block_groups();
  GroupSpec tail;
  tail.kind = GroupKind::kTail;
  tail.label = "tail";
  tail.params = {{0, 1}, {0, 2}};
  tail.reshard_after_forward_false = true;
  out.push_back(tail);
  return out;
}

ShardLayout shard_layout(const EngineSpec& spec, const Topology& topo) {
  const auto& o = fsdp2_options(spec.options);
  const auto mesh = resolve_mesh(o, topo.world);
  // Refused before any rank starts: what wraps_blocks cannot run, and accelerate's
  // fsdp_activation_checkpointing under a policy that does not select the decoder blocks —
  // fsdp2_apply_ac checkpoint-wraps each child of a module the policy selects: under NO_WRAP it
  // calls None (TypeError), under SIZE_BASED_WRAP the root's children or nothing, never the blocks.
  if (!wraps_blocks(spec.model, o) && o.activation_checkpointing)
    throw UsageError("fsdp_activation_checkpointing true with auto_wrap_policy " + o.auto_wrap_policy +
                     (o.auto_wrap_policy == "NO_WRAP"
                          ? ": accelerate's fsdp2_apply_ac calls the auto-wrap policy, which NO_WRAP leaves None "
                            "(a TypeError)"
                          : ": accelerate's fsdp2_apply_ac checkpoints the children of the modules the size policy "
                            "selects (the root's, or none), not the decoder blocks") +
                     "; zerobench checkpoints whole decoder blocks (use TRANSFORMER_BASED_WRAP, or "
                     "--activation-checkpointing, HF's gradient checkpointing, without fsdp_activation_checkpointing)");
  ShardLayout l;
  l.world = topo.world;
  l.ranks_per_node = topo.ranks_per_node;
  l.shard_size = mesh.shard;
  l.separate_groups = mesh.replicate > 1;  // a 1-D mesh when dp_replicate is 1
  const auto specs = models::unit_param_specs(spec.model);
  for (int u = 0; u < int(specs.size()); ++u) {
    int64_t numel = 0, padded = 0;
    for (int i = 0; i < int(specs[size_t(u)].size()); ++i) {
      const auto p = layout_param(specs[size_t(u)][size_t(i)], u, i, mesh.shard, 0);
      numel += p.numel;
      padded += p.padded_shard_numel() * mesh.shard;
    }
    l.unit_numel.push_back(numel);
    l.unit_padded.push_back(padded);
  }
  check_layout(l);
  return l;
}

// Closed form per rank: per parameter, the padded shard (ceil(dim0/S) rows) as sharded parameter
// and as sharded gradient, and two AdamW states over the rows this rank owns — in the sharded dtype.
// CPUOffloadPolicy (fsdp2_offload.hpp): the same states on the host, the gradient being only this
// rank's rows (foreach_reduce copies the `sharded_size` view), `pinned` = pin_memory.
ModelStateBytes closed_form_bytes(const EngineSpec& spec, const Topology& topo, int rank) {
  const auto& o = fsdp2_options(spec.options);
  const bool host = o.offloads();
  const auto d = dtypes_for(spec.precision, o);
  const auto sl = shard_layout(spec, topo);
  const int64_t e = int64_t(c10::elementSize(d.orig));
  ModelStateBytes b;
  int64_t& params = host ? b.host.params : b.params;
  int64_t& grads = host ? b.host.grads : b.grads;
  int64_t& optimizer = host ? b.host.optimizer : b.optimizer;
  const auto specs = models::unit_param_specs(spec.model);
  for (int u = 0; u < int(specs.size()); ++u)
    for (int i = 0; i < int(specs[size_t(u)].size()); ++i) {
      const auto l = layout_param(specs[size_t(u)][size_t(i)], u, i, sl.shard_size, sl.shard_index(rank));
      params += l.padded_shard_numel() * e;
      grads += (host ? l.local_numel() : l.padded_shard_numel()) * e;
      optimizer += 2 * l.local_numel() * e;
    }
  b.host.pinned = host && o.offload_pin_memory;
  return b;
}

}  // namespace zb::backends::fsdp2
