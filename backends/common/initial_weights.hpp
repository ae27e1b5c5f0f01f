// initial_weights.hpp — what every engine's constructor calls for its starting weights: the
// seeded init (models::init_unit_flat) or a checkpoint through EngineSpec::initial_weights
// (models/checkpoint/weight_loader.hpp), and this rank's padded chunk of a tensor as a sharding
// engine loads it (padded_chunk, once for FSDP1's flat shards and ZeRO-3's partitions). Owns: that
// choice. Must not: decide the chunk (the engine's ShardLayout does).
#pragma once
#include <algorithm>

#include "backends/engine.hpp"
#include "models/llama.hpp"
#include "models/weight_source.hpp"

namespace zb::backends::common {

inline int64_t unit_numel(const models::ModelConfig& cfg, int unit) {
  int64_t n = 0;
  for (const auto& p : models::unit_specs(cfg, unit)) n += p.numel();
  return n;
}

// Unit `unit`'s whole flat fp32 weights [unit numel] (may be collective: every rank calls it for
// every unit in order; under a sharded load it reads the whole unit).
inline at::Tensor initial_unit(const EngineSpec& spec, int unit) {
  if (!spec.initial_weights) return models::init_unit_flat(spec.model, unit, spec.train.seed);
  return spec.initial_weights->range(unit, 0, unit_numel(spec.model, unit));
}

// True when the engine should ask only for its own shards (initial_range), never initial_unit.
inline bool sharded_load(const EngineSpec& spec) { return spec.initial_weights && spec.initial_weights->sharded(); }

// Elements [begin, begin + length) of the unit's flat weights; only under sharded_load(spec).
inline at::Tensor initial_range(const EngineSpec& spec, int unit, int64_t begin, int64_t length) {
  return spec.initial_weights->range(unit, begin, length);
}

// Elements [lo, lo + chunk) of a tensor of `numel` real elements padded with zeros, fp32 on the
// CPU: under sharded_load(spec) read from the checkpoint (only the real ones, at `offset` in unit
// `unit`'s flat weights), otherwise cut from `whole` (the tensor's `numel` fp32 elements). With
// lo = 0 and chunk = the padded size it is the whole padded tensor.
inline at::Tensor padded_chunk(const EngineSpec& spec, int unit, int64_t offset, int64_t numel, int64_t lo,
                               int64_t chunk, const at::Tensor& whole) {
  auto out = at::zeros({chunk}, at::kFloat);
  const int64_t n = std::max<int64_t>(0, std::min(lo + chunk, numel) - lo);
  if (n > 0) out.narrow(0, 0, n).copy_(sharded_load(spec) ? initial_range(spec, unit, offset + lo, n) : whole.narrow(0, lo, n));
  return out;
}

}  // namespace zb::backends::common
