// run_command.cpp — `zerobench run`: process roles (launcher / rank), the report's assembly.
#include <ATen/Parallel.h>
#include <ATen/Version.h>
#include <torch/headeronly/version.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <iostream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#include "backends/backend_info.hpp"
#include "backends/engine.hpp"
#include "bench/build_info.hpp"
#include "bench/commands.hpp"
#include "bench/lifecycle/checkpoint.hpp"
#include "bench/lifecycle/checkpoint_preflight.hpp"
#include "bench/run/peak.hpp"
#include "bench/run/preflight.hpp"
#include "bench/run/rank_record.hpp"
#include "bench/run/trainer.hpp"
#include "backends/precision_plan.hpp"
#include "config/config_file.hpp"
#include "config/config_notes.hpp"
#include "config/hf_scheduler.hpp"
#include "models/checkpoint/weight_loader.hpp"
#include "models/llama.hpp"
#include "models/token_data.hpp"
#include "profiler/analysis.hpp"
#include "profiler/chrome_trace.hpp"
#include "reports/metrics.hpp"
#include "reports/report.hpp"
#include "reports/report_builder.hpp"
#include "reports/run_report.hpp"
#include "reports/table.hpp"
#include "runtime/device.hpp"
#include "runtime/dist_env.hpp"
#include "runtime/errors.hpp"
#include "runtime/launcher.hpp"
#include "runtime/memory.hpp"
#include "runtime/world.hpp"

