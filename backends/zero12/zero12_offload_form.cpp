// zero12_offload_form.cpp — the closed forms of zero12_offload.hpp, worked out from the layout
// (zero12_layout.hpp) and the options alone.
#include <algorithm>

#include "backends/zero12/zero12_layout.hpp"
#include "backends/zero12/zero12_offload.hpp"

namespace zb::backends::zero12 {

namespace {
int64_t largest_param(const FlatLayout& l) {
  int64_t n = 0;
  for (const auto& p : l.params) n = std::max(n, p.numel);
  return n;
}
}  // namespace

ModelStateBytes expected_offload_bytes(const EngineSpec& spec, const Topology& topo, int rank, int stage) {
  const auto& o = zero12_options(spec.options, stage);
  const auto d = dtypes_for(spec.precision, o);
  const auto l = flat_layout(spec.model, topo.world, o.round_robin_gradients);
  const int64_t e = int64_t(c10::elementSize(d.model)), L = largest_param(l), P = l.partition;
  ModelStateBytes b;
  b.params = l.padded * e;
  b.grads = L * e;
  auto& h = b.host;
  h.params = P * e;
  h.master_params = P * 4;
  h.optimizer = 2 * P * 4;
  h.grads = P * 4 + L * e;
  if (stage == 2 && spec.train.grad_accum > 1) h.grads += l.grads_in_partition_numel(rank) * e;
  h.pinned = o.offload_pin_memory;
  return b;
}

common::OffloadTraffic expected_step_traffic(const EngineSpec& spec, const Topology& topo, int rank, int stage) {
  const auto& o = zero12_options(spec.options, stage);
  common::OffloadTraffic t;
  if (!o.offload()) return t;
  const auto d = dtypes_for(spec.precision, o);
  const auto l = flat_layout(spec.model, topo.world, o.round_robin_gradients);
  const int64_t e = int64_t(c10::elementSize(d.model)), G = spec.train.grad_accum, P = l.partition;
  const int64_t lo = int64_t(rank) * P, hi = lo + P;
  for (int id : l.params_in_partition(rank)) {
    const auto& p = l.params[size_t(id)];
    const int64_t n = p.numel, m = std::min(p.offset + n, hi) - std::max(p.offset, lo);
    if (stage == 2 && G > 1) {
      t.d2h_copies += G + 1;
      t.d2h_bytes += G * n * e + m * 4;
      t.h2d_copies += G - 1;
      t.h2d_bytes += (G - 1) * n * e;
    } else {
      t.d2h_copies += 1;
      t.d2h_bytes += m * 4;
    }
  }
  t.h2d_copies += 1;
  t.h2d_bytes += P * e;
  return t;
}

}  // namespace zb::backends::zero12
