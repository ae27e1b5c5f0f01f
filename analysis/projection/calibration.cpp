// calibration.cpp — alpha-beta fits, presets and the calibration file (see calibration.hpp).
#include "analysis/projection/calibration.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <sstream>

#include "runtime/errors.hpp"

namespace zb::analysis::projection {

namespace {
using json = nlohmann::json;

constexpr const char* kSchema = "zerobench.calibration";

std::optional<CollectiveKind> kind_named(const std::string& name) {
  for (int k = 0; k < int(CollectiveKind::kCount); ++k)
    if (name == backends::common::collective_name(CollectiveKind(k))) return CollectiveKind(k);
  return std::nullopt;
}

double to_seconds(double v, const std::string& unit) {
  if (unit == "ns") return v * 1e-9;
  if (unit == "us") return v * 1e-6;
  if (unit == "ms") return v * 1e-3;
  if (unit == "s") return v;
  throw UsageError("benchmark time_unit '" + unit + "' is not ns, us, ms or s");
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Weighted least squares of t = alpha + x * s with weights 1/t^2 (relative residuals).
void fit_line(const std::vector<double>& x, const std::vector<double>& t, double* alpha, double* slope) {
  double sw = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double w = 1.0 / (t[i] * t[i]);
    sw += w;
    sx += w * x[i];
    sy += w * t[i];
    sxx += w * x[i] * x[i];
    sxy += w * x[i] * t[i];
  }
  const double det = sw * sxx - sx * sx;
  double s = det > 0 ? (sw * sxy - sx * sy) / det : 0.0;
  double a = sw > 0 ? (sy - s * sx) / sw : 0.0;
  if (a < 0 && sxx > 0) {  // latency cannot be negative: refit through the origin
    a = 0;
    s = sxy / sxx;
  }
  if (s < 0) {  // flat or noisy: latency only
    s = 0;
    a = sy / sw;
  }
  *alpha = a;
  *slope = s;
}

bool is_file(const std::string& p) {
  struct stat st {};
  return stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::string context_string(const json& ctx, const char* key) {
  return ctx.contains(key) && ctx[key].is_string() ? ctx[key].get<std::string>() : "";
}
int context_int(const json& ctx, const char* key) {
  const auto s = context_string(ctx, key);
  return s.empty() ? 0 : std::atoi(s.c_str());
}

// Measured sizes in the calibration file: [[size, value], ...] in size order.
json sizes_json(const std::map<int64_t, double>& m) {
  json a = json::array();
  for (const auto& [size, v] : m) a.push_back({size, v});
  return a;
}
std::map<int64_t, double> sizes_of(const json& j, const char* key) {
  std::map<int64_t, double> m;
  if (j.contains(key))
    for (const auto& p : j[key]) m[p.at(0).get<int64_t>()] = p.at(1).get<double>();
  return m;
}
}  // namespace

bool in_range(int64_t size, int64_t min, int64_t max) {
  return max > 0 && double(size) >= double(min) * (1 - kRangeTolerance) &&
         double(size) <= double(max) * (1 + kRangeTolerance);
}

int ring_steps(CollectiveKind kind, int world) {
  switch (kind) {
    case CollectiveKind::kAllReduce: return 2 * (world - 1);
    case CollectiveKind::kBroadcast: return 1;
    default: return world - 1;
  }
}

const std::vector<Preset>& presets() {
  // Every figure's source is listed with it (and in docs/projection.md).
  static const std::vector<Preset> all = [] {
    const std::string nccl_tuning =
        "NCCL src/graph/tuning.cc ncclTunerConstantsDefaults: Ring/Simple base latency 8.4 us, hwLatencies "
        "NVLINK 3.4 us and NET 14.0 us per ring step";
    const std::string nic = "400 Gb/s per GPU (one NVIDIA ConnectX-7 NDR 400 Gb/s adapter per GPU, as in the NVIDIA "
                            "DGX H100 datasheet: 8x single-port ConnectX-7 400 Gb/s) = 50 GB/s";
    Preset a100;
    a100.name = "a100-nvlink";
    a100.gpu = "NVIDIA A100 SXM4 80GB";
    a100.peak_tflops = 312;
    a100.intra_busbw_gbps = 300;
    a100.inter_busbw_gbps = 50;
    a100.gpus_per_node = 8;
    a100.base_latency_us = 8.4;
    a100.intra_step_latency_us = 3.4;
    a100.inter_step_latency_us = 14.0;
    a100.hbm_gbps = 2039;
    a100.gemm_efficiency = 271.2 / 312.0;
    a100.attention_efficiency = 0.50;
    a100.pcie_gbps = 32;
    a100.sources = {
        {"peak_tflops 312", "NVIDIA A100 Tensor Core GPU datasheet: BF16 Tensor Core 312 TFLOPS (dense)"},
        {"intra_busbw_gbps 300", "NVIDIA A100 datasheet: NVLink 600 GB/s (both directions) = 300 GB/s per direction"},
        {"inter_busbw_gbps 50", nic},
        {"hbm_gbps 2039", "NVIDIA A100 datasheet: A100 80GB SXM GPU memory bandwidth 2,039 GB/s"},
        {"pcie_gbps 32", "NVIDIA A100 datasheet: PCIe Gen4 64 GB/s (both directions) = 32 GB/s per direction, an upper "
                         "bound for pinned host<->device copies"},
        {"latency", nccl_tuning},
        {"gemm_efficiency 0.869",
         "stas00/ml-engineering compute/accelerator/README.md, Maximum Achievable Matmul FLOPS table: A100 SXM "
         "BF16 271.2 of 312 TFLOPS"},
        {"attention_efficiency 0.50",
         "Dao, FlashAttention-2 (arXiv 2307.08691): 50-73% of the theoretical maximum FLOPs/s on A100; the low end "
         "(forward+backward, the backward being the slower pass)"}};
    Preset h100 = a100;
    h100.name = "h100-sxm";
    h100.gpu = "NVIDIA H100 SXM5 80GB";
    h100.peak_tflops = 989;
    h100.intra_busbw_gbps = 450;
    h100.hbm_gbps = 3350;
    h100.gemm_efficiency = 794.5 / 989.0;
    h100.attention_efficiency = 0.35;
    h100.pcie_gbps = 64;
    h100.sources = {
        {"peak_tflops 989", "NVIDIA H100 Tensor Core GPU datasheet: H100 SXM BF16 Tensor Core 1,979 TFLOPS with "
                            "sparsity = 989 dense"},
        {"intra_busbw_gbps 450", "NVIDIA H100 datasheet: NVLink 900 GB/s (both directions, as the A100's 600) = 450 GB/s "
                                 "per direction"},
        {"inter_busbw_gbps 50", nic},
        {"hbm_gbps 3350", "NVIDIA H100 datasheet: H100 SXM GPU memory bandwidth 3.35 TB/s"},
        {"pcie_gbps 64", "NVIDIA H100 datasheet: PCIe Gen5 128 GB/s (both directions) = 64 GB/s per direction, an "
                         "upper bound for pinned host<->device copies"},
        {"latency", nccl_tuning},
        {"gemm_efficiency 0.803",
         "stas00/ml-engineering compute/accelerator/README.md, Maximum Achievable Matmul FLOPS table: H100 SXM "
         "BF16 794.5 of 989 TFLOPS"},
        {"attention_efficiency 0.35",
         "Shah et al., FlashAttention-3 (arXiv 2407.08608): FlashAttention-2 reaches only 35% utilization on H100"}};
    return std::vector<Preset>{a100, h100};
  }();
  return all;
}

std::optional<Preset> find_preset(const std::string& name) {
  for (const auto& p : presets())
    if (p.name == name) return p;
  return std::nullopt;
}

Calibration Calibration::from_preset(const Preset& p) {
  Calibration c;
  c.source = "preset: " + p.name;
  c.device = p.gpu;
  c.pg_backend = "nccl";
  c.preset = p;
  c.offload.h2d_gbps = c.offload.d2h_gbps = p.pcie_gbps;
  c.offload.basis = "preset " + p.name + ": PCIe per direction (datasheet); no host optimizer rate";
  return c;
}

Calibration Calibration::fit(const json& gb, const std::string& source) {
  if (!gb.contains("benchmarks") || !gb["benchmarks"].is_array())
    throw UsageError(source + ": not a Google Benchmark JSON (no \"benchmarks\" array)");
  Calibration c;
  c.source = "measured: " + source;
  const json ctx = gb.value("context", json::object());
  c.device = context_string(ctx, "zerobench_device");
  c.pg_backend = context_string(ctx, "zerobench_pg_backend");
  c.host_cores = context_int(ctx, "zerobench_host_cores");
  c.threads_per_rank = context_int(ctx, "zerobench_threads_per_rank");
  c.world_size = context_int(ctx, "zerobench_world_size");
  // Median time per name over repetitions (aggregate rows are skipped).
  struct Point {
    std::vector<double> t;
    double bytes = 0;
    int world = 0;
  };
  std::map<std::string, Point> points;
  std::map<std::string, std::vector<double>> gemm;
  std::vector<double> h2d, d2h, adam;  // offload/ entries (offload.cpp in analysis/micro)
  std::map<int64_t, std::vector<double>> h2d_at, d2h_at, adam_at;  // ... by size: seconds, ns per parameter
  for (const auto& b : gb["benchmarks"]) {
    if (b.value("run_type", "iteration") != "iteration" || !b.contains("name") || !b.contains("real_time")) continue;
    const std::string name = b["name"];
    if (b.contains("error_occurred") && b["error_occurred"].get<bool>()) continue;
    if (name.rfind("gemm/", 0) == 0 && name.find("/square/") != std::string::npos && b.contains("tflops")) {
      gemm[name.substr(5, name.find('/', 5) - 5)].push_back(b["tflops"].get<double>());
      continue;
    }
    if (name.rfind("offload/", 0) == 0) {
      if (name.rfind("offload/h2d/", 0) == 0 && b.contains("GBps")) h2d.push_back(b["GBps"].get<double>());
      if (name.rfind("offload/d2h/", 0) == 0 && b.contains("GBps")) d2h.push_back(b["GBps"].get<double>());
      if (name.rfind("offload/host_adamw/", 0) == 0 && b.contains("ns_per_param"))
        adam.push_back(b["ns_per_param"].get<double>());
      const double secs = to_seconds(b["real_time"].get<double>(), b.value("time_unit", "ns"));
      if (name.rfind("offload/h2d/", 0) == 0 && b.contains("bytes")) h2d_at[int64_t(b["bytes"].get<double>())].push_back(secs);
      if (name.rfind("offload/d2h/", 0) == 0 && b.contains("bytes")) d2h_at[int64_t(b["bytes"].get<double>())].push_back(secs);
      if (name.rfind("offload/host_adamw/", 0) == 0 && b.contains("params") && b.contains("ns_per_param"))
        adam_at[int64_t(b["params"].get<double>())].push_back(b["ns_per_param"].get<double>());
      continue;
    }
    if (!b.contains("busbw") || !b.contains("bytes") || !b.contains("world_size")) continue;
    auto& p = points[name];
    p.t.push_back(to_seconds(b["real_time"].get<double>(), b.value("time_unit", "ns")));
    p.bytes = b["bytes"].get<double>();
    p.world = int(b["world_size"].get<double>());
  }
  for (auto& [dtype, v] : gemm) c.gemm_tflops.push_back({dtype, median(v)});
  if (!h2d.empty()) c.offload.h2d_gbps = median(h2d);
  if (!d2h.empty()) c.offload.d2h_gbps = median(d2h);
  if (!adam.empty()) c.offload.host_adam_ns_per_param = median(adam);
  if (!h2d.empty() || !adam.empty()) c.offload.basis = "measured: offload/ medians in " + source;
  for (const auto& [bytes, v] : h2d_at) c.offload_sizes.h2d_s[bytes] = median(v);
  for (const auto& [bytes, v] : d2h_at) c.offload_sizes.d2h_s[bytes] = median(v);
  for (const auto& [params, v] : adam_at) c.offload_sizes.host_adam_ns[params] = median(v);
  // Group by (kind, dtype, W): name = <kind>/<dtype>/W:<w>/bytes:<s>.
  std::map<std::tuple<int, std::string, int>, std::vector<std::pair<double, double>>> groups;
  for (const auto& [name, p] : points) {
    std::stringstream ss(name);
    std::string kind_s, dtype;
    std::getline(ss, kind_s, '/');
    std::getline(ss, dtype, '/');
    const auto kind = kind_named(kind_s);
    if (!kind || p.world < 2) continue;  // W=1 collectives are local copies: nothing to fit
    groups[{int(*kind), dtype, p.world}].push_back({p.bytes, median(p.t)});
  }
  for (auto& [key, pts] : groups) {
    CollectiveFit f;
    f.kind = CollectiveKind(std::get<0>(key));
    f.dtype = std::get<1>(key);
    f.world_size = std::get<2>(key);
    const double factor = backends::common::busbw_factor(f.kind, f.world_size);
    std::vector<double> x, t;
    for (const auto& [bytes, secs] : pts) {
      x.push_back(bytes * factor);
      t.push_back(secs);
    }
    double slope = 0;
    fit_line(x, t, &f.alpha_s, &slope);
    f.busbw_gbps = slope > 0 ? 1.0 / slope / 1e9 : 0.0;  // 0: no bandwidth term resolved
    f.points = int(pts.size());
    f.min_bytes = int64_t(pts.front().first);
    f.max_bytes = int64_t(pts.front().first);
    for (size_t i = 0; i < x.size(); ++i) {
      const double pred = f.alpha_s + x[i] * slope;
      f.max_rel_residual = std::max(f.max_rel_residual, std::abs(pred - t[i]) / t[i]);
      f.min_bytes = std::min(f.min_bytes, int64_t(pts[i].first));
      f.max_bytes = std::max(f.max_bytes, int64_t(pts[i].first));
      f.measured_s[int64_t(pts[i].first)] = t[i];
    }
    c.fits.push_back(f);
  }
  if (c.fits.empty())
    throw UsageError(source + ": no collective benchmarks with W >= 2 to fit (run `zerobench micro --nproc 2` or more)");
  return c;
}

json Calibration::to_json() const {
  json fits_j = json::array();
  for (const auto& f : fits)
    fits_j.push_back({{"kind", backends::common::collective_name(f.kind)},
                      {"dtype", f.dtype},
                      {"world_size", f.world_size},
                      {"alpha_s", f.alpha_s},
                      {"busbw_gbps", f.busbw_gbps},
                      {"points", f.points},
                      {"max_rel_residual", f.max_rel_residual},
                      {"min_bytes", f.min_bytes},
                      {"max_bytes", f.max_bytes},
                      {"measured", sizes_json(f.measured_s)}});
  json j = {{"schema", {{"name", kSchema}, {"version", 1}}},
            {"source", source},
            {"device", device},
            {"pg_backend", pg_backend},
            {"host_cores", host_cores},
            {"threads_per_rank", threads_per_rank},
            {"world_size", world_size},
            {"model", "t(S) = alpha_s + S * busbw_factor(kind, W) / (busbw_gbps * 1e9); docs/projection.md"},
            {"collectives", fits_j}};
  json g = json::object();
  for (const auto& [d, v] : gemm_tflops) g[d] = v;
  j["gemm_square_tflops"] = g;
  j["offload"] = {{"h2d_gbps", offload.h2d_gbps},
                  {"d2h_gbps", offload.d2h_gbps},
                  {"host_adam_ns_per_param", offload.host_adam_ns_per_param},
                  {"basis", offload.basis},
                  {"h2d_measured", sizes_json(offload_sizes.h2d_s)},
                  {"d2h_measured", sizes_json(offload_sizes.d2h_s)},
                  {"host_adamw_measured", sizes_json(offload_sizes.host_adam_ns)}};
  if (preset) {
    const auto& p = *preset;
    json src = json::object();
    for (const auto& [k, v] : p.sources) src[k] = v;
    j["preset"] = {{"name", p.name},
                   {"gpu", p.gpu},
                   {"peak_tflops", p.peak_tflops},
                   {"intra_busbw_gbps", p.intra_busbw_gbps},
                   {"inter_busbw_gbps", p.inter_busbw_gbps},
                   {"gpus_per_node", p.gpus_per_node},
                   {"base_latency_us", p.base_latency_us},
                   {"intra_step_latency_us", p.intra_step_latency_us},
                   {"inter_step_latency_us", p.inter_step_latency_us},
                   {"hbm_gbps", p.hbm_gbps},
                   {"gemm_efficiency", p.gemm_efficiency},
                   {"attention_efficiency", p.attention_efficiency},
                   {"pcie_gbps", p.pcie_gbps},
                   {"sources", src}};
  }
  return j;
}

Calibration Calibration::from_json(const json& j) {
  Calibration c;
  c.source = j.value("source", "");
  c.device = j.value("device", "");
  c.pg_backend = j.value("pg_backend", "");
  c.host_cores = j.value("host_cores", 0);
  c.threads_per_rank = j.value("threads_per_rank", 0);
  c.world_size = j.value("world_size", 0);
  const json collectives = j.value("collectives", json::array());
  for (const auto& f : collectives) {
    CollectiveFit x;
    const auto kind = kind_named(f.value("kind", ""));
    if (!kind) throw UsageError("calibration: unknown collective kind '" + f.value("kind", std::string()) + "'");
    x.kind = *kind;
    x.dtype = f.value("dtype", "");
    x.world_size = f.value("world_size", 0);
    x.alpha_s = f.value("alpha_s", 0.0);
    x.busbw_gbps = f.value("busbw_gbps", 0.0);
    x.points = f.value("points", 0);
    x.max_rel_residual = f.value("max_rel_residual", 0.0);
    x.min_bytes = f.value("min_bytes", int64_t(0));
    x.max_bytes = f.value("max_bytes", int64_t(0));
    x.measured_s = sizes_of(f, "measured");
    c.fits.push_back(x);
  }
  const json gemm = j.value("gemm_square_tflops", json::object());
  for (const auto& [d, v] : gemm.items()) c.gemm_tflops.push_back({d, v.get<double>()});
  if (j.contains("offload")) {  // calibration files from before offload lack it
    const auto& o = j["offload"];
    c.offload.h2d_gbps = o.value("h2d_gbps", 0.0);
    c.offload.d2h_gbps = o.value("d2h_gbps", 0.0);
    c.offload.host_adam_ns_per_param = o.value("host_adam_ns_per_param", 0.0);
    c.offload.basis = o.value("basis", std::string());
    c.offload_sizes.h2d_s = sizes_of(o, "h2d_measured");
    c.offload_sizes.d2h_s = sizes_of(o, "d2h_measured");
    c.offload_sizes.host_adam_ns = sizes_of(o, "host_adamw_measured");
  }
  if (j.contains("preset")) {
    const auto name = j["preset"].value("name", "");
    c.preset = find_preset(name);
    if (!c.preset) throw UsageError("calibration: unknown preset '" + name + "'");
  }
  return c;
}

Calibration Calibration::load(const std::string& what) {
  if (!is_file(what)) {
    if (auto p = find_preset(what)) return from_preset(*p);
    std::string names;
    for (const auto& p : presets()) names += (names.empty() ? "" : ", ") + p.name;
    throw UsageError("--calibration '" + what + "' is neither a file nor a preset (" + names + ")");
  }
  std::ifstream in(what);
  json j;
  try {
    in >> j;
  } catch (const std::exception& e) {
    throw UsageError("calibration " + what + " is not valid JSON: " + e.what());
  }
  if (j.contains("benchmarks")) return fit(j, what);
  if (j.contains("schema") && j["schema"].value("name", "") == kSchema) return from_json(j);
  throw UsageError("calibration " + what + " is neither a `zerobench micro` JSON nor a " + kSchema + " file");
}

const CollectiveFit* Calibration::nearest_fit(CollectiveKind kind, const std::string& dtype, int world) const {
  const CollectiveFit* best = nullptr;
  auto score = [&](const CollectiveFit& f) {  // same dtype first, then the nearest W
    return (f.dtype == dtype ? 0 : 1 << 24) + std::abs(f.world_size - world);
  };
  for (const auto& f : fits)
    if (f.kind == kind && (!best || score(f) < score(*best))) best = &f;
  return best;
}

double Calibration::collective_s(CollectiveKind kind, const std::string& dtype, int64_t bytes, int world,
                                 int nodes) const {
  if (world <= 1) return 0.0;
  const double factor = backends::common::busbw_factor(kind, world);
  if (preset) {
    const auto& p = *preset;
    const int steps = ring_steps(kind, world);
    int inter = 0;
    if (nodes > 1) inter = kind == CollectiveKind::kAllReduce ? 2 * (nodes - 1) : (kind == CollectiveKind::kBroadcast ? 1 : nodes - 1);
    inter = std::min(inter, steps);
    const double alpha =
        1e-6 * (p.base_latency_us + double(steps - inter) * p.intra_step_latency_us + double(inter) * p.inter_step_latency_us);
    const double bus = nodes > 1 ? std::min(p.intra_busbw_gbps, p.inter_busbw_gbps) : p.intra_busbw_gbps;
    return alpha + double(bytes) * factor / (bus * 1e9);
  }
  const auto* f = nearest_fit(kind, dtype, world);
  if (!f) throw UsageError("calibration " + source + " has no fit for " + backends::common::collective_name(kind));
  if (f->world_size == world && f->dtype == dtype)
    if (const auto it = f->measured_s.find(bytes); it != f->measured_s.end()) return it->second;  // measured
  const double alpha = f->alpha_s * double(ring_steps(kind, world)) / double(ring_steps(kind, f->world_size));
  const double bw = f->busbw_gbps > 0 ? double(bytes) * factor / (f->busbw_gbps * 1e9) : 0.0;
  return alpha + bw;
}

std::optional<double> Calibration::measured_copy_s(bool to_device, int64_t bytes) const {
  const auto& m = to_device ? offload_sizes.h2d_s : offload_sizes.d2h_s;
  const auto it = m.find(bytes);
  if (it == m.end()) return std::nullopt;
  return it->second;
}

std::string Calibration::collective_basis(CollectiveKind kind, const std::string& dtype, int world, int nodes) const {
  if (world <= 1) return "local copy";
  if (preset) return "preset " + preset->name + (nodes > 1 ? " across " + std::to_string(nodes) + " nodes" : "");
  const auto* f = nearest_fit(kind, dtype, world);
  if (!f) return "none";
  std::string s = "fit " + f->dtype + " W=" + std::to_string(f->world_size);
  if (f->world_size != world) s += " (alpha scaled to W=" + std::to_string(world) + ")";
  s += ", " + std::to_string(f->min_bytes) + ".." + std::to_string(f->max_bytes) + " bytes";
  if (f->world_size == world && f->dtype == dtype && !f->measured_s.empty())
    s += "; a measured size at its measured time";
  return s;
}

}  // namespace zb::analysis::projection
