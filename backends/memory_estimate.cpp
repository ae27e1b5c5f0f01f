// memory_estimate.cpp — see memory_estimate.hpp. Each term names what it counts and how; the
// symbols are the model's (N = B*T tokens of one micro-batch, c compute-dtype bytes) plus each
// backend's own (docs/metrics.md). Engine transients follow the engines as written: when an
// engine's buffers change (fused AdamW, a preallocated reduce bucket, ...), change its term here.
#include "backends/backend_info.hpp"
#include "backends/memory_estimate.hpp"

#include <algorithm>

#include "backends/fsdp/fsdp_offload_estimate.hpp"
#include "backends/fsdp/fsdp_options.hpp"
#include "backends/fsdp2/fsdp2_layout.hpp"
#include "backends/fsdp2/fsdp2_offload_estimate.hpp"
#include "backends/zero3/zero3_offload_estimate.hpp"
#include "backends/zero3/zero3_options.hpp"
#include "backends/zero12/zero12_estimate.hpp"
#include "models/activation_memory.hpp"

namespace zb::backends {

namespace {
constexpr const char* kResident = "resident";
constexpr const char* kFwdBwd = "forward_backward";
constexpr const char* kLossHead = "loss_head";
constexpr const char* kBackward = "backward";
constexpr const char* kEndOfBackward = "end_of_backward";
constexpr const char* kOpt = "optimizer_step";
// ZeRO3-mode: the root's largest gradient (the LM head's), the first of backward, before any
// block's backward transients or bucket flush (estimate_zero3).
constexpr const char* kRootGradient = "root_gradient";
const char* const kMoments[] = {kLossHead, kRootGradient, kBackward, kEndOfBackward, kOpt};

// What every engine holds during a step: its model states (the backend's closed form), the
// step's batches, the RoPE tables, and one micro-batch's activations. Returns the activations.
// `grads_set_to_none`: the engine frees its gradients after each optimizer step
// (zero_grad(set_to_none=True)) and makes them again in backward, so they are not held at the
// loss head; counted whole from a block's backward on (an upper bound while they fill).
models::ActivationMemory add_common(PeakEstimate& e, const EngineSpec& spec, const ModelStateBytes& states, int c,
                                    bool grads_set_to_none = false) {
  const auto& t = spec.train;
  const auto& m = spec.model;
  e.terms.push_back({"params", kResident, states.params, "expected_bytes().params (the backend's closed form)"});
  e.terms.push_back({"master params", kResident, states.master_params, "expected_bytes().master_params"});
  if (!grads_set_to_none) {
    e.terms.push_back({"grads", kResident, states.grads, "expected_bytes().grads"});
  } else {
    for (const char* moment : {kBackward, kEndOfBackward, kOpt})
      e.terms.push_back({"grads", moment, states.grads,
                         "expected_bytes().grads (set_to_none after each step: made again in backward)"});
  }
  e.terms.push_back({"optimizer states", kResident, states.optimizer, "expected_bytes().optimizer"});
  // Offloaded model states (expected_bytes().host): resident in host memory.
  const auto& h = states.host;
  for (const auto& [name, bytes] : {std::pair<const char*, int64_t>{"params", h.params},
                                    {"master params", h.master_params},
                                    {"grads", h.grads},
                                    {"optimizer states", h.optimizer},
                                    {"buffers", h.buffers}})
    if (bytes > 0)
      e.terms.push_back({std::string("host ") + name, kResident, bytes,
                         std::string("expected_bytes().host.") + (std::string(name) == "master params" ? "master_params"
                                                                  : std::string(name) == "optimizer states" ? "optimizer"
                                                                                                            : name),
                         "host"});
  if (states.buffers > 0)
    e.terms.push_back({"communication buffers", kResident, states.buffers,
                       "expected_bytes().buffers (ZeRO-3's IPG bucket: reduce_bucket_size*comm bytes)"});
  // --batching pad|pack (models/batching.hpp): rows of documents padded to T; every micro-batch
  // also carries int64 position_ids and document ids, and its forward builds RoPE at those
  // positions and one additive block-diagonal mask that every layer's SDPA saves by reference.
  const bool per_document = t.batching == "pad" || t.batching == "pack";
  if (!per_document) {
    e.terms.push_back({"batches", kResident, t.grad_accum * t.micro_batch * t.seq_len * 16,
                       "grad_accum*B*T*16 (int64 tokens and targets of every micro-batch, made before the step)"});
  } else {
    e.terms.push_back({"batches", kResident, t.grad_accum * t.micro_batch * t.seq_len * 32,
                       "grad_accum*B*T*32 (int64 tokens, targets, position_ids, document ids, padding included)"});
    e.terms.push_back({"document mask", kFwdBwd, t.micro_batch * t.seq_len * t.seq_len * c,
                       "B*T*T*c (the additive block-diagonal causal mask, saved once for all layers)"});
    e.terms.push_back({"rope at positions", kFwdBwd, 2 * t.micro_batch * t.seq_len * m.head_dim() * c,
                       "2*B*T*head_dim*c (cos, sin gathered at position_ids)"});
  }
  e.terms.push_back({"rope tables", kResident, 2 * t.seq_len * m.head_dim() * c, "2*T*head_dim*c (cos, sin)"});
  const auto a = models::activation_memory(m, t.micro_batch, t.seq_len, c, t.activation_checkpointing);
  e.terms.push_back({"activations: " + a.blocks.name, kFwdBwd, a.blocks.bytes, a.blocks.formula});
  e.terms.push_back({"activations: " + a.head_saved.name, kLossHead, a.head_saved.bytes, a.head_saved.formula});
  e.terms.push_back({"activations: " + a.head_backward.name, kLossHead, a.head_backward.bytes, a.head_backward.formula});
  e.terms.push_back({"activations: " + a.block_backward.name, kBackward, a.block_backward.bytes, a.block_backward.formula});
  return a;
}

// The optimizer step's largest transient. AdamW is ATen's fused kernel (common/optim.cpp,
// at::_fused_adamw_): nothing full-size. The global norm (torch's clip_grad_norm_ / FSDP1's)
// takes one norm per gradient tensor: for bf16 gradients ATen's CPU reduction first makes an fp32
// copy of that tensor (4 bytes per element; tests/test_fsdp.cpp FsdpMemory.
// OptimizerStepAddsOnlyUpstreamsTransients), so the largest gradient tensor sets it; fp32
// gradients add only scalars.
void add_optimizer_transient(PeakEstimate& e, int64_t largest_grad_numel, int grad_bytes) {
  if (grad_bytes == 4) return;
  e.terms.push_back({"grad-norm transient", kOpt, largest_grad_numel * 4,
                     "largest gradient tensor*4 (its fp32 copy in the norm; fused AdamW adds nothing)"});
}

// The run's shard layout, as the backend's engine builds its groups (BackendInfo::shard_layout),
// and an estimate made for it.
ShardLayout layout_of(const std::string& name, const EngineSpec& spec, const Topology& topo) {
  return backend(name).shard_layout(spec, topo);
}
PeakEstimate for_layout(const ShardLayout& l) {
  PeakEstimate e;
  e.world = l.world;
  e.ranks_per_node = l.ranks_per_node;
  e.shard_group = l.shard_size;
  return e;
}

int bytes_of(const std::string& dtype_name, int fallback) {
  if (dtype_name == "fp32") return 4;
  if (dtype_name == "bf16" || dtype_name == "fp16") return 2;
  return fallback;
}
}  // namespace

int64_t PeakEstimate::phase_bytes(const std::string& phase, const std::string& location) const {
  int64_t s = 0;
  for (const auto& t : terms)
    if (t.phase == phase && t.location == location) s += t.bytes;
  return s;
}

int64_t PeakEstimate::moment_bytes(const std::string& moment, const std::string& location) const {
  int64_t s = phase_bytes(moment, location);
  if (moment == kLossHead || moment == kRootGradient || moment == kBackward) s += phase_bytes(kFwdBwd, location);
  return s;
}

namespace {
// The peak over the moments of the device's terms, with the host's when they share its memory.
int64_t peak_of(const PeakEstimate& e, bool device, bool host, std::string* phase = nullptr) {
  auto at = [&](const char* moment) {
    return (device ? e.moment_bytes(moment, "device") : 0) + (host ? e.moment_bytes(moment, "host") : 0);
  };
  const char* best = kLossHead;
  for (const char* moment : kMoments)
    if (at(moment) > at(best)) best = moment;
  if (phase) *phase = best;
  return (device ? e.phase_bytes(kResident, "device") : 0) + (host ? e.phase_bytes(kResident, "host") : 0) + at(best);
}
}  // namespace

int64_t PeakEstimate::peak_bytes() const { return peak_of(*this, true, host_is_device); }

std::string PeakEstimate::peak_phase() const {
  std::string phase;
  peak_of(*this, true, host_is_device, &phase);
  return phase;
}

int64_t PeakEstimate::host_peak_bytes() const { return peak_of(*this, false, true); }

nlohmann::json to_json(const PeakEstimate& e) {
  nlohmann::json terms = nlohmann::json::array(), moments = nlohmann::json::object();
  bool any_host = false;
  for (const auto& t : e.terms) {
    terms.push_back({{"name", t.name}, {"phase", t.phase}, {"bytes", t.bytes}, {"formula", t.formula}});
    if (t.location != "device") {
      terms.back()["location"] = t.location;
      any_host = true;
    }
  }
  for (const char* m : kMoments) moments[m] = e.moment_bytes(m);
  nlohmann::json j = {{"peak_bytes", e.peak_bytes()},
                      {"peak_phase", e.peak_phase()},
                      {"topology", {{"world", e.world}, {"ranks_per_node", e.ranks_per_node}, {"shard_group", e.shard_group}}},
                      {"resident_bytes", e.phase_bytes(kResident)},
                      {"moments", moments},
                      {"terms", terms}};
  if (any_host) {  // offload: the host's own peak, and whether peak_bytes counts it (a CPU-only run)
    j["host_peak_bytes"] = e.host_peak_bytes();
    j["host_resident_bytes"] = e.phase_bytes(kResident, "host");
    j["peak_includes_host"] = e.host_is_device;
  }
  return j;
}

// ddp: a full replica in the storage dtype s; "mixed" computes on bf16 copies of the weights.
PeakEstimate estimate_ddp(const EngineSpec& spec, const Topology& world, int rank, bool /*gloo*/) {
  PeakEstimate e = for_layout(layout_of("ddp", spec, world));
  const bool mixed = spec.precision == "mixed";
  const int s = spec.precision == "low" ? 2 : 4, c = spec.precision == "fp32" ? 4 : 2;
  add_common(e, spec, backend("ddp").expected_bytes(spec, world, rank), c);
  const auto& m = spec.model;
  const int64_t N = models::count_params(m).total, VH = m.vocab * m.hidden;
  if (mixed)
    e.terms.push_back({"bf16 weight copies", kFwdBwd, 2 * (N - VH),
                       "2*(params - V*H): each unit's w.to(bf16) is saved by the ops that use it (the embedding's "
                       "copy is not)"});
  // The largest weight's gradient (LM head, V*H) before autograd adds it into the flat gradient
  // buffer; in "mixed" its bf16 gradient and the fp32 cast exist together. (The gradient
  // all-reduce after backward works in place: Gloo and NCCL all-reduce the buffer itself.)
  e.terms.push_back({"weight-gradient transient", kBackward, VH * (s + (mixed ? 2 : 0)),
                     std::string("V*H*") + (mixed ? "(4+2)" : std::to_string(s))});
  add_optimizer_transient(e, VH, s);  // the embedding and LM head are the largest tensors
  return e;
}

// fsdp: flat shards of S-padded units; unsharded units in the param dtype p while gathered;
// gradients reduced in r.
PeakEstimate estimate_fsdp(const EngineSpec& spec, const Topology& world, int rank, bool gloo) {
  using namespace fsdp;
  const auto o = fsdp_options_from_json(spec.options);
  // The shard group the engine builds (HYBRID_SHARD: the node's ranks, not the world) and each
  // unit's padded flat parameter, from the run's layout.
  const auto layout = layout_of("fsdp", spec, world);
  const int S = layout.shard_size;
  PeakEstimate e = for_layout(layout);
  const bool fp32_flat = spec.precision == "mixed" || spec.precision == "fp16";  // fp32 flat, low-precision compute
  const int s = fp32_flat || spec.precision == "fp32" ? 4 : 2;
  const int p = spec.precision == "fp32" ? 4 : 2;
  const int r = spec.precision == "fp32" ? 4 : fp32_flat && o.reduce_dtype == "fp32" ? 4 : p;
  const auto a = add_common(e, spec, backend("fsdp").expected_bytes(spec, world, rank), p, /*grads_set_to_none=*/true);
  const bool sharded = S > 1;
  int64_t root = 0, block = 0, all = 0;
  for (size_t u = 0; u < layout.unit_padded.size(); ++u) {
    const int64_t padded = layout.unit_padded[u];  // numel when unsharded
    if (u == 0) root = padded;
    else block = std::max(block, padded);
    all += padded;
  }
  const bool prefetch = o.backward_prefetch != BackwardPrefetch::kNone;
  if (sharded && o.sharding_strategy == ShardingStrategy::kShardGradOp) {
    e.terms.push_back({"unsharded units", kFwdBwd, all * p,
                       "sum(padded units)*p: SHARD_GRAD_OP keeps every unit gathered from forward to its post-backward"});
  } else if (!sharded) {
    if (p != s) e.terms.push_back({"bf16 unit copies", kFwdBwd, all * p, "sum(units)*p: NO_SHARD's compute copies"});
  } else {
    // The root is never resharded after forward; the root's pre-backward hook (on the loss)
    // prefetches the last block (BACKWARD_PRE), and each block's pre-backward the next one.
    e.terms.push_back({"unsharded units", kLossHead, (root + (prefetch ? block : 0)) * p,
                       prefetch ? "(root + block)*p (the root, and the last block prefetched)" : "root*p"});
    e.terms.push_back({"unsharded units", kBackward, (root + (prefetch ? 2 : 1) * block) * p,
                       prefetch ? "(root + 2*block)*p (the root, the current block, the prefetched one)"
                                : "(root + block)*p"});
    // The prefetch all-gather runs while the loss head's backward computes: its input (the
    // shard cast to p under "mixed", _mp_shard) and, on Gloo, a flat output-sized staging buffer
    // (ProcessGroupGloo AsyncAllgatherWork).
    // The same for the next block's prefetch during a block's backward.
    const int64_t staging = (s != p ? block / S * p : 0) + (gloo ? block * p : 0);
    const std::string staging_formula = std::string(s != p ? "block/S*p (_mp_shard)" : "") +
                                        (s != p && gloo ? " + " : "") + (gloo ? "block*p (Gloo's flat output)" : "");
    if (prefetch && staging > 0) {
      e.terms.push_back({"prefetch all-gather staging", kLossHead, staging, staging_formula});
      e.terms.push_back({"prefetch all-gather staging", kBackward, staging, staging_formula});
    }
  }
  // A block's backward: autograd accumulates the unit's flat gradient (p) from each weight's
  // gradient expanded to the unit's size (NarrowBackward: another unit-sized tensor); the root's
  // flat gradient accumulates from the LM head's onward until the embedding's arrives last. The
  // previous unit's reduce-scatter is in flight meanwhile, its input held (and on Gloo cloned,
  // ProcessGroupGloo::reduce_scatter_tensor_coalesced), by when that unit's activations are freed.
  // A block's flat gradient is whole only once its own activations are freed, so one block's
  // activations come off the "backward" moment.
  const int64_t acc = root * p + 2 * block * p + (r != p ? block * r : 0);
  const int64_t in_flight = sharded ? block * r * (gloo ? 2 : 1) : 0;
  const int64_t block_act = a.blocks.bytes / std::max<int64_t>(1, spec.model.layers);
  e.terms.push_back({"unsharded gradients", kBackward,
                     std::max<int64_t>(0, acc + std::max<int64_t>(0, in_flight - block_act) - block_act),
                     "(root + 2*block)*p" + std::string(r != p ? " + block*r" : "") +
                         " + max(0, in-flight reduce-scatter block*r" + (gloo ? "*2 (Gloo's clone)" : "") +
                         " - a block's activations) - a block's activations"});
  // After the last gradient: the root's reduce-scatter input (and Gloo's clone of it).
  e.terms.push_back({"root gradient reduce-scatter", kEndOfBackward,
                     root * p + (r != p ? root * r : 0) + (sharded && gloo ? root * r : 0),
                     "root*p" + std::string(r != p ? " + root*r" : "") + (sharded && gloo ? " + root*r (Gloo's clone)" : "")});
  // The largest original-parameter view in this rank's shard (FSDP1 clips over per-parameter views).
  add_optimizer_transient(e, std::min(spec.model.vocab * spec.model.hidden, std::max(root, block) / (sharded ? S : 1)), s);
  add_offload_terms(e, spec, world, rank, gloo);  // CPUOffload (backends/fsdp/fsdp_offload_estimate.cpp)
  return e;
}

// fsdp2: every parameter Shard(0) over the mesh's dp_shard ranks S (padded to ceil(dim0/S) rows),
// one all-gather per fully_shard group into a [S, sum of padded shards] output in the compute
// dtype p, copied out into each parameter's [S * padded rows] buffer (backends/fsdp2/, docs/
// backends/fsdp2.md); gradients in p, reduce-scattered per group in r, kept sharded in the
// sharded dtype s and freed each step (zero_grad(set_to_none=True)).
PeakEstimate estimate_fsdp2(const EngineSpec& spec, const Topology& topo, int rank, bool gloo) {
  using namespace fsdp2;
  const auto o = fsdp2_options_from_json(spec.options);
  const auto d = dtypes_for(spec.precision, o);
  const auto layout = layout_of("fsdp2", spec, topo);  // the mesh's dp_shard ranks
  const int S = layout.shard_size;
  PeakEstimate e = for_layout(layout);
  const int s = int(c10::elementSize(d.orig)), p = int(c10::elementSize(d.compute())),
            r = int(c10::elementSize(d.comm_reduce()));
  const auto a = add_common(e, spec, closed_form_bytes(spec, topo, rank), p, /*grads_set_to_none=*/true);
  const auto& m = spec.model;
  const auto param_specs = models::unit_param_specs(m);
  // Per group: its unsharded all-gather size (S x the padded shards, elements) and its unpadded
  // numel (what autograd's gradients cover).
  int64_t kept = 0, kept_numel = 0, block = 0, block_numel = 0, largest_local = 0, all = 0, all_numel = 0;
  for (const auto& g : group_specs(m, o)) {
    int64_t shard = 0, numel = 0;
    for (const auto& [u, i] : g.params) {
      const auto l = layout_param(param_specs[size_t(u)][size_t(i)], u, i, S, layout.shard_index(rank));
      shard += l.padded_shard_numel();
      numel += l.numel;
      largest_local = std::max(largest_local, l.local_numel());
    }
    const int64_t unsharded = shard * S;
    all += unsharded;
    all_numel += numel;
    if (g.reshard_after_forward_false) {
      kept += unsharded;
      kept_numel += numel;
    } else if (g.kind == GroupKind::kBlock) {
      block = std::max(block, unsharded);
      block_numel = std::max(block_numel, numel);
    }
  }
  const int64_t L = std::max<int64_t>(1, m.layers);
  const bool raf_false = o.reshard_after_forward == kReshardFalse || S == 1;
  // The groups held unsharded at the loss head and in a block's backward: those never resharded
  // after forward (the root, accelerate's tail), the current block, and the previous block
  // prefetched (_backward_prefetch) with its all-gather output [S, shard] in p while it is in
  // flight — on Gloo with a flat output-sized staging copy (ProcessGroupGloo allgather). With
  // reshard_after_forward=False every group stays unsharded from forward to its post-backward;
  // with an int N each block keeps 1/N of its unsharded data (to_sharded_post_forward).
  if (raf_false) {
    e.terms.push_back({"unsharded groups", kFwdBwd, all * p,
                       "sum(S*padded shards)*p: reshard_after_forward=False keeps every group unsharded"});
  } else {
    const int64_t staging = gloo ? block * p : 0;
    e.terms.push_back({"unsharded groups", kLossHead, (kept + block) * p + staging,
                       std::string("(kept + block)*p (groups never resharded, the last block's prefetch output)") +
                           (gloo ? " + block*p (Gloo's flat all-gather output)" : "")});
    e.terms.push_back({"unsharded groups", kBackward, (kept + 2 * block) * p + staging,
                       std::string("(kept + 2*block)*p (the current block, the previous one's prefetch output)") +
                           (gloo ? " + block*p (Gloo's flat all-gather output)" : "")});
    if (o.reshard_after_forward > 1)
      e.terms.push_back({"post-forward shards", kFwdBwd, L * block / o.reshard_after_forward * p,
                         "L*block/N*p (reshard_after_forward=N keeps 1/N of each block)"});
  }
  // Gradients: autograd's unsharded gradients in p — the kept groups' (the LM head's arrives in
  // the loss head's backward and waits for the final callback) and one block's — then the block's
  // post-backward copies them into a [S, shard] reduce-scatter input in r (chunk_cat) that stays
  // alive until the next group's post-backward (ReduceScatterState), Gloo cloning it while in
  // flight. The in-flight one belongs to the block after, whose activations are freed by then.
  const int64_t held = kept_numel * p + block_numel * p;
  const int64_t in_flight = S > 1 ? block * r * (gloo ? 2 : 1) : 0;
  const int64_t block_act = a.blocks.bytes / L;
  e.terms.push_back({"unsharded gradients", kBackward,
                     std::max<int64_t>(0, held + std::max<int64_t>(0, in_flight - block_act) - block_act),
                     "(kept numel + block numel)*p + max(0, in-flight reduce-scatter block*r" +
                         std::string(gloo ? "*2 (Gloo's clone)" : "") +
                         " - a block's activations) - a block's activations"});
  // Under no_sync accumulation (set_requires_gradient_sync(False)) every unsharded gradient is
  // held from the first micro-batch's backward to the last one's post-backward, in p (or upcast
  // once to reduce_dtype when it is set).
  if (spec.train.grad_accum > 1 && !o.sync_each_batch && !spec.train.sync_each_batch) {
    const int held_bytes = d.reduce ? r : p;
    e.terms.push_back({"accumulated unsharded gradients", kFwdBwd, all_numel * held_bytes,
                       "params*" + std::string(d.reduce ? "r" : "p") + " (no_sync: held between micro-batches)"});
  }
  // The final callback: the kept groups' post-backward (the root's inputs need no gradient): its
  // gradients and the reduce-scatter input, then the input, Gloo's clone and the output
  // (cast to s when r differs).
  const int64_t kept_shard = kept / std::max(1, S);
  const int64_t rs_tail = std::max(kept_numel * p, (S > 1 && gloo ? kept * r : 0) + kept_shard * r) +
                          (r != s ? kept_shard * s : 0);
  e.terms.push_back({"root gradient reduce-scatter", kEndOfBackward, kept * r + rs_tail,
                     "kept*r + max(kept numel*p, " + std::string(S > 1 && gloo ? "kept*r (Gloo's clone) + " : "") +
                         "kept/S*r)" + (r != s ? " + kept/S*s (cast)" : "")});
  // Optimizer: one vector_norm per local gradient (an fp32 copy of a bf16 one on CPU), the [P]
  // stack; fused AdamW adds nothing full-size.
  add_optimizer_transient(e, largest_local, s);
  add_offload_terms(e, spec, topo, rank);  // CPUOffloadPolicy (backends/fsdp2/fsdp2_offload_estimate.cpp)
  return e;
}

// zero3: per-parameter partitions; gathered parameters and gradient buckets in model/comm dtypes.
PeakEstimate estimate_zero3(const EngineSpec& spec, const Topology& topo, int rank, bool gloo) {
  const auto layout = layout_of("zero3", spec, topo);
  const int world = layout.shard_size;  // ZeRO-3 partitions over every rank
  PeakEstimate e = for_layout(layout);
  const auto o = zero3::zero3_options_from_json(spec.options);
  const int md = spec.precision == "bf16" || spec.precision == "fp16" ? 2 : 4;
  const int comm = bytes_of(o.communication_data_type, md), ga = bytes_of(o.grad_accum_dtype, md);
  add_common(e, spec, backend("zero3").expected_bytes(spec, topo, rank), md);
  int64_t np_padded = 0, largest = 0, largest_root = 0, largest_block = 0, total_numel = 0, total_padded = 0, local = 0;
  std::vector<int64_t> parts;
  const auto units = models::unit_param_specs(spec.model);
  for (size_t u = 0; u < units.size(); ++u)
    for (const auto& ps : units[u]) {
      const int64_t numel = ps.numel(), padded = (numel + world - 1) / world * world;
      total_numel += numel;
      total_padded += padded;
      local += padded / world;
      parts.push_back(padded / world);
      largest = std::max(largest, padded);
      int64_t& unit_largest = u == size_t(models::kRootUnit) ? largest_root : largest_block;
      unit_largest = std::max(unit_largest, padded);
      if (numel > o.stage3_param_persistence_threshold) np_padded += padded;
    }
  // Gathered non-persistent parameters: with a recorded trace a parameter reused within
  // stage3_max_reuse_distance elements stays, and prefetch adds up to stage3_prefetch_bucket_size
  // (within stage3_max_live_parameters). An upper bound; small models keep everything.
  const int64_t prefetch = std::min(o.stage3_prefetch_bucket_size, o.stage3_max_live_parameters);
  const int64_t gathered = std::min(np_padded, o.stage3_max_reuse_distance + prefetch + largest);
  e.terms.push_back({"gathered parameters", kFwdBwd, gathered * md,
                     "min(non-persistent padded, max_reuse_distance + min(prefetch, max_live) + largest)*model bytes"});
  // A parameter's gradient arrives as the weight's gradient expanded to its padded buffer. The
  // root's (the LM head's) comes first in backward, before any block's backward transients or
  // bucket flush: its own moment; a block's during its block's backward.
  e.terms.push_back({"root gradient transient", kRootGradient, 2 * largest_root * md,
                     "2*largest padded root parameter*model bytes (the LM head's, the first gradient of backward)"});
  e.terms.push_back({"gradient transient", kBackward, 2 * largest_block * md,
                     "2*largest padded block parameter*model bytes"});
  // The reduce bucket holds each gradient (padded, comm dtype) until reduce_bucket_size elements;
  // a flush copies them into a [W, sum P] staging buffer (+ the [sum P] output; Gloo clones the
  // staging buffer too), mid-backward when the bucket is smaller than the model, and at its end.
  const double per_elem = double(total_padded) / double(std::max<int64_t>(1, total_numel));
  const int64_t bucket = int64_t(double(std::min(o.reduce_bucket_size, total_numel)) * per_elem);
  const double flush_factor = 2.0 + 1.0 / world + (gloo ? 1.0 : 0.0);
  const std::string flush_formula =
      std::string("(2 + 1/W") + (gloo ? " + 1" : "") + ")*min(reduce_bucket_size, params)*comm bytes (gradients, "
      "staging copy, output" + (gloo ? ", Gloo's clone" : "") + ")";
  if (o.reduce_bucket_size < total_numel)
    e.terms.push_back({"gradient bucket flush", kBackward, int64_t(flush_factor * double(bucket * comm)), flush_formula});
  e.terms.push_back({"final gradient bucket flush", kEndOfBackward, int64_t(flush_factor * double(bucket * comm)),
                     flush_formula});
  // Optimizer: per sub-group an fp32 gradient copy (when grad_accum_dtype is not fp32) and AdamW's
  // denominator on the fp32 master; the global norm's fp32 square before that.
  int64_t sub_group = 0, in_group = 0;
  const bool split = o.sub_group_size < local;
  for (size_t i = 0; i < parts.size() && split; ++i) {
    in_group += parts[i];
    if (in_group >= o.sub_group_size || i + 1 == parts.size()) {
      sub_group = std::max(sub_group, in_group);
      in_group = 0;
    }
  }
  if (!split) sub_group = local;
  const int64_t norm = local * 4 * (ga == 4 ? 1 : 2);
  const int64_t step = sub_group * ((ga == 4 ? 0 : 4) + 2 * 4);
  if (norm >= step)
    e.terms.push_back({"grad-norm transient", kOpt, norm,
                       "local partitions*4 (fp32 square" + std::string(ga == 4 ? ")" : " and fp32 copy)")});
  else
    e.terms.push_back({"sub-group step transient", kOpt, step,
                       "largest sub-group*(" + std::string(ga == 4 ? "" : "4 + ") + "2*4) (fp32 gradient, AdamW denominator)"});
  // offload_optimizer / offload_param (zero3_offload_estimate.cpp); the partitions are fetched
  // again in backward only when not every non-persistent parameter stays gathered.
  zero3::add_offload_terms(e, spec, topo, rank, /*refetch_in_backward=*/gathered < np_padded);
  return e;
}

// zero1/zero2: the whole flat model-dtype buffer resident, partitioned fp32 master and states; the
// gradients of this rank's partition (set to None after each step, made again in backward).
PeakEstimate estimate_zero12(const EngineSpec& spec, const Topology& topo, int rank, bool /*gloo*/, int stage) {
  const std::string name = "zero" + std::to_string(stage);
  PeakEstimate e = for_layout(layout_of(name, spec, topo));
  const int md = spec.precision == "bf16" ? 2 : 4;
  add_common(e, spec, backend(name).expected_bytes(spec, topo, rank), md, /*grads_set_to_none=*/true);
  for (auto& t : zero12::estimate_terms(spec, topo, rank, stage)) e.terms.push_back({t.name, t.phase, t.bytes, t.formula});
  return e;
}

}  // namespace zb::backends
