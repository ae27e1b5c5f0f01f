// study_lifecycle.cpp — `zerobench study lifecycle` (study_lifecycle.hpp).
#include "bench/lifecycle/study_lifecycle.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>

#include "backends/backend_info.hpp"
#include "backends/common/initial_weights.hpp"
#include "models/checkpoint/hf_llama.hpp"
#include "models/llama.hpp"
#include "reports/report.hpp"
#include "reports/run_report.hpp"
#include "runtime/errors.hpp"
#include "runtime/subprocess.hpp"

namespace zb::bench::lifecycle {

namespace {
using json = nlohmann::json;

std::string mb(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f", bytes / 1e6);
  return buf;
}
std::string gb(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.0f", bytes / 1e9);
  return buf;
}
std::string secs(double s) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.3f", s);
  return buf;
}

int64_t largest_unit(const models::ModelConfig& cfg) {
  int64_t m = 0;
  for (int u = 0; u < int(models::unit_count(cfg)); ++u) m = std::max(m, backends::common::unit_numel(cfg, u));
  return m;
}

}  // namespace

LoadRamProjection project_load_ram(const std::string& strategy, int64_t params, int64_t largest_unit_params,
                                   int bytes_per_param, int world) {
  const double model = double(params) * bytes_per_param;
  LoadRamProjection p;
  if (strategy == "all-ranks") {
    p.rank0_bytes = p.other_bytes = model;
  } else if (strategy == "rank0-broadcast") {
    p.rank0_bytes = model;
    p.other_bytes = double(largest_unit_params) * bytes_per_param;  // one unit in flight
  } else if (strategy == "sharded") {
    p.rank0_bytes = p.other_bytes = model / world;
  } else {
    throw UsageError("unknown load strategy " + strategy);
  }
  p.node_bytes = p.rank0_bytes + p.other_bytes * (world - 1);
  return p;
}

