// zero0_crossval.hpp — zero0's crossval reference (BackendInfo::crossval): real DeepSpeed at ZeRO
// stage 0 through scripts/crossval/run_deepspeed.py, with the DeepSpeed JSON both sides read.
// Owns: that JSON (the user's file with zerobench's resolved values written in) and the measured
// bound. Must not: run anything.
#pragma once
#include "backends/crossval_reference.hpp"

namespace zb::backends::zero0 {
CrossvalReference crossval_reference();
}  // namespace zb::backends::zero0
