// zero3_offload_estimate.cpp — see zero3_offload_estimate.hpp. The transients follow the data
// path of zero3_offload.cpp (DeepSpeed's stage3.py partition_grads /
// _offload_grad_partition_at_boundary / _reassign_or_swap_out_partitioned_parameters and
// partition_parameters.py all_gather_coalesced with offload_param).
#include "backends/zero3/zero3_offload_estimate.hpp"

#include <algorithm>

#include "backends/zero3/zero3_layout.hpp"

namespace zb::backends::zero3 {

void add_offload_terms(PeakEstimate& e, const EngineSpec& spec, const Topology& topo, int /*rank*/,
                       bool refetch_in_backward) {
  const auto& o = zero3_options(spec.options);
  const bool oo = o.offload_optimizer.enabled(), op = o.offload_param.enabled();
  if (!oo && !op) return;
  const auto d = dtypes_for(spec.precision, o);
  const int world = shard_layout(spec, topo).shard_size;
  int groups = 1;
  const auto layout = param_layouts(spec.model, world, o, &groups);
  const int64_t md = int64_t(c10::elementSize(d.model)), ga = int64_t(c10::elementSize(d.grad_accum));
  int64_t largest_part = 0, largest_root_part = 0, largest_block_part = 0, largest_root = 0, sum_parts = 0;
  std::vector<int64_t> group_numel(size_t(groups), 0);
  for (const auto& l : layout) {
    largest_part = std::max(largest_part, l.part_numel);
    if (l.unit == models::kRootUnit) {
      largest_root_part = std::max(largest_root_part, l.part_numel);
      largest_root = std::max(largest_root, l.padded);
    } else {
      largest_block_part = std::max(largest_block_part, l.part_numel);
    }
    sum_parts += l.part_numel;
    group_numel[size_t(l.sub_group)] += l.part_numel;
  }
  const int64_t largest_group = *std::max_element(group_numel.begin(), group_numel.end());
  if (op && refetch_in_backward) {
    // Each all-gather reads device copies of its parameters' host partitions (a coalesced
    // prefetch: up to stage3_prefetch_bucket_size elements gathered, plus the fetched one), freed
    // once it completes (partition_on_device). In forward that is before the loss head, where
    // the activations peak; in backward it coincides with a block's backward when parameters are
    // fetched again. Every parameter gathered in forward staying gathered: no backward fetch.
    const int64_t gathered = std::min(sum_parts, (o.stage3_prefetch_bucket_size + int64_t(world) - 1) / world + largest_part);
    e.terms.push_back({"offload_param: device copies of gathered partitions", "backward", gathered * md,
                       "min(local partitions, prefetch_bucket/W + largest partition)*model bytes (a backward fetch)"});
  }
  if (oo) {
    // partition_grads -> offload_grad_partition, per parameter with real data, in turn: a device
    // copy of its gradient partition (grad_accum dtype) and, alongside it, first the cast from
    // the communication dtype (when it differs: ga bytes), then the norm's fp64 copy (8, freed by
    // the norm), then the fp32 copy sent to the host (4, only when grad_accum is not fp32): at
    // most partition*(grad_accum + 8) at once. It runs when the next bucket flushes: for a
    // block's parameter beside that block's backward; for the root's largest (the LM head, the
    // first gradient) once its gathered copy is released, its gradient (in the bucket) replacing
    // it, so it adds to the root_gradient moment only what exceeds that moment's 2*root*model bytes.
    const int64_t block_per = largest_block_part * (ga + 8), root_per = largest_root_part * (ga + 8);
    const std::string f = "partition*(grad_accum + 8 fp64 norm copy)";
    e.terms.push_back({"offload_optimizer: gradient partition copies", "backward", block_per,
                       "largest block " + f});
    const int64_t root_over = std::max<int64_t>(0, root_per - 2 * largest_root * md);
    if (root_over > 0)
      e.terms.push_back({"offload_optimizer: gradient partition copies", "root_gradient", root_over,
                         "max(0, largest root " + f + " - 2*largest padded root parameter*model bytes)"});
    e.terms.push_back({"offload_optimizer: gradient partition copies", "end_of_backward", std::max(block_per, root_per),
                       "largest " + f});
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
