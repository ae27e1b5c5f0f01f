// zero3_crossval.hpp — this backend's crossval reference and known differences (BackendInfo::crossval;
// backends/crossval_reference.hpp says what they are).
#pragma once
#include "backends/crossval_reference.hpp"

namespace zb::backends::zero3 {

CrossvalReference crossval_reference();

}  // namespace zb::backends::zero3
