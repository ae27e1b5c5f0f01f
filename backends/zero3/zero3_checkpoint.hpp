// zero3_checkpoint.hpp — ZeRO3-mode's checkpoint layout as DeepSpeed writes it (BackendInfo::checkpoint).
#pragma once
#include "backends/backend_info.hpp"

namespace zb::backends::zero3 {

CheckpointLayout checkpoint_layout();

}  // namespace zb::backends::zero3
