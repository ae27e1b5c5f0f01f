// planted_allocation.cpp — see planted_allocation.hpp.
#include "backends/fsdp_family/planted_allocation.hpp"

#include <cstdlib>
#include <string>

#include "runtime/errors.hpp"

namespace zb::backends::fsdp_family {

PlantedStepAllocation PlantedStepAllocation::from_env() {
  PlantedStepAllocation out;
  const char* v = std::getenv("ZEROBENCH_TEST_PLANT_STEP_ALLOC");
  if (!v || !*v) return out;
  size_t used = 0;
  try {
    out.bytes_ = std::stoll(v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != std::string(v).size() || out.bytes_ <= 0)
    throw UsageError("ZEROBENCH_TEST_PLANT_STEP_ALLOC '" + std::string(v) + "': expected a positive byte count");
  return out;
}

void PlantedStepAllocation::hold() {
  if (bytes_ > 0 && !held_.defined()) held_ = at::zeros({bytes_}, at::kByte);
}

void PlantedStepAllocation::release() { held_ = at::Tensor(); }

}  // namespace zb::backends::fsdp_family
