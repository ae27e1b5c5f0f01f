// zero0_config.cpp — zero0's options and config hooks (see zero0_config.hpp; docs/configs.md).
#include "backends/zero0/zero0_config.hpp"

#include <algorithm>

#include "backends/deepspeed_family/loss_scale_json.hpp"
#include "config/accelerate_deepspeed.hpp"
#include "config/deepspeed_config.hpp"
#include "runtime/errors.hpp"

namespace zb::backends::zero0 {

nlohmann::json to_json(const Zero0Options& o) {
  return {{"stage", 0},
          {"communication_data_type", o.communication_data_type},
          {"grad_accum_dtype", o.grad_accum_dtype},
          {"fp16", common::to_json(o.fp16)},
          {"fused_adam", o.fused_adam}};
}

Zero0Options zero0_options_from_json(const nlohmann::json& j) {
  Zero0Options o;
  if (!j.is_object()) return o;
  for (const auto& [k, v] : j.items())
    if (k != "stage" && k != "communication_data_type" && k != "grad_accum_dtype" && k != "fp16" && k != "fused_adam")
      throw UsageError("zero0 option '" + k + "' is not known (stage, communication_data_type, grad_accum_dtype, fp16, "
                       "fused_adam)");
  if (j.contains("stage") && j["stage"] != 0) throw UsageError("zero0 option stage " + j["stage"].dump() + ": zero0 is ZeRO stage 0");
  o.communication_data_type = j.value("communication_data_type", o.communication_data_type);
  o.grad_accum_dtype = j.value("grad_accum_dtype", o.grad_accum_dtype);
  if (j.contains("fp16")) o.fp16 = deepspeed_family::deepspeed_loss_scale_from_json(j["fp16"]);
  o.fused_adam = j.value("fused_adam", o.fused_adam);
  validate(o);
  return o;
}

void validate(const Zero0Options& o) {
  for (const auto* d : {&o.communication_data_type, &o.grad_accum_dtype})
    if (!d->empty() && *d != "fp32" && *d != "bf16" && *d != "fp16")
      throw UsageError("zero0 dtype '" + *d + "' is not fp32, bf16 or fp16");
}

const Zero0Options& zero0_options(const BackendOptions& options) {
  return options.as<Zero0Options>(zero0_options_from_json);
}

nlohmann::json to_json(const Zero0Resolved& r) {
  auto j = to_json(r.options);
  deepspeed_family::write_precision(r.precision, r.options.fp16, j);  // dtypes; fp16 with its scaler
  j["allreduce_bucket_elements"] = r.allreduce_bucket_elements;
  j["allreduce_buckets"] = r.allreduce_buckets;
  j["optimizer_wrapper"] = r.optimizer_wrapper;
  j["optimizer"] = r.optimizer;
  return j;
}

Zero0Resolved zero0_resolved_from_json(const nlohmann::json& j) {
  Zero0Resolved r;
  auto o = j.is_object() ? j : nlohmann::json::object();
  r.precision = deepspeed_family::take_precision(o);  // the dtypes resolved, not the options' bf16 | fp16 | fp32 | ""
  r.allreduce_bucket_elements = o.value("allreduce_bucket_elements", r.allreduce_bucket_elements);
  r.allreduce_buckets = o.value("allreduce_buckets", r.allreduce_buckets);
  r.optimizer_wrapper = o.value("optimizer_wrapper", r.optimizer_wrapper);
  r.optimizer = o.value("optimizer", r.optimizer);
  // The record's own keys taken out: what is left are the options (zero0_options_from_json
  // refuses any other key).
  for (const char* key : {"allreduce_bucket_elements", "allreduce_buckets", "optimizer_wrapper", "optimizer"}) o.erase(key);
  r.options = zero0_options_from_json(o);
  return r;
}

void check_precision(const Zero0Options& o, const std::string& precision) {
  if (precision != "fp32" && precision != "bf16" && precision != "fp16")
    throw UsageError("--precision for zero0 must be fp32, bf16 or fp16, got '" + precision + "'");
  // engine.py _do_optimizer_sanity_check without ZeRO: the model dtype must equal grad_accum_dtype.
  if (!o.grad_accum_dtype.empty() && o.grad_accum_dtype != precision) {
    auto torch_name = [](const std::string& d) {
      return std::string(d == "fp32" ? "torch.float32" : d == "bf16" ? "torch.bfloat16" : "torch.float16");
    };
    throw UsageError("data_types.grad_accum_dtype " + o.grad_accum_dtype + " with precision " + precision +
                     " at ZeRO stage 0: DeepSpeed refuses it (engine.py _do_optimizer_sanity_check: NotImplementedError: "
                     "unsupported mix of model_dtype=" + torch_name(precision) + " and grad_accum_dtype=" +
                     torch_name(o.grad_accum_dtype) + ")");
  }
  // bf16/fp16 wrap the basic optimizer: FP16_Optimizer (flat fp32 master) for FusedAdam,
  // FP16_UnfusedOptimizer for any other (engine.py _configure_fp16_optimizer). zero0 runs the latter.
  if (precision != "fp32" && o.fused_adam)
    throw UsageError("optimizer.type AdamW without optimizer.params.torch_adam in " + precision +
                     " at ZeRO stage 0: DeepSpeed builds FusedAdam and wraps it in FP16_Optimizer (flat fp32 master, "
                     "engine.py _configure_fp16_optimizer), which zerobench's zero0 does not implement; it runs "
                     "FP16_UnfusedOptimizer: set \"torch_adam\": true or leave out the optimizer section (HF Trainer's AdamW)");
}

namespace {

void accept_stage(const config::DeepSpeedStage& s) {
  if (s.stage != 0)
    throw UsageError(s.key + " " + s.shown + ": zerobench's zero0 backend is ZeRO stage 0 (ZeRO stage " + s.stage_text +
                     " runs as --backend zero" + s.stage_text + ")");
}

Zero0Options options_from_deepspeed(const config::DeepSpeedConfig& c, config::ConfigNotes& notes) {
  Zero0Options o;
  o.communication_data_type = c.communication_data_type;
  o.grad_accum_dtype = c.grad_accum_dtype;
  o.fp16 = {c.fp16.loss_scale, int(c.fp16.initial_scale_power), c.fp16.loss_scale_window, int(c.fp16.hysteresis),
            c.fp16.consecutive_hysteresis, double(c.fp16.min_loss_scale)};
  o.fused_adam = c.optimizer_section && !c.torch_adam;
  // What the reader applied that stage 0 does not read: offload_param (stage 3 only) and, in
  // fp16, the hysteresis (FP16_UnfusedOptimizer's dynamic scale has none: _update_scale).
  auto move_to_ignored = [&](const std::string& prefix, const std::string& reason) {
    auto& a = notes.applied;
    for (auto it = a.begin(); it != a.end();) {
      if (it->key.rfind(prefix, 0) == 0) {
        notes.ignore(it->key, it->value, reason);
        it = a.erase(it);
      } else {
        ++it;
      }
    }
  };
  // offload_optimizer: stage 0 has no ZeRO optimizer to offload anything; DeepSpeed only picks the
  // basic optimizer by it (engine.py zero_use_cpu_optimizer -> get_optimizer_configuration). The
  // client torch.optim.AdamW (no "optimizer" section with zero_force_ds_cpu_optimizer false, or
  // torch_adam) then steps the parameters where they are: the section changes nothing, as upstream.
  if (c.zero.offload_optimizer.device != "none") {
    const bool client_adamw = c.optimizer_section ? c.torch_adam : !c.zero_force_ds_cpu_optimizer;
    if (!client_adamw)
      throw UsageError("zero_optimization.offload_optimizer.device " + c.zero.offload_optimizer.device +
                       " with ZeRO stage 0: DeepSpeed has no optimizer offload at stage 0; it steps "
                       "DeepSpeedCPUAdam on the parameters where they are (a GPU's are refused: \"CPUAdam param is on "
                       "cuda and must be 'cpu'\"), or with a client optimizer raises ZeRORuntimeException (\"You are "
                       "using ZeRO-Offload with a client provided optimizer\"); zerobench's zero0 does not implement "
                       "DeepSpeedCPUAdam on device parameters: use stage 1 or 2 for optimizer offload, or "
                       "zero_force_ds_cpu_optimizer false (the client torch.optim.AdamW, no offload)");
    move_to_ignored("zero_optimization.offload_optimizer",
                    "ZeRO stage 0 has no optimizer offload: the client torch.optim.AdamW steps the parameters where "
                    "they are (engine.py _configure_optimizer)");
  }
  move_to_ignored("zero_optimization.offload_param", "DeepSpeed offloads parameters only in ZeRO stage 3 (stage 0 "
                                                     "builds no ZeRO optimizer)");
  if (c.precision == "fp16")
    move_to_ignored("fp16.hysteresis", "FP16_UnfusedOptimizer's dynamic loss scale has no hysteresis "
                                       "(runtime/fp16/unfused_optimizer.py _update_scale)");
  validate(o);
  return o;
}

void read_deepspeed(const nlohmann::json& ds, config::AutoFill mode, const ConfigRequest& req, ResolvedConfig& out) {
  auto cfg = config::read_deepspeed_json(ds, trainer_args(req), mode, accept_stage);
  out.provenance.notes.append(cfg.notes);
  const Zero0Options z = options_from_deepspeed(cfg, out.provenance.notes);
  check_precision(z, cfg.precision);
  out.precision = cfg.precision;
  apply_training_arguments(cfg.train, out.train);
  out.options = z;
}

}  // namespace

// A DeepSpeed JSON (or an accelerate DEEPSPEED file) of stage 0: claimed with 2, above zero3's 1.
int config_claim(const ConfigIdentity& id) {
  const bool deepspeed = !id.accelerate || id.distributed_type == "DEEPSPEED";
  return deepspeed && id.zero_stage == 0 ? 2 : 0;
}

void read_config(const ConfigInput& in, ResolvedConfig& out) {
  const auto& req = in.request;
  if (!in.launch) return read_deepspeed(in.file.root, config::AutoFill::kHfTrainer, req, out);
  auto& notes = out.provenance.notes;
  const auto ds = config::read_accelerate_deepspeed(in.file.root, in.launch->mixed_precision,
                                                    in.launch->mixed_precision_in_file,
                                                    req.precision_given ? req.precision : "", req.given, accept_stage,
                                                    out.provenance);
  read_deepspeed(ds.config, config::AutoFill::kAccelerate, req, out);
  notes.apply("distributed_type", "DEEPSPEED", "backend zero0 (DeepSpeed ZeRO stage 0 semantics)");
  config::note_mixed_precision(in.file.root, req.precision_given ? req.precision + " (--precision)" : out.precision,
                               ds.mixed_precision, notes);
}

}  // namespace zb::backends::zero0
