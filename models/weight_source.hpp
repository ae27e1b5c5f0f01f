// weight_source.hpp — where an engine's initial weights come from when they are not the seeded
// init (models::init_unit_flat): a checkpoint read by one of the loading strategies
// (models/checkpoint/weight_loader.hpp). Owns: the small interface engines call while they build
// their shards. Must not: know files, strategies or how an engine shards.
#pragma once
#include <ATen/ATen.h>

#include <cstdint>

namespace zb::models {

class UnitWeightSource {
 public:
  virtual ~UnitWeightSource() = default;
  // Elements [begin, begin + length) of unit `unit`'s flat weights (unit_param_specs order, the
  // layout of init_unit_flat), as an fp32 tensor [length] (on CPU or the run's device).
  // When sharded() is false this may be collective (rank 0 reads and broadcasts): every rank
  // must then ask for every unit, in unit order, before asking for the next one.
  virtual at::Tensor range(int unit, int64_t begin, int64_t length) = 0;
  // True when range() reads only the bytes asked for and is not collective: engines then ask
  // for their own shards only (the "sharded" load strategy).
  virtual bool sharded() const = 0;
};

}  // namespace zb::models
