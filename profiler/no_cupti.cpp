// no_cupti.cpp — make_cupti_tracer in a build without CUDA: a clear error (see tracer.hpp).
#include "profiler/tracer.hpp"
#include "runtime/errors.hpp"

namespace zb::profiler {

bool cupti_built() { return false; }
std::unique_ptr<ActivityTracer> make_cupti_tracer() {
  throw RunError("--profile on CUDA needs a build with CUPTI (configure with -DZEROBENCH_CUDA=ON)");
}

}  // namespace zb::profiler
