// columns.cpp — the column registry and its formulas (see columns.hpp).
#include "reports/columns.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <stdexcept>

#include "reports/stats.hpp"

namespace zb::reports {

const char* const kStateCategories[5] = {"params", "master_params", "grads", "optimizer", "buffers"};

namespace {
using json = nlohmann::json;
using Show = Column::Show;
using Gate = Column::Gate;
using Value = std::optional<double>;

constexpr double kMiB = 1024.0 * 1024.0;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), f, v);
  return buf;
}

const Summary& summary(const RunReport& r) {
  static const Summary none;
  return r.summary ? *r.summary : none;
}

int64_t category_bytes(const ModelStates& m, int c) {
  switch (c) {
    case 0: return m.params;
    case 1: return m.master_params;
    case 2: return m.grads;
    case 3: return m.optimizer;
    default: return m.buffers.value_or(0);  // absent from older reports
  }
}

// The program-order peak (deterministic), or the observed one where a report has none (older,
// CUDA), max over ranks; and the rank with the largest peak: that peak / its own estimate.
struct Peaks {
  double peak_mib = 0, observed_mib = 0, est_mib = kNaN, peak_over_est = kNaN;
};
Peaks peaks(const RunReport& r) {
  Peaks p;
  for (const auto& rk : r.rank_records()) {
    const auto& mem = rk.memory;
    const double observed = double(mem.peak_tracked_bytes) / kMiB;
    const double peak = mem.peak_program_bytes ? double(*mem.peak_program_bytes) / kMiB : observed;
    p.observed_mib = std::max(p.observed_mib, observed);
    const bool has_est = mem.estimated_peak_bytes && *mem.estimated_peak_bytes > 0;
    const double est = has_est ? double(*mem.estimated_peak_bytes) / kMiB : kNaN;
    if (has_est) p.est_mib = std::max(std::isfinite(p.est_mib) ? p.est_mib : 0.0, est);
    if (peak >= p.peak_mib) p.peak_over_est = has_est ? peak / est : kNaN;
    p.peak_mib = std::max(p.peak_mib, peak);
  }
  return p;
}

double host_mib(const RunReport& r) {  // model states offloaded to host memory, max over ranks
  double m = 0;
  for (const auto& rk : r.rank_records())
    if (rk.memory.model_states_bytes.host) m = std::max(m, double(rk.memory.model_states_bytes.host->total()) / kMiB);
  return m;
}

double comm_mib(const RunReport& r) {  // one step's bytes over every kind, max over ranks
  double m = 0;
  for (const auto& rk : r.rank_records()) {
    double sum = 0;
    for (const auto& [kind, c] : rk.comm) sum += double(c.bytes);
    m = std::max(m, sum / kMiB);
  }
  return m;
}

double offload_mib(const RunReport& r) {  // host<->device bytes in the last step, both ways (NaN: no offload)
  double m = kNaN;
  for (const auto& rk : r.rank_records()) {
    if (!rk.offload) continue;
    const auto& l = rk.offload->last_step;
    const double mib = l ? double(l->h2d_bytes + l->d2h_bytes) / kMiB : 0.0;
    m = std::max(std::isfinite(m) ? m : 0.0, mib);
  }
  return m;
}

double overlap(const RunReport& r) {
  if (r.projection) return r.projection->overlap_ratio.value_or(kNaN);
  return r.profile && r.profile->overlap_ratio ? *r.profile->overlap_ratio : kNaN;
}

double tps(const RunReport& r) { return summary(r).tokens_per_gpu_per_s.median; }

// The global batch: every rank's tokens per optimizer step (micro-batch x sequence x accumulation)
// over the data-parallel world.
double tokens_per_optimizer_step(const RunReport& r) {
  return r.env ? double(summary(r).tokens_per_rank_per_step) * double(r.env->world_size) : kNaN;
}

// (v / base - 1) in percent; nullopt without an ok base with a positive value.
Value relative(double v, const RunReport* base, double (*f)(const RunReport&)) {
  if (!base || !base->ok()) return std::nullopt;
  const double b = f(*base);
  if (!(b > 0) || !std::isfinite(v)) return std::nullopt;
  return (v / b - 1) * 100;
}

std::string status_text(const RunReport& r) {
  std::string status = !r.ok() ? r.status.state + ": " + r.status.error : r.projected() ? "projected" : "ok";
  // Flag a run that read a config file with warnings (config.warnings in its report).
  const size_t warnings = r.config.warnings ? r.config.warnings->size() : 0;
  if (warnings > 0) status += " (" + std::to_string(warnings) + " config warning" + (warnings > 1 ? "s" : "") + ")";
  const int64_t skipped = r.summary ? r.summary->skipped_steps.value_or(0) : 0;
  if (skipped > 0)  // fp16: the loss scaler skipped these optimizer steps (an overflow)
    status += " (" + std::to_string(skipped) + " step" + (skipped > 1 ? "s" : "") + " skipped: overflow)";
  return status;
}

