// project_command.cpp — `zerobench project` (see project_command.hpp).
#include "bench/project/project_command.hpp"

#include <algorithm>
#include <cstdio>
#include <fstream>

#include "analysis/projection/calibration.hpp"
#include "analysis/projection/replay.hpp"
#include "reports/report.hpp"
#include "reports/run_report.hpp"
#include "runtime/errors.hpp"

namespace zb::bench::projection {

using json = nlohmann::json;
using analysis::projection::Calibration;
using analysis::projection::project;
using analysis::projection::replay;

void add_project_options(CLI::App& app, ProjectOptions& o) {
  app.add_option("report", o.report, "a measured report (run with --profile for per-unit times)")->required();
  app.add_option("--calibration", o.calibration,
                 "a `zerobench micro` JSON, a calibration JSON (micro --calibrate), or a preset: a100-nvlink, h100-sxm "
                 "(required unless --replay)");
  app.add_option("--nproc", o.world, "ranks to project to, all nodes (required unless --replay)")
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--replay", o.replay,
                 "instead of projecting: replay the report's own `run --trace` FILE (its measured per-op durations) "
                 "through the schedule at the run's W and print replayed vs measured step time per rank and step");
  app.add_option("--nodes", o.nodes, "nodes the ranks are spread over (presets: inter-node links)")
      ->check(CLI::Range(1, 1 << 16))
      ->capture_default_str();
  app.add_option("--out", o.out, "projected report (default out/projected-<backend>-w<W>.json)");
  app.add_option("--backend", o.backend, "schedule another engine with the same compute (default: the report's)");
  app.add_option("--compute", o.compute, "auto|measured|flops: per-unit compute from the report, or from FLOPs at a "
                                         "preset's rates (auto: flops for a preset)")
      ->check(CLI::IsMember({"auto", "measured", "flops"}))
      ->capture_default_str();
  app.add_option("--layers", o.layers, "project a model with this many blocks (the median block replicated)")
      ->check(CLI::PositiveNumber);
  app.add_option("--micro-batch", o.micro_batch, "flops mode: samples per micro-batch")->check(CLI::PositiveNumber);
  app.add_option("--seq-len", o.seq_len, "flops mode: tokens per sample")->check(CLI::PositiveNumber);
  app.add_option("--grad-accum", o.grad_accum, "flops mode: micro-batches per step")->check(CLI::PositiveNumber);
  app.add_flag("--activation-checkpointing", o.activation_checkpointing, "flops mode: recompute each block in backward");
  app.add_option("--data", o.data,
                 "flops mode: price the rows of these documents (a token file or lengths:FILE, as `run --data`; "
                 "default: the report's)");
  app.add_option("--batching", o.batching, "flops mode: pad|pack|pack-naive rows of the documents (default: the report's)")
      ->check(CLI::IsMember({"pad", "pad-longest", "pack", "pack-naive"}));
  app.add_option("--peak-tflops", o.peak_tflops, "peak for MFU (default: preset, measured GEMM, or the report's)")
      ->check(CLI::NonNegativeNumber);
  app.add_flag("--timeline", o.timeline, "include every simulated compute/comm span in projection.timeline");
  app.add_option("--cpu-contention", o.cpu_contention,
                 "CPU: compute slowdown of W ranks at once: gemm (the report's GEMM probe vs the calibration's "
                 "square GEMM with W ranks at once), cores (W x threads / cores), or auto (gemm where both were "
                 "measured, else cores)")
      ->check(CLI::IsMember({"auto", "cores", "gemm"}))
      ->capture_default_str();
}

