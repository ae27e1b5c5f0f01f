// fsdp_crossval.cpp — FSDP-mode's crossval reference (PyTorch FSDP1, scripts/crossval/run_fsdp1.py)
// and its known differences (docs/crossval.md describes each one with the measurement that found it).
#include "backends/fsdp/fsdp_crossval.hpp"

#include <algorithm>

#include "backends/fsdp/fsdp_options.hpp"
#include "backends/fsdp/fsdp_wrap.hpp"
#include "models/model_config.hpp"

namespace zb::backends::fsdp {

namespace {

// FSDP1's shard geometry for one rank, from the backend options as the engine resolves them
// (fsdp_engine.cpp shard_group_size; a world of one runs NO_SHARD: _init_utils.py
// _init_core_state): per unit, the original parameters with a piece in this rank's shard and
// the padding elements in it.
struct ShardPieces {
  int64_t params_in_shard = 0, padding = 0;
};
ShardPieces shard_pieces(const CrossvalCase& c, int rank) {
  const auto& o = fsdp_options(c.spec.options);
  int S = c.world_size;
  if (c.world_size == 1 || o.sharding_strategy == ShardingStrategy::kNoShard) S = 1;
  if (is_hybrid(o.sharding_strategy) && o.hybrid_shard_group_size > 0) S = o.hybrid_shard_group_size;
  const int64_t r = rank % S;
  ShardPieces out;
  for (const auto& unit : flat_unit_specs(c.spec.model, wrapping(o, c.spec.model))) {
    int64_t numel = 0;
    for (const auto& p : unit) numel += p.numel();
    const int64_t shard = (numel + S - 1) / S, lo = r * shard, hi = lo + shard;
    out.padding += std::max<int64_t>(0, hi - std::max(lo, numel));
    int64_t begin = 0;
    for (const auto& p : unit) {
      if (std::min(begin + p.numel(), hi) > std::max(begin, lo)) ++out.params_in_shard;
      begin += p.numel();
    }
  }
  return out;
}

std::optional<StateExplanation> explain_state(const CrossvalCase& c, int rank, const std::string& category,
                                              const nlohmann::json& zb) {
  if (category == "optimizer_step_counters")
    // use_orig_params=True: an original parameter with no piece in this rank's shard has no
    // gradient (FlatParamHandle._use_sharded_grad_views sets it to None) and gets no state.
    return adamw_step_counters(shard_pieces(c, rank).params_in_shard,
                               "original parameters with a piece in this rank's shard");
  // With CPUOffload the states are on the host: the category "host.optimizer" (`zb` is flat).
  if ((category == "optimizer" || category == "host.optimizer") && zb.contains(category) &&
      zb[category].is_number_integer()) {
    // zerobench's AdamW keeps exp_avg / exp_avg_sq over each unit's whole shard, the
    // FlatParameter's tail padding included; FSDP1 with use_orig_params=True steps the original
    // parameters' sharded views, so AdamW never sees the padding.
    const int64_t pad = shard_pieces(c, rank).padding;
    const int64_t elem = c.spec.precision == "low" ? 2 : 4;
    if (pad == 0) return std::nullopt;
    return StateExplanation{zb[category].get<int64_t>() - 2 * elem * pad, /*zerobench_reports=*/true,
                            "AdamW states over the original parameters' views skip the FlatParameter's padding (" +
                                std::to_string(pad) + " elements on this rank); zerobench's states cover the padded shard",
                            "torch/distributed/fsdp/_flat_param.py: FlatParamHandle._use_sharded_views / "
                            "_use_sharded_grad_views (views of numel_in_shard elements)"};
  }
  return std::nullopt;
}

// What scripts/crossval/run_fsdp1.py can run of the resolved options on this device; see
// CrossvalReference::reference_setup.
void reference_setup(const EngineSpec& spec, const std::string& device, ReferenceSetup& setup) {
  const auto& o = fsdp_options(spec.options);
  if (device == "cpu" && o.offload_params) {
    setup.refusal =
        "PyTorch FSDP1 CPUOffload(offload_params=True) cannot run on a CPU-only machine: it pins the host shards "
           "and gradients (_flat_param.py init_flat_param_attributes: .pin_memory()), which needs a CUDA driver; "
           "crossval the file with --device cuda on a GPU machine (scripts/gpu-check.sh part 2), or a copy without "
           "fsdp_offload_params here";
    return;
  }
  if (device == "cpu" && o.sync_module_states)
    setup.substitutions.push_back(
        "sync_module_states true: the reference runs without it (FSDP1 refuses it for CPU parameters: _init_utils.py "
        "_check_module_states_for_sync_module_states); every rank loads the same weights file, so only the set-up "
        "broadcast, which is not compared, is missing");
}

}  // namespace

CrossvalReference crossval_reference() {
  CrossvalReference r;
  r.script = "run_fsdp1.py";
  r.framework = "PyTorch FSDP1";
  r.reference_setup = reference_setup;
  r.explain_state = explain_state;
  return r;
}

}  // namespace zb::backends::fsdp