std::string interval_text(const RunReport& r) {
  const auto iv = r.ok() ? tps_interval(r) : std::nullopt;
  if (!iv) return "-";
  std::string t = fmt("%.1f", iv->lo) + " – " + fmt("%.1f", iv->hi);
  if (iv->coverage < 0.95) t += fmt(" (%.0f%%", 100 * iv->coverage) + ", n=" + std::to_string(iv->n) + ")";
  return t;
}

Column text(const char* key, const char* header, std::function<std::string(const RowContext&)> f, bool left,
            Show show = Show::Always) {
  Column c{key, header, "", nullptr, show, Gate::None, left, nullptr, std::move(f)};
  return c;
}
Column number(const char* key, const char* header, const char* unit, const char* format,
              std::function<Value(const RowContext&)> f, Show show = Show::Always, Gate gate = Gate::None) {
  Column c{key, header, unit, format, show, gate, false, std::move(f), nullptr};
  return c;
}
Value of(double v) { return v; }

std::vector<Column> make_columns() {
  std::vector<Column> c = {
      text("cell", "cell", [](const RowContext& x) { return x.report.cell_name(); }, true),
      text("backend", "backend", [](const RowContext& x) { return x.report.config.backend_name(); }, true),
      text("precision", "precision", [](const RowContext& x) { return x.report.config.precision_name(); }, true),
      number("world_size", "W", "ranks", "%.0f",
             [](const RowContext& x) { return x.report.env ? of(double(x.report.env->world_size)) : std::nullopt; }),
      number("tokens_per_gpu_per_s.median", "tokens/GPU/s", "tokens/s", "%.1f",
             [](const RowContext& x) { return of(tps(x.report)); }, Show::Always, Gate::Timing),
      text("tokens_per_gpu_per_s.interval", "95% interval",
           [](const RowContext& x) { return interval_text(x.report); }, false, Show::HtmlOnly),
      number("step_time_s.median", "s/step", "s", "%.4f",
             [](const RowContext& x) { return of(summary(x.report).step_time_s.median); }, Show::Always, Gate::Timing),
      number("mfu", "MFU", "", "%.3f", [](const RowContext& x) { return of(summary(x.report).mfu); }),
      number("mfu_6n", "mfu_6n", "", "%.3f", [](const RowContext& x) { return of(summary(x.report).mfu_6n); }),
      number("tokens_per_optimizer_step", "tokens/opt. step", "tokens", "%.0f",
             [](const RowContext& x) { return of(tokens_per_optimizer_step(x.report)); }),
  };
  const char* headers[5] = {"params MiB", "master MiB", "grads MiB", "optimizer MiB", "buffers MiB"};
  for (int k = 0; k < 5; ++k)
    c.push_back(number(kStateCategories[k], headers[k], "MiB", "%.2f",
                       [k](const RowContext& x) { return of(category_mib(x.report, k)); }));
  const std::vector<Column> rest = {
      number("host_mib", "host MiB", "MiB", "%.2f", [](const RowContext& x) { return of(host_mib(x.report)); }),
      number("peak_mib", "peak MiB", "MiB", "%.2f", [](const RowContext& x) { return of(peaks(x.report).peak_mib); }),
      number("observed_peak_mib", "observed peak MiB", "MiB", "%.2f",
             [](const RowContext& x) { return of(peaks(x.report).observed_mib); }),
      number("estimated_peak_mib", "est. peak MiB", "MiB", "%.2f",
             [](const RowContext& x) { return of(peaks(x.report).est_mib); }),
      number("peak_over_estimate", "peak/est", "", "%.2f",
             [](const RowContext& x) { return of(peaks(x.report).peak_over_est); }),
      number("comm_mib_per_step", "comm MiB/step", "MiB", "%.2f", [](const RowContext& x) { return of(comm_mib(x.report)); }),
      number("offload_mib_per_step", "offload MiB/step", "MiB", "%.2f",
             [](const RowContext& x) { return of(offload_mib(x.report)); }),
      number("overlap", "overlap", "", "%.2f", [](const RowContext& x) { return of(overlap(x.report)); }),
      number("final_loss", "final loss", "nats", "%.4f",
             [](const RowContext& x) { return of(summary(x.report).final_loss.value_or(kNaN)); }),
      number("tokens_per_gpu_per_s.vs_base", "tokens/GPU/s vs base", "%", "%+.1f%%",
             [](const RowContext& x) { return relative(tps(x.report), x.base, tps); }, Show::WithBaseline),
      number("peak_mib.vs_base", "peak MiB vs base", "%", "%+.1f%%",
             [](const RowContext& x) {
               return relative(peaks(x.report).peak_mib, x.base, [](const RunReport& r) { return peaks(r).peak_mib; });
             },
             Show::WithBaseline),
      number("predicted_tokens_per_gpu_per_s", "predicted tokens/GPU/s", "tokens/s", "%.1f",
             [](const RowContext& x) { return x.predicted_tps; }, Show::WithProjection),
      number("prediction_error", "prediction error", "%", "%+.1f%%",
             [](const RowContext& x) -> Value {
               const double t = tps(x.report);
               if (x.report.projected() || !x.predicted_tps || !(t > 0)) return std::nullopt;
               return 100 * ((*x.predicted_tps - t) / t);
             },
             Show::WithProjection),
      text("status", "status", [](const RowContext& x) { return status_text(x.report); }, true),
  };
  c.insert(c.end(), rest.begin(), rest.end());
  return c;
}
}  // namespace

