// checkpoint.hpp — training checkpoints out and back in (docs/lifecycle.md):
//   --state-dict sharded  every rank writes its own state (parameter shards, fp32 masters,
//                         optimizer states, step counters) plus rank 0 one metadata.json —
//                         torch.distributed.checkpoint's idea (each rank saves its local shards,
//                         one .metadata; torch/distributed/checkpoint/state_dict_saver.py save)
//                         and FSDP's SHARDED_STATE_DICT (torch/distributed/fsdp/_state_dict_utils.py
//                         _sharded_pre_state_dict_hook / _sharded_post_state_dict_hook). For zero3 the
//                         files follow DeepSpeed's per-rank layout (runtime/engine.py save_checkpoint,
//                         _get_rank_zero_ckpt_name: `{bf16_}zero_pp_rank_R_mp_rank_00_optim_states`,
//                         `zero_pp_rank_R_mp_rank_00_model_states`, tag `global_step{N}`, a `latest`
//                         file naming the tag), and `zerobench checkpoint consolidate` merges them
//                         into a full HF folder as deepspeed/utils/zero_to_fp32.py does
//                         (_zero3_merge_trainable_params).
//   --state-dict full     FSDP's FULL_STATE_DICT (_state_dict_utils.py _full_pre_state_dict_hook /
//                         _full_post_state_dict_hook, rank0_only): the parameters are gathered and
//                         rank 0 writes an HF Llama folder (config.json + model.safetensors, loadable by
//                         --model-dir and Python's safetensors); the optimizer state of every rank is
//                         gathered to rank 0 too (optimizer.safetensors, for an exact resume).
// Every save goes to a temp dir renamed into place, then `latest` is replaced (atomic): a rank
// killed mid-save leaves the previous checkpoint and `latest` whole.
// Owns: the on-disk layout, the identity checks of --resume, the save/load statistics. Must not:
// know an engine's internals (engines expose Engine::state_tensors()).
#pragma once
#include <nlohmann/json.hpp>

#include <string>

#include "backends/common/comm.hpp"
#include "backends/engine.hpp"
#include "bench/run/run_options.hpp"

namespace zb::bench::lifecycle {

// Creates `path` and its missing parents (mkdir -p); returns "" on success, else the first
// directory that could not be created with the reason. Callers raise their own error kind.
std::string make_dirs(const std::string& path);

struct CheckpointOptions {
  std::string dir;                     // --checkpoint-dir
  int64_t every = 0;                   // --checkpoint-every N optimizer steps (0: never)
  std::string state_dict = "sharded";  // --state-dict full | sharded
  std::string resume;                  // --resume DIR (a checkpoint dir with `latest`, or one tag dir)
};

struct CheckpointStats {
  int64_t saves = 0;
  double save_s_total = 0, save_s_max = 0;
  int64_t bytes_written = 0;            // this rank's files, every save
  int64_t peak_rss_bytes = -1;          // VmHWM over the saves (reset at each save's start)
  double longest_wait_s = 0;            // longest this rank waited in the commit barrier (rank 0 writing)
  double load_s = 0;                    // resume: reading the files and restoring the state
  int64_t bytes_read = 0;               // resume: tensor bytes read
  int64_t resumed_from_step = -1;       // resume: the steps already done
  std::string last_tag;
};

// The identity a checkpoint records and --resume checks (model, world, backend, precision,
// batch shape, seed, data, schedule): the run must be the same job to continue it exactly.
nlohmann::json checkpoint_identity(const std::string& backend, const backends::EngineSpec& spec, int world_size);

struct ResumePoint {
  std::string tag_dir;
  int64_t step = 0;  // optimizer steps done
  std::string state_dict;
  nlohmann::json metadata;
};
// Finds the checkpoint `dir` names (`dir`/latest's tag, or `dir` itself) and checks it against
// this run; throws UsageError naming the first mismatch ("--resume D: checkpoint backend fsdp,
// this run zero3").
ResumePoint find_resume(const std::string& dir, const std::string& backend, const backends::EngineSpec& spec,
                        int world_size);

class Checkpointer {
 public:
  Checkpointer(CheckpointOptions opts, std::string backend, const backends::EngineSpec& spec, backends::Engine& engine,
               backends::common::Comm& side, FaultInjection fault);
  bool enabled() const { return !opts_.dir.empty() && opts_.every > 0; }
  // Called after optimizer step index `step` (0-based): saves when (step + 1) % every == 0.
  void after_step(int64_t step);
  // Restores opts.resume into the engine; returns the first step to run (the steps done).
  int64_t resume();
  const CheckpointStats& stats() const { return stats_; }

 private:
  void save(int64_t steps_done);
  double barrier();  // seconds this rank waited
  CheckpointOptions opts_;
  std::string backend_;
  const backends::EngineSpec& spec_;
  backends::Engine& engine_;
  backends::common::Comm& side_;
  FaultInjection fault_;
  CheckpointStats stats_;
};

// `zerobench checkpoint consolidate`: a zero3 sharded checkpoint (or a full one) to an HF folder.
int consolidate_command(const std::string& from, const std::string& out);

}  // namespace zb::bench::lifecycle
