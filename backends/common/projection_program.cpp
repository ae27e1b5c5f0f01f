// projection_program.cpp — the shared pieces of the backends' projection programs (see
// projection_program.hpp).
#include "backends/common/projection_program.hpp"

#include <algorithm>

#include "runtime/errors.hpp"

namespace zb::backends::common {

std::pair<double, double> UnitCosts::root_forward() const {
  const double all = unit_share(forward_s, 0), pre = std::clamp(root_forward_pre_s, 0.0, all);
  return {pre, all - pre};
}

std::pair<double, double> UnitCosts::root_backward() const {
  const double all = unit_share(backward_s, 0), post = std::clamp(root_backward_post_s, 0.0, all);
  return {all - post, post};
}

ProgramDtype program_dtype(at::ScalarType t) {
  if (t == at::kFloat) return {"fp32", 4};
  if (t == at::kBFloat16) return {"bf16", 2};
  if (t == at::kHalf) return {"fp16", 2};
  throw UsageError(std::string("projection: dtype ") + c10::toString(t) +
                   " in the report's backend options is not modelled (fp32, bf16, fp16 are)");
}

ProgramDtype program_dtype_or(const std::optional<at::ScalarType>& t, const ProgramDtype& fallback) {
  return t ? program_dtype(*t) : fallback;
}

ProgramDtype program_compute_dtype(const std::string& precision) {
  return precision == "fp32" ? ProgramDtype{"fp32", 4} : ProgramDtype{"bf16", 2};
}

double unit_share(const std::vector<double>& v, size_t u) { return u < v.size() ? v[u] : 0.0; }

}  // namespace zb::backends::common