int lifecycle_study_command(const LifecycleStudyOptions& opts) {
  LifecycleStudyOptions o = opts;
  if (o.backend.empty()) o.backend = backends::lifecycle_study_backend();
  reports::make_directories(o.out_dir);
  const std::string exe = runtime::self_executable();
  const std::vector<std::string> strategies = {"all-ranks", "rank0-broadcast", "sharded"};
  const std::vector<std::string> state_dicts = {"sharded", "full"};
  json cells = json::array();
  std::ostringstream table;
  table << "| model | W | load strategy | state dict | load RSS +MB rank 0 | load RSS +MB others (max) | read MB rank 0 | "
           "read MB others (max) | load s (max) | save s (max) | written MB rank 0 | written MB others (max) | "
           "longest wait s |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
  for (const auto& model : o.models) {
    const auto cfg = models::preset(model);
    const std::string dir = o.out_dir + "/models/" + model;
    struct stat st;
    if (::stat((dir + "/config.json").c_str(), &st) != 0) {
      std::vector<at::Tensor> units;
      for (int u = 0; u < int(models::unit_count(cfg)); ++u) units.push_back(models::init_unit_flat(cfg, u, 1234));
      models::checkpoint::write_hf_llama(dir, cfg, units, at::kFloat);
    }
    for (int w : o.worlds)
      for (const auto& strategy : strategies)
        for (const auto& sd : state_dicts) {
          const std::string id = model + "-w" + std::to_string(w) + "-" + strategy + "-" + sd;
          const std::string report_path = o.out_dir + "/" + id + ".json";
          const std::string ckpt_dir = o.out_dir + "/checkpoints/" + id;
          std::vector<std::string> argv = {exe, "run", "--backend", o.backend, "--nproc", std::to_string(w),
                                           "--model-dir", dir, "--load-strategy", strategy, "--steps", "2",
                                           "--warmup", "1", "--micro-batch", "1", "--seq-len", "16", "--threads", "1",
                                           "--no-memory-check", "--checkpoint-dir", ckpt_dir, "--checkpoint-every", "2",
                                           "--state-dict", sd, "--out", report_path, "--quiet"};
          std::cerr << "zerobench study lifecycle: " << id << "\n";
          const auto r = runtime::run_subprocess(argv, std::chrono::milliseconds(int64_t(o.timeout_s * 1000)));
          if (r.exit_code != 0) {
            std::cerr << "zerobench study lifecycle: " << id << " failed (exit " << r.exit_code << "): " << r.stderr_tail
                      << "\n";
            cells.push_back({{"id", id}, {"state", "failed"}});
            continue;
          }
          const auto rep = reports::run_report_from_json(reports::read_report(report_path));
          double rss0 = 0, rss_other = 0, read0 = 0, read_other = 0, load_s = 0, save_s = 0, wr0 = 0, wr_other = 0,
                 wait = 0;
          for (const auto& rank : rep.rank_records()) {
            const auto life = rank.lifecycle.value_or(reports::RankLifecycle{});
            const auto l = life.load.value_or(reports::LoadRecord{});
            const auto c = life.checkpoint.value_or(reports::CheckpointRecord{});
            const double rss = l.peak_rss_bytes ? double(*l.peak_rss_bytes - l.rss_before_bytes.value_or(0)) : 0;
            const bool zero = rank.rank == 0;
            (zero ? rss0 : rss_other) = std::max(zero ? rss0 : rss_other, rss);
            (zero ? read0 : read_other) = std::max(zero ? read0 : read_other, double(l.bytes_read));
            (zero ? wr0 : wr_other) = std::max(zero ? wr0 : wr_other, double(c.bytes_written));
            load_s = std::max(load_s, l.wall_s);
            save_s = std::max(save_s, c.save_s_max);
            wait = std::max(wait, c.longest_wait_s);
          }
          table << "| " << model << " | " << w << " | " << strategy << " | " << sd << " | " << mb(rss0) << " | "
                << mb(rss_other) << " | " << mb(read0) << " | " << mb(read_other) << " | " << secs(load_s) << " | "
                << secs(save_s) << " | " << mb(wr0) << " | " << mb(wr_other) << " | " << secs(wait) << " |\n";
          cells.push_back({{"id", id},
                           {"state", "ok"},
                           {"model", model},
                           {"world_size", w},
                           {"load_strategy", strategy},
                           {"state_dict", sd},
                           {"model_bytes", models::count_params(cfg).total * 4},
                           {"load_rss_increase_bytes", {{"rank0", rss0}, {"others_max", rss_other}}},
                           {"bytes_read", {{"rank0", read0}, {"others_max", read_other}}},
                           {"load_s_max", load_s},
                           {"save_s_max", save_s},
                           {"bytes_written", {{"rank0", wr0}, {"others_max", wr_other}}},
                           {"longest_wait_s", wait},
                           {"report", id + ".json"}});
        }
  }
  // Projections: CPU RAM per rank to load, W=8 (the article's node), fp32 and bf16 weights.
  std::ostringstream proj;
  proj << "| model | dtype | load strategy | rank 0 GB | each other rank GB | node (8 ranks) GB |\n|---|---|---|---|---|---|\n";
  json projections = json::array();
  for (const std::string model : {"llama2-7b", "llama2-70b"}) {
    const auto cfg = models::preset(model);
    const int64_t n = models::count_params(cfg).total, unit = largest_unit(cfg);
    for (const auto& [dtype, bpp] : std::vector<std::pair<std::string, int>>{{"fp32", 4}, {"bf16", 2}})
      for (const auto& s : strategies) {
        const auto p = project_load_ram(s, n, unit, bpp, 8);
        proj << "| " << model << " | " << dtype << " | " << s << " | " << gb(p.rank0_bytes) << " | " << gb(p.other_bytes)
             << " | " << gb(p.node_bytes) << " |\n";
        projections.push_back({{"model", model},
                               {"dtype", dtype},
                               {"strategy", s},
                               {"world_size", 8},
                               {"rank0_bytes", p.rank0_bytes},
                               {"other_rank_bytes", p.other_bytes},
                               {"node_bytes", p.node_bytes}});
      }
  }
  const json summary = {{"schema", {{"name", "zerobench.lifecycle-study"}, {"version", 1}}},
                        {"backend", o.backend},
                        {"cells", cells},
                        {"projections_w8", projections}};
  reports::write_json_atomic(o.out_dir + "/summary.json", summary);
  std::ofstream(o.out_dir + "/table.md") << table.str() << "\n" << proj.str();
  std::cout << table.str() << "\nCPU RAM to load, W=8 (rank0-broadcast's other ranks hold one unit at a time):\n"
            << proj.str();
  for (const auto& c : cells)
    if (c["state"] != "ok") return 1;
  return 0;
}

}  // namespace zb::bench::lifecycle
