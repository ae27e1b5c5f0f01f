// zero3_zeropp.cpp — ZeRO++ hpZ and qwZ in the ZeRO3-mode engine (see zero3_zeropp.hpp for the
// semantics and the upstream lines followed). Engine methods: the hpZ group, the gathers from
// secondary partitions within it, the quantized gathers and their dequantization at the wait,
// cutting and dropping secondary partitions. Must not: decide what is fetched or when
// (zero3_coordinator.cpp), or touch gradients.
#include "backends/zero3/zero3_zeropp.hpp"

#include <algorithm>
#include <string>

#include "backends/deepspeed_family/blockwise_quant.hpp"
#include "backends/common/storage.hpp"
#include "backends/zero3/zero3_engine_impl.hpp"
#include "runtime/errors.hpp"

namespace zb::backends::zero3 {

int effective_hpz(const Zero3Options& o, int world) {
  if (!o.hpz() || world <= 1) return 1;
  const int n = int(std::min<int64_t>(o.zero_hpz_partition_size, world));  // min(group_size, world_size)
  if (world % n != 0)  // _ensure_divisibility(world_size, zero_param_parallel_size_)
    throw UsageError("zero_optimization.zero_hpz_partition_size " + std::to_string(o.zero_hpz_partition_size) +
                     " does not divide the world size " + std::to_string(world));
  return n;
}

std::vector<int> hpz_group_ranks(int rank, int hpz) {
  std::vector<int> r;
  for (int i = 0; i < hpz; ++i) r.push_back(rank / hpz * hpz + i);
  return r;
}

void check_quantizable(const std::vector<ParamLayout>& layout, int hpz) {
  for (const auto& l : layout) {
    const std::string name = "unit" + std::to_string(l.unit) + " parameter " + std::to_string(l.index);
    deepspeed_family::weight_quant_groups(l.part_numel, name);
    if (hpz > 1) deepspeed_family::weight_quant_groups(l.padded / hpz, name + " (hpZ secondary)");
  }
}

int64_t secondary_bytes(const std::vector<ParamLayout>& layout, int hpz, int64_t elem_bytes, bool with_persistent) {
  if (hpz <= 1) return 0;
  int64_t b = 0;
  for (const auto& l : layout)
    if (with_persistent || !l.persistent) b += l.padded / hpz * elem_bytes;
  return b;
}

QuantizedGatherBytes quantized_gather_bytes(int64_t numel_per_rank, int group) {
  const int64_t groups = deepspeed_family::weight_quant_groups(numel_per_rank, "all-gather input");
  return {numel_per_rank * group, groups * group * 4};  // int8 [group * n], fp32 [group * groups]
}

// ---- the engine ----

void Zero3Engine::init_zeropp() {
  hpz_ = effective_hpz(opts_, comm_.size());
  // _create_zero_param_parallel_group: dist.new_group over each run of hpz consecutive ranks; a
  // rank joins its own (World::subgroup keys the group by its ranks; members only).
  if (hpz_ > 1) hpz_group_ = comm_.world().subgroup("hpz", hpz_group_ranks(comm_.rank(), hpz_));
  if (opts_.zero_quantized_weights && comm_.size() > 1) check_quantizable(layout_, hpz_);
}

int64_t Zero3Engine::secondary_numel(int id) const { return layout_[size_t(id)].padded / hpz_; }

// __all_gather_params_: parameters with a secondary partition first, then those without, each
// as its own all_gather_coalesced.
void Zero3Engine::issue_zeropp_gather(const std::vector<int>& ids, const std::string& label) {
  std::vector<int> with, without;
  for (int id : ids) (params_[size_t(id)].secondary.defined() ? with : without).push_back(id);
  if (!with.empty()) issue_zeropp_part(with, true, label + " hpz");
  if (!without.empty()) issue_zeropp_part(without, false, label);
}

// all_gather_coalesced for one group of parameters: sorted by ds_id; the secondary partitions
// within the hpZ group, else the primary ones over the world; quantized (qwZ) or not.
void Zero3Engine::issue_zeropp_part(std::vector<int> ids, bool secondary, const std::string& label) {
  std::sort(ids.begin(), ids.end());  // params = sorted(params, key=lambda p: p.ds_id)
  InflightGather g;
  g.ids = ids;
  g.zeropp = true;
  g.secondary = secondary;
  g.quantized = opts_.zero_quantized_weights;
  g.group_size = secondary ? hpz_ : comm_.size();
  const runtime::World* group = secondary ? &hpz_group_ : nullptr;
  const int rank_in_group = secondary ? comm_.rank() % hpz_ : comm_.rank();
  std::vector<at::Tensor> inputs;
  for (int id : ids) {
    auto& p = params_[size_t(id)];
    inputs.push_back(secondary ? p.secondary : p.partition);  // [padded / hpz] or [part_numel]
    g.total += inputs.back().numel();
    p.available = true;
    p.inflight = true;
  }
  const int G = g.group_size;
  if (!g.quantized) {
    if (ids.size() == 1) {  // _all_gather_sequential: into the parameter's padded buffer
      auto& p = params_[size_t(ids[0])];
      common::allocate_storage(p.full, layout_[size_t(ids[0])].padded * int64_t(c10::elementSize(dtypes_.model)));
      g.collective = comm_.all_gather_async(p.full, inputs[0], label, group);
    } else {  // _all_gather_dtype: one flat [G * total] buffer, this rank's slice a cat
      g.flat = at::empty({G * g.total}, partitions_.options());
      auto mine = g.flat.narrow(0, int64_t(rank_in_group) * g.total, g.total);
      at::cat_out(mine, inputs);
      g.collective = comm_.all_gather_async(g.flat, mine, label, group);
    }
  } else {
    // CUDAQuantizer.quantize(ds_tensor) or quantize(torch.cat(partitions)): int8 [total] and
    // fp32 scales [groups, 1]; the data gathered into int8 [G * total], the scales into
    // fp32 [G * groups] (_all_gather_sequential / _all_gather_coalesced, quantize=True).
    const auto in = ids.size() == 1 ? inputs[0] : at::cat(inputs);
    g.quant_groups = deepspeed_family::weight_quant_groups(g.total, label);
    auto q = deepspeed_family::quantize_blockwise(in, g.quant_groups, 8, /*symmetric=*/true);
    g.flat = at::empty({G * g.total}, partitions_.options().dtype(at::kChar));
    g.scales = at::empty({G * g.quant_groups}, partitions_.options().dtype(at::kFloat));
    auto scales = q.params.view({-1});
    g.collective = comm_.all_gather_async(g.flat, q.data, label + " int8", group);
    g.scale_collective = comm_.all_gather_async(g.scales, scales, label + " scales", group);
    ++quantized_gathers_;
  }
  inflight_gathers_.push_back(std::move(g));
}

// AllGatherHandle.wait / AllGatherCoalescedHandle.wait: the data (then the scales), the
// dequantized flat buffer (fp16, then the model dtype), each parameter copied out of it.
void Zero3Engine::finish_zeropp_gather(InflightGather& g) {
  g.collective.wait();
  at::Tensor flat = g.flat;  // [G * total]
  if (g.quantized) {
    g.scale_collective.wait();
    flat = deepspeed_family::dequantize_blockwise_fp32(g.flat, g.scales, g.group_size * g.quant_groups, 8, true)
               .to(at::kHalf)
               .to(dtypes_.model);
  }
  int64_t off = 0;
  for (int pid : g.ids) {
    auto& p = params_[size_t(pid)];
    const auto& l = layout_[size_t(pid)];
    const int64_t part = g.secondary ? secondary_numel(pid) : l.part_numel;
    if (flat.defined()) {  // a single unquantized parameter was gathered in place
      common::allocate_storage(p.full, l.padded * int64_t(c10::elementSize(dtypes_.model)));
      p.full.view({g.group_size, part}).copy_(flat.view({g.group_size, g.total}).narrow(1, off, part));
    }
    off += part;
    p.inflight = false;
  }
}

// _partition_param_sec (at release, has_been_updated=False): kept if it exists; otherwise
// [padded / hpz] zeros with this rank's slice of the gathered parameter (up to numel).
void Zero3Engine::make_secondary(int id) {
  auto& p = params_[size_t(id)];
  if (hpz_ <= 1 || p.secondary.defined()) return;
  const auto& l = layout_[size_t(id)];
  const int64_t n = secondary_numel(id), start = n * (comm_.rank() % hpz_);
  p.secondary = at::zeros({n}, partitions_.options());
  const int64_t copy = std::max<int64_t>(0, std::min(l.numel - start, n));
  if (copy > 0) p.secondary.narrow(0, 0, copy).copy_(p.full.narrow(0, start, copy));
}

void Zero3Engine::invalidate_secondaries() {  // stage3.py invalidate_secondary_tensor
  for (auto& p : params_) p.secondary = at::Tensor();
}

int64_t Zero3Engine::secondary_bytes() const {
  int64_t b = 0;
  for (const auto& p : params_)
    if (p.secondary.defined()) b += int64_t(p.secondary.nbytes());
  return b;
}

}  // namespace zb::backends::zero3
