// planted_overflow.cpp — see planted_overflow.hpp.
#include "backends/deepspeed_family/planted_overflow.hpp"

#include <cstdlib>
#include <sstream>
#include <string>

#include "runtime/errors.hpp"

namespace zb::backends::deepspeed_family {

PlantedOverflows PlantedOverflows::from_env() {
  PlantedOverflows out;
  const char* v = std::getenv("ZEROBENCH_TEST_FP16_PLANT_INF");
  if (!v || !*v) return out;
  std::stringstream ss(v);
  std::string item;
  while (std::getline(ss, item, ',')) {
    const auto at = item.find('@');
    try {
      const int64_t step = std::stoll(item.substr(0, at));
      const int rank = at == std::string::npos ? 0 : std::stoi(item.substr(at + 1));
      out.at.emplace_back(step, rank);
    } catch (const std::exception&) {
      throw UsageError("ZEROBENCH_TEST_FP16_PLANT_INF '" + std::string(v) + "': expected STEP[@RANK],...");
    }
  }
  return out;
}

bool PlantedOverflows::planted(int64_t step, int rank) const {
  for (const auto& [s, r] : at)
    if (s == step && r == rank) return true;
  return false;
}

}  // namespace zb::backends::deepspeed_family