namespace {
// `project REPORT --replay TRACE`: the schedule checked against the run's own durations.
json read_json(const std::string& path, const std::string& what) {
  std::ifstream f(path);
  if (!f) throw UsageError("project: " + what + " " + path + ": cannot open");
  try {
    return json::parse(f);
  } catch (const json::exception& e) {
    throw UsageError("project: " + what + " " + path + ": not JSON (" + e.what() + ")");
  }
}

// The report may be trimmed to what the replay reads (run_id, env, config: tests/data/replay/).
int replay_command(const ProjectOptions& o) {
  const auto file = read_json(o.report, "report");
  const auto report = file.is_object() ? reports::run_report_from_json(file) : reports::RunReport{};
  const auto& absent = report.extra.absent;  // a key the record types but the file lacks
  const bool has_config = file.is_object() && std::find(absent.begin(), absent.end(), "config") == absent.end();
  const bool has_env = report.env || report.extra.contains("env");  // env of another type is carried
  if (!has_config || !has_env)
    throw UsageError("project: report " + o.report + " has no config/env (a `zerobench run` report)");
  const auto trace = read_json(o.replay, "--replay");
  json out;
  try {
    out = replay(report, trace);
  } catch (const json::exception& e) {
    throw UsageError("project: --replay: the report or trace lacks a field the replay reads (" + std::string(e.what()) + ")");
  }
  std::printf("| backend | W | rank | step | measured s | replayed s | error | replayed comm s | exposed comm s |\n");
  std::printf("|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (const auto& s : out["steps"])
    std::printf("| %s | %d | %d | %lld | %.4f | %.4f | %+.1f%% | %.4f | %.4f |\n", out["backend"].get<std::string>().c_str(),
                out["world_size"].get<int>(), s["rank"].get<int>(), (long long)s["step"].get<int64_t>(),
                s["measured_s"].get<double>(), s["replayed_s"].get<double>(), 100 * s["error"].get<double>(),
                s["replayed_comm_s"].get<double>(), s["replayed_exposed_comm_s"].get<double>());
  std::printf("median error %+.2f%%, largest |error| %.2f%%\n", 100 * out["median_error"].get<double>(),
              100 * out["max_abs_error"].get<double>());
  if (!o.out.empty()) {
    reports::write_json_atomic(o.out, out);
    std::printf("replay: %s\n", o.out.c_str());
  }
  return kExitOk;
}
}  // namespace

int project_command(const ProjectOptions& o) {
  if (!o.replay.empty()) return replay_command(o);
  if (o.calibration.empty()) throw UsageError("project: --calibration is required (or --replay TRACE)");
  if (o.world < 1) throw UsageError("project: --nproc is required (or --replay TRACE)");
  const auto report = reports::read_report(o.report);
  const auto cal = Calibration::load(o.calibration);
  const auto out = project(report, cal, o);
  const auto problems = reports::validate_report(out);
  if (!problems.empty()) throw RunError("internal: projected report does not match its schema: " + problems.front());
  const auto record = reports::run_report_from_json(out);
  const reports::Projection& p = *record.projection;
  const reports::ProjectionSource source = p.source_report.value_or(reports::ProjectionSource{});
  const std::string backend = p.backend.value_or("");
  const std::string path = o.out.empty() ? "out/projected-" + backend + "-w" + std::to_string(o.world) + ".json" : o.out;
  reports::write_json_atomic(path, out);
  std::printf("| backend | W | nodes | step s | tokens/GPU/s | MFU | mfu_6n | exposed comm s | comm s | source step s (W=%d) |\n",
              int(source.world_size));
  std::printf("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  std::printf("| %s | %d | %d | %.4f | %.1f | %.3f | %.3f | %.4f | %.4f | %.4f |\n", backend.c_str(), o.world, o.nodes,
              p.step_time_s, p.tokens_per_gpu_per_s, p.mfu, p.mfu_6n.value_or(0.0), p.exposed_comm_s,
              p.comm_s.value_or(0.0), source.step_time_s);
  for (const auto& n : p.notes.value_or(std::vector<std::string>{})) std::printf("note: %s\n", n.c_str());
  std::printf("projection: %s\n", path.c_str());
  return kExitOk;
}


}  // namespace zb::bench::projection
