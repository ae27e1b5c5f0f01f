// fsdp2_options.cpp — FSDP2 option names and their JSON round trip (see fsdp2_options.hpp; the
// accelerate `fsdp_version: 2` reader is config/accelerate_fsdp2.cpp, its use fsdp2_config.cpp).
#include "backends/fsdp2/fsdp2_options.hpp"

#include <algorithm>
#include <cctype>

#include "runtime/errors.hpp"

namespace zb::backends::fsdp2 {

namespace {
std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}
std::string upper(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::toupper(c); });
  return s;
}

void check_dtype_name(const std::string& key, const std::string& v, bool allow_none) {
  if (v.empty() || v == "bf16" || v == "fp32" || (allow_none && v == "none")) return;
  throw UsageError(key + " must be bf16 or fp32" + std::string(allow_none ? " or none" : "") + ", got '" + v + "'");
}
}  // namespace

std::string reshard_after_forward_text(int v) {
  if (v == kReshardTrue) return "true";
  if (v == kReshardFalse) return "false";
  return std::to_string(v);
}

int parse_reshard_after_forward(const std::string& key, const std::string& v) {
  const auto l = lower(v);
  if (l == "true") return kReshardTrue;
  if (l == "false") return kReshardFalse;
  try {
    size_t used = 0;
    const int n = std::stoi(v, &used);
    if (used == v.size() && n >= 1) return n;
  } catch (const std::exception&) {
  }
  throw UsageError(key + " '" + v + "' must be true, false or a positive int (ranks to reshard to after forward)");
}

std::string offload_policy_text(const Fsdp2Options& o) {
  if (!o.offloads()) return "OffloadPolicy()";
  return std::string("CPUOffloadPolicy(pin_memory=") + (o.offload_pin_memory ? "True" : "False") + ")";
}

nlohmann::json to_json(const Fsdp2Options& o) {
  nlohmann::json raf;
  if (o.reshard_after_forward == kReshardTrue)
    raf = true;
  else if (o.reshard_after_forward == kReshardFalse)
    raf = false;
  else
    raf = o.reshard_after_forward;
  nlohmann::json j = {{"reshard_after_forward", raf},
          {"reduce_dtype", o.reduce_dtype},
          {"output_dtype", o.output_dtype},
          {"grouping", o.grouping},
          {"auto_wrap_policy", o.auto_wrap_policy},
          {"dp_replicate_size", o.dp_replicate_size},
          {"dp_shard_size", o.dp_shard_size},
          {"modules_to_forward_prefetch", o.modules_to_forward_prefetch},
          {"modules_to_backward_prefetch", o.modules_to_backward_prefetch},
          {"sync_each_batch", o.sync_each_batch},
          {"force_sum_reduction_for_comms", o.force_sum_reduction_for_comms},
          {"activation_checkpointing", o.activation_checkpointing},
          {"cpu_ram_efficient_loading", o.cpu_ram_efficient_loading},
          {"state_dict_type", o.state_dict_type},
          {"transformer_layer_cls_to_wrap", o.transformer_layer_cls_to_wrap},
          {"offload_policy", o.offload_policy},
          {"offload_pin_memory", o.offload_pin_memory}};
  if (o.auto_wrap_policy == "SIZE_BASED_WRAP") j["min_num_params"] = o.min_num_params;
  return j;
}

