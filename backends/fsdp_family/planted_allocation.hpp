// planted_allocation.hpp — the test-only memory regression the gate must catch
// (tests/test_gate_stability.cpp): ZEROBENCH_TEST_PLANT_STEP_ALLOC=BYTES makes an engine that
// calls it (fsdp) allocate BYTES more at the start of each step's forward and keep them until
// its optimizer step ends — an extra buffer kept alive across the step, as a leaked activation or
// a gradient copy held too long would be.
// Owns: parsing the variable and holding the buffer. Must not: be read by anything but the
// engines' step entry and exit.
// Belongs to the PyTorch-FSDP family (backends/fsdp_family/), used by fsdp.
#pragma once
#include <ATen/ATen.h>

#include <cstdint>

namespace zb::backends::fsdp_family {

class PlantedStepAllocation {
 public:
  // Throws UsageError naming the variable's value when it is not a positive byte count.
  static PlantedStepAllocation from_env();
  void hold();     // at a step's first forward: allocate (and touch) the bytes, once per step
  void release();  // at the end of the optimizer step
  int64_t bytes() const { return bytes_; }

 private:
  int64_t bytes_ = 0;
  at::Tensor held_;
};

}  // namespace zb::backends::fsdp_family
