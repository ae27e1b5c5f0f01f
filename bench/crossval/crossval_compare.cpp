// crossval_compare.cpp — one mode's comparison (see crossval_compare.hpp; every known difference
// is described in docs/crossval.md and lives in crossval_rules.cpp).
//
// Nothing passes by being absent or unreadable: each side must report exactly W ranks and the
// run's number of steps; a loss or grad norm that is NaN or infinite on either side is a
// disagreement (a rel diff with NaN compares false against any tolerance, so it is checked
// first); a model-state category on one side only is a disagreement unless a rule predicts it
// exactly; and every rank's collectives are compared in every step, of every kind either side
// reports (the reference's barriers, all-to-alls and point-to-point calls included).
#include "bench/crossval/crossval_compare.hpp"
#include "bench/crossval/crossval_loss_scale.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>

#include "bench/crossval/crossval_rules.hpp"

namespace zb::bench {

namespace {
using json = nlohmann::json;
using reports::RunReport;
using StepCommByKind = std::map<std::string, reports::StepComm>;

const char* const kKinds[] = {"all_gather", "reduce_scatter", "all_reduce", "broadcast"};

// zerobench's number: a typed field; absent or null (nlohmann writes NaN and Inf so: the record
// carries the null untyped) reads as NaN: it cannot agree with anything.
double number(const std::optional<double>& v) { return v ? *v : NAN; }

// The reference's number: a JSON number; "nan" / "inf" / "-inf" (the Python runners write
// non-finite floats so, scripts/crossval/common.py); null. Anything else, or a missing key, reads
// as NaN.
double number(const json& obj, const char* key) {
  if (!obj.is_object() || !obj.contains(key)) return NAN;
  const json& v = obj[key];
  if (v.is_number()) return v.get<double>();
  if (v.is_string()) {
    const auto s = v.get<std::string>();
    if (s == "inf" || s == "Infinity") return INFINITY;
    if (s == "-inf" || s == "-Infinity") return -INFINITY;
  }
  return NAN;
}

std::string text(double v, int digits = 9) {
  if (!std::isfinite(v)) return std::isnan(v) ? "nan" : (v > 0 ? "inf" : "-inf");
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.*g", digits, v);
  return buf;
}

// The shortest text that reads back as exactly `v` (Python's repr): two values it prints
// differently are different doubles.
std::string exact(double v) {
  if (!std::isfinite(v)) return text(v);
  for (int digits = 15; digits < 17; ++digits) {
    const auto t = text(v, digits);
    if (std::strtod(t.c_str(), nullptr) == v) return t;
  }
  return text(v, 17);
}

double rel_diff(double a, double b) {
  if (!std::isfinite(a) || !std::isfinite(b)) return NAN;
  const double d = std::abs(a - b);
  if (d == 0) return 0;
  return d / std::max(std::abs(b), 1e-30);
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

size_t array_size(const json& obj, const char* key) {
  return obj.is_object() && obj.contains(key) && obj[key].is_array() ? obj[key].size() : 0;
}

// ---- shape: W ranks and T steps on each side ----
// Returns how many ranks and steps both sides have (what can be compared); every shortfall or
// excess is a reason.
std::pair<size_t, size_t> check_shape(const CrossvalContext& c, const RunReport& report, const std::vector<json>& upstream,
                                      std::vector<std::string>& reasons) {
  const size_t W = size_t(c.world_size), T = size_t(c.spec.train.steps);
  const size_t zr = report.rank_records().size();
  if (zr != W) reasons.push_back("zerobench reports " + std::to_string(zr) + " ranks, expected " + std::to_string(W));
  if (upstream.size() != W)
    reasons.push_back("upstream reports " + std::to_string(upstream.size()) + " ranks, expected " + std::to_string(W));
  const size_t ranks = std::min({W, zr, upstream.size()});
  for (size_t k = 0; k < upstream.size(); ++k) {
    const json& u = upstream[k];
    if (!u.is_object() || u.value("rank", int64_t(-1)) != int64_t(k) || u.value("world_size", int64_t(-1)) != int64_t(W))
      reasons.push_back("upstream rank file " + std::to_string(k) + " says rank " +
                        (u.is_object() && u.contains("rank") ? u["rank"].dump() : "?") + " of " +
                        (u.is_object() && u.contains("world_size") ? u["world_size"].dump() : "?") + ", expected rank " +
                        std::to_string(k) + " of " + std::to_string(W));
  }
  const size_t zsteps = report.step_records().size();
  size_t steps = std::min(T, zsteps);
  if (zsteps != T)
    reasons.push_back("zerobench reports " + std::to_string(zsteps) + " steps, expected " + std::to_string(T));
  for (size_t k = 0; k < upstream.size(); ++k) {
    const size_t n = array_size(upstream[k], "steps");
    if (n != T)
      reasons.push_back("upstream rank " + std::to_string(k) + " reports " + std::to_string(n) + " steps, expected " +
                        std::to_string(T));
    steps = std::min(steps, n);
  }
  if (upstream.empty()) steps = 0;
  return {ranks, steps};
}

// ---- collectives: one rank, one step, every kind ----
struct CountBytes {
  int64_t count = 0, bytes = 0;
};

// kind -> {count, bytes} of one side's step. zerobench: the four kinds its Comm counts. The
// reference: `kinds` (the same four) and `other` (barrier, all_to_all, send, recv, ...; a bare
// count in runners older than the byte-counting wrapper).
std::map<std::string, CountBytes> zerobench_comm(const StepCommByKind& comm) {
  std::map<std::string, CountBytes> out;
  for (const auto& [kind, v] : comm) out[kind] = {v.count, v.bytes};
  return out;
}
std::map<std::string, CountBytes> upstream_comm(const json& comm) {
  std::map<std::string, CountBytes> out;
  if (comm.contains("kinds"))
    for (const auto& [kind, v] : comm["kinds"].items()) out[kind] = {v.value("count", int64_t(0)), v.value("bytes", int64_t(0))};
  if (comm.contains("other"))
    for (const auto& [kind, v] : comm["other"].items())
      out[kind] = v.is_object() ? CountBytes{v.value("count", int64_t(0)), v.value("bytes", int64_t(0))}
                                : CountBytes{v.get<int64_t>(), 0};
  return out;
}

// zerobench's collectives of rank k in step j: ranks[k].comm_steps[j] (every rank), else rank
// 0's steps[j].comm (reports written before comm_steps existed); null when the report has neither.
const StepCommByKind* zerobench_step_comm(const RunReport& report, size_t k, size_t j) {
  const auto& r = report.rank_records()[k];
  if (r.comm_steps && j < r.comm_steps->size()) return &(*r.comm_steps)[j];
  const auto& s = report.step_records()[j];
  if (k == 0 && s.comm) return &*s.comm;
  return nullptr;
}

}  // namespace

Tolerance tolerance_for(const std::string& backend, const std::string& precision, int64_t steps,
                        const std::string& device) {
  (void)steps;
  Tolerance t;
  if (device == "cuda") {
    // Not measured on a GPU yet (docs/crossval.md, "On the GPU"): the CPU bounds, kept until the
    // first GPU run's documents (which carry every step's exact differences) give a measured
    // basis. Expected there: bitwise in the FSDP modes (the same cuBLAS kernels in the same order
    // on the same GPU), unless a kernel on the path accumulates with atomics.
    t.measured_on_device = false;
    if (precision != "fp32") {
      t.loss_rel = std::ldexp(1.0, -10);
      t.grad_norm_rel = std::ldexp(1.0, -4);
    }
    t.basis = std::string("cuda: the cpu bounds (") + (precision == "fp32" ? "fp32: 1e-5" : "bf16: loss 2^-10, grad norm 2^-4") +
              "), not yet measured on a GPU (docs/crossval.md)";
    return t;
  }
  // A backend's measured bound (docs/crossval.md, "Tolerances"): where both sides do the same
  // arithmetic, the largest difference its crossvals measured (0 where every step is bitwise), so
  // that a real difference is not hidden under the generic bounds below.
  if (const auto b = measured_bound(backend, precision)) {
    t.loss_rel = b->loss_rel;
    t.grad_norm_rel = b->grad_norm_rel;
    t.basis = b->basis;
    return t;
  }
  if (precision == "fp32") {
    // The bound for loss and grad norm alike. ZeRO-3's grad norm carries DeepSpeed's
    // hook-reordered fp32 gradient sums (docs/crossval.md): measured 2.7e-6 over 5 steps of tiny,
    // inside the bound; a longer run that drifts past it is reported, not hidden.
    t.basis = "fp32: 1e-5 relative at every step, loss and grad norm (the issue's bound)";
    return t;
  }
  // bf16 modes: the reference's own spread under a reduction-order change (W=2 vs W=1 on the
  // same global batch, 20 steps of tiny: loss 2.2e-4, grad norm 1.2e-2), x4, next power of two.
  t.loss_rel = std::ldexp(1.0, -10);
  t.grad_norm_rel = std::ldexp(1.0, -4);
  t.basis = "bf16: loss 2^-10, grad norm 2^-4 (the reference's bf16 reduction-order spread x4; docs/crossval.md)";
  return t;
}

json compare_mode(const CrossvalContext& c, const RunReport& report, const std::vector<json>& upstream) {
  const auto& t = c.spec.train;
  const Tolerance tol = tolerance_for(c.backend, c.spec.precision, t.steps, c.device);
  std::vector<std::string> reasons;
  json out = {{"precision", c.spec.precision},
              {"status", {{"zerobench", "ok"}, {"upstream", "ok"}}},
              {"tolerance", {{"loss_rel", tol.loss_rel}, {"grad_norm_rel", tol.grad_norm_rel}, {"basis", tol.basis},
                             {"device", c.device}, {"measured_on_device", tol.measured_on_device}}}};
  const auto [nranks, nsteps] = check_shape(c, report, upstream, reasons);

  // ---- fp16: the loss scale, step by step, exactly (crossval_loss_scale.cpp) ----
  const auto scale = compare_loss_scale(report, upstream, reasons);
  if (!scale.doc.is_null()) out["loss_scale"] = scale.doc;

  // ---- steps: loss, grad norm, lr ----
  json steps = json::array();
  double worst_loss = 0, worst_norm = 0;
  bool all_finite = true, lr_equal = true;
  for (size_t j = 0; j < nsteps; ++j) {
    const reports::StepRecord& z = report.step_records()[j];
    json per_rank_loss = json::array(), per_rank_norm = json::array();
    double loss_sum = 0;
    std::vector<std::string> non_finite;
    for (size_t k = 0; k < upstream.size(); ++k) {
      const json& u = upstream[k]["steps"][j];
      const double l = number(u, "loss"), g = number(u, "grad_norm");
      if (!std::isfinite(l)) non_finite.push_back("upstream rank " + std::to_string(k) + " loss " + text(l));
      if (!std::isfinite(g)) non_finite.push_back("upstream rank " + std::to_string(k) + " grad norm " + text(g));
      loss_sum += l;
      per_rank_loss.push_back(l);
      per_rank_norm.push_back(g);
    }
    const auto& u0 = upstream.front()["steps"][j];
    // A step both sides' loss scalers skipped: its grad norm is the overflowed one (not compared).
    const bool both_skipped = scale.skipped_by_both.count(j) > 0;
    if (both_skipped) non_finite.clear();
    const double up_loss = loss_sum / double(upstream.size());
    const double up_norm = number(u0, "grad_norm");
    const double loss = number(z.loss), norm = number(z.grad_norm);
    if (!std::isfinite(loss)) non_finite.push_back("zerobench loss " + text(loss));
    if (!std::isfinite(norm) && !both_skipped) non_finite.push_back("zerobench grad norm " + text(norm));
    for (size_t k = 0; both_skipped && k < upstream.size(); ++k) {  // the losses are still compared
      const double l = number(upstream[k]["steps"][j], "loss");
      if (!std::isfinite(l)) non_finite.push_back("upstream rank " + std::to_string(k) + " loss " + text(l));
    }
    const double dl = rel_diff(loss, up_loss), dn = both_skipped ? 0.0 : rel_diff(norm, up_norm);
    const bool finite = non_finite.empty();
    all_finite = all_finite && finite;
    if (finite) {
      worst_loss = std::max(worst_loss, dl);
      worst_norm = std::max(worst_norm, dn);
    }
    json s = {{"step", j},
              {"lr", z.lr ? json(*z.lr) : json(nullptr)},
              {"upstream_lr", u0.value("lr", json(nullptr))},
              {"loss", loss},
              {"upstream_loss", up_loss},
              {"loss_rel_diff", dl},
              {"upstream_loss_per_rank", per_rank_loss},
              {"grad_norm", norm},
              {"upstream_grad_norm", up_norm},
              {"grad_norm_rel_diff", dn},
              {"within_tolerance", finite && dl <= tol.loss_rel && dn <= tol.grad_norm_rel},
              {"time_s", z.time_s.value_or(0.0)},
              {"upstream_time_s", u0.value("time_s", 0.0)}};
    // The lr of the step's optimizer update, bitwise: both sides compute the schedule in double
    // (DeepSpeed's classes in Python floats); a difference is a different schedule, not rounding.
    const double lr = number(z.lr);
    bool step_lr_equal = true;
    for (size_t k = 0; k < upstream.size(); ++k) {
      const double ulr = number(upstream[k]["steps"][j], "lr");
      if (lr == ulr) continue;
      step_lr_equal = false;
      reasons.push_back("step " + std::to_string(j) + ": lr " + exact(lr) + " vs upstream rank " + std::to_string(k) +
                        " " + exact(ulr) + " (the lr of the step's optimizer update differs)");
    }
    s["lr_equal"] = step_lr_equal;
    lr_equal = lr_equal && step_lr_equal;
    bool norms_differ = false;
    for (const auto& v : per_rank_norm) norms_differ = norms_differ || !(v.get<double>() == up_norm);
    if (norms_differ) s["upstream_grad_norm_per_rank"] = per_rank_norm;
    for (const auto& what : non_finite) reasons.push_back("step " + std::to_string(j) + ": " + what + " (not finite)");
    if (finite && dl > tol.loss_rel)
      reasons.push_back("step " + std::to_string(j) + ": loss " + text(loss) + " vs " + text(up_loss) + " (relative " +
                        text(dl) + " > " + text(tol.loss_rel) + ")");
    if (finite && dn > tol.grad_norm_rel)
      reasons.push_back("step " + std::to_string(j) + ": grad norm " + text(norm) + " vs " + text(up_norm) +
                        " (relative " + text(dn) + " > " + text(tol.grad_norm_rel) + ")");
    steps.push_back(s);
  }
  out["max_loss_rel_diff"] = all_finite ? worst_loss : NAN;
  out["max_grad_norm_rel_diff"] = all_finite ? worst_norm : NAN;
  out["all_finite"] = all_finite;
  out["lr_equal"] = lr_equal && nsteps > 0;

  // ---- step inputs: what every rank trained on in every step (SHA-256 of its batches) ----
  bool batches_equal = nranks > 0 && nsteps > 0;
  for (size_t k = 0; k < nranks; ++k) {
    const auto& hashes = report.rank_records()[k].batch_sha256;
    for (size_t j = 0; j < nsteps; ++j) {
      const json z = hashes && j < hashes->size() ? json((*hashes)[j]) : json(nullptr);
      const json u = upstream[k]["steps"][j].value("batch_sha256", json(nullptr));
      if (z.is_string() && u.is_string() && z == u) continue;
      batches_equal = false;
      auto show = [](const json& h) { return h.is_string() ? h.get<std::string>().substr(0, 16) : std::string("missing"); };
      reasons.push_back("rank " + std::to_string(k) + " step " + std::to_string(j) + ": batch sha256 " + show(z) +
                        " vs upstream " + show(u) + " (the two sides trained on different data)");
    }
  }
  out["batches_equal"] = batches_equal;

  // ---- collectives: every rank, every step, every kind either side reports ----
  json comm_diffs = json::array();
  bool comm_equal = true, comm_explained = true, comm_missing = false;
  for (size_t k = 0; k < nranks && !comm_missing; ++k) {
    for (size_t j = 0; j < nsteps; ++j) {
      const StepCommByKind* zj = zerobench_step_comm(report, k, j);
      if (!zj) {
        comm_missing = true;
        reasons.push_back("zerobench's report has no per-step collectives of rank " + std::to_string(k) +
                          " (ranks[" + std::to_string(k) + "].comm_steps)");
        break;
      }
      const json& uj = upstream[k]["steps"][j].value("comm", json::object());
      auto zc = zerobench_comm(*zj);
      auto uc = upstream_comm(uj);
      std::set<std::string> kinds(std::begin(kKinds), std::end(kKinds));
      for (const auto& [kind, v] : zc) kinds.insert(kind);
      for (const auto& [kind, v] : uc) kinds.insert(kind);
      json comm = json::object();
      for (const auto& kind : kinds) {
        const CountBytes a = zc[kind], b = uc[kind];
        const bool equal = a.count == b.count && a.bytes == b.bytes;
        const bool four = std::find(std::begin(kKinds), std::end(kKinds), kind) != std::end(kKinds);
        json cell = {{"count", a.count}, {"bytes", a.bytes}, {"upstream_count", b.count}, {"upstream_bytes", b.bytes},
                     {"equal", equal}};
        if (!equal) {
          comm_equal = false;
          json d = {{"rank", k},           {"step", j},        {"kind", kind},
                    {"count", a.count},    {"bytes", a.bytes}, {"upstream_count", b.count},
                    {"upstream_bytes", b.bytes}};
          const auto e = explain_comm(c, report, int(k), int64_t(j), kind, a.count, a.bytes);
          if (e && e->count == b.count && e->bytes == b.bytes) {
            d["explanation"] = {{"reason", e->reason}, {"upstream", e->upstream}};
            cell["explained"] = true;
          } else {
            comm_explained = false;
            d["explanation"] = nullptr;
            reasons.push_back("rank " + std::to_string(k) + " step " + std::to_string(j) + ": " + kind + " count/bytes " +
                              std::to_string(a.count) + "/" + std::to_string(a.bytes) + " vs upstream " +
                              std::to_string(b.count) + "/" + std::to_string(b.bytes) + " (unexplained)");
          }
          comm_diffs.push_back(d);
        }
        if (k == 0 && (four || !equal || a.count > 0)) comm[kind] = cell;  // the step table shows rank 0
      }
      if (k == 0) {
        steps[j]["comm"] = comm;
        if (uj.contains("other") && !uj["other"].empty()) steps[j]["upstream_other_collectives"] = uj["other"];
      }
    }
  }
  out["steps"] = steps;
  out["comm_ranks_compared"] = comm_missing ? 0 : nranks;
  out["comm_equal"] = comm_equal && !comm_missing;
  out["comm_differences_explained"] = comm_explained && !comm_missing;
  out["comm_differences"] = comm_diffs;

  // ---- model-state bytes, per rank and category ----
  json states = json::array();
  bool states_equal = true, states_explained = true;
  for (size_t rank = 0; rank < nranks; ++rank) {
    // Offloaded states sit under "host" ({category: bytes, pinned}) on both sides: compared as
    // "host.<category>" (pinned as 0/1), so bytes are compared by category and by location.
    auto flat = [](const json& j) {
      json out = json::object();
      for (const auto& [k, v] : j.items()) {
        if (!v.is_object()) out[k] = v;
        else
          for (const auto& [hk, hv] : v.items()) out[k + "." + hk] = hv.is_boolean() ? json(int64_t(hv.get<bool>())) : hv;
      }
      return out;
    };
    // The record's categories as it writes them (typed, and any it carries: each compared by name).
    const json zb = flat(reports::to_json(report.rank_records()[rank].memory.model_states_bytes));
    const json up = flat(upstream[rank].value("model_states_bytes", json::object()));
    std::set<std::string> categories;
    for (const auto& [k, v] : zb.items()) categories.insert(k);
    for (const auto& [k, v] : up.items()) categories.insert(k);
    for (const auto& cat : categories) {
      const bool zb_has = zb.contains(cat) && zb[cat].is_number_integer();
      const bool up_has = up.contains(cat) && up[cat].is_number_integer();
      const int64_t zv = zb_has ? zb[cat].get<int64_t>() : 0, uv = up_has ? up[cat].get<int64_t>() : 0;
      const bool equal = zb_has && up_has && zv == uv;
      json e = {{"rank", rank}, {"category", cat}, {"zerobench", zb_has ? json(zv) : json(nullptr)},
                {"upstream", up_has ? json(uv) : json(nullptr)}, {"equal", equal}};
      if (!equal) {
        states_equal = false;
        // A rule predicts the upstream value and whether zerobench reports the category at all;
        // a side that lacks a category no rule names is a disagreement, whatever the other says.
        const auto x = explain_state(c, report, int(rank), cat, zb);
        if (x && up_has && x->expected == uv && x->zerobench_reports == zb_has) {
          e["explanation"] = {{"reason", x->reason}, {"upstream", x->upstream}, {"difference_bytes", uv - zv}};
        } else {
          states_explained = false;
          e["explanation"] = nullptr;
          reasons.push_back("rank " + std::to_string(rank) + " " + cat + ": zerobench " +
                            (zb_has ? std::to_string(zv) + " bytes" : std::string("does not report it")) +
                            " vs upstream " + (up_has ? std::to_string(uv) + " bytes" : std::string("does not report it")) +
                            " (unexplained)");
        }
      }
      states.push_back(e);
    }
  }
  out["model_states_equal"] = states_equal && nranks == size_t(c.world_size);
  out["model_states_differences_explained"] = states_explained && nranks == size_t(c.world_size);
  out["model_states"] = states;

  // ---- performance: ratios, reported, never asserted ----
  std::vector<double> up_times;
  if (!upstream.empty())
    for (const auto& s : upstream.front().value("steps", json::array()))
      if (s.value("step", int64_t(0)) >= t.warmup) up_times.push_back(s.value("time_s", 0.0));
  const double tokens = double(t.micro_batch * t.seq_len * t.grad_accum);
  const double zb_tps = report.summary ? report.summary->tokens_per_gpu_per_s.median : NAN;
  const double up_med = median(up_times);
  const double up_tps = up_med > 0 ? tokens / up_med : 0;
  int64_t zb_rss = 0, up_rss = 0, zb_tracked = 0;
  for (const auto& r : report.rank_records()) {
    zb_rss = std::max(zb_rss, r.memory.peak_rss_bytes);
    zb_tracked = std::max(zb_tracked, r.memory.peak_tracked_bytes);
  }
  for (const auto& u : upstream) up_rss = std::max(up_rss, u.value("peak_rss_bytes", int64_t(0)));
  // On a GPU: the caching allocator's peak of steps >= warmup, both sides (zerobench's
  // memory.cuda, the runners' torch.cuda.max_memory_allocated after a reset at the warmup step).
  int64_t zb_gpu = 0, up_gpu = 0;
  for (const auto& r : report.rank_records())
    zb_gpu = std::max(zb_gpu, r.memory.cuda ? r.memory.cuda->peak_allocated_bytes.value_or(0) : int64_t(0));
  for (const auto& u : upstream) up_gpu = std::max(up_gpu, u.value("peak_cuda_allocated_bytes", int64_t(0)));
  out["perf"] = {{"tokens_per_gpu_per_s", zb_tps},
                 {"upstream_tokens_per_gpu_per_s", up_tps},
                 {"throughput_ratio", up_tps > 0 ? zb_tps / up_tps : 0.0},
                 {"peak_rss_bytes", zb_rss},
                 {"upstream_peak_rss_bytes", up_rss},
                 {"peak_rss_ratio", up_rss > 0 ? double(zb_rss) / double(up_rss) : 0.0},
                 {"peak_tracked_bytes", zb_tracked},
                 {"peak_cuda_allocated_bytes", zb_gpu},
                 {"upstream_peak_cuda_allocated_bytes", up_gpu},
                 {"peak_cuda_allocated_ratio", up_gpu > 0 ? double(zb_gpu) / double(up_gpu) : 0.0},
                 {"measured_steps", up_times.size()},
                 {"note", "median over steps >= warmup, rank 0; RSS max over ranks (the reference's includes the "
                          "Python interpreter and imported frameworks). Reported, never asserted."}};
  out["upstream_setup_comm"] = upstream.empty() ? json::object() : upstream.front().value("setup_comm", json::object());
  out["upstream_notes"] = upstream.empty() ? json::array() : upstream.front().value("notes", json::array());
  out["verdict"] = {{"agree", reasons.empty()}, {"reasons", reasons}};
  return out;
}

}  // namespace zb::bench
