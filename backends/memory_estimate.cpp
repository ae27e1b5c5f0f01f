// memory_estimate.cpp — see memory_estimate.hpp. Each term names what it counts and how; the
// symbols are the model's (N = B*T tokens of one micro-batch, c compute-dtype bytes) plus each
// backend's own (docs/metrics.md). Engine transients follow the engines as written: when an
// engine's buffers change (fused AdamW, a preallocated reduce bucket, ...), change its term in
// the backend's <x>_estimate.cpp.
#include "backends/memory_estimate.hpp"

#include "models/batching.hpp"

namespace zb::backends {

namespace estimate {

namespace {
const char* const kMoments[] = {kLossHead, kRootGradient, kBackward, kEndOfBackward, kOpt};
}  // namespace

models::ActivationMemory add_common(PeakEstimate& e, const EngineSpec& spec, const ModelStateBytes& states, int c,
                                    bool gloo, bool grads_set_to_none) {
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
  // --batching pad|pad-longest|pack (models/batching.hpp): rows of documents padded to T (pad-longest: at most T); every micro-batch
  // also carries int64 position_ids and document ids, and its forward builds RoPE at those
  // positions and one additive block-diagonal mask that every layer's SDPA saves by reference.
  const bool per_document = models::per_document_batching(t.batching);
  if (!per_document) {
    e.terms.push_back({"batches", kResident, t.grad_accum * t.micro_batch * t.seq_len * 16,
                       "grad_accum*B*T*16 (int64 tokens and targets of every micro-batch, made before the step)"});
  } else {
    e.terms.push_back({"batches", kResident, t.grad_accum * t.micro_batch * t.seq_len * 32,
                       "grad_accum*B*T*32 (int64 tokens, targets, position_ids, document ids, padding included)"});
    // A GPU run in bf16/fp16 takes the varlen flash path (models/attention.hpp attention_path): no
    // mask, the int32 cumulative lengths of at most B*T segments instead.
    if (!gloo && c == 2)
      e.terms.push_back({"document lengths", kFwdBwd, 4 * (t.micro_batch * t.seq_len + 1),
                         "4*(B*T+1) (int32 cumulative segment lengths of the varlen flash path, at most B*T segments)"});
    else
      e.terms.push_back({"document mask", kFwdBwd, t.micro_batch * t.seq_len * t.seq_len * c,
                         "B*T*T*c (the additive block-diagonal causal mask, saved once for all layers)"});
    e.terms.push_back({"rope at positions", kFwdBwd, 2 * t.micro_batch * t.seq_len * m.head_dim() * c,
                       "2*B*T*head_dim*c (cos, sin gathered at position_ids)"});
  }
  e.terms.push_back({"rope tables", kResident, 2 * t.seq_len * m.head_dim() * c, "2*T*head_dim*c (cos, sin)"});
  const auto a = models::activation_memory(m, t.micro_batch, t.seq_len, c, t.activation_checkpointing, /*cuda=*/!gloo);
  e.terms.push_back({"activations: " + a.blocks.name, kFwdBwd, a.blocks.bytes, a.blocks.formula});
  e.terms.push_back({"activations: " + a.head_saved.name, kLossHead, a.head_saved.bytes, a.head_saved.formula});
  e.terms.push_back({"activations: " + a.head_backward.name, kLossHead, a.head_backward.bytes, a.head_backward.formula});
  e.terms.push_back({"activations: " + a.block_backward.name, kBackward, a.block_backward.bytes, a.block_backward.formula});
  return a;
}

void add_optimizer_transient(PeakEstimate& e, int64_t largest_grad_numel, int grad_bytes) {
  if (grad_bytes == 4) return;
  e.terms.push_back({"grad-norm transient", kOpt, largest_grad_numel * 4,
                     "largest gradient tensor*4 (its fp32 copy in the norm; fused AdamW adds nothing)"});
}

PeakEstimate for_layout(const ShardLayout& l) {
  PeakEstimate e;
  e.world = l.world;
  e.ranks_per_node = l.ranks_per_node;
  e.shard_group = l.shard_size;
  return e;
}

}  // namespace estimate

using namespace estimate;

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

}  // namespace zb::backends
