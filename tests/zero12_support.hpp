// zero12_support.hpp — what the ZeRO-1/2 tests (test_zero12, test_zero12_offload) build alike: an
// EngineSpec of a stage with options, and the flat buffer's parameter numels from the shapes alone
// (independent of backends/zero12/zero12_layout.cpp, which the tests check).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "backends/zero12/zero12_options.hpp"
#include "models/model_config.hpp"
#include "tests/thread_world.hpp"

namespace zb::test_support {

inline backends::EngineSpec zero12_spec(int stage, const std::string& precision, int64_t accum,
                                        backends::zero12::Zero12Options o = {}) {
  auto s = small_spec(accum);
  s.precision = precision;
  o.stage = stage;
  s.options = backends::zero12::to_json(o);
  return s;
}

// The parameters' numels in the flat buffer's order (module.parameters() of the crossval model:
// embedding, each block in spec order, final norm, LM head).
inline std::vector<int64_t> zero12_flat_numels(const models::ModelConfig& cfg) {
  const auto units = models::unit_param_specs(cfg);
  std::vector<int64_t> out = {units[0][0].numel()};
  for (size_t u = 1; u < units.size(); ++u)
    for (const auto& p : units[u]) out.push_back(p.numel());
  out.push_back(units[0][1].numel());
  out.push_back(units[0][2].numel());
  return out;
}

}  // namespace zb::test_support
