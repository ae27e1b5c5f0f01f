// gpu_required.hpp — the one skip rule of the CUDA tests: without a CUDA build or a visible GPU a
// CUDA test skips, saying why; under ZEROBENCH_REQUIRE_GPU=1 (scripts/gpu-first.sh sets it, so a
// skip cannot hide a gate on a GPU machine) that skip is a failure. Must not: decide anything else.
#pragma once
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "runtime/device.hpp"

namespace zb::test_support {
inline bool gpu_required() {
  const char* v = std::getenv("ZEROBENCH_REQUIRE_GPU");
  return v && std::string(v) == "1";
}
}  // namespace zb::test_support

#define ZB_SKIP_OR_FAIL(why)                                                                             \
  do {                                                                                                   \
    if (::zb::test_support::gpu_required()) FAIL() << (why) << " (ZEROBENCH_REQUIRE_GPU=1: a skip fails)"; \
    GTEST_SKIP() << (why);                                                                               \
  } while (0)
#define ZB_REQUIRE_GPU()                                                                                    \
  do {                                                                                                      \
    if (!::zb::runtime::cuda_built()) ZB_SKIP_OR_FAIL("this build has no CUDA path (-DZEROBENCH_CUDA=OFF)"); \
    if (!::zb::runtime::cuda_available()) ZB_SKIP_OR_FAIL("no CUDA device is visible: CUDA test not run");  \
  } while (0)