namespace zb::bench {

namespace {
using json = nlohmann::json;

// The variables that pin oneMKL's and oneDNN's kernel choice (empty when unset): with ATen's
// capability they decide how a CPU run rounds (docs/regression.md).
std::string cpu_math_pins() {
  std::string out;
  for (const char* name : {"MKL_ENABLE_INSTRUCTIONS", "MKL_CBWR", "ONEDNN_MAX_CPU_ISA"}) {
    const char* v = std::getenv(name);
    if (v && *v) out += (out.empty() ? "" : " ") + std::string(name) + "=" + v;
  }
  return out;
}

std::string hostname() {
  char buf[256] = {0};
  gethostname(buf, sizeof(buf) - 1);
  return buf;
}

std::string make_run_id(const RunOptions& o, int world) {
  std::ostringstream s;
  s << o.backend << "-" << o.precision << "-" << o.model << "-w" << world << (o.emulate_world_size ? "emu" : "") << "-"
    << std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  return s.str();
}

reports::ModelConfig model_record(const models::ModelConfig& m) {
  const auto n = models::count_params(m);
  reports::ModelConfig r;
  r.preset = m.preset;
  r.layers = m.layers;
  r.hidden = m.hidden;
  r.heads = m.heads;
  r.kv_heads = m.kv_heads;
  r.ffn = m.ffn;
  r.vocab = m.vocab;
  r.rope_theta = m.rope_theta;
  r.norm_eps = m.norm_eps;
  r.params = reports::ParamCounts{n.total, n.non_embedding, n.embedding, {}};
  return r;
}

// The report's lr_schedule_params: a DeepSpeed scheduler's parameters by DeepSpeed's names
// (lr_schedules.py); an --lr-scheduler-type schedule's get_scheduler arguments by transformers'
// names, its type's defaults included; {} otherwise.
json schedule_params_json(const backends::TrainConfig& t) {
  if (!config::is_hf_schedule(t.lr_schedule)) return config::scheduler_params_json(t.deepspeed_scheduler);
  const std::string type = config::hf_schedule_type(t.lr_schedule);
  json p = {{"lr_scheduler_type", type}, {"num_warmup_steps", t.lr_warmup_steps}, {"num_training_steps", t.steps}};
  if (config::hf_schedule_takes_min_lr_rate(type)) p["min_lr_rate"] = t.min_lr_ratio;
  if (type == "cosine" || config::hf_schedule_takes_min_lr_rate(type)) p["num_cycles"] = 0.5;
  if (type == "cosine_with_restarts") p["num_cycles"] = 1;
  if (type == "polynomial") p.update({{"lr_end", 1e-7}, {"power", 1.0}});
  if (type == "inverse_sqrt") p["timescale"] = t.lr_warmup_steps != 0 ? t.lr_warmup_steps : 10000;
  return p;
}

reports::TrainConfig train_record(const backends::TrainConfig& t) {
  reports::TrainConfig r;
  r.micro_batch = t.micro_batch;
  r.seq_len = t.seq_len;
  r.grad_accum = t.grad_accum;
  r.sync_each_batch = t.sync_each_batch;
  r.steps = t.steps;
  r.warmup = t.warmup;
  r.lr = t.lr;
  r.lr_schedule = t.lr_schedule;
  r.lr_warmup_steps = t.lr_warmup_steps;
  r.lr_warmup_ratio = t.lr_warmup_ratio;
  r.lr_schedule_params = schedule_params_json(t);
  r.min_lr_ratio = t.min_lr_ratio;
  r.weight_decay = t.weight_decay;
  r.betas = std::vector<double>{t.beta1, t.beta2};
  r.eps = t.eps;
  r.adamw_impl = config::adamw_impl_name(t.adamw_impl);
  r.grad_clip = t.grad_clip;
  // A seed past int64's range is written as the unsigned number it is (carried: the record's
  // member is signed).
  if (t.seed <= uint64_t(INT64_MAX))
    r.seed = int64_t(t.seed);
  else
    r.extra.keys["seed"] = t.seed;
  // Both keys (issue 37): the boolean every report has (anything checkpointed) and the mode.
  r.activation_checkpointing = t.activation_checkpointing.enabled();
  r.activation_checkpointing_mode = t.activation_checkpointing.name();
  r.measure_lost_updates = t.measure_lost_updates;
  return r;
}

// config.source_files / applied / ignored / warnings: what the run was read from (every report).
void add_provenance(reports::RunConfig& c, const ConfigProvenance& provenance) {
  c.source_files = config::sources_json(provenance);
  c.applied = config::applied_json(provenance.notes.applied);
  c.ignored = config::ignored_json(provenance.notes.ignored);
  c.warnings = provenance.notes.warnings;
}

// config.data: the --data value; for a token file its format, files, documents and tokens. The
// entropy floor is null where it is unknown (real text).
reports::DataConfig data_record(const backends::EngineSpec& spec, const models::DataSource& data) {
  reports::DataConfig d;
  d.kind = spec.train.data;
  const double floor = data.entropy_floor_nats();
  if (std::isfinite(floor))
    d.entropy_floor_nats = floor;
  else
    d.extra.keys["entropy_floor_nats"] = nullptr;
  if (const auto* corpus = models::token_corpus(data)) {
    d.format = corpus->format();
    d.files = corpus->files();
    d.documents = corpus->documents();
    d.tokens = corpus->tokens();
    d.batching = spec.train.batching.empty() ? std::string("pack-naive") : spec.train.batching;
  }
  return d;
}

// config.precision_plan: the backend's typed plan, by the report's short dtype names.
reports::PrecisionPlan precision_plan_record(const backends::PrecisionPlan& p) {
  reports::PrecisionPlan r;
  r.load = backends::dtype_short_name(p.load);
  r.params = backends::dtype_short_name(p.params);
  r.compute = backends::dtype_short_name(p.compute);
  r.reduce = backends::dtype_short_name(p.reduce);
  r.grads = backends::dtype_short_name(p.grads);
  r.optimizer_states = backends::dtype_short_name(p.optimizer_states);
  r.notes = p.notes;
  if (p.master)
    r.master = backends::dtype_short_name(*p.master);
  else
    r.extra.keys["master"] = nullptr;  // none: the optimizer updates the parameters
  return r;
}

// The config section every report of the run has: what was run, as resolved (`options`: the
// backend's options, or its engine's resolved record's JSON on a launched rank).
reports::RunConfig config_record(const RunOptions& o, const backends::EngineSpec& spec, const json& options,
                                 const ConfigProvenance& provenance) {
  reports::RunConfig c;
  c.model = model_record(spec.model);
  reports::BackendConfig b;
  b.name = o.backend;
  b.precision = spec.precision;
  b.options = options;
  c.backend = b;
  c.train = train_record(spec.train);
  c.precision_plan = precision_plan_record(backends::backend(o.backend).training.precision_plan(spec));
  add_provenance(c, provenance);
  return c;
}

// summary.batching (a token file): the measured steps' rows as every rank draws them, averaged
// per rank per step: real tokens, documents, labels, padding fraction, and the attention span
// (sum of document length^2 / real tokens) the attention FLOPs are counted from.
reports::BatchingSummary batching_stats(const backends::EngineSpec& spec, const models::DataSource& data,
                                        const std::vector<StepRecord>& steps, int world) {
  const auto& t = spec.train;
  std::vector<int64_t> measured;
  for (const auto& s : steps)
    if (s.measured) measured.push_back(s.step);
  const auto rows = models::row_stats(data, measured, t.grad_accum, world, t.micro_batch, t.seq_len);
  return reports::batching_summary(t.batching.empty() ? std::string("pack-naive") : t.batching, rows);
}

reports::RunConfig run_config_record(const RunOptions& o, const backends::EngineSpec& spec, const json& resolved,
                                     const models::DataSource& data, const ConfigProvenance& provenance) {
  reports::RunConfig c = config_record(o, spec, resolved, provenance);
  c.data = data_record(spec, data);
  c.device = o.device;
  return c;
}

int set_threads(const RunOptions& o, int local_size) {
  int threads = o.threads;
  if (threads <= 0) threads = std::max(1, int(std::thread::hardware_concurrency()) / std::max(1, local_size));
  at::set_num_threads(threads);
  return threads;
}

// The model load (engine construction): wall time, RSS high-water mark and device peak over it,
// and with --model-dir the loader's strategy and bytes.
struct LoadMeasure {
  std::shared_ptr<models::checkpoint::CheckpointWeightLoader> loader;
  std::chrono::steady_clock::time_point start;
  int64_t rss_before = 0;
  bool rss_reset = false;
  std::string strategy;
};

LoadMeasure begin_load(const RunOptions& o, const RunOptions::Resolved& resolved, backends::EngineSpec& spec,
                       const runtime::World& world, backends::common::Comm& side) {
  LoadMeasure m;
  // Only a --model-dir load resets the RSS high-water mark (memory.peak_rss_bytes stays the
  // whole process's otherwise).
  m.rss_reset = !o.model_dir.empty() && runtime::reset_peak_rss();
  m.rss_before = runtime::current_rss_bytes();
  runtime::reset_tracked_peak(world.device);
  m.start = std::chrono::steady_clock::now();
  m.strategy = o.model_dir.empty() ? "init" : resolved.load_strategy;
  if (!o.model_dir.empty()) {
    m.loader = std::make_shared<models::checkpoint::CheckpointWeightLoader>(
        o.model_dir, spec.model, models::checkpoint::load_strategy_from_name(resolved.load_strategy), world.rank,
        world.device, [&side](at::Tensor& t) { side.broadcast(t, 0, "load"); });
    spec.initial_weights = m.loader;
  }
  return m;
}

reports::LoadRecord end_load(LoadMeasure& m, backends::EngineSpec& spec, at::Device device) {
  runtime::synchronize(device);
  reports::LoadRecord r;
  r.strategy = m.strategy;
  r.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - m.start).count();
  r.rss_before_bytes = m.rss_before;
  if (m.rss_reset) r.peak_rss_bytes = runtime::hwm_rss_bytes();
  r.peak_rss_source = m.rss_reset ? "VmHWM reset at load start" : "not measured (no --model-dir, or clear_refs refused)";
  r.device_peak_bytes = runtime::tracked_peak_bytes(device);
  r.device_after_bytes = runtime::tracked_bytes(device);
  r.bytes_read = 0;
  r.bytes_received = 0;
  if (m.loader) {
    const auto& s = m.loader->stats();
    r.bytes_read = s.bytes_read;
    r.bytes_received = s.bytes_received;
    r.tensors_touched = s.tensors_touched;
    r.peak_rss_sampled_bytes = s.peak_rss_sampled_bytes;
    if (!m.rss_reset) r.peak_rss_bytes = s.peak_rss_sampled_bytes;
    m.loader->release();
    spec.initial_weights.reset();
  }
  if (!r.peak_rss_bytes) r.extra.keys["peak_rss_bytes"] = nullptr;  // unknown
  return r;
}

int run_rank_in_world(const RunOptions& o, const runtime::DistEnv& env, const RunOptions::Resolved& resolved,
                      backends::EngineSpec& spec, at::Device device, int threads, bool emulated, runtime::World& world);

// A rank of a job that fails says why while its engine and process groups are still up, then
// exits: unwinding would destroy them and close its connections first, and a peer failing on
// those must not be taken for the cause (the launcher names the first rank to announce,
// runtime::announce_rank_failure). The line and the exit code are main's.
[[noreturn]] void fail_now(int rank, const std::exception& e) {
  std::string what = e.what();
  what = what.substr(0, what.find('\n'));  // c10::Error carries a backtrace after the first line
  const bool usage = dynamic_cast<const UsageError*>(&e) != nullptr;
  const std::string line = "zerobench: rank " + std::to_string(rank) + ": " + (usage ? "error: " : "failed: ") + what;
  runtime::announce_rank_failure(rank, line);
  std::cout.flush();
  std::cerr << line << std::endl;
  std::_Exit(usage ? kExitUsage : kExitFailed);
}

// Runs this process as one rank of the job and returns its exit code.
int run_rank(const RunOptions& o) {
  runtime::install_counting_cpu_allocator();
  const bool emulated = o.emulate_world_size > 0;
  const auto env = emulated ? runtime::DistEnv{} : runtime::discover_dist_env(runtime::process_env());
  const auto resolved = o.resolve();
  auto spec = resolved.spec;  // a copy: --model-dir hands the engine its weight loader
  const auto device = runtime::pick_device(o.device, env.local_rank, emulated ? 1 : std::max(1, env.local_world_size));
  if (device.is_cuda() && !o.no_memory_check) {
    // The ranks of this machine that share this GPU (pick_device: local_rank % device count).
    const int local = emulated ? 1 : std::max(1, env.local_world_size);
    const int sharing = ranks_sharing_gpu(local, runtime::device_count(device), device.index());
    check_memory(o.backend, spec,
                 emulated ? backends::Topology(o.emulate_world_size) : backends::Topology(env.world_size, local), sharing,
                 device, local);
  }
  const int threads = set_threads(o, env.local_world_size);
  auto world = emulated ? runtime::init_emulated_world(o.emulate_rank, o.emulate_world_size, device)
                        : runtime::init_world(env, device, std::chrono::minutes(10));
  if (emulated || world.size == 1) return run_rank_in_world(o, env, resolved, spec, device, threads, emulated, world);
  try {
    return run_rank_in_world(o, env, resolved, spec, device, threads, emulated, world);
  } catch (const std::exception& e) {
    fail_now(world.rank, e);
  }
}

int run_rank_in_world(const RunOptions& o, const runtime::DistEnv& env, const RunOptions::Resolved& resolved,
                      backends::EngineSpec& spec, at::Device device, int threads, bool emulated, runtime::World& world) {
  backends::common::Comm side(world.side_channel());

  // The dtype the matmuls run in, from the backend's own plan (an option such as FSDP's param_dtype
  // moves it): the peak MFU divides by is that dtype's.
  const auto compute_dtype = backends::backend(o.backend).training.precision_plan(spec).compute;
  const Peak peak = resolve_peak(o.peak_tflops, device, compute_dtype);
  auto data = models::make_data_source(spec.train.data, spec.model.vocab, spec.train.seed, spec.train.batching);
  // Engine construction is the load: with --model-dir its weights come through the strategy's
  // loader (lifecycle.load in the report, docs/lifecycle.md).
  auto load = begin_load(o, resolved, spec, world, side);
  auto engine = backends::create_engine(o.backend, spec, world);
  const auto load_record = end_load(load, spec, device);
  const bool profiling = o.profile || !o.trace.empty();
  // Checkpoints and resume (bench/lifecycle/checkpoint.hpp): the step to start at, a save after steps.
  lifecycle::Checkpointer checkpointer({o.checkpoint_dir, o.checkpoint_every, o.state_dict, o.resume}, o.backend, spec,
                                       *engine, side, o.fault());
  TrainHooks hooks;
  if (!o.resume.empty()) hooks.first_step = checkpointer.resume();
  if (checkpointer.enabled()) hooks.after_step = [&checkpointer](int64_t step) { checkpointer.after_step(step); };
  const auto result = [&] {
    if (emulated || world.size == 1) return run_training(*engine, spec, *data, side, o.fault(), profiling ? o.profile_steps : 0, hooks);
    try {  // the training loop (and its checkpoint saves) fail here with the engine still alive
      return run_training(*engine, spec, *data, side, o.fault(), profiling ? o.profile_steps : 0, hooks);
    } catch (const std::exception& e) {
      fail_now(world.rank, e);
    }
  }();

  // The job's shape as the engine saw it (a node's ranks form HYBRID_SHARD's shard group).
  const backends::Topology topology(world.size, world.local_size);
  std::optional<backends::PeakEstimate> estimate;
  if (const auto& info = backends::backend(o.backend); info.training.estimate_peak)
    estimate = info.training.estimate_peak(spec, topology, world.rank, world.device.is_cpu());
  const bool diverged = result.diverged_step >= 0;

  // This rank's part of the report, handed to rank 0 through the store.
  std::vector<double> step_times;
  for (const auto& s : result.steps)
    if (s.measured) step_times.push_back(s.time_s);
  RankInputs rank_in;
  rank_in.rank = world.rank;
  rank_in.world_size = world.size;
  rank_in.host = hostname();
  rank_in.expected_bytes = backends::backend(o.backend).training.expected_bytes(spec, topology, world.rank);
  rank_in.estimate = estimate;
  rank_in.peak_rss_bytes = runtime::peak_rss_bytes();
  rank_in.cpu_block_cache = runtime::cpu_block_cache_stats();
  rank_in.load = load_record;
  rank_in.checkpoint = checkpoint_record(checkpointer.stats());
  rank_in.comm_timing_error = engine->comm().timing_error();
  const auto record = rank_record(result, rank_in);
  if (result.profile && !o.trace.empty()) {  // this rank's trace events, its timeline starting at its first traced event
    const auto& p = *result.profile;
    int64_t origin = p.windows.front().start_ns;
    for (const auto& a : p.activities) origin = std::min(origin, a.start_ns);
    const auto events = profiler::trace_events(p.activities, world.rank, origin).dump();
    world.store->set("trace/rank/" + std::to_string(world.emulated ? 0 : world.rank),
                     std::vector<uint8_t>(events.begin(), events.end()));
  }
  const std::string key = "report/rank/" + std::to_string(world.emulated ? 0 : world.rank);
  const auto payload = reports::to_json(record).dump();
  world.store->set(key, std::vector<uint8_t>(payload.begin(), payload.end()));
  if (world.rank != 0 && !world.emulated) {  // an emulated rank writes its own report
    world.store->wait({"report/done"});
    return kExitOk;
  }

  std::vector<reports::RankRecord> ranks;
  std::set<std::string> hosts;
  for (int r = 0; r < (world.emulated ? 1 : world.size); ++r) {
    auto bytes = world.store->get("report/rank/" + std::to_string(r));
    ranks.push_back(reports::rank_record_from_json(json::parse(std::string(bytes.begin(), bytes.end()))));
    hosts.insert(ranks.back().host.value_or(""));
  }
  world.store->set("report/done", std::vector<uint8_t>{1});

  const auto& t = spec.train;
  const int64_t tokens_per_step = t.micro_batch * t.seq_len * t.grad_accum;
  // Real tokens (padding excluded) count for tokens/GPU/s and MFU; attention FLOPs follow the
  // documents' lengths (docs/data.md). Synthetic rows are all real tokens under one causal mask.
  std::optional<reports::BatchingSummary> docs;
  if (models::token_corpus(*data)) docs = batching_stats(spec, *data, result.steps, world.size);
  const double real_per_step = docs ? docs->real_tokens_per_rank_per_step : double(tokens_per_step);
  std::vector<double> tps;
  for (double s : step_times) tps.push_back(s > 0 ? real_per_step / s : 0.0);
  const auto step_dist = reports::summarize(step_times);
  const double tps_median = step_dist.median > 0 ? real_per_step / step_dist.median : 0.0;
  // selective-op's recompute counts SDPA on CPU only (its CUDA output is kept).
  const bool cuda = device.is_cuda();
  const auto flops = docs ? models::flops_per_real_token(spec.model, docs->attention_span, t.activation_checkpointing, cuda)
                          : models::flops_per_token(spec.model, t.seq_len, t.activation_checkpointing, cuda);

  reports::ThroughputInputs throughput;
  throughput.tokens_per_gpu_per_s = reports::summarize(tps);
  throughput.step_time_s = step_dist;
  throughput.tokens_per_rank_per_step = tokens_per_step;
  throughput.measured_steps = step_dist.n;
  throughput.flops_six_n = flops.six_n;
  throughput.flops_palm = flops.palm;
  throughput.flops_palm_recompute = flops.palm_recompute;
  throughput.tokens_per_gpu_per_s_at = tps_median;
  throughput.peak_tflops = peak.tflops;
  throughput.measured_gemm_tflops = peak.measured_gemm_tflops;
  throughput.throughput_note = emulated ? "emulated world: collectives are local copies, so tokens/GPU/s and MFU "
                                          "exclude real communication time (compute and memory are the real rank's)"
                                        : "";
  reports::ReportParts parts;
  parts.run_id = make_run_id(o, world.size);
  const std::string diverged_error =
      diverged ? result.diverged_what + " at step " + std::to_string(result.diverged_step) : "";
  parts.status.state = diverged ? "diverged" : "ok";
  parts.status.error = diverged_error;
  if (diverged) parts.status.step = result.diverged_step;
  auto& run_env = parts.env;
  run_env.device = runtime::device_name(device);
  run_env.device_count = runtime::device_count(device);
  run_env.peak_tflops = peak.tflops;
  run_env.peak_source = peak.source;
  run_env.measured_gemm_tflops = peak.measured_gemm_tflops;
  run_env.cuda = runtime::cuda_runtime_version();
  run_env.driver = runtime::gpu_driver_version();
  run_env.nccl = runtime::nccl_version();
  run_env.torch = TORCH_VERSION;
  run_env.compiler = std::string("g++ ") + __VERSION__;
  run_env.git_sha = git_sha();
  run_env.host = hostname();
  run_env.world_size = world.size;
  run_env.nodes = int64_t(hosts.size());
  run_env.pg_backend = world.pg_backend;
  run_env.launcher = emulated ? std::string("emulated") : env.source;
  run_env.threads_per_rank = threads;
  // The CPU kernels ATen dispatched to (DEFAULT, AVX2, AVX512, ...): runs on CPUs of different
  // capability round differently, so `regress` gates losses bitwise only between equals.
  run_env.cpu_capability = at::get_cpu_capability();
  // The GEMM libraries pick their own kernels; these pins (scripts/cpu-isa.sh) make them, and ATen
  // through ATEN_CPU_CAPABILITY, round alike on every x86 CPU with AVX2.
  run_env.cpu_math_pins = cpu_math_pins();
  run_env.emulated = emulated;
  run_env.emulated_rank = emulated ? o.emulate_rank : -1;
  parts.config = run_config_record(o, spec, engine->resolved_options(), *data, resolved.provenance);
  parts.summary = reports::summary_record(throughput);
  parts.summary.final_loss = result.steps.back().loss;
  // The best achievable loss where the data define one (synthetic); absent for real text.
  if (std::isfinite(data->entropy_floor_nats())) parts.summary.entropy_floor_nats = data->entropy_floor_nats();
  parts.summary.batching = docs;
  // Counted in backward (models::recomputed_flops): rank 0's last step, with checkpointing only.
  if (spec.train.activation_checkpointing.enabled())
    parts.summary.recompute_flops_per_step = result.steps.back().recompute_flops;
  // Steps skipped on overflow: fp16 (every step carries its loss scale), or a bf16/fp32 ZeRO-1/2
  // step DeepSpeed skips (only that step carries one). Absent when no step carries a record.
  bool scaled = false;
  int64_t skipped = 0;
  for (const auto& s : result.steps) {
    scaled = scaled || s.loss_scale.enabled;
    skipped += s.loss_scale.enabled && s.loss_scale.skipped ? 1 : 0;
  }
  if (scaled) parts.summary.skipped_steps = skipped;
  parts.steps = step_records(result, device.is_cuda());
  if (result.profile) parts.profile = profile_section(ranks, step_times, result.profile->source);
  parts.ranks = std::move(ranks);
  // The run's shard layout (BackendInfo::training.shard_layout): the groups the engine built, the padding.
  if (const auto& info = backends::backend(o.backend); info.training.shard_layout)
    parts.config.shard_layout = backends::to_json(info.training.shard_layout(spec, topology));
  if (!o.model_dir.empty())  // where the weights came from and how (ranks[i].lifecycle.load measured it)
    parts.config.load = reports::LoadConfig{o.model_dir, resolved.load_strategy, {}};
  if (!o.checkpoint_dir.empty() || !o.resume.empty()) {
    reports::CheckpointConfig ck;
    ck.dir = o.checkpoint_dir;
    ck.every = o.checkpoint_every;
    ck.state_dict = o.state_dict;
    ck.resume = o.resume;
    ck.first_step = hooks.first_step;
    parts.config.checkpoint = ck;
  }
  if (!o.trace.empty()) {
    json events = json::array();
    for (int r = 0; r < (world.emulated ? 1 : world.size); ++r) {
      auto bytes = world.store->get("trace/rank/" + std::to_string(r));
      for (auto& e : json::parse(std::string(bytes.begin(), bytes.end()))) events.push_back(std::move(e));
    }
    reports::write_json_atomic(o.trace, profiler::trace_document(std::move(events),
                                                                  {{"run_id", parts.run_id},
                                                                   {"source", result.profile->source},
                                                                   {"note", "each rank's time starts at its first "
                                                                            "traced event"}}));
    if (parts.profile) parts.profile->trace_file = o.trace;
  }
  const json report = reports::build_report(parts);
  const auto problems = reports::validate_report(report);
  if (!problems.empty()) throw RunError("internal: report does not match its schema: " + problems.front());
  const std::string out = o.out.empty() ? o.default_out(world.size) : o.out;
  reports::write_json_atomic(out, report);
  if (diverged) {
    std::cerr << "zerobench: run diverged: " << diverged_error << "; report: " << out
              << "\n";
    return kExitFailed;
  }
  if (!o.quiet) {
    json view = report;
    view["_cell"] = o.backend + "-" + spec.precision + "-" + o.model + "-w" + std::to_string(world.size);
    std::cout << reports::markdown_table({view});
    std::cout << "report: " << out << "\n";
  }
  return kExitOk;
}
}  // namespace

