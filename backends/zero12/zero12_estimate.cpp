// zero12_estimate.cpp — see zero12_estimate.hpp.
#include "backends/zero12/zero12_estimate.hpp"

#include <algorithm>

#include "backends/memory_estimate.hpp"
#include "backends/zero12/zero12_engine.hpp"
#include "backends/zero12/zero12_layout.hpp"

namespace zb::backends::zero12 {

namespace {
// offload_optimizer cpu (zero12_offload.cpp): the gradients of this rank's partition go to the
// host as each bucket is reduced (no grads_in_partition, no accumulated device gradients, no
// fp32 gradient partition at the step); at the boundary each one's fp64 norm copy and (bf16) fp32
// cast exist while it is copied out; temp_grad_buffer_for_gpu_offload is in expected_bytes().grads
// (held from the start of backward: counted at the loss head too). The host side is resident
// (expected_bytes().host): the step casts and copies in place.
std::vector<EstimateTerm> with_offload(std::vector<EstimateTerm> t, int stage, int64_t e, int64_t largest) {
  t.erase(std::remove_if(t.begin(), t.end(),
                         [](const EstimateTerm& x) {
                           return x.name == "accumulated gradients" || x.name == "second grads_in_partition";
                         }),
          t.end());
  const int64_t per = largest * (8 + (e != 4 ? 4 : 0));
  const std::string f = "largest parameter*(8 fp64 norm copy" + std::string(e != 4 ? " + 4 fp32 cast" : "") +
                        ") (copy_grads_in_partition with cpu_offload)";
  if (stage == 2) t.push_back({"offload: boundary gradient copies", "backward", per, f});
  t.push_back({"offload: boundary gradient copies", "end_of_backward", per, f});
  t.push_back({"offload: temp_grad_buffer_for_gpu_offload", "loss_head", largest * e,
               "largest parameter*model bytes (resident; expected_bytes().grads from backward on)"});
  return t;
}
}  // namespace

std::vector<EstimateTerm> estimate_terms(const EngineSpec& spec, const Topology& topo, int rank, int stage) {
  const auto& o = zero12_options(spec.options, stage);
  const auto d = dtypes_for(spec.precision, o);
  const auto l = flat_layout(spec.model, topo.world, o.round_robin_gradients);
  const int64_t e = int64_t(c10::elementSize(d.model)), ce = int64_t(c10::elementSize(d.comm));
  int64_t largest = 0;
  for (const auto& p : l.params) largest = std::max(largest, p.numel);
  std::vector<EstimateTerm> t;
  const int64_t nbuf = o.overlap_comm ? 2 : 1;
  // setup_buckets: torch.empty(reduce_bucket_size) per buffer at the first gradient hook, released
  // by the epilogue (stage 1: held from the first micro-batch's hooks to the boundary).
  for (const char* phase : {"backward", "end_of_backward"})
    t.push_back({"IPG bucket", phase, nbuf * o.reduce_bucket_size * e,
                 std::string(o.overlap_comm ? "2*" : "") + "reduce_bucket_size*model bytes (setup_buckets)"});
  if (stage == 1) {
    // Whole gradients accumulate in param.grad until the boundary's reduce_gradients.
    for (const char* phase : {"backward", "end_of_backward"})
      t.push_back({"whole gradients (stage 1)", phase, l.numel * e, "params*model bytes (param.grad until the boundary)"});
  } else {
    t.push_back({"gradient in flight", "backward", 2 * largest * e, "2*largest parameter*model bytes (autograd's gradient and "
                                                                     "its copy into the bucket)"});
  }
  // Under accumulation the next micro-batch's forward starts with earlier gradients held: stage 2
  // its accumulated in-partition gradients (all_grad_tensors), stage 1 the whole param.grad and
  // the IPG bucket (released only by the boundary's epilogue).
  if (spec.train.grad_accum > 1) {
    if (stage == 2) {
      t.push_back({"accumulated gradients", "loss_head", l.grads_in_partition_numel(rank) * e,
                   "params touching the partition*model bytes (all_grad_tensors between micro-batches)"});
    } else {
      t.push_back({"whole gradients (stage 1)", "loss_head", l.numel * e, "params*model bytes (param.grad between micro-batches)"});
      t.push_back({"IPG bucket", "loss_head", nbuf * o.reduce_bucket_size * e, "kept between micro-batches (stage 1)"});
    }
  }
  // allreduce_bucket: flatten(small_bucket) (+ a communication_data_type copy).
  const int64_t flush = std::min(o.reduce_bucket_size, std::max(l.numel, largest));
  const std::string flush_formula = "min(reduce_bucket_size, params)*model bytes" +
                                    std::string(ce != e ? " + the same in comm bytes" : "") + " (flatten in allreduce_bucket)";
  t.push_back({"bucket flush copy", "end_of_backward", flush * e + (ce != e ? flush * ce : 0), flush_formula});
  // A bucket smaller than the gradients flushes during backward too (stage 2; stage 1 reduces
  // after backward), while a block's activations are held.
  if (stage == 2 && o.reduce_bucket_size < l.numel)
    t.push_back({"bucket flush copy", "backward", flush * e + (ce != e ? flush * ce : 0), flush_formula});
  // Later micro-batches copy into a fresh grads_in_partition before adding it to the first.
  if (spec.train.grad_accum > 1 && stage == 2)
    for (const char* phase : {"backward", "end_of_backward"})
      t.push_back({"second grads_in_partition", phase, l.grads_in_partition_numel(rank) * e,
                   "params touching the partition*model bytes (filled during a later micro-batch's backward)"});
  if (o.offload()) return with_offload(std::move(t), stage, e, largest);
  // step: flatten(averaged_gradients) [P] then .to(fp32) (the same tensor for fp32), the fp64
  // copy of one slice in the norm.
  t.push_back({"fp32 gradient partition", "optimizer_step", l.partition * e + (e != 4 ? l.partition * 4 : 0) + largest * 8,
               "P*model bytes" + std::string(e != 4 ? " + P*4" : "") + " + largest parameter*8 (norm in fp64)"});
  return t;
}

// zero1/zero2: the whole flat model-dtype buffer resident, partitioned fp32 master and states; the
// gradients of this rank's partition (set to None after each step, made again in backward).
PeakEstimate estimate_peak(const EngineSpec& spec, const Topology& topo, int rank, bool gloo, int stage) {
  PeakEstimate e = estimate::for_layout(shard_layout(spec, topo));
  const int md = spec.precision == "bf16" ? 2 : 4;
  estimate::add_common(e, spec, expected_bytes_for(spec, topo, rank, stage), md, gloo, /*grads_set_to_none=*/true);
  for (auto& t : estimate_terms(spec, topo, rank, stage)) e.terms.push_back({t.name, t.phase, t.bytes, t.formula});
  return e;
}

}  // namespace zb::backends::zero12
