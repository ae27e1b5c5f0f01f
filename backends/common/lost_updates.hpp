// lost_updates.hpp — the count behind the precision study's "lost-update fraction".
#pragma once
#include <cstdint>

namespace zb::backends::common {

struct LostUpdates {
  int64_t lost = 0;     // elements whose optimizer update rounded away (|dw| < ulp(w)/2)
  int64_t counted = 0;  // non-zero weights looked at
  LostUpdates& operator+=(const LostUpdates& o) {
    lost += o.lost;
    counted += o.counted;
    return *this;
  }
};

}  // namespace zb::backends::common
