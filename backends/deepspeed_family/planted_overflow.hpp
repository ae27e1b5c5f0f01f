// planted_overflow.hpp — the test-only overflow planter the fp16 engines share (zero3_fp16.cpp,
// zero12_fp16.cpp): ZEROBENCH_TEST_FP16_PLANT_INF="STEP[@RANK],..." plants an inf into RANK's
// (default 0) gradients before the overflow check of optimizer step STEP (0-based). The overflow
// is then found on one rank and must reach every rank through the engine's MAX all-reduce
// (tests/test_deepspeed_fp16.cpp).
// Owns: parsing the variable. Must not: decide where the inf goes (each engine plants into its own
// gradient partition) or be read by anything but those engines.
// Belongs to the DeepSpeed family (backends/deepspeed_family/), used by zero12, zero3.
#pragma once
#include <cstdint>
#include <utility>
#include <vector>

namespace zb::backends::deepspeed_family {

struct PlantedOverflows {
  std::vector<std::pair<int64_t, int>> at;  // (optimizer step, rank)
  // Throws UsageError naming the variable's value when it is not STEP[@RANK],...
  static PlantedOverflows from_env();
  bool planted(int64_t step, int rank) const;
};

}  // namespace zb::backends::deepspeed_family
