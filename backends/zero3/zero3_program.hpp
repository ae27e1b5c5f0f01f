// zero3_program.hpp — ZeRO3-mode's projection hooks (backends/common/projection_program.hpp): the
// program of one optimizer step as zero3_engine.cpp runs it, and the elements one rank's optimizer steps
// over. Registered on the descriptor in zero3_engine.cpp's backend_info().
#pragma once
#include "backends/common/projection_program.hpp"

namespace zb::backends::zero3 {

common::ProjectionHooks projection_hooks();

}  // namespace zb::backends::zero3
