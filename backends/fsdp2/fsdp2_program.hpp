// fsdp2_program.hpp — FSDP2-mode's projection hooks (backends/common/projection_program.hpp): the
// program of one optimizer step as fsdp2_engine.cpp runs it, and the elements one rank's optimizer steps
// over. Registered on the descriptor in fsdp2_engine.cpp's backend_info().
#pragma once
#include "backends/common/projection_program.hpp"

namespace zb::backends::fsdp2 {

common::ProjectionHooks projection_hooks();

}  // namespace zb::backends::fsdp2
