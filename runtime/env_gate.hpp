// env_gate.hpp — one CUDA stack per process. Owns: reading which libcudart, libnccl and libcupti
// files this process has mapped (/proc/self/maps) and judging that there is at most (or exactly)
// one of each. A 12.x toolkit next to the cu130 wheel loads two CUDA runtimes: zerobench's direct
// CUDA calls then talk to a runtime whose current device torch never set (every rank reads GPU 0).
// Pure functions over the maps text, so the logic is tested on CPU with a synthetic text.
// Must not: load, unload or initialise anything.
#pragma once
#include <map>
#include <string>
#include <vector>

namespace zb::runtime {

// The families checked, by file-name prefix: "libcudart.so", "libnccl.so", "libcupti.so".
const std::vector<std::string>& cuda_library_families();

// family -> the distinct mapped files of that family (sorted), from a /proc/<pid>/maps text.
std::map<std::string, std::vector<std::string>> loaded_cuda_libraries(const std::string& maps_text);

// "" when every family has at most one file mapped (`require_each`: exactly one); else one line
// naming each family at fault and its files.
std::string check_one_cuda_stack(const std::string& maps_text, bool require_each);

std::string read_self_maps();  // /proc/self/maps ("" if unreadable)

}  // namespace zb::runtime
