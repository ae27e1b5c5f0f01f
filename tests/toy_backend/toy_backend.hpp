// toy_backend.hpp — a backend that lives entirely in tests/: data parallel without bucketing (one
// all-reduce per parameter tensor, fp32 only). It exists to show, and to test, that a backend is
// one descriptor registered by one line: toy_zerobench.cpp registers it and gets `run`,
// `model-info`, the memory estimate, `project`, `matrix` and `table` without a change anywhere
// else (docs/architecture.md, "Adding a backend", walks through it).
#pragma once
#include "backends/backend_info.hpp"

namespace zb::toy {

backends::BackendInfo backend_info();

}  // namespace zb::toy
