// checkpoint_preflight.cpp — see checkpoint_preflight.hpp; the layout it counts is checkpoint.cpp's
// Checkpointer::save (docs/lifecycle.md "Checkpoints").
#include "backends/backend_info.hpp"
#include "bench/lifecycle/checkpoint_preflight.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "models/model_config.hpp"
#include "runtime/errors.hpp"

namespace zb::bench::lifecycle {

namespace {
// Upper bounds for what is not tensor data (checkpoint.cpp writes it; measured ~100-150 bytes per
// safetensors header entry and ~120 per metadata.json tensor entry for HF-length names).
constexpr int64_t kHeaderBytesPerTensor = 256;  // safetensors JSON entry: name, dtype, shape, offsets
constexpr int64_t kFileFixedBytes = 8 + 512;    // the 8-byte length, __metadata__, padding
constexpr int64_t kMetadataFixedBytes = 8192;   // metadata.json's identity, format, step, tag
constexpr int64_t kMetadataBytesPerEntry = 256; // metadata.json: one per rank and per state tensor
constexpr int64_t kConfigJsonBytes = 4096;      // full: the HF config.json

void make_checkpoint_dir(const std::string& path) {
  const auto failed = make_dirs(path);
  if (!failed.empty()) throw UsageError("--checkpoint-dir " + path + ": cannot create " + failed);
}
}  // namespace

CheckpointDiskNeed checkpoint_disk_need(const CheckpointOptions& opts, const std::string& backend,
                                        const backends::EngineSpec& spec, int world_size, int64_t first_step) {
  CheckpointDiskNeed need;
  if (opts.dir.empty() || opts.every <= 0) return need;
  // Checkpointer::after_step saves after step k when (k + 1) % every == 0, for k in [first_step, steps).
  need.saves = spec.train.steps / opts.every - first_step / opts.every;
  // Every rank's training state (Engine::state_tensors): parameter storage, fp32 masters and AdamW
  // states, which are the backend's closed form of those categories (gradients are not saved).
  int64_t state = 0;
  for (int r = 0; r < world_size; ++r) {
    const auto b = backends::backend(backend).training.expected_bytes(spec, world_size, r);
    state += b.params + b.master_params + b.optimizer;
  }
  int64_t param_tensors = 0;
  for (const auto& unit : models::unit_param_specs(spec.model)) param_tensors += int64_t(unit.size());
  // State tensors per rank, at most: a parameter storage per parameter (fsdp2; fsdp/ddp one flat,
  // zero3 one partition), and per optimizer (one per sub-group at most one per parameter) the fp32
  // master, exp_avg, exp_avg_sq and the step counters — each a float per parameter at most.
  const int64_t tensors_per_rank = 4 * param_tensors + 4;
  const int64_t step_counters_per_rank = 4 * param_tensors;
  const int64_t header_per_rank = 2 * kFileFixedBytes + kHeaderBytesPerTensor * tensors_per_rank;  // zero3: 2 files
  const int64_t metadata = kMetadataFixedBytes + kMetadataBytesPerEntry * (tensors_per_rank + world_size);
  if (opts.state_dict == "full") {
    // Rank 0 alone: config.json, model.safetensors (every parameter in fp32, HF names) and
    // optimizer.safetensors (every rank's state, `rank{R}.` prefixed), metadata.json.
    const int64_t model_fp32 = models::count_params(spec.model).total * 4;
    need.tensor_bytes = model_fp32 + state;
    need.overhead_bytes = kConfigJsonBytes + kFileFixedBytes + kHeaderBytesPerTensor * param_tensors +
                          world_size * (step_counters_per_rank + kHeaderBytesPerTensor * tensors_per_rank) +
                          kFileFixedBytes + metadata;
  } else {
    need.tensor_bytes = state;
    need.overhead_bytes = world_size * (step_counters_per_rank + header_per_rank) + metadata;
  }
  return need;
}

int64_t free_bytes_at(const std::string& dir) {
  if (const char* v = std::getenv(kTestFreeBytesEnv); v && *v) {
    char* end = nullptr;
    const long long n = std::strtoll(v, &end, 10);
    if (!end || *end || n < 0) throw UsageError(std::string(kTestFreeBytesEnv) + " '" + v + "' is not a byte count");
    return n;
  }
  struct statvfs st {};
  if (::statvfs(dir.c_str(), &st) != 0)
    throw UsageError("--checkpoint-dir " + dir + ": statvfs failed (" + std::strerror(errno) + ")");
  return int64_t(st.f_bavail) * int64_t(st.f_frsize);
}

void check_checkpoint_dir(const CheckpointOptions& opts, const std::string& backend, const backends::EngineSpec& spec,
                          int world_size, int64_t first_step) {
  const auto need = checkpoint_disk_need(opts, backend, spec, world_size, first_step);
  if (need.saves <= 0) return;
  const std::string& dir = opts.dir;
  make_checkpoint_dir(dir);
  // Writable: create and remove a probe file (access(W_OK) says yes to root on a read-only mode).
  const std::string probe = dir + "/.zerobench-write-probe-" + std::to_string(::getpid());
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) throw UsageError("--checkpoint-dir " + dir + ": not writable (" + std::strerror(errno) + ")");
  ::close(fd);
  ::unlink(probe.c_str());
  const int64_t free = free_bytes_at(dir);
  if (need.total() > free)
    throw UsageError("--checkpoint-dir " + dir + ": the run's checkpoints need " + std::to_string(need.total()) +
                     " bytes (" + std::to_string(need.saves) + " saves of at most " +
                     std::to_string(need.bytes_per_save()) + " bytes, --state-dict " + opts.state_dict +
                     ", none deleted), the filesystem has " + std::to_string(free) + " bytes free");
}

}  // namespace zb::bench::lifecycle
