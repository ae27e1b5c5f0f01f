// crossval_rules.cpp — the known differences (see crossval_rules.hpp; docs/crossval.md describes
// each one with the measurement that found it).
#include "bench/crossval_rules.hpp"

#include <algorithm>

#include "models/model_config.hpp"

namespace zb::bench {

namespace {
using json = nlohmann::json;

int64_t param_tensor_count(const models::ModelConfig& cfg) {
  int64_t n = 0;
  for (const auto& unit : models::unit_param_specs(cfg)) n += int64_t(unit.size());
  return n;
}

// FSDP1's shard geometry for one rank, from the backend options as backends/fsdp resolves them
// (fsdp_engine.cpp shard_group_size; a world of one runs NO_SHARD: _init_utils.py
// _init_core_state): per unit, the original parameters with a piece in this rank's shard and
// the padding elements in it.
struct FsdpShardPieces {
  int64_t params_in_shard = 0, padding = 0;
};
FsdpShardPieces fsdp_shard_pieces(const CrossvalContext& c, int rank) {
  const auto& o = c.spec.options;
  const std::string strategy = o.value("sharding_strategy", std::string("FULL_SHARD"));
  int S = c.world_size;
  if (c.world_size == 1 || strategy == "NO_SHARD") S = 1;
  if (strategy == "HYBRID_SHARD" && o.value("hybrid_shard_group_size", 0) > 0) S = o.value("hybrid_shard_group_size", 0);
  const int64_t r = rank % S;
  FsdpShardPieces out;
  for (const auto& unit : models::unit_param_specs(c.spec.model)) {
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

// zerobench's zero3 engine's fp32 sub-groups (stage3.py _create_fp16_sub_groups, as
// backends/zero3 resolves them from sub_group_size and the partition sizes), from the report's
// config.backend.options; -1 when the report does not carry them.
int64_t zero3_sub_groups(const json& report) {
  const json& o = report.value("config", json::object()).value("backend", json::object()).value("options", json::object());
  return o.contains("sub_groups") && o["sub_groups"].is_number_integer() ? o["sub_groups"].get<int64_t>() : -1;
}

}  // namespace

std::optional<StateExplanation> explain_state(const CrossvalContext& c, const json& report, int rank,
                                              const std::string& category, const json& zb) {
  if (category == "optimizer_step_counters") {
    // torch.optim.AdamW(fused=True) keeps `step` as a 0-dim fp32 tensor on the parameter's
    // device for each parameter it steps; zerobench's FusedAdamW holds them too but, as for
    // every backend, does not count them in model_states_bytes (docs/metrics.md).
    int64_t tensors = 0;
    std::string which;
    if (c.backend == "fsdp") {
      // use_orig_params=True: an original parameter with no piece in this rank's shard has no
      // gradient (FlatParamHandle._use_sharded_grad_views sets it to None) and gets no state.
      tensors = fsdp_shard_pieces(c, rank).params_in_shard;
      which = "original parameters with a piece in this rank's shard";
    } else if (c.backend == "fsdp2") {
      tensors = param_tensor_count(c.spec.model);  // every DTensor parameter
      which = "DTensor parameters";
    } else if (c.backend == "zero3") {
      tensors = zero3_sub_groups(report);  // DeepSpeed steps the client AdamW on one fp32 flat per sub-group
      if (tensors < 0) return std::nullopt;
      which = "fp32 sub-group partitions (zerobench's resolved sub_groups)";
    } else {
      return std::nullopt;
    }
    return StateExplanation{4 * tensors, /*zerobench_reports=*/false,
                            "torch.optim.AdamW's per-parameter `step` counter (a 0-dim fp32 tensor for each of " +
                                std::to_string(tensors) + " " + which +
                                "); zerobench's FusedAdamW holds the same kind of tensor and does not count it",
                            "torch/optim/adam.py: Adam._init_group (AdamW subclasses Adam): state[\"step\"] = "
                            "torch.zeros((), dtype=_get_scalar_dtype(is_fused=True), device=p.device)"};
  }
  if (category == "optimizer" && c.backend == "fsdp" && zb.contains("optimizer") && zb["optimizer"].is_number_integer()) {
    // zerobench's FusedAdamW keeps exp_avg / exp_avg_sq over each unit's whole shard, the
    // FlatParameter's tail padding included; FSDP1 with use_orig_params=True steps the original
    // parameters' sharded views, so AdamW never sees the padding.
    const int64_t pad = fsdp_shard_pieces(c, rank).padding;
    const int64_t elem = c.spec.precision == "low" ? 2 : 4;
    if (pad == 0) return std::nullopt;
    return StateExplanation{zb["optimizer"].get<int64_t>() - 2 * elem * pad, /*zerobench_reports=*/true,
                            "AdamW states over the original parameters' views skip the FlatParameter's padding (" +
                                std::to_string(pad) + " elements on this rank); zerobench's states cover the padded shard",
                            "torch/distributed/fsdp/_flat_param.py: FlatParamHandle._use_sharded_views / "
                            "_use_sharded_grad_views (views of numel_in_shard elements)"};
  }
  return std::nullopt;
}

std::optional<CommExplanation> explain_comm(const CrossvalContext& c, const json& report, int rank, int64_t step,
                                            const std::string& kind, int64_t zb_count, int64_t zb_bytes) {
  (void)report;
  (void)rank;  // the trace check runs on every rank alike (rank 0 sends, the others receive)
  (void)zb_bytes;
  const auto& t = c.spec.train;
  if (c.backend == "zero3" && kind == "broadcast" && zb_count == 0) {
    // Each forward starts with PartitionedParameterCoordinator.reset_step(). The first one
    // (empty module trace) and the second (trace just recorded) check that every rank saw the
    // same trace with assert_ints_same_as_other_ranks: a broadcast of the list length (one
    // int64) and one of the list (zero/utils.py, get_lst_from_rank0) — once for the module
    // order at the first reset; for the module order, the parameter order and the parameters'
    // last-use steps at the second. Trace lengths of scripts/crossval/model.py, one micro-batch:
    // modules M = 2 (5 + 12 L) (forward and backward hooks), parameters P = 2 (3 + 9 L).
    const int64_t L = c.spec.model.layers, M = 2 * (5 + 12 * L), P = 2 * (3 + 9 * L);
    CommExplanation e;
    for (int64_t a = 0; a < t.grad_accum; ++a) {
      const int64_t micro = step * t.grad_accum + a;
      if (micro == 0) {
        e.count += 2;
        e.bytes += 8;
      } else if (micro == 1) {
        e.count += 6;
        e.bytes += 3 * 8 + 8 * (M + 2 * P);
      }
    }
    if (e.count == 0) return std::nullopt;
    e.reason = "DeepSpeed checks the recorded trace across ranks with blocking broadcasts in the first two "
               "reset_step() calls (trace length and contents); zerobench records the same trace without checking it";
    e.upstream = "deepspeed/runtime/zero/partitioned_param_coordinator.py: reset_step -> "
                 "deepspeed/runtime/zero/utils.py: assert_ints_same_as_other_ranks";
    return e;
  }
  return std::nullopt;
}

}  // namespace zb::bench
