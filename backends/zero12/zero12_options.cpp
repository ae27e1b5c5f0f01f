// zero12_options.cpp — see zero12_options.hpp. Defaults: deepspeed/runtime/zero/config.py
// (reduce_bucket_size, allgather_bucket_size 5e8; contiguous_gradients, reduce_scatter,
// allgather_partitions, use_multi_rank_bucket_allreduce True; round_robin_gradients False;
// overlap_comm_valid: None -> stage == 3, so False for stages 1 and 2).
#include "backends/zero12/zero12_options.hpp"

#include "backends/deepspeed_family/loss_scale_json.hpp"
#include "config/deepspeed_zero_config.hpp"
#include "runtime/errors.hpp"

namespace zb::backends::zero12 {

namespace {
using json = nlohmann::json;
using config::deepspeed_values::as_count;

void check_dtype(const std::string& key, const std::string& v) {
  if (!v.empty() && v != "bf16" && v != "fp16" && v != "fp32")
    throw UsageError(key + " '" + v + "' is not supported (bf16, fp16 or fp32)");
}

// offload_optimizer as DeepSpeedZeroOffloadOptimizerConfig names it (a bare string: the device).
// DeepSpeedZeroOptimizer sets cpu_offload for any device but none (stage_1_and_2.py __init__), so
// DeepSpeed would run nvme as cpu offload; zerobench refuses nvme rather than guess the intent.
// ratio < 1: config.py offload_ratio_check asserts "Partial offloading only supported for ZeRO
// Stage 3". buffer_count, fast_init, pipeline_read/write, nvme_path: read by the NVMe swapper only.
void read_offload_optimizer(const json& oo, int stage, Zero12Options& o) {
  const std::string key = "zero_optimization.offload_optimizer";
  if (oo.is_null()) return;
  if (oo.is_string()) {
    o.offload_optimizer = oo.get<std::string>();
  } else if (oo.is_object()) {
    for (const auto& [k, v] : oo.items()) {
      const bool typed = k == "device" ? v.is_string() : k == "pin_memory" ? v.is_boolean() : k == "ratio" ? v.is_number() : true;
      if (!typed) throw UsageError(key + "." + k + " " + v.dump() + " has the wrong type");
      if (k == "device") o.offload_optimizer = v.get<std::string>();
      else if (k == "pin_memory") o.offload_pin_memory = v.get<bool>();
      else if (k == "ratio") {
        if (v.get<double>() != 1.0)
          throw UsageError(key + ".ratio " + v.dump() + " with ZeRO stage " + std::to_string(stage) +
                           ": DeepSpeed offloads part of the optimizer only in stage 3 (config.py offload_ratio_check)");
      } else if (k != "buffer_count" && k != "fast_init" && k != "pipeline_read" && k != "pipeline_write" &&
                 k != "nvme_path") {
        throw UsageError(key + "." + k + ": not a DeepSpeed offload_optimizer setting");
      }
    }
  } else {
    throw UsageError(key + " " + oo.dump() + " is not a section");
  }
}
}  // namespace

json to_json(const Zero12Options& o) {
  json j = {{"stage", o.stage},
          {"reduce_bucket_size", o.reduce_bucket_size},
          {"allgather_bucket_size", o.allgather_bucket_size},
          {"overlap_comm", o.overlap_comm},
          {"contiguous_gradients", o.contiguous_gradients},
          {"reduce_scatter", o.reduce_scatter},
          {"round_robin_gradients", o.round_robin_gradients},
          {"allgather_partitions", o.allgather_partitions},
          {"use_multi_rank_bucket_allreduce", o.use_multi_rank_bucket_allreduce},
          {"communication_data_type", o.communication_data_type},
          {"grad_accum_dtype", o.grad_accum_dtype},
          {"offload_optimizer", {{"device", o.offload_optimizer}, {"pin_memory", o.offload_pin_memory}}},
          {"host_optimizer", o.host_optimizer}};
  // The fp16 section's loss scaling: only when it differs from DeepSpeed's defaults (read only
  // under precision fp16; bf16/fp32 options stay as they were), as zero3_options.cpp writes it.
  if (to_json(o.fp16) != to_json(common::DeepSpeedLossScaleOptions{})) j["fp16"] = to_json(o.fp16);
  return j;
}

Zero12Options zero12_options_from_json(const json& j, int stage) {
  Zero12Options o;
  o.stage = stage;
  if (j.contains("stage")) {
    const auto given = as_count("stage", j["stage"]);
    if (given != stage)
      throw UsageError("zero_optimization.stage " + std::to_string(given) + " with --backend zero" +
                       std::to_string(stage) + ": ZeRO stage " + std::to_string(given) + " runs as --backend zero" +
                       std::to_string(given));
  }
  if (j.contains("reduce_bucket_size")) o.reduce_bucket_size = as_count("reduce_bucket_size", j["reduce_bucket_size"]);
  if (j.contains("allgather_bucket_size"))
    o.allgather_bucket_size = as_count("allgather_bucket_size", j["allgather_bucket_size"]);
  o.overlap_comm = j.value("overlap_comm", o.overlap_comm);
  o.contiguous_gradients = j.value("contiguous_gradients", o.contiguous_gradients);
  o.reduce_scatter = j.value("reduce_scatter", o.reduce_scatter);
  o.round_robin_gradients = j.value("round_robin_gradients", o.round_robin_gradients);
  o.allgather_partitions = j.value("allgather_partitions", o.allgather_partitions);
  o.use_multi_rank_bucket_allreduce = j.value("use_multi_rank_bucket_allreduce", o.use_multi_rank_bucket_allreduce);
  o.communication_data_type = j.value("communication_data_type", o.communication_data_type);
  o.grad_accum_dtype = j.value("grad_accum_dtype", o.grad_accum_dtype);
  if (j.contains("fp16")) o.fp16 = deepspeed_family::deepspeed_loss_scale_from_json(j["fp16"]);
  if (j.contains("offload_optimizer")) read_offload_optimizer(j["offload_optimizer"], stage, o);
  o.host_optimizer = j.value("host_optimizer", o.host_optimizer);
  return validated(std::move(o));
}

Zero12Options validated(Zero12Options o) {
  const std::string key = "zero_optimization.offload_optimizer";
  if (o.offload_optimizer == "nvme")
    throw UsageError(key + ".device nvme with ZeRO stage " + std::to_string(o.stage) +
                     ": NVMe offload is not implemented in zerobench (DeepSpeed's stage 1/2 would run it as cpu "
                     "offload); use cpu");
  if (o.offload_optimizer != "none" && o.offload_optimizer != "cpu")
    throw UsageError(key + ".device '" + o.offload_optimizer + "' is not none, cpu or nvme");
  check_dtype("communication_data_type", o.communication_data_type);
  check_dtype("grad_accum_dtype", o.grad_accum_dtype);
  if (o.reduce_bucket_size <= 0) throw UsageError("reduce_bucket_size must be positive");  // Field(gt=0)
  // stage_1_and_2.py __init__: assert allgather_bucket_size % nccl_start_alignment_factor (2) == 0.
  if (o.allgather_bucket_size % 2 != 0)
    throw UsageError("allgather_bucket_size " + std::to_string(o.allgather_bucket_size) +
                     " must be a multiple of nccl_start_alignment_factor (2), as DeepSpeed asserts");
  if (o.host_optimizer != kCpuAdam && o.host_optimizer != kTorchAdamW)
    throw UsageError("host_optimizer '" + o.host_optimizer + "' is not " + kCpuAdam + " or " + kTorchAdamW);
  // stage_1_and_2.py __init__: `self.contiguous_gradients = contiguous_gradients or self.cpu_offload`.
  if (o.offload()) o.contiguous_gradients = true;
  // What DeepSpeed does and zerobench does not (yet): one line naming the key.
  if (!o.use_multi_rank_bucket_allreduce && o.reduce_scatter)
    throw UsageError("use_multi_rank_bucket_allreduce false: the per-rank dist.reduce path of average_tensor is not "
                     "implemented in zerobench (default true: one all-reduce per bucket)");
  if (!o.contiguous_gradients)
    throw UsageError("contiguous_gradients false: the non-contiguous buffered_reduce_fallback path is not implemented "
                     "in zerobench (default true)");
  return o;
}

const Zero12Options& zero12_options(const BackendOptions& options, int stage) {
  return options.as<Zero12Options>([stage](const json& j) { return zero12_options_from_json(j, stage); });
}

json to_json(const Zero12Resolved& r) {
  auto j = to_json(r.options);
  deepspeed_family::write_precision(r.precision, r.options.fp16, j);  // dtypes; fp16 with its scaler
  j["flat_numel"] = r.flat_numel;
  j["flat_padded"] = r.flat_padded;
  j["partition_size"] = r.partition_size;
  j["ipg_buffers"] = r.ipg_buffers;
  j["reduces_every_micro_batch"] = r.options.stage == 2;
  // runtime/utils.py all_gather_dp_groups: with all_gather_into_tensor (torch >= 1.13) one
  // all_gather_into_tensor of the whole flat buffer; allgather_bucket_size is read only without it.
  j["allgather"] = "all_gather_into_tensor of the flat buffer (allgather_bucket_size unused, as upstream)";
  j["allgather_partitions_effect"] = "none (DeepSpeed 0.19.8 does not pass it to DeepSpeedZeroOptimizer)";
  j["optimizer"] = r.optimizer;
  j["check_grad_overflow"] = r.check_grad_overflow;
  j["offload"] = {{"optimizer", r.options.offload_optimizer}};
  if (r.options.offload()) j["offload"]["pinned"] = r.options.offload_pin_memory;
  return j;
}

Zero12Resolved zero12_resolved_from_json(const json& j, int stage) {
  Zero12Resolved r;
  auto o = j.is_object() ? j : json::object();
  r.precision = deepspeed_family::take_precision(o);  // the dtypes resolved, not the options' bf16 | fp16 | fp32 | ""
  r.options = zero12_options_from_json(o, stage);
  r.flat_numel = o.value("flat_numel", r.flat_numel);
  r.flat_padded = o.value("flat_padded", r.flat_padded);
  r.partition_size = o.value("partition_size", r.partition_size);
  r.ipg_buffers = o.value("ipg_buffers", r.ipg_buffers);
  r.check_grad_overflow = o.value("check_grad_overflow", r.check_grad_overflow);
  r.optimizer = o.value("optimizer", r.optimizer);
  return r;
}

void check_precision(const Zero12Options& o, const std::string& precision) {
  const std::string model = precision == "bf16" || precision == "fp16" ? precision : "fp32";
  if (!o.grad_accum_dtype.empty() && o.grad_accum_dtype != model)
    throw UsageError("grad_accum_dtype " + o.grad_accum_dtype + " with " + model + " parameters: " +
                     (o.stage == 1 ? "DeepSpeed runs BF16_Optimizer, not DeepSpeedZeroOptimizer, for ZeRO-1 with bf16 "
                                     "parameters and fp32 accumulation (engine.py _do_optimizer_sanity_check)"
                                   : "the compact fp32 gradient-partition path of stage_1_and_2.py") +
                     "; not implemented in zerobench (leave grad_accum_dtype unset)");
}

}  // namespace zb::backends::zero12
