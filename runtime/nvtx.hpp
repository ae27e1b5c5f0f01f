// nvtx.hpp — NVTX ranges in the "zerobench" domain for Nsight Systems (no-ops in a build
// without the CUDA toolkit's NVTX3 headers). Owns: range names' format and a recorder hook
// that lets tests see which ranges a step emits on a CPU machine.
// Scoped ranges nest (push/pop); unit spans that start and end in different calls (an FSDP
// unit's backward, from its pre- to its post-backward hook) use start/end ranges.
#pragma once
#include <cstdint>
#include <functional>
#include <string>

namespace zb::runtime::nvtx {

bool compiled_in();

// Scoped: push in the constructor, pop in the destructor.
class Range {
 public:
  explicit Range(const std::string& name);
  ~Range();
  Range(const Range&) = delete;
  Range& operator=(const Range&) = delete;
};

uint64_t start(const std::string& name);  // returns an id for end()
void end(uint64_t id);

// Hook for tests and the profiler: called on the emitting thread with ("push"|"pop"|"start"|
// "end", name, id) for every range; `id` pairs a start with its end (0 for push/pop; end's
// name is empty). nullptr to stop.
using Recorder = std::function<void(const char* kind, const std::string& name, uint64_t id)>;
void set_recorder(Recorder recorder);

}  // namespace zb::runtime::nvtx
