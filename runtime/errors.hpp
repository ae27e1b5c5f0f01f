// errors.hpp — the typed errors every layer throws. Owns: the mapping to exit codes.
// UsageError (bad flag, value or input file) → exit 2; RunError (a run that failed) → exit 1.
#pragma once
#include <stdexcept>
#include <string>

namespace zb {

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct RunError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailed = 1;
inline constexpr int kExitUsage = 2;

}  // namespace zb
