// build_paths.hpp — test support: the paths tests run and read, fixed when the build was configured:
// this build's zerobench and zerobench_toy binaries, and the source tree (zb::bench::source_dir()).
// Defined in one generated file (build/tests/test_paths.cpp, tests/CMakeLists.txt), not in compile
// definitions: every test file's compile command is then the same in any clone, so a clone at
// another path (CI's fresh checkout) hits ccache for all of them.
#pragma once
#include "bench/build_info.hpp"

namespace zb::test_support {
const char* zerobench_bin();  // $<TARGET_FILE:zerobench>
const char* toy_bin();        // $<TARGET_FILE:zerobench_toy>
}  // namespace zb::test_support