Fsdp2Options fsdp2_options_from_json(const nlohmann::json& j) {
  Fsdp2Options o;
  if (j.contains("reshard_after_forward")) {
    const auto& v = j["reshard_after_forward"];
    if (v.is_boolean())
      o.reshard_after_forward = v.get<bool>() ? kReshardTrue : kReshardFalse;
    else if (v.is_number_integer())
      o.reshard_after_forward = parse_reshard_after_forward("--reshard-after-forward", std::to_string(v.get<int>()));
    else
      o.reshard_after_forward = parse_reshard_after_forward("--reshard-after-forward", v.get<std::string>());
  }
  o.reduce_dtype = j.value("reduce_dtype", o.reduce_dtype);
  o.output_dtype = j.value("output_dtype", o.output_dtype);
  o.grouping = j.value("grouping", o.grouping);
  o.auto_wrap_policy = j.value("auto_wrap_policy", o.auto_wrap_policy);
  o.min_num_params = j.value("min_num_params", o.min_num_params);
  o.dp_replicate_size = j.value("dp_replicate_size", o.dp_replicate_size);
  o.dp_shard_size = j.value("dp_shard_size", o.dp_shard_size);
  o.modules_to_forward_prefetch = j.value("modules_to_forward_prefetch", o.modules_to_forward_prefetch);
  o.modules_to_backward_prefetch = j.value("modules_to_backward_prefetch", o.modules_to_backward_prefetch);
  o.sync_each_batch = j.value("sync_each_batch", o.sync_each_batch);
  o.force_sum_reduction_for_comms = j.value("force_sum_reduction_for_comms", o.force_sum_reduction_for_comms);
  o.activation_checkpointing = j.value("activation_checkpointing", o.activation_checkpointing);
  o.cpu_ram_efficient_loading = j.value("cpu_ram_efficient_loading", o.cpu_ram_efficient_loading);
  o.state_dict_type = j.value("state_dict_type", o.state_dict_type);
  o.transformer_layer_cls_to_wrap = j.value("transformer_layer_cls_to_wrap", o.transformer_layer_cls_to_wrap);
  // Options written before CPUOffloadPolicy existed here spelled it offload_params (then refused).
  if (j.value("offload_params", false)) o.offload_policy = "cpu";
  o.offload_policy = j.value("offload_policy", o.offload_policy);
  o.offload_pin_memory = j.value("offload_pin_memory", o.offload_pin_memory);
  return validated(std::move(o));
}

Fsdp2Options validated(Fsdp2Options o) {
  check_dtype_name("--reduce-dtype", o.reduce_dtype, false);
  check_dtype_name("--output-dtype", o.output_dtype, true);
  if (o.grouping != "root" && o.grouping != "accelerate")
    throw UsageError("--fsdp2-grouping must be root or accelerate, got '" + o.grouping + "'");
  o.auto_wrap_policy = upper(o.auto_wrap_policy);
  if (o.auto_wrap_policy != "TRANSFORMER_BASED_WRAP" && o.auto_wrap_policy != "NO_WRAP" &&
      o.auto_wrap_policy != "SIZE_BASED_WRAP")
    throw UsageError("fsdp2 auto_wrap_policy must be TRANSFORMER_BASED_WRAP, SIZE_BASED_WRAP or NO_WRAP, got '" +
                     o.auto_wrap_policy + "'");
  if (o.auto_wrap_policy != "SIZE_BASED_WRAP") o.min_num_params = 0;
  if (o.dp_replicate_size < 0 || o.dp_shard_size < 0 || (o.dp_replicate_size == 0 && o.dp_shard_size == 0))
    throw UsageError("--dp-replicate-size " + std::to_string(o.dp_replicate_size) + " / --dp-shard-size " +
                     std::to_string(o.dp_shard_size) + ": sizes must be >= 0 and not both 0 (0 = world / the other)");
  if (o.modules_to_forward_prefetch < 0 || o.modules_to_backward_prefetch < 0)
    throw UsageError("--modules-to-forward-prefetch / --modules-to-backward-prefetch must be >= 0");
  o.offload_policy = lower(o.offload_policy);
  if (o.offload_policy != "none" && o.offload_policy != "cpu")
    throw UsageError("--fsdp2-offload-policy must be cpu or none, got '" + o.offload_policy + "'");
  return o;
}

const Fsdp2Options& fsdp2_options(const BackendOptions& options) {
  return options.as<Fsdp2Options>(fsdp2_options_from_json);
}

