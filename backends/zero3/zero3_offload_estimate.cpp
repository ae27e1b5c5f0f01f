// zero3_offload_estimate.cpp — see zero3_offload_estimate.hpp. The transients follow the data
// path of zero3_offload.cpp (DeepSpeed's stage3.py partition_grads /
// _offload_grad_partition_at_boundary / _reassign_or_swap_out_partitioned_parameters and
// partition_parameters.py all_gather_coalesced with offload_param).
#include "backends/zero3/zero3_offload_estimate.hpp"

#include <algorithm>

#include "backends/zero3/zero3_layout.hpp"

namespace zb::backends::zero3 {

void add_offload_terms(PeakEstimate& e, const EngineSpec& spec, const Topology& topo, int /*rank*/) {
  const auto o = zero3_options_from_json(spec.options);
  const bool oo = o.offload_optimizer.enabled(), op = o.offload_param.enabled();
  if (!oo && !op) return;
  const auto d = dtypes_for(spec.precision, o);
  const int world = shard_layout(spec, topo).shard_size;
  int groups = 1;
  const auto layout = param_layouts(spec.model, world, o, &groups);
  const int64_t md = int64_t(c10::elementSize(d.model)), ga = int64_t(c10::elementSize(d.grad_accum));
  const int64_t comm = int64_t(c10::elementSize(d.comm));
  int64_t largest_part = 0, sum_parts = 0;
  std::vector<int64_t> group_numel(size_t(groups), 0);
  for (const auto& l : layout) {
    largest_part = std::max(largest_part, l.part_numel);
    sum_parts += l.part_numel;
    group_numel[size_t(l.sub_group)] += l.part_numel;
  }
  const int64_t largest_group = *std::max_element(group_numel.begin(), group_numel.end());
  if (op) {
    // Each all-gather reads device copies of its parameters' host partitions (a coalesced
    // prefetch: up to stage3_prefetch_bucket_size elements gathered, plus the fetched one).
    const int64_t gathered = std::min(sum_parts, (o.stage3_prefetch_bucket_size + int64_t(world) - 1) / world + largest_part);
    e.terms.push_back({"offload_param: device copies of gathered partitions", "forward_backward", gathered * md,
                       "min(local partitions, prefetch_bucket/W + largest partition)*model bytes"});
  }
  if (oo) {
    // partition_grads: per parameter a device copy of its gradient partition (grad_accum dtype),
    // its cast to the grad_accum dtype when the communication dtype differs, the fp64 copy of
    // the norm and the fp32 copy sent to the host.
    const int64_t per = largest_part * (ga + (comm != ga ? ga : 0) + 8 + 4);
    const std::string f = "largest partition*(grad_accum" + std::string(comm != ga ? " + cast" : "") +
                          " + 8 fp64 norm copy + 4 fp32 copy)";
    e.terms.push_back({"offload_optimizer: gradient partition copies", "backward", per, f});
    e.terms.push_back({"offload_optimizer: gradient partition copies", "end_of_backward", per, f});
    // The step's device transients of the non-offloaded path do not exist: the host steps on
    // its kept fp32 gradient buffers.
    e.terms.erase(std::remove_if(e.terms.begin(), e.terms.end(),
                                 [](const PeakEstimate::Term& t) {
                                   return t.phase == "optimizer_step" && t.location == "device" &&
                                          (t.name == "sub-group step transient" || t.name == "grad-norm transient");
                                 }),
                  e.terms.end());
    if (!op)
      e.terms.push_back({"offload_optimizer: updated sub-group in the model dtype", "optimizer_step",
                         largest_group * md, "largest sub-group*model bytes (cast on the host, then copied)", "host"});
  } else {
    e.terms.push_back({"offload_param: updated master staged on the host", "optimizer_step", largest_group * 4,
                       "largest sub-group*4 (fp32 copied to the host, then cast)", "host"});
  }
}

}  // namespace zb::backends::zero3
