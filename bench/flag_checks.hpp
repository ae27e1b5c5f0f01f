// flag_checks.hpp — CLI11 validators for numeric flags. A value must parse as a finite number
// (nan and inf are refused) inside the flag's range; the message reads "VALUE is outside the
// valid range [LO, HI]" after CLI11's "--flag: " prefix. (CLI11's own Range lets NaN through and
// prints DBL_MAX as the open end.) Owns: these validators. Must not: know what a flag means.
#pragma once
#include <CLI/CLI.hpp>

#include <cmath>
#include <limits>
#include <string>

namespace zb::bench {

inline std::string range_text(double lo, bool lo_open, double hi, bool hi_open) {
  auto num = [](double v) {
    if (std::isinf(v)) return std::string(v > 0 ? "inf" : "-inf");
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%g", v);
    return std::string(buf);
  };
  return std::string(lo_open ? "(" : "[") + num(lo) + ", " + num(hi) + (hi_open || std::isinf(hi) ? ")" : "]");
}

// A finite number in [lo, hi] (or (lo, ...) with lo_open; hi may be infinity, meaning no bound).
inline CLI::Validator FiniteRange(double lo, double hi, bool lo_open = false) {
  const std::string range = range_text(lo, lo_open, hi, false);
  return CLI::Validator(
      [=](std::string& input) -> std::string {
        double v = 0;
        size_t pos = 0;
        try {
          v = std::stod(input, &pos);
        } catch (const std::exception&) {
          pos = 0;
        }
        if (pos == 0 || pos != input.size()) return input + " is not a number; valid range " + range;
        if (!std::isfinite(v)) return input + " is not a finite number; valid range " + range;
        if (v < lo || (lo_open && v == lo) || v > hi) return input + " is outside the valid range " + range;
        return std::string();
      },
      "in " + range, "FINITE_RANGE");
}

inline CLI::Validator NonNegative() { return FiniteRange(0, std::numeric_limits<double>::infinity()); }
inline CLI::Validator Positive() { return FiniteRange(0, std::numeric_limits<double>::infinity(), /*lo_open=*/true); }
// Integers >= 1 (counts); CLI11 refuses a fractional value when it converts to the integer type.
inline CLI::Validator AtLeastOne() { return FiniteRange(1, std::numeric_limits<double>::infinity()); }

}  // namespace zb::bench