nlohmann::json to_json(const Fsdp2Resolved& r) {
  auto factor = [](const std::optional<double>& f) { return f ? nlohmann::json(*f) : nlohmann::json(nullptr); };
  auto j = to_json(r.options);
  j["optimizer"] = r.optimizer;
  j["fully_shard_offload_policy"] = offload_policy_text(r.options);
  // "None": a MixedPrecisionPolicy field left unset, as torch prints it
  j["sharded_param_dtype"] = dtype_long_name(r.sharded_param_dtype, "None");
  j["mp_param_dtype"] = dtype_long_name(r.mp_param_dtype, "None");
  j["mp_reduce_dtype"] = dtype_long_name(r.mp_reduce_dtype, "None");
  j["mp_output_dtype"] = dtype_long_name(r.mp_output_dtype, "None");
  j["all_gather_dtype"] = dtype_long_name(r.all_gather_dtype, "None");
  j["reduce_scatter_dtype"] = dtype_long_name(r.reduce_scatter_dtype, "None");
  j["mesh"] = {{"dp_replicate", r.mesh_dp_replicate}, {"dp_shard", r.mesh_dp_shard}};
  j["reduce_scatter_op"] = r.reduce_scatter_op;
  j["all_reduce_op"] = r.all_reduce_op;
  j["gradient_predivide_factor"] = factor(r.gradient_predivide_factor);
  j["gradient_postdivide_factor"] = factor(r.gradient_postdivide_factor);
  j["groups"] = nlohmann::json::array();
  for (const auto& g : r.groups)
    j["groups"].push_back({{"label", g.label},
                           {"params", g.params},
                           {"reshard_after_forward", reshard_after_forward_text(g.reshard_after_forward)}});
  return j;
}

Fsdp2Resolved fsdp2_resolved_from_json(const nlohmann::json& j) {
  Fsdp2Resolved r;
  const auto o = j.is_object() ? j : nlohmann::json::object();
  r.options = fsdp2_options_from_json(o);  // the engine's own keys are not options: not read there
  r.optimizer = o.value("optimizer", r.optimizer);
  r.sharded_param_dtype = dtype_key(o, "sharded_param_dtype");
  r.mp_param_dtype = dtype_key(o, "mp_param_dtype");
  r.mp_reduce_dtype = dtype_key(o, "mp_reduce_dtype");
  r.mp_output_dtype = dtype_key(o, "mp_output_dtype");
  r.all_gather_dtype = dtype_key(o, "all_gather_dtype");
  r.reduce_scatter_dtype = dtype_key(o, "reduce_scatter_dtype");
  if (o.contains("mesh") && o["mesh"].is_object()) {
    r.mesh_dp_replicate = o["mesh"].value("dp_replicate", r.mesh_dp_replicate);
    r.mesh_dp_shard = o["mesh"].value("dp_shard", r.mesh_dp_shard);
  }
  r.reduce_scatter_op = o.value("reduce_scatter_op", r.reduce_scatter_op);
  r.all_reduce_op = o.value("all_reduce_op", r.all_reduce_op);
  auto factor = [&o](const char* key) {
    return o.contains(key) && o[key].is_number() ? std::optional<double>(o[key].get<double>()) : std::nullopt;
  };
  r.gradient_predivide_factor = factor("gradient_predivide_factor");
  r.gradient_postdivide_factor = factor("gradient_postdivide_factor");
  if (o.contains("groups") && o["groups"].is_array())
    for (const auto& g : o["groups"]) {
      Fsdp2Resolved::Group group;
      group.label = g.value("label", group.label);
      group.params = g.value("params", group.params);
      if (g.contains("reshard_after_forward"))
        group.reshard_after_forward =
            parse_reshard_after_forward("groups[].reshard_after_forward", g["reshard_after_forward"].get<std::string>());
      r.groups.push_back(group);
    }
  return r;
}

}  // namespace zb::backends::fsdp2
