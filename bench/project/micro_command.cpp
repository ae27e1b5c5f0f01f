// micro_command.cpp — `zerobench micro` (see micro_command.hpp): the command glue; the benchmark
// families and their harness are analysis/micro/, the fit analysis/projection/calibration.
#include <ATen/Parallel.h>
#include <benchmark/benchmark.h>
#include <torch/headeronly/version.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

#include "analysis/micro/harness.hpp"
#include "analysis/projection/calibration.hpp"
#include "analysis/projection/coverage.hpp"
#include "analysis/projection/projection.hpp"
#include "analysis/projection/replay.hpp"
#include "bench/project/micro_command.hpp"
#include "reports/report.hpp"
#include "runtime/device.hpp"
#include "runtime/dist_env.hpp"
#include "runtime/errors.hpp"
#include "runtime/launcher.hpp"
#include "runtime/world.hpp"

namespace zb::bench::micro {

namespace {
using analysis::micro::Harness;
using analysis::micro::SuiteOptions;
namespace projection = analysis::projection;
// Ranks other than 0 run every benchmark and report nothing.
class NullReporter final : public benchmark::BenchmarkReporter {
 public:
  bool ReportContext(const Context&) override { return true; }
  void ReportRuns(const std::vector<Run>&) override {}
};

std::vector<at::ScalarType> dtypes_of(const MicroOptions& o) {
  const std::string list = o.dtypes.empty() ? (o.quick ? "fp32" : "fp32,bf16") : o.dtypes;
  std::vector<at::ScalarType> out;
  std::stringstream ss(list);
  std::string item;
  while (std::getline(ss, item, ',')) {
    try {
      out.push_back(analysis::micro::parse_dtype(item));
    } catch (const UsageError&) {
      throw UsageError("--dtypes: '" + item + "' must be fp32, bf16 or fp16");
    }
  }
  if (out.empty()) throw UsageError("--dtypes: empty list");
  return out;
}

// `--for REPORT`: what projecting that run to `world` ranks needs measured (coverage.hpp): its
// collectives' sizes per kind and dtype, its offload copies and host optimizer, the square GEMM
// in its compute dtype, at the report's threads per rank (the projection's GEMM contention probe
// is taken at the same threads).
void fill_for_report(const MicroOptions& o, int world, SuiteOptions& s, int* threads) {
  if (world < 2)
    throw UsageError("micro --for: --nproc " + std::to_string(world) +
                     ": give the world size to project to (2 or more; at W=1 there are no collectives)");
  const auto report = reports::run_report_from_json(reports::read_report(o.for_report));
  projection::ProjectOptions po;
  po.world = world;
  po.report = o.for_report;
  const auto exec = o.device == "cpu" ? projection::ExecModel::kHostIsDevice : projection::ExecModel::kAsyncDevice;
  const auto need = projection::step_sizes(projection::projection_input(report, po, exec));
  SuiteOptions::Exact exact;
  std::vector<at::ScalarType> dtypes;
  for (const auto& c : need.collectives) {
    if (c.world != world)
      throw UsageError("micro --for: the run's step issues " + std::string(backends::common::collective_name(c.kind)) +
                       " over groups of " + std::to_string(c.world) + " ranks; micro measures its --nproc " +
                       std::to_string(world) + " ranks");
    const auto dtype = analysis::micro::parse_dtype(c.dtype);
    if (std::find(dtypes.begin(), dtypes.end(), dtype) == dtypes.end()) dtypes.push_back(dtype);
    for (const int64_t b : c.bytes) exact.collectives.push_back({c.kind, dtype, b});
  }
  exact.h2d_bytes.assign(need.h2d_bytes.begin(), need.h2d_bytes.end());
  exact.d2h_bytes.assign(need.d2h_bytes.begin(), need.d2h_bytes.end());
  exact.host_adam_params = need.host_optimizer_params;
  const auto run = projection::schedule_input_of_report(report);
  exact.gemm_dtype = run.precision == "fp32" ? at::kFloat : at::kBFloat16;
  if (dtypes.empty()) dtypes.push_back(exact.gemm_dtype);
  s.dtypes = dtypes;
  s.exact = exact;
  s.model = run.model;
  s.tokens = run.train.micro_batch * run.train.seq_len;
  if (threads && *threads <= 0) *threads = report.env ? int(report.env->threads_per_rank.value_or(0)) : 0;
}

SuiteOptions suite_of(const MicroOptions& o, int world, int* threads = nullptr) {
  SuiteOptions s;
  s.quick = o.quick;
  s.dtypes = dtypes_of(o);
  s.min_bytes = o.min_bytes;
  s.max_bytes = o.max_bytes_given ? o.max_bytes : (o.quick ? int64_t(64) << 10 : o.max_bytes);
  if (s.min_bytes <= 0 || s.max_bytes < s.min_bytes)
    throw UsageError("--min-bytes " + std::to_string(s.min_bytes) + " / --max-bytes " + std::to_string(s.max_bytes) +
                     ": need 0 < min <= max");
  if (o.suite != "all" && o.suite != "comm" && o.suite != "compute")
    throw UsageError("--suite '" + o.suite + "' must be all, comm or compute");
  s.comm = o.suite != "compute";
  s.concurrent_gemm = o.concurrent_gemm;
  if (o.concurrent_gemm && o.device != "cpu")
    throw UsageError("--concurrent-gemm is for CPU collectives (Gloo); --device is " + o.device);
  s.compute = o.suite != "comm";
  s.model = o.model.model_config();
  s.tokens = o.model.train.micro_batch * o.model.train.seq_len;
  if (!o.for_report.empty()) fill_for_report(o, world, s, threads);
  return s;
}

// Flags zerobench sets itself, or that would break lockstep across ranks.
void check_benchmark_args(const std::vector<std::string>& args) {
  for (const auto& a : args) {
    if (a.rfind("--benchmark_", 0) != 0 && a != "--v" && a.rfind("--v=", 0) != 0)
      throw UsageError("micro: unknown argument '" + a + "' (Google Benchmark flags start with --benchmark_)");
    if (a.rfind("--benchmark_out", 0) == 0)
      throw UsageError("micro: '" + a + "': use --out (zerobench writes Google Benchmark's JSON itself)");
    if (a.rfind("--benchmark_enable_random_interleaving", 0) == 0 && a.find("=false") == std::string::npos)
      throw UsageError("micro: '" + a + "': random interleaving differs between ranks and would deadlock collectives");
  }
}

int micro_rank(const MicroOptions& o) {
  const auto env = runtime::discover_dist_env(runtime::process_env());
  int threads = o.threads;
  const auto suite = suite_of(o, env.world_size, &threads);
  const auto device = runtime::pick_device(o.device, env.local_rank);
  const int cores = int(std::thread::hardware_concurrency());
  if (threads <= 0) threads = std::max(1, cores / std::max(1, env.local_world_size));
  at::set_num_threads(threads);
  auto world = runtime::init_world(env, device, std::chrono::minutes(10));
  Harness h(world);

  // Google Benchmark's argv: defaults, the user's flags (later flags win), rank 0's output.
  std::vector<std::string> args = {"zerobench-micro"};
  if (o.quick) args.push_back("--benchmark_min_time=0.02");
  args.insert(args.end(), o.benchmark_args.begin(), o.benchmark_args.end());
  const std::string tmp = o.out + ".tmp." + std::to_string(getpid());
  if (world.rank == 0) {
    const auto slash = o.out.rfind('/');
    if (slash != std::string::npos && slash > 0) reports::make_directories(o.out.substr(0, slash));
    args.push_back("--benchmark_out=" + tmp);
    args.push_back("--benchmark_out_format=json");
  }
  std::vector<char*> cargs;
  for (auto& a : args) cargs.push_back(a.data());
  int argc = int(cargs.size());
  benchmark::Initialize(&argc, cargs.data());
  if (argc > 1) throw UsageError(std::string("micro: Google Benchmark does not know '") + cargs[1] + "'");

  benchmark::AddCustomContext("zerobench_world_size", std::to_string(world.size));
  benchmark::AddCustomContext("zerobench_pg_backend", world.pg_backend);
  benchmark::AddCustomContext("zerobench_device", runtime::device_name(device));
  benchmark::AddCustomContext("zerobench_host_cores", std::to_string(cores));
  benchmark::AddCustomContext("zerobench_threads_per_rank", std::to_string(threads));
  benchmark::AddCustomContext("zerobench_model", suite.model.preset);
  benchmark::AddCustomContext("zerobench_tokens", std::to_string(suite.tokens));
  benchmark::AddCustomContext("zerobench_torch", TORCH_VERSION);
  benchmark::AddCustomContext("zerobench_time", "manual: per iteration, device-synchronised, max over ranks");

  if (suite.comm) analysis::micro::register_collective_benchmarks(h, suite);
  if (suite.compute) analysis::micro::register_compute_benchmarks(h, suite);
  if (world.rank == 0) {
    benchmark::RunSpecifiedBenchmarks();
  } else {
    NullReporter quiet;
    benchmark::RunSpecifiedBenchmarks(&quiet);
  }
  benchmark::Shutdown();
  h.barrier();
  if (world.rank != 0) return kExitOk;
  if (std::rename(tmp.c_str(), o.out.c_str()) != 0) throw RunError("micro: cannot write " + o.out);
  std::cout << "micro: " << o.out << "\n";
  if (!o.calibrate.empty()) {
    std::ifstream in(o.out);
    nlohmann::json j;
    in >> j;
    const auto cal = projection::Calibration::fit(j, o.out);
    reports::write_json_atomic(o.calibrate, cal.to_json());
    for (const auto& f : cal.fits)
      std::printf("calibration: %-14s %s W=%d  alpha %.1f us  busbw %.3f GB/s  (%d sizes, max residual %.0f%%)\n",
                  backends::common::collective_name(f.kind), f.dtype.c_str(), f.world_size, f.alpha_s * 1e6,
                  f.busbw_gbps, f.points, 100 * f.max_rel_residual);
    std::cout << "calibration: " << o.calibrate << "\n";
  }
  return kExitOk;
}
}  // namespace

void add_micro_options(CLI::App& app, MicroOptions& o) {
  app.add_option("--nproc", o.nproc, "ranks to launch on this machine")->check(CLI::Range(1, 1024))->capture_default_str();
  app.add_flag("--quick", o.quick, "CI mode: collectives 1 KiB..64 KiB in fp32, the square GEMM, one unit's copies");
  app.add_option("--out", o.out, "Google Benchmark JSON (written by rank 0)")->capture_default_str();
  app.add_option("--calibrate", o.calibrate, "also fit alpha/busbw per collective and W into this calibration JSON");
  app.add_option("--device", o.device, "cpu|cuda")->check(CLI::IsMember({"cpu", "cuda"}))->capture_default_str();
  app.add_option("--threads", o.threads, "intra-op threads per rank (default cores / local ranks)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--dtypes", o.dtypes, "comma-separated: fp32,bf16 (default; --quick: fp32)");
  app.add_option("--suite", o.suite, "all|comm|compute")->check(CLI::IsMember({"all", "comm", "compute"}))->capture_default_str();
  app.add_option("--min-bytes", o.min_bytes, "smallest collective size (nccl-tests -b)")->capture_default_str();
  app.add_option("--max-bytes", o.max_bytes, "largest collective size (nccl-tests -e; sizes step x4)")->capture_default_str();
  add_model_options(app, o.model);
  app.add_option("--micro-batch", o.model.train.micro_batch, "GEMM shapes: samples per micro-batch")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--seq-len", o.model.train.seq_len, "GEMM shapes: tokens per sample")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_flag("--concurrent-gemm", o.concurrent_gemm,
               "CPU: time each collective while the rank runs its square GEMM on a thread of its own (a training "
               "step's compute beside its collectives); counter concurrent_gemm_runs");
  app.add_option("--timeout", o.timeout_s, "stop all ranks after this many seconds (0 = no limit)")
      ->check(CLI::NonNegativeNumber);
  auto* for_opt = app.add_option(
      "--for", o.for_report,
      "measure exactly what `zerobench project REPORT --nproc W` needs, W = --nproc: each collective size the run "
      "issues at W (per kind and dtype), its offload copies and host optimizer, and the square GEMM in its compute "
      "dtype, at the report's threads per rank");
  for (const char* other : {"--quick", "--dtypes", "--suite", "--min-bytes", "--max-bytes", "--model", "--layers",
                            "--hidden", "--heads", "--kv-heads", "--ffn", "--vocab", "--model-dir", "--micro-batch",
                            "--seq-len"})
    for_opt->excludes(other);
  app.allow_extras();  // --benchmark_* flags pass through to Google Benchmark
}

int micro_command(const MicroOptions& o_in, const std::vector<std::string>& argv) {
  MicroOptions o = o_in;
  check_benchmark_args(o.benchmark_args);
  suite_of(o, o.nproc);  // usage errors before anything starts
  const bool in_job =
      runtime::launched_by_zerobench() || runtime::discover_dist_env(runtime::process_env()).source != "single";
  if (!in_job && o.nproc == 1 && !o.calibrate.empty())
    throw UsageError("--calibrate needs collectives across ranks: --nproc 2 or more (at W=1 they are local copies)");
  if (in_job || o.nproc == 1) {
    if (!in_job) {
      runtime::hold_rendezvous_port();  // MASTER_ADDR/PORT + the held socket its TCPStore serves on
    }
    return micro_rank(o);
  }
  runtime::LaunchOptions lo;
  lo.nproc = o.nproc;
  lo.argv = argv;
  lo.timeout = std::chrono::milliseconds(int64_t(o.timeout_s * 1000));
  const auto res = runtime::launch_local(lo);
  if (res.exit_code == 0) return kExitOk;
  std::cerr << "zerobench: micro failed: " << res.message << "\n";
  return res.exit_code == kExitUsage ? kExitUsage : kExitFailed;
}

}  // namespace zb::bench::micro
