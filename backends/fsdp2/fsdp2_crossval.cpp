// fsdp2_crossval.cpp — FSDP2-mode's crossval reference (PyTorch fully_shard,
// scripts/crossval/run_fsdp2.py) and its known differences (docs/crossval.md).
#include "backends/fsdp2/fsdp2_crossval.hpp"

#include "backends/fsdp2/fsdp2_layout.hpp"
#include "backends/fsdp2/fsdp2_offload.hpp"
#include "backends/fsdp2/fsdp2_options.hpp"
#include "models/model_config.hpp"

namespace zb::backends::fsdp2 {

namespace {

// The first option scripts/crossval/run_fsdp2.py does not set up, as a refusal; "" when none.
std::string not_set_up(const EngineSpec& spec, const Fsdp2Options& o) {
  const std::string way = "; crossval a copy of the file (or the flags) without it";
  if (o.dp_replicate_size > 1 || (o.dp_replicate_size == 0 && o.dp_shard_size > 0))
    return "PyTorch FSDP2 with HSDP (dp_replicate_size " + std::to_string(o.dp_replicate_size) + ", dp_shard_size " +
           std::to_string(o.dp_shard_size) + ") is not set up by scripts/crossval/run_fsdp2.py (one 1-D mesh)" + way;
  if (o.modules_to_forward_prefetch > 0 || o.modules_to_backward_prefetch > 0)
    return "PyTorch FSDP2 with explicit prefetch lists (--modules-to-forward-prefetch / --modules-to-backward-prefetch) "
           "is not set up by scripts/crossval/run_fsdp2.py" + way;
  if (o.force_sum_reduction_for_comms)
    return "PyTorch FSDP2 with force_sum_reduction_for_comms is not set up by scripts/crossval/run_fsdp2.py" + way;
  // NO_WRAP (and SIZE_BASED_WRAP selecting nothing): the blocks stay in the root group on both
  // sides. Activation checkpointing is accelerate's fsdp2_apply_ac, which checkpoints the children
  // of the modules the auto-wrap policy selects: under NO_WRAP it has none (it calls None), under
  // the size policy not the decoder blocks, so that pair has no upstream run to compare with.
  if (o.auto_wrap_policy != "TRANSFORMER_BASED_WRAP" &&
      (o.activation_checkpointing || spec.train.activation_checkpointing.enabled()))
    return "PyTorch FSDP2 with activation checkpointing and fsdp_auto_wrap_policy " + o.auto_wrap_policy +
           " is not set up by scripts/crossval/run_fsdp2.py (accelerate's fsdp2_apply_ac checkpoints the children "
           "of the modules the auto-wrap policy selects: NO_WRAP has no policy, the size policy not the decoder "
           "blocks)" + way;
  // The runner applies accelerate's fsdp2_apply_ac to the blocks zerobench checkpoints (every block
  // for full; selective-layer:N's blocks N, 2N, ...); torchtitan's op-level policy it does not set up.
  if (spec.train.activation_checkpointing.kind == models::ActivationCheckpointing::Kind::SelectiveOp)
    return "PyTorch FSDP2 with --activation-checkpointing " + spec.train.activation_checkpointing.name() +
           " is not set up by scripts/crossval/run_fsdp2.py (accelerate's fsdp2_apply_ac wraps whole blocks; "
           "the op-level policy is crossval-ed on fsdp)" + way;
  return "";
}

// The names in fsdp_transformer_layer_cls_to_wrap that are not the block class of the model here.
std::string other_models_classes(const std::string& names) {
  std::string others;
  for (size_t start = 0; start <= names.size();) {
    size_t end = names.find(',', start);
    if (end == std::string::npos) end = names.size();
    std::string name = names.substr(start, end - start);
    while (!name.empty() && name.front() == ' ') name.erase(0, 1);
    while (!name.empty() && name.back() == ' ') name.pop_back();
    if (!name.empty() && name != "LlamaDecoderLayer") others += (others.empty() ? "" : ", ") + name;
    start = end + 1;
  }
  return others;
}

// What scripts/crossval/run_fsdp2.py sets up of the resolved options (its docstring), on this
// device; see CrossvalReference::reference_setup.
void reference_setup(const EngineSpec& spec, const std::string& device, ReferenceSetup& setup) {
  const auto& o = fsdp2_options(spec.options);
  setup.refusal = not_set_up(spec, o);
  if (!setup.refusal.empty()) return;
  if (o.cpu_ram_efficient_loading) {
    setup.reference_options["cpu_ram_efficient_loading"] = false;
    setup.substitutions.push_back(
        "cpu_ram_efficient_loading true: the reference loads the same weights file on every rank instead of "
        "broadcasting rank 0's (accelerate fsdp2_load_full_state_dict); the parameters start from the same values, "
        "and set-up traffic is not compared");
  }
  if (o.offloads() && o.offload_pin_memory && device == "cpu") {
    setup.reference_options["offload_pin_memory"] = false;
    setup.zerobench_flags["--fsdp2-offload-pin-memory"] = "false";
    setup.substitutions.push_back(
        "CPUOffloadPolicy(pin_memory=True) runs unpinned on both sides (zerobench's with --fsdp2-offload-pin-memory "
        "false): page-locked memory needs CUDA and torch refuses to pin on a CPU-only machine; zerobench pins nothing "
        "on a CPU run either (common::host_empty), so only the reported host.pinned flag would differ");
  }
  // accelerate resolves each name against the model it prepares (fsdp2_prepare_auto_wrap_policy:
  // "Could not find the transformer layer class ... in the model"); both sides here wrap the one
  // block class of the model they train.
  if (const auto others = other_models_classes(o.transformer_layer_cls_to_wrap); !others.empty())
    setup.substitutions.push_back("fsdp_transformer_layer_cls_to_wrap names " + others +
                                  ", not a class of the Llama decoder trained here: both sides wrap its decoder block "
                                  "(LlamaDecoderLayer), the block the file wraps in its own model");
}

}  // namespace

CrossvalReference crossval_reference() {
  CrossvalReference r;
  r.script = "run_fsdp2.py";
  r.framework = "PyTorch FSDP2";
  r.reference_setup = reference_setup;
  r.explain_state = [](const CrossvalCase& c, int rank, const std::string& category,
                       const nlohmann::json& /*zb*/) -> std::optional<StateExplanation> {
    if (category == "host.grads") {
      // CPUOffloadPolicy on a CPU-only run: the "device" is the CPU, so foreach_reduce's
      // `new_sharded_grad.to(torch.device("cpu"))` returns the view itself (Tensor.to on the same
      // device copies nothing) and the gradients stay views into the padded reduce-scatter output:
      // a padded shard per parameter, as without offload. On CUDA it copies the `sharded_size`
      // rows, which zerobench counts (the bytes where they live on a GPU).
      const auto& o = fsdp2_options(c.spec.options);
      if (!o.offloads() || c.pg_backend != "gloo") return std::nullopt;
      StateExplanation x;
      x.expected = closed_form_bytes(c.spec, Topology(c.world_size), rank).host.params;
      x.reason = "on a CPU-only run upstream's device->host copy of a reduced gradient is Tensor.to(cpu) of a CPU "
                 "tensor: no copy, the gradients stay views into the padded reduce-scatter output (its padded "
                 "shards); zerobench copies the unpadded rows as FSDP2 does on a GPU";
      x.upstream = "torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py: foreach_reduce "
                   "(new_sharded_grad.to(torch.device(\"cpu\"), non_blocking=...))";
      return x;
    }
    if (category != "optimizer_step_counters") return std::nullopt;
    int64_t tensors = 0;  // every DTensor parameter
    for (const auto& unit : models::unit_param_specs(c.spec.model)) tensors += int64_t(unit.size());
    return adamw_step_counters(tensors, "DTensor parameters");
  };
  return r;
}

}  // namespace zb::backends::fsdp2