// A token file is checked before any rank starts: opening it checks its layout, and drawing every
// sample the run trains on (its steps, then its traced steps) checks each token id those samples
// read against the vocabulary, so a bad file exits 2 with one line, here, not from every rank.
void preflight_data(const RunOptions& o, const backends::EngineSpec& spec, int64_t first_step) {
  const bool synthetic = spec.train.data == "random" || spec.train.data == "markov";
  if (synthetic && spec.train.batching.empty()) return;
  // --batching pad|pack with synthetic data exits 2 here.
  const auto data = models::make_data_source(spec.train.data, spec.model.vocab, spec.train.seed, spec.train.batching);
  if (synthetic) return;
  const auto& t = spec.train;
  const int world = o.world_size();
  const int64_t last = t.steps + (o.profile || !o.trace.empty() ? o.profile_steps : 0);
  for (int64_t s = first_step; s < last; ++s)
    for (int64_t a = 0; a < t.grad_accum; ++a)
      for (int r = 0; r < world; ++r)
        data->samples(models::first_sample_index(s, a, t.grad_accum, r, world, t.micro_batch), t.micro_batch, t.seq_len);
}

int run_command(const RunOptions& o_in, const std::vector<std::string>& argv) {
  RunOptions o = o_in;
  o.nproc = o.world_size_hint();
  const auto resolved = o.resolve();  // usage errors surface here, before anything starts
  runtime::cpu_block_cache_stats();     // a bad ZEROBENCH_CPU_BLOCK_CACHE_MB too
  const auto& spec = resolved.spec;
  // A config file may have chosen the backend and precision (ranks re-read it and agree); these
  // name the run (run_id, default --out), resolve() still reads the file the same way.
  o.backend = resolved.backend;
  o.precision = spec.precision;
  int64_t first_step = 0;
  if (!o.resume.empty())  // a checkpoint of another job exits 2 here, naming the mismatch
    first_step = lifecycle::find_resume(o.resume, o.backend, spec, o.world_size()).step;
  // The checkpoint directory before any rank starts: writable, room for every save (exit 2).
  if (!runtime::launched_by_zerobench())
    lifecycle::check_checkpoint_dir({o.checkpoint_dir, o.checkpoint_every, o.state_dict, o.resume}, o.backend, spec,
                                    o.world_size(), first_step);
  if (!runtime::launched_by_zerobench() && !o.quiet)
    for (const auto& w : resolved.provenance.notes.warnings) std::cerr << "zerobench: warning: " << w << "\n";
  const auto env = runtime::discover_dist_env(runtime::process_env());
  const bool in_job = runtime::launched_by_zerobench() || env.source != "single";
  if (!in_job) preflight_data(o, spec, first_step);
  // Memory pre-flight on CPU: every rank of this machine draws on the same MemAvailable. (On
  // CUDA each rank checks its own GPU in run_rank; ranks this launcher starts were checked here.)
  if (!o.no_memory_check && o.device == "cpu" && !runtime::launched_by_zerobench()) {
    const int local = o.emulate_world_size > 0 ? 1 : in_job ? std::max(1, env.local_world_size) : o.nproc;
    const auto topo = o.emulate_world_size > 0 ? backends::Topology(o.world_size()) : backends::Topology(o.world_size(), local);
    check_memory(o.backend, spec, topo, local, at::kCPU);
  }
  if (o.emulate_world_size > 0) {
    if (in_job) throw UsageError("--emulate-world-size runs one process; do not launch it with torchrun/srun");
    return run_rank(o);
  }
  const std::string out = o.out.empty() ? o.default_out(o.nproc) : o.out;
  // Leave a report that says the run failed and why (never a half-written one): a failed run is a result too.
  auto write_failed = [&](const std::string& state, const std::string& error) {
    auto config = config_record(o, spec, spec.options.json(), resolved.provenance);
    config.world_size = o.nproc;
    reports::write_json_atomic(out, reports::failed_report(state, error, reports::to_json(config)));
  };
  if (in_job) return run_rank(o);
  if (o.nproc == 1) {
    // A lone process still rendezvouses (world of 1 on a private port).
    runtime::hold_rendezvous_port();  // MASTER_ADDR/PORT + the held socket its TCPStore serves on
    std::remove(out.c_str());
    try {
      return run_rank(o);
    } catch (const UsageError&) {
      throw;
    } catch (const std::exception& e) {  // its own message is the report's status.error
      const std::string what = e.what();
      write_failed("failed", "rank 0 failed: " + what.substr(0, what.find('\n')));
      throw;
    }
  }
  runtime::check_local_ranks_fit(o.device, o.nproc);  // before any rank starts: one GPU per NCCL rank
  std::remove(out.c_str());  // whatever report is there after the launch is this run's
  runtime::LaunchOptions lo;
  lo.nproc = o.nproc;
  lo.argv = argv;
  lo.timeout = std::chrono::milliseconds(int64_t(o.timeout_s * 1000));
  const auto res = runtime::launch_local(lo);
  if (res.exit_code == 0) return kExitOk;
  // A run that diverged has written its own report (rank 0 exits 1 after writing it).
  try {
    const auto written = reports::read_report(out);
    if (reports::run_report_from_json(written).status.state == "diverged") return kExitFailed;
  } catch (const UsageError&) {
  }
  std::string state = res.exit_code == 124 ? "timeout" : "failed";
  std::string error = res.message;
  if (res.signal == SIGKILL) {
    state = "oom";
    error = res.ended + ": SIGKILL, the signal the kernel's OOM killer sends" +
            (res.rank_error_line.empty() ? "" : "; its last stderr line: " + res.rank_error_line);
  }
  std::cerr << "zerobench: run failed: " << error << "\n";
  write_failed(state, error);
  return res.exit_code == kExitUsage ? kExitUsage : kExitFailed;
}

}  // namespace zb::bench
