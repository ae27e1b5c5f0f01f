// initial_weights.hpp — what every engine's constructor calls for its starting weights: the
// seeded init (models::init_unit_flat) or a checkpoint through EngineSpec::initial_weights
// (models/checkpoint/weight_loader.hpp). Owns: that choice. Must not: shard anything.
#pragma once
#include "backends/engine.hpp"
#include "models/llama.hpp"

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

}  // namespace zb::backends::common