const std::vector<Column>& columns() {
  static const std::vector<Column> all = make_columns();
  return all;
}

const Column& column(const std::string& key) {
  for (const auto& c : columns())
    if (c.key == key) return c;
  throw std::out_of_range("no column " + key);
}

std::vector<const Column*> shown_columns(bool with_baseline, bool with_projection, bool html) {
  std::vector<const Column*> out;
  for (const auto& c : columns())
    if (c.show == Show::Always || (c.show == Show::WithBaseline && with_baseline) ||
        (c.show == Show::WithProjection && with_projection) || (c.show == Show::HtmlOnly && html))
      out.push_back(&c);
  return out;
}

std::optional<double> column_value(const Column& c, const RowContext& ctx) {
  if (!c.value || !ctx.report.ok()) return std::nullopt;
  const auto v = c.value(ctx);
  if (!v || !std::isfinite(*v)) return std::nullopt;
  return v;
}

std::string cell_text(const Column& c, const RowContext& ctx) {
  if (c.text) return c.text(ctx);
  const auto v = column_value(c, ctx);
  return v ? fmt(c.format, *v) : "-";
}

double category_mib(const RunReport& r, int category) {
  double m = 0;
  for (const auto& rk : r.rank_records())
    m = std::max(m, double(category_bytes(rk.memory.model_states_bytes, category)) / kMiB);
  return m;
}

std::optional<TpsInterval> tps_interval(const RunReport& r) {
  std::vector<double> step_times;
  for (const auto& st : r.step_records())
    if (st.measured.value_or(false) && st.time_s) step_times.push_back(*st.time_s);
  const double tokens = double(summary(r).tokens_per_rank_per_step);
  if (step_times.empty() || !(tokens > 0)) return std::nullopt;
  const auto iv = median_interval(step_times);
  return TpsInterval{tokens / iv.hi, tokens / iv.lo, iv.coverage, iv.n};
}

std::string precision_plan_key(const RunReport& r) {
  // The blog's pairing: modes that compute in the same dtype and update weights of the same dtype
  // (FSDP mixed's fp32 flat parameters, ZeRO-3 bf16's fp32 masters) compare like for like.
  if (const auto& pl = r.config.precision_plan)
    return "compute " + pl->compute + ", optimizer updates " + pl->updates() + " weights";
  return "precision " + r.config.precision_name() + " (report without config.precision_plan)";
}

std::string workload_key(const RunReport& r) {
  if (!r.env || !r.config.model) return "";
  const auto& m = *r.config.model;
  json k;
  const std::pair<const char*, const std::optional<int64_t>*> dims[] = {
      {"layers", &m.layers}, {"hidden", &m.hidden}, {"heads", &m.heads},
      {"kv_heads", &m.kv_heads}, {"ffn", &m.ffn}, {"vocab", &m.vocab}};
  for (const auto& [name, v] : dims) k[name] = v->value_or(0);
  k["backend"] = r.config.backend ? r.config.backend->name.value_or("") : "";
  k["precision"] = r.config.backend ? r.config.backend->precision.value_or("") : "";
  const TrainConfig none;
  const TrainConfig& t = r.config.train ? *r.config.train : none;
  k["micro_batch"] = t.micro_batch.value_or(0);
  k["seq_len"] = t.seq_len.value_or(0);
  k["grad_accum"] = t.grad_accum.value_or(0);
  k["world_size"] = r.env->world_size;
  k["nodes"] = r.env->nodes;
  return k.dump();
}

}  // namespace zb::reports
