// run_report.hpp — the typed report record (schema `zerobench.report` v1, reports/SCHEMA.md):
// RunReport {schema, status, Env, RunConfig, Summary, RankRecord[], StepRecord[], Profile?,
// Projection?}. Owns: the record's fields, their one JSON mapping (from_json / to_json, generated
// from each struct's `fields()` list), validation, and the list of documented keys the SCHEMA.md
// check compares with. Keys a struct does not type are carried unchanged in its `extra`, so a
// report parses and re-serialises to the same JSON. Must not: compute metrics or render anything.
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace zb::reports {

// Each struct lists its typed members once, in `fields(V&)`: `v("key", member)`. A member is a
// number, string, bool, a nested struct, std::optional<...> (absent, or holding another type
// such as null: then the value stays in `extra`), std::vector<...> or std::map<std::string, ...>.
// `extra` holds every key the struct does not type, unchanged, and the value of a typed key whose
// JSON type differs from the member's (an integer read into a double keeps its spelling: its
// value is in the member too, but the JSON wins when written); `absent`, the member keys the
// JSON lacked (not written back). So a parsed report re-serialises to the same JSON.
struct Carried {
  nlohmann::json keys = nlohmann::json::object();
  std::vector<std::string> absent;
  bool contains(const std::string& key) const { return keys.contains(key); }
};

struct DistributionRecord {  // summary.tokens_per_gpu_per_s, summary.step_time_s
  double median = 0, p10 = 0, p90 = 0, min = 0, max = 0, mean = 0;
  int64_t n = 0;
  Carried extra;
  template <class V> void fields(V& v) {
    v("median", median); v("p10", p10); v("p90", p90); v("min", min); v("max", max); v("mean", mean); v("n", n);
  }
};

struct Env {
  std::string device, torch, compiler, host, git_sha, peak_source;
  int64_t world_size = 0, nodes = 0, device_count = 0;
  double peak_tflops = 0;
  std::optional<bool> emulated, projected;
  std::optional<std::string> cpu_capability, cpu_math_pins;
  std::optional<int64_t> threads_per_rank;
  std::optional<double> measured_gemm_tflops;  // the square GEMM the rank probed at its start
  std::optional<std::string> pg_backend;       // gloo | nccl
  std::optional<std::string> cuda, driver, nccl;  // versions ("" without them)
  std::optional<std::string> launcher;            // single | torchrun | slurm | openmpi | emulated
  std::optional<int64_t> emulated_rank;           // -1 unless emulated
  Carried extra;
  template <class V> void fields(V& v) {
    v("device", device); v("torch", torch); v("compiler", compiler); v("host", host); v("git_sha", git_sha);
    v("peak_source", peak_source); v("world_size", world_size); v("nodes", nodes); v("device_count", device_count);
    v("peak_tflops", peak_tflops); v("emulated", emulated); v("projected", projected);
    v("cpu_capability", cpu_capability); v("cpu_math_pins", cpu_math_pins); v("threads_per_rank", threads_per_rank);
    v("measured_gemm_tflops", measured_gemm_tflops); v("pg_backend", pg_backend); v("cuda", cuda);
    v("driver", driver); v("nccl", nccl); v("launcher", launcher); v("emulated_rank", emulated_rank);
  }
};

struct ParamCounts {  // config.model.params
  int64_t total = 0;
  std::optional<int64_t> non_embedding, embedding;
  Carried extra;
  template <class V> void fields(V& v) { v("total", total); v("non_embedding", non_embedding); v("embedding", embedding); }
};

struct ModelConfig {
  std::optional<std::string> preset;
  std::optional<int64_t> layers, hidden, heads, kv_heads, ffn, vocab;
  std::optional<double> rope_theta, norm_eps;
  std::optional<ParamCounts> params;
  Carried extra;
  template <class V> void fields(V& v) {
    v("preset", preset); v("layers", layers); v("hidden", hidden); v("heads", heads); v("kv_heads", kv_heads);
    v("ffn", ffn); v("vocab", vocab); v("rope_theta", rope_theta); v("norm_eps", norm_eps); v("params", params);
  }
};

struct BackendConfig {
  std::optional<std::string> name, precision;
  std::optional<nlohmann::json> options;  // every option, as the framework names it: carried whole
  Carried extra;
  template <class V> void fields(V& v) { v("name", name); v("precision", precision); v("options", options); }
};

struct TrainConfig {
  std::optional<int64_t> micro_batch, seq_len, grad_accum, steps, seed, warmup, lr_warmup_steps;
  std::optional<double> lr, lr_warmup_ratio, min_lr_ratio, weight_decay, eps, grad_clip;
  std::optional<std::vector<double>> betas;     // AdamW's (beta1, beta2)
  std::optional<std::string> lr_schedule;       // constant | cosine | hf:NAME | a DeepSpeed scheduler type | none
  std::optional<nlohmann::json> lr_schedule_params;  // by the scheduler's own names: carried whole
  std::optional<std::string> adamw_impl;        // fused | default | foreach | for-loop (absent before it: fused)
  // none | full | selective-layer:N (reports before issue 37 have only the boolean
  // activation_checkpointing, carried in extra: models::activation_checkpointing_of_report)
  std::optional<std::string> activation_checkpointing_mode;
  std::optional<bool> activation_checkpointing;  // any block recomputed (every report has it)
  std::optional<bool> sync_each_batch, measure_lost_updates;
  Carried extra;
  template <class V> void fields(V& v) {
    v("micro_batch", micro_batch); v("seq_len", seq_len); v("grad_accum", grad_accum); v("steps", steps); v("lr", lr);
    v("seed", seed); v("warmup", warmup); v("lr_schedule", lr_schedule); v("lr_warmup_steps", lr_warmup_steps);
    v("lr_warmup_ratio", lr_warmup_ratio); v("lr_schedule_params", lr_schedule_params); v("min_lr_ratio", min_lr_ratio);
    v("weight_decay", weight_decay); v("betas", betas); v("eps", eps); v("adamw_impl", adamw_impl);
    v("grad_clip", grad_clip);
    v("activation_checkpointing_mode", activation_checkpointing_mode);
    v("activation_checkpointing", activation_checkpointing); v("sync_each_batch", sync_each_batch);
    v("measure_lost_updates", measure_lost_updates);
  }
};

struct PrecisionPlan {  // config.precision_plan (backends/precision_plan.hpp)
  std::string load, params, compute, reduce, grads, optimizer_states, notes;
  std::optional<std::string> master;  // null: the optimizer updates `params` (the null stays in extra)
  Carried extra;
  template <class V> void fields(V& v) {
    v("load", load); v("params", params); v("compute", compute); v("reduce", reduce); v("grads", grads);
    v("optimizer_states", optimizer_states); v("notes", notes); v("master", master);
  }
  // What the optimizer updates: the master copy, else the parameters.
  const std::string& updates() const { return master ? *master : params; }
};

struct DataConfig {
  std::optional<std::string> kind;
  // The best achievable loss where the data define one (synthetic); null for real text (the null
  // stays in extra).
  std::optional<double> entropy_floor_nats;
  std::optional<std::string> format, batching;  // a token file's (docs/data.md) ...
  std::optional<std::vector<std::string>> files;
  std::optional<int64_t> documents, tokens;
  Carried extra;
  template <class V> void fields(V& v) {
    v("kind", kind); v("entropy_floor_nats", entropy_floor_nats); v("format", format); v("batching", batching);
    v("files", files); v("documents", documents); v("tokens", tokens);
  }
};

struct LoadConfig {  // config.load: --model-dir
  std::string model_dir, strategy;
  Carried extra;
  template <class V> void fields(V& v) { v("model_dir", model_dir); v("strategy", strategy); }
};

struct CheckpointConfig {  // config.checkpoint: --checkpoint-dir / --resume
  std::string dir, state_dict, resume;
  int64_t every = 0, first_step = 0;
  Carried extra;
  template <class V> void fields(V& v) {
    v("dir", dir); v("every", every); v("state_dict", state_dict); v("resume", resume); v("first_step", first_step);
  }
};

struct FailedCellOptions {  // config.options: a matrix cell that never wrote a report
  std::optional<std::string> backend, precision;
  Carried extra;
  template <class V> void fields(V& v) { v("backend", backend); v("precision", precision); }
};

struct RunConfig {
  std::optional<ModelConfig> model;
  std::optional<BackendConfig> backend;
  std::optional<TrainConfig> train;
  std::optional<PrecisionPlan> precision_plan;
  std::optional<DataConfig> data;
  std::optional<std::string> device;              // --device as given (cpu, cuda, auto)
  std::optional<nlohmann::json> shard_layout;     // backends/shard_layout.hpp's to_json: carried whole
  std::optional<LoadConfig> load;
  std::optional<CheckpointConfig> checkpoint;
  std::optional<std::vector<std::string>> warnings;
  std::optional<nlohmann::json> source_files, applied, ignored;  // provenance: carried whole
  std::optional<std::string> cell;                 // a failed matrix cell's id
  std::optional<FailedCellOptions> options;        // ... and its options
  std::optional<int64_t> world_size;               // ... and its world
  Carried extra;
  template <class V> void fields(V& v) {
    v("model", model); v("backend", backend); v("train", train); v("precision_plan", precision_plan); v("data", data);
    v("device", device); v("shard_layout", shard_layout); v("load", load); v("checkpoint", checkpoint);
    v("warnings", warnings); v("source_files", source_files); v("applied", applied); v("ignored", ignored);
    v("cell", cell); v("options", options); v("world_size", world_size);
  }
  // The backend and precision names (a failed matrix cell's from its options), "?" when unknown.
  std::string backend_name() const;
  std::string precision_name() const;
};

struct FlopsPerToken {
  double six_n = 0, palm = 0, palm_recompute = 0;
  Carried extra;
  template <class V> void fields(V& v) { v("six_n", six_n); v("palm", palm); v("palm_recompute", palm_recompute); }
};

struct BatchingSummary {  // summary.batching: a token file's runs (docs/data.md)
  std::string mode;
  double real_tokens_per_rank_per_step = 0, documents_per_rank_per_step = 0, label_tokens_per_rank_per_step = 0,
         padding_fraction = 0, attention_span = 0;
  Carried extra;
  template <class V> void fields(V& v) {
    v("mode", mode); v("real_tokens_per_rank_per_step", real_tokens_per_rank_per_step);
    v("documents_per_rank_per_step", documents_per_rank_per_step);
    v("label_tokens_per_rank_per_step", label_tokens_per_rank_per_step); v("padding_fraction", padding_fraction);
    v("attention_span", attention_span);
  }
};

struct Summary {
  DistributionRecord tokens_per_gpu_per_s, step_time_s;
  double mfu = 0, mfu_6n = 0, hfu = 0;
  int64_t tokens_per_rank_per_step = 0;
  std::optional<double> mfu_vs_measured_gemm, final_loss, entropy_floor_nats;
  std::optional<FlopsPerToken> flops_per_token;
  std::optional<int64_t> measured_steps, skipped_steps, recompute_flops_per_step;
  std::optional<std::string> throughput_note;
  std::optional<BatchingSummary> batching;
  Carried extra;
  template <class V> void fields(V& v) {
    v("tokens_per_gpu_per_s", tokens_per_gpu_per_s); v("step_time_s", step_time_s); v("mfu", mfu); v("mfu_6n", mfu_6n);
    v("hfu", hfu); v("tokens_per_rank_per_step", tokens_per_rank_per_step); v("mfu_vs_measured_gemm", mfu_vs_measured_gemm);
    v("final_loss", final_loss); v("entropy_floor_nats", entropy_floor_nats); v("flops_per_token", flops_per_token);
    v("measured_steps", measured_steps); v("skipped_steps", skipped_steps); v("throughput_note", throughput_note);
    v("batching", batching); v("recompute_flops_per_step", recompute_flops_per_step);
  }
};

struct HostModelStates {  // ranks[i].memory.model_states_bytes.host
  std::optional<int64_t> params, master_params, grads, optimizer, buffers;
  std::optional<bool> pinned;
  Carried extra;
  template <class V> void fields(V& v) {
    v("params", params); v("master_params", master_params); v("grads", grads); v("optimizer", optimizer);
    v("buffers", buffers); v("pinned", pinned);
  }
  int64_t total() const {
    return params.value_or(0) + master_params.value_or(0) + grads.value_or(0) + optimizer.value_or(0) +
           buffers.value_or(0);
  }
};

struct ModelStates {  // ranks[i].memory.model_states_bytes
  int64_t params = 0, master_params = 0, grads = 0, optimizer = 0;
  std::optional<int64_t> buffers;  // absent from reports written before it existed
  std::optional<HostModelStates> host;
  Carried extra;
  template <class V> void fields(V& v) {
    v("params", params); v("master_params", master_params); v("grads", grads); v("optimizer", optimizer);
    v("buffers", buffers); v("host", host);
  }
};

struct ProgramOrder {  // ranks[i].memory.program_order
  std::optional<bool> exact;
  std::optional<int64_t> late_frees, open_collectives_at_read, other_thread_peak_bytes, comm_buffers_peak_bytes;
  Carried extra;
  template <class V> void fields(V& v) {
    v("exact", exact); v("late_frees", late_frees); v("open_collectives_at_read", open_collectives_at_read);
    v("other_thread_peak_bytes", other_thread_peak_bytes); v("comm_buffers_peak_bytes", comm_buffers_peak_bytes);
  }
};

struct MemoryEstimate {  // ranks[i].memory.estimate (null without an estimate: the null stays in extra)
  std::optional<int64_t> peak_bytes;
  Carried extra;
  template <class V> void fields(V& v) { v("peak_bytes", peak_bytes); }
};

struct CudaMemory {  // ranks[i].memory.cuda: the caching allocator (CUDA runs)
  std::optional<int64_t> peak_allocated_bytes, after_init_allocated_bytes, after_init_reserved_bytes, allocated_bytes,
      reserved_bytes, peak_reserved_bytes, outside_allocator_bytes;
  Carried extra;
  template <class V> void fields(V& v) {
    v("peak_allocated_bytes", peak_allocated_bytes); v("after_init_allocated_bytes", after_init_allocated_bytes);
    v("after_init_reserved_bytes", after_init_reserved_bytes); v("allocated_bytes", allocated_bytes);
    v("reserved_bytes", reserved_bytes); v("peak_reserved_bytes", peak_reserved_bytes);
    v("outside_allocator_bytes", outside_allocator_bytes);
  }
};

struct CpuBlockCache {  // ranks[i].memory.cpu_block_cache: the counting allocator's large-block cache
  int64_t limit_bytes = 0, hits = 0, misses = 0, evictions = 0, cached_bytes = 0, cached_peak_bytes = 0;
  Carried extra;
  template <class V> void fields(V& v) {
    v("limit_bytes", limit_bytes); v("hits", hits); v("misses", misses); v("evictions", evictions);
    v("cached_bytes", cached_bytes); v("cached_peak_bytes", cached_peak_bytes);
  }
};

struct RankMemory {
  ModelStates model_states_bytes;
  std::optional<ModelStates> model_states_expected_bytes;  // the backend's closed form
  int64_t peak_tracked_bytes = 0, peak_rss_bytes = 0;
  std::optional<int64_t> model_states_total_bytes, tracked_after_init_bytes, peak_from_step;
  std::optional<MemoryEstimate> estimate;
  std::optional<int64_t> estimated_peak_bytes, peak_program_bytes;  // peak_program_bytes null on CUDA
  std::optional<ProgramOrder> program_order;  // null on CUDA
  std::optional<CpuBlockCache> cpu_block_cache;
  std::optional<CudaMemory> cuda;
  Carried extra;
  template <class V> void fields(V& v) {
    v("model_states_bytes", model_states_bytes); v("model_states_expected_bytes", model_states_expected_bytes);
    v("peak_tracked_bytes", peak_tracked_bytes); v("peak_rss_bytes", peak_rss_bytes);
    v("estimated_peak_bytes", estimated_peak_bytes); v("peak_program_bytes", peak_program_bytes);
    v("program_order", program_order); v("model_states_total_bytes", model_states_total_bytes);
    v("tracked_after_init_bytes", tracked_after_init_bytes); v("peak_from_step", peak_from_step);
    v("estimate", estimate); v("cpu_block_cache", cpu_block_cache); v("cuda", cuda);
  }
};

struct CommStat {  // ranks[i].comm.<kind>, ranks[i].comm_total.<kind>
  int64_t count = 0, bytes = 0;
  std::optional<double> time_s, wait_s, busbw_gbps;  // time_s, busbw_gbps null when emulated (in extra)
  std::optional<int64_t> untimed, not_measured;       // only when > 0
  std::optional<std::string> timing;                  // why time_s is null (emulated)
  Carried extra;
  template <class V> void fields(V& v) {
    v("count", count); v("bytes", bytes); v("time_s", time_s); v("wait_s", wait_s); v("busbw_gbps", busbw_gbps);
    v("untimed", untimed); v("not_measured", not_measured); v("timing", timing);
  }
};

struct StepComm {  // ranks[i].comm_steps[j].<kind>, steps[j].comm.<kind>: one step's collectives of a kind
  int64_t count = 0, bytes = 0;
  Carried extra;
  template <class V> void fields(V& v) { v("count", count); v("bytes", bytes); }
};

struct OffloadTraffic {  // ranks[i].offload.last_step, .total, .steps[j]
  int64_t h2d_bytes = 0, d2h_bytes = 0;
  std::optional<int64_t> h2d_copies, d2h_copies;
  Carried extra;
  template <class V> void fields(V& v) {
    v("h2d_bytes", h2d_bytes); v("d2h_bytes", d2h_bytes); v("h2d_copies", h2d_copies); v("d2h_copies", d2h_copies);
  }
};

struct Offload {  // ranks[i].offload (null without offload: the null stays in extra)
  std::optional<int64_t> device_model_states_bytes, host_model_states_bytes, estimated_host_peak_bytes,
      peak_host_tracked_bytes;
  std::optional<bool> host_pinned;
  std::optional<OffloadTraffic> last_step, total;
  std::optional<std::vector<OffloadTraffic>> steps;
  Carried extra;
  template <class V> void fields(V& v) {
    v("device_model_states_bytes", device_model_states_bytes); v("host_model_states_bytes", host_model_states_bytes);
    v("host_pinned", host_pinned); v("estimated_host_peak_bytes", estimated_host_peak_bytes);
    v("peak_host_tracked_bytes", peak_host_tracked_bytes); v("last_step", last_step); v("total", total);
    v("steps", steps);
  }
};

struct LoadRecord {  // ranks[i].lifecycle.load (docs/lifecycle.md)
  double wall_s = 0;
  int64_t bytes_read = 0;
  std::optional<std::string> strategy, peak_rss_source;
  std::optional<int64_t> rss_before_bytes, peak_rss_bytes;  // peak null: unknown (the null stays in extra)
  std::optional<int64_t> device_peak_bytes, device_after_bytes, bytes_received;
  std::optional<int64_t> tensors_touched, peak_rss_sampled_bytes;  // --model-dir only
  Carried extra;
  template <class V> void fields(V& v) {
    v("strategy", strategy); v("wall_s", wall_s); v("bytes_read", bytes_read); v("rss_before_bytes", rss_before_bytes);
    v("peak_rss_bytes", peak_rss_bytes); v("peak_rss_source", peak_rss_source);
    v("device_peak_bytes", device_peak_bytes); v("device_after_bytes", device_after_bytes);
    v("bytes_received", bytes_received); v("tensors_touched", tensors_touched);
    v("peak_rss_sampled_bytes", peak_rss_sampled_bytes);
  }
};

struct CheckpointRecord {  // ranks[i].lifecycle.checkpoint (docs/lifecycle.md)
  int64_t bytes_written = 0;
  double save_s_max = 0, longest_wait_s = 0;
  std::optional<int64_t> saves, peak_rss_bytes, bytes_read, resumed_from_step;
  std::optional<double> save_s_total, load_s;
  std::optional<std::string> last_tag;
  Carried extra;
  template <class V> void fields(V& v) {
    v("bytes_written", bytes_written); v("save_s_max", save_s_max); v("longest_wait_s", longest_wait_s);
    v("saves", saves); v("save_s_total", save_s_total); v("peak_rss_bytes", peak_rss_bytes); v("load_s", load_s);
    v("bytes_read", bytes_read); v("resumed_from_step", resumed_from_step); v("last_tag", last_tag);
  }
};

struct RankLifecycle {  // ranks[i].lifecycle: the model load and the checkpoints (--model-dir, --checkpoint-dir)
  std::optional<LoadRecord> load;
  std::optional<CheckpointRecord> checkpoint;
  Carried extra;
  template <class V> void fields(V& v) { v("load", load); v("checkpoint", checkpoint); }
};

struct ProfileUnits {  // profile.units, profile.ranks[i].units: per-unit compute per optimizer step (docs/projection.md)
  std::vector<double> forward_s, backward_s;  // [0] the root unit, [u >= 1] decoder block u
  std::optional<double> forward_total_s, backward_total_s, optimizer_s, window_s, other_s, root_forward_pre_s,
      root_backward_post_s;
  Carried extra;
  template <class V> void fields(V& v) {
    v("forward_s", forward_s); v("backward_s", backward_s); v("forward_total_s", forward_total_s);
    v("backward_total_s", backward_total_s); v("optimizer_s", optimizer_s); v("window_s", window_s);
    v("other_s", other_s); v("root_forward_pre_s", root_forward_pre_s); v("root_backward_post_s", root_backward_post_s);
  }
};

// ---- the profile (--profile/--trace; docs/profiling.md): what profiler/analysis measures ----

struct ProfileClassTime {  // profile.ranks[i].steps[j].by_class.<class>: one kernel class in one step
  int64_t count = 0;
  double time_s = 0;  // summed durations (concurrent kernels both count)
  Carried extra;
  template <class V> void fields(V& v) { v("count", count); v("time_s", time_s); }
};

struct ProfileStep {  // profile.ranks[i].steps[j]: one traced step on one rank (covered time, HTA's)
  int64_t step = 0;
  double window_s = 0, compute_s = 0, non_compute_s = 0, idle_s = 0, comm_s = 0, comm_overlapped_s = 0,
         exposed_comm_s = 0, overlap_ratio = 0;
  std::map<std::string, ProfileClassTime> by_class;  // by kernel class name
  Carried extra;
  template <class V> void fields(V& v) {
    v("step", step); v("window_s", window_s); v("compute_s", compute_s); v("non_compute_s", non_compute_s);
    v("idle_s", idle_s); v("comm_s", comm_s); v("comm_overlapped_s", comm_overlapped_s);
    v("exposed_comm_s", exposed_comm_s); v("overlap_ratio", overlap_ratio); v("by_class", by_class);
  }
};

// profile.ranks[i].median (the median over the rank's traced steps of each ProfileStep time, the
// percentages of the median window), profile.summary (the median over ranks of each).
struct ProfileBreakdown {
  ProfileBreakdown() {}  // not an aggregate: g++ -O2 took its `{}` for an uninitialized Carried (-Wmaybe-uninitialized)
  double window_s = 0, compute_s = 0, non_compute_s = 0, idle_s = 0, comm_s = 0, comm_overlapped_s = 0,
         exposed_comm_s = 0, overlap_ratio = 0, compute_pct = 0, non_compute_pct = 0, idle_pct = 0;
  Carried extra;
  template <class V> void fields(V& v) {
    v("window_s", window_s); v("compute_s", compute_s); v("non_compute_s", non_compute_s); v("idle_s", idle_s);
    v("comm_s", comm_s); v("comm_overlapped_s", comm_overlapped_s); v("exposed_comm_s", exposed_comm_s);
    v("overlap_ratio", overlap_ratio); v("compute_pct", compute_pct); v("non_compute_pct", non_compute_pct);
    v("idle_pct", idle_pct);
  }
};

struct ProfileKernel {  // profile.ranks[i].top_kernels[j]: kernels of one name over the traced steps
  std::string name, kernel_class;  // "class": profiler/activity.hpp's kernel_class_name
  int64_t count = 0;
  double time_s = 0, pct_of_kernel_time = 0;
  Carried extra;
  template <class V> void fields(V& v) {
    v("name", name); v("class", kernel_class); v("count", count); v("time_s", time_s);
    v("pct_of_kernel_time", pct_of_kernel_time);
  }
};

struct ProfileSkippedRecords {  // profile.ranks[i].skipped_records: only when one is non-zero (profiler/tracer.hpp)
  int64_t other_kind = 0, no_timestamp = 0, unreadable_buffers = 0;
  Carried extra;
  template <class V> void fields(V& v) {
    v("other_kind", other_kind); v("no_timestamp", no_timestamp); v("unreadable_buffers", unreadable_buffers);
  }
};

// ranks[i].profile, profile.ranks[i]: one rank's analysis. profiler::rank_profile fills steps,
// median, top_kernels and units; bench/run/rank_record.cpp the rank and the tracer's counts.
struct RankProfile {
  int64_t rank = 0;
  std::vector<ProfileStep> steps;
  ProfileBreakdown median;
  std::vector<ProfileKernel> top_kernels;
  ProfileUnits units;  // the median over the traced steps of each field (and of each unit's entry)
  std::vector<double> traced_step_times_s;
  int64_t dropped_records = 0;
  std::optional<ProfileSkippedRecords> skipped_records;
  double buffer_processing_s = 0;
  Carried extra;
  template <class V> void fields(V& v) {
    v("rank", rank); v("steps", steps); v("median", median); v("top_kernels", top_kernels); v("units", units);
    v("traced_step_times_s", traced_step_times_s); v("dropped_records", dropped_records);
    v("skipped_records", skipped_records); v("buffer_processing_s", buffer_processing_s);
  }
};

struct RankRecord {
  int64_t rank = 0;
  std::optional<std::string> host;
  RankMemory memory;
  std::map<std::string, CommStat> comm;  // one step's traffic (the last), by kind
  std::optional<std::map<std::string, CommStat>> comm_total;                // every step's, summed
  std::optional<std::vector<std::map<std::string, StepComm>>> comm_steps;  // every step's, by kind
  std::optional<std::string> comm_timing_error;
  std::optional<std::vector<std::string>> batch_sha256;                    // every step's input (hex)
  std::optional<Offload> offload;
  std::optional<std::vector<double>> step_times_s;
  std::optional<RankLifecycle> lifecycle;
  // This rank's profile analysis (--profile/--trace: profiler::rank_profile, with the tracer's
  // counts); the report's profile section is made from every rank's (bench/run/rank_record.hpp).
  std::optional<RankProfile> profile;
  Carried extra;
  template <class V> void fields(V& v) {
    v("rank", rank); v("host", host); v("memory", memory); v("comm", comm); v("comm_total", comm_total);
    v("comm_steps", comm_steps); v("comm_timing_error", comm_timing_error); v("batch_sha256", batch_sha256);
    v("offload", offload); v("step_times_s", step_times_s); v("lifecycle", lifecycle); v("profile", profile);
  }
};

struct LossScale {  // steps[j].loss_scale (fp16 only)
  std::optional<std::string> kind;
  double scale = 0, next_scale = 0;
  bool overflow = false, skipped = false;
  Carried extra;
  template <class V> void fields(V& v) {
    v("kind", kind); v("scale", scale); v("next_scale", next_scale); v("overflow", overflow); v("skipped", skipped);
  }
};

struct StepRecord {
  int64_t step = 0;
  std::optional<double> loss, grad_norm, lr, time_s;  // null (NaN/Inf, a skipped step's norm) stays in extra
  std::optional<double> beta1, beta2;  // only when the schedule sets AdamW's betas (OneCycle's cycle_momentum)
  std::optional<bool> measured;
  std::optional<LossScale> loss_scale;
  std::optional<double> lost_update_fraction;  // --measure-lost-updates only
  std::optional<std::map<std::string, StepComm>> comm;  // rank 0's collectives in this step, by kind
  // Rank 0's peaks in this step alone: tracked always, program-order on CPU, the caching allocator's on CUDA.
  std::optional<int64_t> peak_tracked_bytes, peak_program_bytes, peak_allocated_bytes, peak_reserved_bytes;
  Carried extra;
  template <class V> void fields(V& v) {
    v("step", step); v("loss", loss); v("grad_norm", grad_norm); v("lr", lr); v("beta1", beta1); v("beta2", beta2);
    v("time_s", time_s); v("measured", measured); v("loss_scale", loss_scale); v("lost_update_fraction", lost_update_fraction);
    v("comm", comm); v("peak_tracked_bytes", peak_tracked_bytes); v("peak_program_bytes", peak_program_bytes);
    v("peak_allocated_bytes", peak_allocated_bytes); v("peak_reserved_bytes", peak_reserved_bytes);
  }
  bool skipped() const { return loss_scale && loss_scale->skipped; }
};

struct TracerOverhead {  // profile.tracer_overhead: rank 0's traced vs untraced step time
  double traced_step_time_s = 0, untraced_step_time_s = 0, overhead_pct = 0, buffer_processing_s = 0;
  int64_t dropped_records = 0;
  Carried extra;
  template <class V> void fields(V& v) {
    v("traced_step_time_s", traced_step_time_s); v("untraced_step_time_s", untraced_step_time_s);
    v("overhead_pct", overhead_pct); v("buffer_processing_s", buffer_processing_s);
    v("dropped_records", dropped_records);
  }
};

// profile (null unless --profile/--trace: the null stays in RunReport::extra): every rank's
// analysis and the median over ranks (bench/run/rank_record.cpp's profile_section).
struct Profile {
  std::optional<std::string> source;  // cupti | host
  std::optional<int64_t> steps_traced;
  std::optional<double> overlap_ratio, exposed_comm_s;  // summary's
  std::optional<ProfileBreakdown> summary;
  std::optional<ProfileUnits> units;
  std::optional<TracerOverhead> tracer_overhead;
  std::optional<std::string> trace_file;  // "" without --trace
  std::optional<std::vector<RankProfile>> ranks;
  Carried extra;
  template <class V> void fields(V& v) {
    v("source", source); v("steps_traced", steps_traced); v("overlap_ratio", overlap_ratio);
    v("exposed_comm_s", exposed_comm_s); v("summary", summary); v("units", units);
    v("tracer_overhead", tracer_overhead); v("trace_file", trace_file); v("ranks", ranks);
  }
};

struct ProjectionSource {  // projection.source_report: the measured run it was projected from
  std::string run_id, device;
  int64_t world_size = 0;
  bool emulated = false;
  double step_time_s = 0;
  Carried extra;
  template <class V> void fields(V& v) {
    v("run_id", run_id); v("world_size", world_size); v("emulated", emulated); v("device", device);
    v("step_time_s", step_time_s);
  }
};

struct Projection {  // projection: a report written by `zerobench project`
  double step_time_s = 0, tokens_per_gpu_per_s = 0, mfu = 0, exposed_comm_s = 0;
  std::optional<double> overlap_ratio, mfu_6n, comm_s;
  std::optional<std::string> backend;
  std::optional<std::vector<std::string>> notes;
  std::optional<ProjectionSource> source_report;
  Carried extra;
  template <class V> void fields(V& v) {
    v("step_time_s", step_time_s); v("tokens_per_gpu_per_s", tokens_per_gpu_per_s); v("mfu", mfu);
    v("exposed_comm_s", exposed_comm_s); v("overlap_ratio", overlap_ratio); v("mfu_6n", mfu_6n); v("comm_s", comm_s);
    v("backend", backend); v("notes", notes); v("source_report", source_report);
  }
};

struct SchemaTag {
  std::string name;
  int64_t version = 0;
  Carried extra;
  template <class V> void fields(V& v) { v("name", name); v("version", version); }
};

struct Status {
  std::string state, error;
  std::optional<int64_t> step;  // diverged only
  Carried extra;
  template <class V> void fields(V& v) { v("state", state); v("error", error); v("step", step); }
};

struct RunReport {
  SchemaTag schema;
  std::string run_id, created;
  Status status;
  RunConfig config;
  std::optional<Env> env;
  std::optional<Summary> summary;
  std::optional<std::vector<RankRecord>> ranks;
  std::optional<std::vector<StepRecord>> steps;
  std::optional<Profile> profile;
  std::optional<Projection> projection;
  std::optional<std::string> cell;  // "_cell": the file's stem, set by load_reports (not in files)
  Carried extra;
  template <class V> void fields(V& v) {
    v("schema", schema); v("run_id", run_id); v("created", created); v("status", status); v("config", config);
    v("env", env); v("summary", summary); v("ranks", ranks); v("steps", steps); v("profile", profile);
    v("projection", projection); v("_cell", cell);
  }

  bool ok() const { return status.state == "ok"; }
  bool projected() const { return projection.has_value(); }
  // The cell name: "_cell", else run_id, else "?" (a report without run_id).
  std::string cell_name() const;
  const std::vector<RankRecord>& rank_records() const;
  const std::vector<StepRecord>& step_records() const;
};

// The one JSON mapping. from_json expects a valid report (validate_run_report first).
RunReport run_report_from_json(const nlohmann::json& j);
nlohmann::json to_json(const RunReport& r);
nlohmann::json to_json(const RunConfig& c);
nlohmann::json to_json(const Env& e);
nlohmann::json to_json(const ParamCounts& p);
nlohmann::json to_json(const ModelConfig& m);
nlohmann::json to_json(const BackendConfig& b);
nlohmann::json to_json(const TrainConfig& t);
nlohmann::json to_json(const PrecisionPlan& p);
nlohmann::json to_json(const FlopsPerToken& f);
nlohmann::json to_json(const ModelStates& m);
nlohmann::json to_json(const ProgramOrder& p);
nlohmann::json to_json(const LossScale& l);
// A rank's and a step's record: `run` hands each rank's to rank 0 as JSON and assembles the report
// from the typed records (bench/run/rank_record.hpp).
nlohmann::json to_json(const RankRecord& r);
nlohmann::json to_json(const Summary& s);
nlohmann::json to_json(const Status& s);
nlohmann::json to_json(const StepRecord& s);
nlohmann::json to_json(const RankProfile& p);
nlohmann::json to_json(const Profile& p);
RankRecord rank_record_from_json(const nlohmann::json& j);

// Every problem found (empty = valid): missing keys, wrong types, bad status (reports/report.hpp's
// validate_report is this).
std::vector<std::string> validate_run_report(const nlohmann::json& report);

// The record's typed keys as SCHEMA.md writes them (`ranks[i].memory.peak_tracked_bytes`,
// `ranks[i].comm.<kind>.bytes`), and the documented keys it carries untyped in `extra`.
std::vector<std::string> run_report_typed_keys();
const std::vector<std::string>& run_report_carried_keys();
// Problems between SCHEMA.md's text and the record (empty = they agree): a typed key with no
// documentation (neither its own row, nor named in the meaning of its parent's row), a documented
// key neither typed nor carried.
std::vector<std::string> check_schema_doc(const std::string& schema_md);

}  // namespace zb::reports
