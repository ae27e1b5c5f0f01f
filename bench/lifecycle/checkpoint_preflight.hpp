// checkpoint_preflight.hpp — the checkpoint directory checked before any rank starts: it exists
// (created if absent, as a save would create it) and is writable (a probe file is created and
// removed, which also holds for root, unlike access(2)), and its filesystem has at least the bytes
// the run's checkpoints will write, from the closed form of their layout (checkpoint.hpp) →
// otherwise UsageError (exit 2) naming the directory, the bytes needed and the bytes free.
// Owns: that closed form (bytes per save, saves kept on disk) and the check. Must not: write a
// checkpoint, or know an engine's internals (the per-rank state bytes come from the backend's
// registered closed form, BackendInfo::training.expected_bytes).
#pragma once
#include <cstdint>
#include <string>

#include "backends/engine.hpp"
#include "bench/lifecycle/checkpoint.hpp"

namespace zb::bench::lifecycle {

// Test-only: a byte count here replaces statvfs's free space (docs/lifecycle.md); never set it
// outside tests.
inline constexpr const char* kTestFreeBytesEnv = "ZEROBENCH_TEST_FREE_BYTES";

struct CheckpointDiskNeed {
  int64_t saves = 0;           // saves this run makes; checkpoint.cpp deletes none, so all stay on disk
  int64_t tensor_bytes = 0;    // per save: the tensors' bytes (every rank's state; full: + the fp32 model) —
                               // exact, except that zero3's closed form of `params` also counts the full
                               // copies of persistent parameters, which a checkpoint does not save
  int64_t overhead_bytes = 0;  // per save: an upper bound on the rest (safetensors headers, step counters,
                               // metadata.json, config.json)
  int64_t bytes_per_save() const { return tensor_bytes + overhead_bytes; }
  int64_t total() const { return saves * bytes_per_save(); }
};

// The closed form for `opts` (dir, every, state_dict) over steps [first_step, spec.train.steps).
CheckpointDiskNeed checkpoint_disk_need(const CheckpointOptions& opts, const std::string& backend,
                                        const backends::EngineSpec& spec, int world_size, int64_t first_step);

// Free bytes for an unprivileged writer at `dir` (statvfs f_bavail × f_frsize), or the test
// override kTestFreeBytesEnv.
int64_t free_bytes_at(const std::string& dir);

// Creates opts.dir if absent, checks it is writable and has room for checkpoint_disk_need;
// throws UsageError naming the directory (and needed vs free). A run without saves checks nothing.
void check_checkpoint_dir(const CheckpointOptions& opts, const std::string& backend, const backends::EngineSpec& spec,
                          int world_size, int64_t first_step);

}  // namespace zb::bench::lifecycle
