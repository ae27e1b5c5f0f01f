// zero3_checkpoint.hpp — ZeRO3-mode's checkpoint layout as DeepSpeed writes it
// (BackendInfo::lifecycle.checkpoint).
#pragma once
#include "backends/checkpoint_layout.hpp"

namespace zb::backends::zero3 {

CheckpointLayout checkpoint_layout();

}  // namespace zb::backends::zero3
