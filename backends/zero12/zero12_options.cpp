// zero12_options.cpp — see zero12_options.hpp. Defaults: deepspeed/runtime/zero/config.py
// (reduce_bucket_size, allgather_bucket_size 5e8; contiguous_gradients, reduce_scatter,
// allgather_partitions, use_multi_rank_bucket_allreduce True; round_robin_gradients False;
// overlap_comm_valid: None -> stage == 3, so False for stages 1 and 2).
#include "backends/zero12/zero12_options.hpp"

#include "backends/common/loss_scale_json.hpp"
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
          {"offload_optimizer", {{"device", o.offload_optimizer}}}};
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
  if (j.contains("fp16")) o.fp16 = common::deepspeed_loss_scale_from_json(j["fp16"]);
  if (j.contains("offload_optimizer")) {
    const auto& oo = j["offload_optimizer"];
    if (oo.is_object()) o.offload_optimizer = oo.value("device", o.offload_optimizer);
    else if (oo.is_string()) o.offload_optimizer = oo.get<std::string>();
  }
  check_dtype("communication_data_type", o.communication_data_type);
  check_dtype("grad_accum_dtype", o.grad_accum_dtype);
  if (o.reduce_bucket_size <= 0) throw UsageError("reduce_bucket_size must be positive");  // Field(gt=0)
  // stage_1_and_2.py __init__: assert allgather_bucket_size % nccl_start_alignment_factor (2) == 0.
  if (o.allgather_bucket_size % 2 != 0)
    throw UsageError("allgather_bucket_size " + std::to_string(o.allgather_bucket_size) +
                     " must be a multiple of nccl_start_alignment_factor (2), as DeepSpeed asserts");
  // What DeepSpeed does and zerobench does not (yet): one line naming the key.
  if (o.offload_optimizer != "none")
    throw UsageError("zero_optimization.offload_optimizer.device " + o.offload_optimizer + " with ZeRO stage " +
                     std::to_string(stage) + ": offload for stages 1/2 is not implemented in zerobench yet (zero3 has it)");
  if (!o.use_multi_rank_bucket_allreduce && o.reduce_scatter)
    throw UsageError("use_multi_rank_bucket_allreduce false: the per-rank dist.reduce path of average_tensor is not "
                     "implemented in zerobench (default true: one all-reduce per bucket)");
  if (!o.contiguous_gradients)
    throw UsageError("contiguous_gradients false: the non-contiguous buffered_reduce_fallback path is not implemented "
                     "in zerobench (default true)");
  return o;
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
