// bench/build_info.hpp — what this binary was configured from (defined in the generated
// build/bench/build_info.cpp; bench/build_info.cpp.in says why it is one file of its own).
#pragma once

namespace zb::bench {
// The commit at configure time (`git rev-parse --short HEAD`), or "unknown".
const char* git_sha();
// The source tree's absolute path (CMAKE_SOURCE_DIR): scripts/crossval, committed results.
const char* source_dir();
}  // namespace zb::bench
