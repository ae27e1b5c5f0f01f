// projection.cpp — what `zerobench project` computes (see projection.hpp; the command: bench/project_command).
#include "analysis/projection/projection.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

#include "analysis/projection/coverage.hpp"
#include "analysis/projection/replay.hpp"
#include "backends/backend_info.hpp"
#include "models/data.hpp"
#include "models/batching.hpp"
#include "models/token_data.hpp"
#include "reports/metrics.hpp"
#include "reports/report_builder.hpp"
#include "runtime/errors.hpp"

namespace zb::analysis::projection {

namespace {
using json = nlohmann::json;
using backends::common::CollectiveKind;

double median_or_zero(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// AdamW on one fp32 shard element per step: read param, grad, m, v; write param, m, v; plus
// clipping (read+write the grad), the norm (read) and zeroing (write): ~48 bytes.
constexpr double kOptimizerBytesPerElement = 48.0;
}  // namespace

double elementwise_bytes_per_token(const models::ModelConfig& cfg, int c) {
  const double H = double(cfg.hidden), KV = double(cfg.kv_dim()), F = double(cfg.ffn);
  // RMSNorm (fp32 inside): to(fp32) r c w 4, pow r4 w4, mean r4, x*rsqrt r4 w4, to(dtype) r4 w c,
  // w*normed r c w c: (28 + 4c) H per norm, two norms.
  const double norms = 2 * (28 + 4 * double(c)) * H;
  // RoPE on q [H] and k [KV]: -x2 (r/w D/2), cat (r/w D), x*cos (r D, w D), rot*sin (r D, w D),
  // add (r 2D, w D): 10 D elements.
  const double rope = 10 * double(c) * (H + KV);
  const double attn_copy = 2 * double(c) * H;  // transpose(1,2).reshape: a copy
  const double residual = 2 * 3 * double(c) * H;  // x + attn_out, x1 + mlp: r 2H w H each
  const double mlp = 5 * double(c) * F;           // silu r/w F, gate*up r 2F w F
  return norms + rope + attn_copy + residual + mlp;
}

UnitCosts flops_unit_costs(const models::ModelConfig& cfg, const backends::TrainConfig& t, const std::string& precision,
                           const Preset& p, double width) {
  const double T = width > 0 ? width : double(t.seq_len);
  const double tokens = double(t.micro_batch) * T;
  const int c = precision == "fp32" ? 4 : 2;
  const double gemm_rate = p.peak_tflops * 1e12 * p.gemm_efficiency;
  const double attn_rate = p.peak_tflops * 1e12 * p.attention_efficiency;
  const double hbm = p.hbm_gbps * 1e9;
  const auto specs = models::unit_param_specs(cfg);
  UnitCosts u;
  // Root: LM head matmul; the loss on fp32 logits (to fp32 r c w 4, log-softmax r 4 w 4, and
  // in backward its gradient r 4 w 4 and the cast back w c); final RMSNorm; embedding lookup.
  const double V = double(cfg.vocab), H = double(cfg.hidden);
  const double head_fwd = 2 * tokens * V * H / gemm_rate +
                          tokens * ((double(c) + 4 + 8) * V + (28 + 4 * double(c)) * H + 2 * double(c) * H) / hbm;
  const double head_bwd = 2 * 2 * tokens * V * H / gemm_rate +
                          tokens * ((8 + double(c)) * V + 2 * (28 + 4 * double(c)) * H + 2 * double(c) * H) / hbm;
  u.forward_s.push_back(head_fwd);
  u.backward_s.push_back(head_bwd);
  for (size_t b = 1; b < specs.size(); ++b) {
    double linear = 0;
    for (const auto& s : specs[b])
      if (!s.is_norm) linear += double(s.numel());
    const double gemm = 2 * tokens * linear / gemm_rate;
    // One causal mask a row: the kernel skips the masked half of 4·T·H per token. Per-document
    // attention (--batching pad|pack) hands SDPA a [B, 1, T, T] mask, and the masked kernel
    // computes every score: 4·T·H per slot, padding included (docs/data.md).
    const bool masked = models::per_document_batching(t.batching);
    const double attn = (masked ? 4 : 2) * tokens * T * H / attn_rate;
    const double mem = tokens * elementwise_bytes_per_token(cfg, c) / hbm;
    const double fwd = gemm + attn + mem;
    u.forward_s.push_back(fwd);
    u.backward_s.push_back(2 * fwd + (t.activation_checkpointing.checkpoints_block(int64_t(b)) ? fwd : 0.0));
  }
  return u;
}

ScheduleInput projection_input(const reports::RunReport& r, const ProjectOptions& o, ExecModel exec) {
  if (o.world < 1) throw UsageError("project: --nproc " + std::to_string(o.world) + " must be >= 1");
  if (o.nodes < 1 || o.world % o.nodes != 0)
    throw UsageError("project: --nodes " + std::to_string(o.nodes) + " must divide --nproc " + std::to_string(o.world));
  const reports::BackendConfig backend_m = r.config.backend.value_or(reports::BackendConfig{});
  const std::string report_backend = backend_m.name.value_or("");
  ScheduleInput in;
  in.backend = o.backend.empty() ? report_backend : o.backend;
  if (!modelled_backend(in.backend))
    throw UsageError("project: --backend '" + in.backend + "' has no modelled schedule (" + modelled_backend_list() + ")");
  in.precision = backend_m.precision.value_or("fp32");
  in.options = in.backend == report_backend && backend_m.options && backend_m.options->is_object() ? *backend_m.options
                                                                                                     : json::object();
  // At another world size the backend may resolve its options otherwise (its hook says how).
  if (const auto& at_world = modelled_backend(in.backend)->analysis.projection.options_at_world; at_world)
    in.options = at_world(in.options, o.world);
  const auto model_m = schedule_input_of_report(r).model;
  in.model = model_m;
  if (o.layers > 0) {
    in.model.layers = o.layers;
    in.model.preset = model_m.preset + (model_m.preset.find("+overrides") == std::string::npos ? "+overrides" : "");
  }
  const reports::TrainConfig tm = r.config.train.value_or(reports::TrainConfig{});
  in.train.micro_batch = o.micro_batch > 0 ? o.micro_batch : tm.micro_batch.value_or(1);
  in.train.seq_len = o.seq_len > 0 ? o.seq_len : tm.seq_len.value_or(1);
  in.train.grad_accum = o.grad_accum > 0 ? o.grad_accum : tm.grad_accum.value_or(1);
  in.train.activation_checkpointing =
      models::activation_checkpointing_of_report(tm.activation_checkpointing_mode.value_or(""),
                                                 tm.activation_checkpointing.value_or(false))
          .or_full_if(o.activation_checkpointing);
  const reports::DataConfig dm = r.config.data.value_or(reports::DataConfig{});
  in.train.data = o.data.empty() ? dm.kind.value_or("markov") : o.data;
  in.train.batching = !o.batching.empty() ? o.batching : o.data.empty() ? dm.batching.value_or("") : "";
  in.train.seed = uint64_t(tm.seed.value_or(1234));
  in.world = o.world;
  in.nodes = o.nodes;
  in.exec = exec;
  return in;
}

ScheduleInput projection_input(const json& r, const ProjectOptions& o, ExecModel exec) {
  return projection_input(reports::run_report_from_json(r), o, exec);
}

namespace {
// What the priced step's rows hold (docs/data.md): documents only for a token file. The measured
// run's own numbers when nothing that changes its rows changed; else the documents drawn as
// `run` would draw them at the projected W and shape, over the source's measured steps.
struct PricedRows {
  bool documents = false;
  std::string mode, basis;
  models::RowStats stats;
};

// width_needed: the flops-mode step prices a pad-longest micro-batch at its width, which
// summary.batching does not carry, so the documents are drawn for it.
PricedRows priced_rows(const reports::RunReport& r, const ScheduleInput& in, const ProjectOptions& o, bool width_needed) {
  PricedRows rows;
  const auto& t = in.train;
  const reports::DataConfig dm = r.config.data.value_or(reports::DataConfig{});
  const reports::TrainConfig tm = r.config.train.value_or(reports::TrainConfig{});
  const bool synthetic = t.data == "markov" || t.data == "random";
  if (synthetic && (t.batching.empty() || t.batching == "pack-naive")) return rows;
  rows.documents = true;
  rows.mode = t.batching.empty() ? "pack-naive" : t.batching;
  const int world_m = r.env && r.env->world_size > 0 ? int(r.env->world_size) : 1;
  // The documents, batching and micro-batch shape of the measured run: its rows, unless W changed.
  const bool same_shape = t.data == dm.kind.value_or("markov") && rows.mode == dm.batching.value_or("pack-naive") &&
                          t.micro_batch == tm.micro_batch.value_or(1) && t.seq_len == tm.seq_len.value_or(1) &&
                          t.grad_accum == tm.grad_accum.value_or(1);
  const auto* measured = r.summary && r.summary->batching ? &*r.summary->batching : nullptr;
  auto measured_rows = [&](std::string basis) {
    rows.stats = {measured->real_tokens_per_rank_per_step, measured->documents_per_rank_per_step,
                  measured->label_tokens_per_rank_per_step, measured->padding_fraction, measured->attention_span,
                  double(t.seq_len)};
    rows.basis = std::move(basis);
    if (rows.mode == "pad-longest" && width_needed)
      rows.basis += "; its micro-batches priced --seq-len wide, the widest they can be (an upper bound)";
    return rows;
  };
  if (same_shape && in.world == world_m && measured && !(width_needed && rows.mode == "pad-longest"))
    return measured_rows("the measured run's rows (summary.batching)");
  std::vector<int64_t> steps;
  for (const auto& s : r.step_records())
    if (s.measured.value_or(false)) steps.push_back(s.step);
  if (steps.empty())
    for (int64_t s = 0; s < 10; ++s) steps.push_back(s);
  std::unique_ptr<models::DataSource> data;
  try {
    data = models::make_data_source(t.data, in.model.vocab, t.seed, t.batching);
  } catch (const std::exception& e) {
    // Only W changed and the documents are not here (a report measured elsewhere): a rank's rows
    // at W are drawn from the same documents in the same way; their mean is the measured run's.
    if (same_shape && measured)
      return measured_rows("the measured run's rows at W=" + std::to_string(world_m) +
                           " (summary.batching; the documents are not readable here to draw W=" +
                           std::to_string(in.world) + "'s: " + e.what() + ")");
    throw UsageError("project: pricing " + rows.mode + " rows at W=" + std::to_string(in.world) + ", micro-batch " +
                     std::to_string(t.micro_batch) + ", seq-len " + std::to_string(t.seq_len) + ", grad-accum " +
                     std::to_string(t.grad_accum) + " needs the documents of --data " + t.data + ": " + e.what());
  }
  rows.stats = models::row_stats(*data, steps, t.grad_accum, in.world, t.micro_batch, t.seq_len);
  rows.basis = "the documents of " + t.data + " drawn as `run` draws them at W=" + std::to_string(in.world) +
               " over the source's " + std::to_string(steps.size()) + " measured steps";
  if (rows.mode == "pad-longest") {
    char buf[160];
    std::snprintf(buf, sizeof(buf), "; micro-batches priced %.1f tokens wide (the widest rank's longest row, mean "
                  "over micro-batches; --seq-len %lld)", rows.stats.width, (long long)t.seq_len);
    rows.basis += buf;
  }
  return rows;
}
}  // namespace

json project(const json& r, const Calibration& cal, const ProjectOptions& o) {
  return project(reports::run_report_from_json(r), cal, o);
}

json project(const reports::RunReport& r, const Calibration& cal, const ProjectOptions& o) {
  if (!r.ok())
    throw UsageError("project: the report's status is not ok (nothing measured to project from)");
  const ExecModel exec = cal.pg_backend == "gloo" ? ExecModel::kHostIsDevice : ExecModel::kAsyncDevice;
  ScheduleInput in = projection_input(r, o, exec);
  const reports::BackendConfig backend_m = r.config.backend.value_or(reports::BackendConfig{});
  const std::string report_backend = backend_m.name.value_or("");
  const std::string backend = in.backend;
  const auto* modelled = modelled_backend(backend);
  const std::string precision = in.precision;
  const json options = in.options;
  const auto model_m = schedule_input_of_report(r).model;
  const auto model = in.model;
  const auto train = in.train;
  const int64_t accum_m = r.config.train ? r.config.train->grad_accum.value_or(1) : 1;
  const reports::Env env_m = r.env.value_or(reports::Env{});
  const int world_m = env_m.world_size > 0 ? int(env_m.world_size) : 1;
  const bool emulated_m = env_m.emulated.value_or(false);

  std::string mode = o.compute;
  if (mode == "auto") mode = cal.preset ? "flops" : "measured";
  if (mode != "measured" && mode != "flops")
    throw UsageError("project: --compute '" + o.compute + "' must be auto, measured or flops");
  if (mode == "flops" && !cal.preset)
    throw UsageError("project: --compute flops needs a preset's rates (--calibration a100-nvlink|h100-sxm)");
  if (mode == "measured" && (o.micro_batch || o.seq_len || o.grad_accum || o.activation_checkpointing))
    throw UsageError("project: --micro-batch/--seq-len/--grad-accum/--activation-checkpointing change the measured "
                     "compute; they need --compute flops");
  if (mode == "measured" && (!o.data.empty() || !o.batching.empty()))
    throw UsageError("project: --data/--batching change the measured compute; they need --compute flops");
  // A measured calibration prices only the sizes it measured (coverage.hpp): refuse before
  // anything is priced outside them.
  const std::string why = uncovered(cal, step_sizes(in), "measure them: zerobench micro --for " +
                                                              (o.report.empty() ? std::string("REPORT") : o.report) +
                                                              " --nproc " + std::to_string(o.world));
  if (!why.empty()) throw UsageError("project: " + why);
  std::vector<std::string> notes;
  // tokens/GPU/s counts real tokens only and the attention FLOPs follow the documents (docs/data.md).
  const PricedRows rows = priced_rows(r, in, o, mode == "flops");
  UnitCosts costs;
  json compute_j;
  if (mode == "measured") {
    if (!r.profile || !r.profile->units)
      throw UsageError("project: the report has no profile.units (re-run it with --profile)");
    const reports::ProfileUnits& units = *r.profile->units;
    std::vector<double> fwd = units.forward_s;
    std::vector<double> bwd = units.backward_s;
    if (modelled->analysis.projection.per_unit_times && int64_t(fwd.size()) != model_m.layers + 1)
      throw UsageError("project: the report has per-unit times for " + std::to_string(fwd.size()) + " units, not " +
                       std::to_string(model_m.layers + 1) + " (project from " + per_unit_report_phrase() + ": " +
                       no_unit_ranges_phrase() + ")");
    for (auto& v : fwd) v /= double(accum_m);
    for (auto& v : bwd) v /= double(accum_m);
    if (o.layers > 0 && o.layers != model_m.layers) {
      if (fwd.size() < 2) throw UsageError("project: --layers needs per-block times (" + per_unit_report_phrase() + ")");
      const double bf = median_or_zero(std::vector<double>(fwd.begin() + 1, fwd.end()));
      const double bb = median_or_zero(std::vector<double>(bwd.begin() + 1, bwd.end()));
      fwd.resize(1);
      bwd.resize(1);
      fwd.resize(size_t(o.layers) + 1, bf);
      bwd.resize(size_t(o.layers) + 1, bb);
      notes.push_back("blocks: the measured median block replicated to " + std::to_string(o.layers) + " layers");
    }
    // The optimizer's work is per shard element.
    const double shard_ratio = double(shard_elements(backend, model, options, o.world)) /
                               double(shard_elements(report_backend, model_m,
                                                  backend_m.options && backend_m.options->is_object() ? *backend_m.options
                                                                                                      : json::object(),
                                                  world_m));
    costs.forward_s = fwd;
    costs.backward_s = bwd;
    costs.optimizer_s = units.optimizer_s.value_or(0.0) * shard_ratio;
    costs.other_s = units.other_s.value_or(0.0);
    // Where the root's compute ran (§3): the embedding before block 1, its gradient after block 1.
    costs.root_forward_pre_s = units.root_forward_pre_s.value_or(0.0) / double(accum_m);
    costs.root_backward_post_s = units.root_backward_post_s.value_or(0.0) / double(accum_m);
    // CPU: W ranks computing at once share the host. `gemm` (what `auto`, the default, takes
    // when both measurements exist): the suite's own measurement — the square GEMM the report's
    // rank probed at its start (env.measured_gemm_tflops, analysis/micro/gemm.hpp) against the same
    // GEMM measured by the calibration run with all its W ranks at once (gemm/<dtype>/square, max
    // over ranks). It sees what a core count cannot: virtual CPUs that share a physical core or
    // memory bandwidth (on the validation VM two ranks on two vCPUs ran 1.0-2.4x slower each,
    // docs/projection.md §5). `cores` (auto's fallback): W*T/C once W ranks of T threads
    // oversubscribe C cores.
    double slowdown = 1.0;
    std::string slowdown_basis = "none";
    const int threads = int(env_m.threads_per_rank.value_or(1));
    if (exec == ExecModel::kHostIsDevice) {
      const std::string dt = precision == "fp32" ? "fp32" : "bf16";
      const double alone = env_m.measured_gemm_tflops.value_or(0.0);
      double together = 0;
      for (const auto& [d, v] : cal.gemm_tflops)
        if (d == dt) together = v;
      const int local = o.world / o.nodes;
      const int local_m = emulated_m ? 1 : world_m;
      const bool gemm_measured = alone > 0 && together > 0 && cal.world_size == local && cal.threads_per_rank == threads;
      if (o.cpu_contention == "gemm" || (o.cpu_contention == "auto" && gemm_measured)) {
        if (!gemm_measured)
          throw UsageError("project: --cpu-contention gemm needs the report's measured GEMM and a calibration run at W=" +
                           std::to_string(local) + " with " + std::to_string(threads) + " thread(s) per rank");
        slowdown = alone / together;
        char buf[200];
        std::snprintf(buf, sizeof(buf), "%s square GEMM: %.4g TFLOP/s in the report (W=%d) vs %.4g with %d ranks at once "
                      "(calibration)", dt.c_str(), alone, local_m, together, local);
        slowdown_basis = buf;
      } else if (cal.host_cores > 0) {
        slowdown = std::max(1.0, double(local) * threads / double(cal.host_cores)) /
                   std::max(1.0, double(local_m) * threads / double(cal.host_cores));
        slowdown_basis = std::to_string(local) + " ranks x " + std::to_string(threads) + " thread(s) on " +
                         std::to_string(cal.host_cores) + " cores";
      }
      if (slowdown != 1.0) {
        for (auto& v : costs.forward_s) v *= slowdown;
        for (auto& v : costs.backward_s) v *= slowdown;
        costs.optimizer_s *= slowdown;
        costs.other_s *= slowdown;
        costs.root_forward_pre_s *= slowdown;
        costs.root_backward_post_s *= slowdown;
        char buf[64];
        std::snprintf(buf, sizeof(buf), "compute x%.3f: ", slowdown);
        notes.push_back(buf + slowdown_basis);
      }
    }
    compute_j = {{"mode", "measured"},
                 {"basis", "the report's profile.units (compute inside each unit's NVTX range, median over traced "
                           "steps and ranks), per micro-batch"},
                 {"optimizer_shard_ratio", shard_ratio},
                 {"concurrency_slowdown", slowdown},
                 {"concurrency_slowdown_basis", slowdown_basis}};
    if (backend != report_backend)
      notes.push_back("compute measured under " + report_backend + ", scheduled as " + backend + " (default options)");
  } else {
    // pad-longest: each micro-batch as wide as its longest row (the widest rank's).
    const double width = train.batching == "pad-longest" ? rows.stats.width : 0.0;
    costs = flops_unit_costs(model, train, precision, *cal.preset, width);
    costs.optimizer_s = double(shard_elements(backend, model, options, o.world)) * kOptimizerBytesPerElement /
                        (cal.preset->hbm_gbps * 1e9);
    compute_j = {{"mode", "flops"},
                 {"basis", "matmuls at peak x gemm_efficiency, causal attention at peak x attention_efficiency, "
                           "elementwise bytes at HBM bandwidth; backward 2x forward (+1 forward with activation "
                           "checkpointing); optimizer 48 B per shard element at HBM bandwidth"},
                 {"peak_tflops", cal.preset->peak_tflops},
                 {"gemm_efficiency", cal.preset->gemm_efficiency},
                 {"attention_efficiency", cal.preset->attention_efficiency},
                 {"hbm_gbps", cal.preset->hbm_gbps},
                 {"elementwise_bytes_per_token_per_block", elementwise_bytes_per_token(model, precision == "fp32" ? 4 : 2)}};
    if (width > 0) compute_j["row_width"] = width;  // pad-longest: the micro-batches' priced width
  }
  compute_j["forward_s"] = costs.forward_s;
  compute_j["backward_s"] = costs.backward_s;
  compute_j["optimizer_s"] = costs.optimizer_s;
  compute_j["other_s"] = costs.other_s;

  in.costs = costs;
  in.offload = cal.offload;
  auto program = build_program(in, cal);
  // An offload copy of a size the micro run measured takes its measured time (the rate elsewhere).
  for (size_t i = 0; i < program.actions().size(); ++i) {
    const auto& a = program.actions()[i];
    if (a.kind == backends::common::Action::kCopy)
      if (const auto t = cal.measured_copy_s(a.to_device, a.bytes)) program.set_duration(int(i), *t);
  }
  const auto tl = simulate(program, exec);

  const int64_t tokens = train.micro_batch * train.seq_len * train.grad_accum;
  const double real_tokens = rows.documents ? rows.stats.real_tokens : double(tokens);
  const double tps = tl.step_s > 0 ? real_tokens / tl.step_s : 0.0;
  // A device target (NCCL): selective-op keeps SDPA's CUDA output, so its recompute has no SDPA.
  const bool cuda = exec == ExecModel::kAsyncDevice;
  const auto flops = rows.documents
                         ? models::flops_per_real_token(model, rows.stats.attention_span, train.activation_checkpointing, cuda)
                         : models::flops_per_token(model, train.seq_len, train.activation_checkpointing, cuda);
  if (rows.documents) {
    char buf[160];
    std::snprintf(buf, sizeof(buf), "%s rows: %.1f real tokens of %lld slots per rank per step (padding %.1f%%), ",
                  rows.mode.c_str(), rows.stats.real_tokens, (long long)tokens, 100 * rows.stats.padding_fraction);
    notes.push_back(buf + rows.basis);
  }
  double peak = o.peak_tflops;
  std::string peak_source = "flag";
  if (peak <= 0 && cal.preset) {
    peak = cal.preset->peak_tflops;
    peak_source = "preset: " + cal.preset->gpu + " dense bf16";
  }
  if (peak <= 0)
    for (const auto& [d, v] : cal.gemm_tflops)
      if (d == (precision == "fp32" ? "fp32" : "bf16")) {
        peak = v;
        peak_source = "measured: " + d + " square GEMM in " + cal.source;
      }
  if (peak <= 0) {
    peak = env_m.peak_tflops;
    peak_source = "the source report's: " + env_m.peak_source;
  }
  json colls = json::object();
  for (int k = 0; k < int(CollectiveKind::kCount); ++k)
    colls[backends::common::collective_name(CollectiveKind(k))] = {{"count", 0}, {"bytes", 0}, {"time_s", 0.0}};
  json basis = json::object();
  for (const auto& s : tl.spans) {
    if (!s.comm) continue;
    auto& c = colls[backends::common::collective_name(s.kind)];
    c["count"] = c["count"].get<int64_t>() + 1;
    c["bytes"] = c["bytes"].get<int64_t>() + s.bytes;
    c["time_s"] = c["time_s"].get<double>() + (s.end_s - s.start_s);
  }
  for (int k = 0; k < int(CollectiveKind::kCount); ++k) {
    const char* name = backends::common::collective_name(CollectiveKind(k));
    if (!backends::common::reported_when_unused(CollectiveKind(k)) && colls[name]["count"].get<int64_t>() == 0) {
      colls.erase(name);  // all_to_all only where the program issues one (projections without it unchanged)
      continue;
    }
    basis[name] = cal.collective_basis(CollectiveKind(k), precision == "fp32" ? "fp32" : "bf16", o.world, o.nodes);
  }

  json projection = {
      {"step_time_s", tl.step_s},
      {"tokens_per_gpu_per_s", tps},
      {"mfu", reports::flops_utilisation(flops.palm, tps, peak)},
      {"mfu_6n", reports::flops_utilisation(flops.six_n, tps, peak)},
      {"exposed_comm_s", tl.exposed_comm_s},
      {"comm_s", tl.comm_s},
      {"comm_overlapped_s", tl.comm_overlapped_s},
      {"compute_s", tl.compute_s},
      {"offload_copy_s", tl.copy_s},
      {"exposed_offload_copy_s", tl.exposed_copy_s},
      {"overlap_ratio", tl.comm_s > 0 ? tl.comm_overlapped_s / tl.comm_s : 0.0},
      {"world_size", o.world},
      {"nodes", o.nodes},
      {"backend", backend},
      {"exec_model", exec == ExecModel::kHostIsDevice
                         ? "host_is_device: the training thread computes; Gloo collectives on worker threads"
                         : "async_device: compute stream + one NCCL stream, upstream's side-stream waits"},
      {"calibration", cal.to_json()},
      {"collective_basis", basis},
      {"compute", compute_j},
      {"collectives", colls},
      {"source_report",
       {{"run_id", r.run_id},
        {"world_size", world_m},
        {"emulated", emulated_m},
        {"device", env_m.device},
        {"step_time_s", r.summary ? r.summary->step_time_s.median : 0.0}}},
      {"notes", notes}};
  if (o.timeline) {
    json spans = json::array();
    for (const auto& s : tl.spans)
      spans.push_back({{"name", s.name}, {"lane", s.comm ? "comm" : "compute"}, {"start_s", s.start_s}, {"end_s", s.end_s}});
    projection["timeline"] = spans;
  }

  // The measured run's config, the projected job's over it.
  reports::RunConfig config = r.config;
  const auto n = models::count_params(model);
  auto& model_c = config.model ? *config.model : config.model.emplace();
  model_c.layers = model.layers;
  model_c.preset = model.preset;
  model_c.params = reports::ParamCounts{n.total, n.non_embedding, n.embedding, {}};
  auto& backend_c = config.backend ? *config.backend : config.backend.emplace();
  backend_c.name = backend;
  backend_c.options = options;
  auto& train_c = config.train ? *config.train : config.train.emplace();
  train_c.micro_batch = train.micro_batch;
  train_c.seq_len = train.seq_len;
  train_c.grad_accum = train.grad_accum;
  train_c.activation_checkpointing = train.activation_checkpointing.enabled();
  train_c.activation_checkpointing_mode = train.activation_checkpointing.name();
  if (!o.data.empty() || !o.batching.empty()) {
    auto& data_c = config.data ? *config.data : config.data.emplace();
    data_c.kind = train.data;
    if (rows.documents) data_c.batching = rows.mode;
  }

  // The measured run's environment (torch, compiler, host, ...), the projected job's over it.
  reports::Env env = r.env ? *r.env : reports::Env{};
  env.device = cal.device.empty() ? (env_m.device.empty() ? std::string("unknown") : env_m.device) : cal.device;
  env.device_count = o.world;
  env.world_size = o.world;
  env.nodes = o.nodes;
  env.peak_tflops = peak;
  env.peak_source = peak_source;
  env.measured_gemm_tflops = 0.0;
  env.emulated = false;
  env.emulated_rank = -1;
  env.projected = true;
  env.pg_backend = cal.pg_backend;
  env.launcher = "projected";
  for (const char* k : {"device", "device_count", "world_size", "nodes", "peak_tflops", "peak_source",
                        "measured_gemm_tflops", "emulated", "emulated_rank", "projected", "pg_backend", "launcher"}) {
    // Set here, so written: a carried value of the measured run's must not stand in for it.
    env.extra.keys.erase(k);
    auto& absent = env.extra.absent;
    absent.erase(std::remove(absent.begin(), absent.end(), k), absent.end());
  }

  reports::ThroughputInputs throughput;
  throughput.tokens_per_gpu_per_s = reports::point_distribution(tps);
  throughput.step_time_s = reports::point_distribution(tl.step_s);
  throughput.tokens_per_rank_per_step = tokens;
  throughput.measured_steps = 0;
  throughput.flops_six_n = flops.six_n;
  throughput.flops_palm = flops.palm;
  throughput.flops_palm_recompute = flops.palm_recompute;
  throughput.tokens_per_gpu_per_s_at = tps;
  throughput.peak_tflops = peak;
  throughput.measured_gemm_tflops = 0;  // env.measured_gemm_tflops: nothing measured
  throughput.throughput_note = "projected by `zerobench project`, not measured: see projection";
  reports::ReportParts parts;
  parts.run_id = "projected-" + backend + "-" + precision + "-" + model.preset + "-w" + std::to_string(o.world) +
                 (o.nodes > 1 ? "x" + std::to_string(o.nodes) + "n" : "");
  parts.status.state = "ok";
  parts.env = env;
  parts.config = config;
  parts.summary = reports::summary_record(throughput);
  if (rows.documents) parts.summary.batching = reports::batching_summary(rows.mode, rows.stats);
  parts.sections["projection"] = projection;
  return reports::build_report(parts);
}

}  // namespace zb::analysis::projection
