// The memory estimate out of sample: closed forms and estimates follow the shard group, not the
// world (FSDP1 HYBRID_SHARD, FSDP2 HSDP); fsdp2 has an estimate; on cells of
// bench/matrices/memory-estimate-heldout.yaml (settings the estimate was not written against)
// every rank's measured peak is within [0.95, 1.05] of its estimate; and a two-node HYBRID_SHARD
// run (two torchrun agents on this host) reports an estimate whose params term is the params
// bytes the engine measured.
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>

#include "backends/backend_info.hpp"
#include "backends/engine.hpp"
#include "reports/report.hpp"
#include "runtime/launcher.hpp"
#include "tests/run_binary.hpp"

using namespace zb;
using nlohmann::json;
using test_support::run_command;
using test_support::run_zerobench;
using test_support::temp_path;

namespace {

backends::EngineSpec tiny_spec(const std::string& precision, json options) {
  backends::EngineSpec spec;
  spec.model = models::preset("tiny");
  spec.precision = precision;
  spec.train.micro_batch = 2;
  spec.train.seq_len = 128;
  spec.options = std::move(options);
  return spec;
}

int64_t term(const json& estimate, const std::string& name, const std::string& phase) {
  for (const auto& t : estimate["terms"])
    if (t["name"] == name && t["phase"] == phase) return t["bytes"].get<int64_t>();
  return -1;
}

// `zerobench run` flags for one cell of a matrix file: base, then the cell's own options (a
// `true` flag is a bare flag), as the matrix runner builds them.
std::string cell_flags(const YAML::Node& base, const YAML::Node& cell) {
  std::map<std::string, std::string> opts;
  for (const auto& kv : base) opts[kv.first.as<std::string>()] = kv.second.as<std::string>();
  for (const auto& kv : cell) opts[kv.first.as<std::string>()] = kv.second.as<std::string>();
  std::string flags;
  for (const auto& [k, v] : opts) {
    if (v == "true") flags += " --" + k;
    else if (v != "false" || k == "reshard-after-forward") flags += " --" + k + " " + v;
  }
  return flags;
}

// peak_program_bytes / estimated_peak_bytes of every rank of a report: the program-order peak,
// which holds collectives' buffers from issue to wait as the estimate does and, unlike the observed
// peak_tracked_bytes, does not depend on when the collectives completed.
std::vector<double> peak_over_estimate(const json& report) {
  std::vector<double> out;
  for (const auto& rk : report["ranks"])
    out.push_back(rk["memory"]["peak_program_bytes"].get<double>() /
                  rk["memory"]["estimated_peak_bytes"].get<double>());
  return out;
}

std::string torchrun() {
  const char* v = std::getenv("ZEROBENCH_VENV");
  const char* home = std::getenv("HOME");
  return (v && *v ? std::string(v) : std::string(home ? home : "") + "/.cache/zerobench/venv") + "/bin/torchrun";
}

}  // namespace

TEST(MemoryEstimateTopology, ClosedFormsAndEstimatesShardOverTheNodeUnderHybridShard) {
  const auto hybrid = tiny_spec("fp32", {{"sharding_strategy", "HYBRID_SHARD"}});
  const auto full = tiny_spec("fp32", json::object());
  const auto& fsdp = backends::backend("fsdp");
  // Two nodes of two ranks: each unit is sharded over its node, as FULL_SHARD over 2 ranks is.
  const backends::Topology two_nodes(4, 2);
  EXPECT_EQ(two_nodes.nodes(), 2);
  EXPECT_EQ(fsdp.training.expected_bytes(hybrid, two_nodes, 0), fsdp.training.expected_bytes(full, 2, 0));
  // The fault this catches: counting the shard over all four ranks (a bare world size) halves it.
  EXPECT_LT(fsdp.training.expected_bytes(hybrid, 4, 0).params * 3 / 2,
            fsdp.training.expected_bytes(hybrid, two_nodes, 0).params);
  const auto e = backends::to_json(fsdp.training.estimate_peak(hybrid, two_nodes, 0, true));
  EXPECT_EQ(e["topology"]["shard_group"], 2);
  EXPECT_EQ(e["topology"]["ranks_per_node"], 2);
  EXPECT_EQ(term(e, "params", "resident"), fsdp.training.expected_bytes(full, 2, 0).params);
  // An explicit hybrid_shard_group_size wins over the node size.
  auto sized = hybrid;
  sized.options["hybrid_shard_group_size"] = 4;
  EXPECT_EQ(fsdp.training.expected_bytes(sized, backends::Topology(8, 2), 0), fsdp.training.expected_bytes(full, 4, 0));

  // FSDP2 HSDP: the mesh's dp_shard dimension is the shard group.
  const auto& fsdp2 = backends::backend("fsdp2");
  const auto hsdp = tiny_spec("mixed", {{"dp_replicate_size", 2}});
  const auto plain = tiny_spec("mixed", json::object());
  for (int rank = 0; rank < 4; ++rank)
    EXPECT_EQ(fsdp2.training.expected_bytes(hsdp, two_nodes, rank), fsdp2.training.expected_bytes(plain, 2, rank % 2))
        << rank;
  const auto e2 = backends::to_json(fsdp2.training.estimate_peak(hsdp, two_nodes, 1, true));
  EXPECT_EQ(e2["topology"]["shard_group"], 2);
  EXPECT_EQ(term(e2, "params", "resident"), fsdp2.training.expected_bytes(plain, 2, 1).params);
}

TEST(MemoryEstimateTopology, Fsdp2HasAnEstimateInModelInfo) {
  ASSERT_TRUE(backends::backend("fsdp2").training.estimate_peak);
  const auto info = run_zerobench("model-info tiny --world-size 2 --seq-len 128 --micro-batch 2 --json");
  ASSERT_EQ(info.exit_code, 0) << info.output;
  const auto j = json::parse(info.output);
  for (const char* mode : {"fsdp2:fp32", "fsdp2:low", "fsdp2:mixed"}) {
    const auto& e = j["estimated_peak_bytes_per_rank"]["modes"][mode];
    ASSERT_TRUE(e.is_object()) << mode;
    EXPECT_GT(e["peak_bytes"].get<int64_t>(), j["model_state_bytes_per_rank"][mode]["total"].get<int64_t>()) << mode;
  }
}

// A held-out cell is chosen by options it sets (every key must match the cell's own options).
bool cell_matches(const YAML::Node& cell, const std::map<std::string, std::string>& want) {
  for (const auto& [k, v] : want)
    if (!cell[k] || cell[k].as<std::string>() != v) return false;
  return true;
}

// Six cheap held-out cells (tiny model, 2 steps, W <= 3), one per setting the estimate was not
// written against: W = 3 (fsdp2), odd dimensions (fsdp2), another GQA ratio (ddp mixed),
// T = 256 (fsdp low), grad-accum 2 (fsdp2), ZeRO-3 persistence with a small reduce bucket. Every
// rank within [0.95, 1.05]. The matrix's other cells are in docs/metrics.md's generated table,
// including the one outside this band (fsdp fp32 with activation checkpointing, overestimated).
TEST(MemoryEstimateHeldOut, EveryRanksPeakIsWithinFivePercentOfItsEstimate) {
  const auto m = YAML::LoadFile(std::string(zb::bench::source_dir()) + "/bench/matrices/memory-estimate-heldout.yaml");
  const std::vector<std::map<std::string, std::string>> chosen = {
      {{"nproc", "3"}, {"backend", "fsdp2"}},
      {{"layers", "3"}, {"backend", "fsdp2"}},
      {{"heads", "8"}, {"backend", "ddp"}},
      {{"seq-len", "256"}, {"backend", "fsdp"}},
      {{"grad-accum", "2"}, {"backend", "fsdp2"}},
      {{"persistence-threshold", "50000"}, {"backend", "zero3"}},
  };
  std::vector<YAML::Node> cells;
  for (const auto& nproc : m["axes"]["nproc"])
    for (const auto& backend : m["axes"]["backend"]) {
      YAML::Node c;
      c["nproc"] = nproc.as<std::string>();
      c["backend"] = backend.as<std::string>();
      cells.push_back(c);
    }
  for (const auto& c : m["include"]) cells.push_back(c);
  int checked = 0;
  const auto out = temp_path("heldout.json");
  for (const auto& want : chosen) {
    const auto it = std::find_if(cells.begin(), cells.end(), [&](const YAML::Node& c) { return cell_matches(c, want); });
    ASSERT_NE(it, cells.end()) << "no held-out cell sets " << want.begin()->first;
    const auto flags = cell_flags(m["base"], *it);
    const auto r = run_zerobench("run" + flags + " --quiet --out " + out);
    ASSERT_EQ(r.exit_code, 0) << flags << "\n" << r.output;
    const auto report = reports::read_report(out);
    const auto ratios = peak_over_estimate(report);
    ASSERT_EQ(int(ratios.size()), (*it)["nproc"].as<int>()) << flags;
    for (size_t i = 0; i < ratios.size(); ++i) {
      EXPECT_GE(ratios[i], 0.95) << flags << " rank " << i << ": the estimate is more than 5% too high";
      EXPECT_LE(ratios[i], 1.05) << flags << " rank " << i << ": the estimate is more than 5% too low";
    }
    ++checked;
  }
  EXPECT_GE(checked, 4);
  std::remove(out.c_str());
}

// Two torchrun agents on this host, --nnodes 2 --nproc-per-node 2: HYBRID_SHARD shards each unit
// over its node's 2 ranks (LOCAL_WORLD_SIZE), so every rank holds half the parameters — and the
// estimate's params term (and the closed form) say so, not a quarter.
TEST(MemoryEstimateTwoNodes, HybridShardEstimateParamsTermEqualsTheMeasuredParamsBytes) {
  const auto tr = torchrun();
  ASSERT_EQ(access(tr.c_str(), X_OK), 0) << "torchrun not found at " << tr << " (scripts/setup.sh installs it)";
  const auto out = temp_path("two_nodes.json");
  std::remove(out.c_str());
  const int port = runtime::find_free_port();
  const std::string run = std::string(zb::test_support::zerobench_bin()) +
                          " run --model tiny --backend fsdp --precision fp32 --sharding-strategy HYBRID_SHARD "
                          "--micro-batch 2 --seq-len 64 --steps 2 --warmup 1 --threads 1 --quiet --out " + out;
  auto agent = [&](int node) {
    return tr + " --nnodes 2 --nproc-per-node 2 --rdzv-backend c10d --rdzv-endpoint 127.0.0.1:" +
           std::to_string(port) + " --node-rank " + std::to_string(node) + " --no-python " + run + " > " +
           temp_path("node" + std::to_string(node) + ".log") + " 2>&1";
  };
  const auto r = run_command("(" + agent(0) + ") & (" + agent(1) + "); s1=$?; wait $!; s0=$?; echo \"$s0 $s1\"");
  ASSERT_NE(r.output.find("0 0"), std::string::npos)
      << r.output << run_command("cat " + temp_path("node0.log") + " " + temp_path("node1.log")).output;
  const auto report = reports::read_report(out);
  ASSERT_EQ(report["ranks"].size(), 4u);
  const auto spec = tiny_spec("fp32", {{"sharding_strategy", "HYBRID_SHARD"}});
  const int64_t per_node = backends::backend("fsdp").training.expected_bytes(spec, backends::Topology(4, 2), 0).params;
  const int64_t over_world = backends::backend("fsdp").training.expected_bytes(spec, 4, 0).params;
  for (const auto& rk : report["ranks"]) {
    const auto& mem = rk["memory"];
    const int64_t measured = mem["model_states_bytes"]["params"].get<int64_t>();
    EXPECT_EQ(term(mem["estimate"], "params", "resident"), measured) << "rank " << rk["rank"];
    EXPECT_EQ(mem["model_states_expected_bytes"]["params"].get<int64_t>(), measured);
    EXPECT_EQ(measured, per_node);
    EXPECT_NE(measured, over_world) << "sharded over the world, not the node";
    EXPECT_EQ(mem["estimate"]["topology"]["shard_group"], 2);
    EXPECT_EQ(mem["estimate"]["topology"]["ranks_per_node"], 2);
  }
  EXPECT_EQ(report["config"]["backend"]["options"]["shard_group_size"], 2);
  // config.shard_layout: the groups the engine built (BackendInfo::training.shard_layout), node-local shards.
  EXPECT_EQ(report["config"]["shard_layout"]["ranks_per_node"], 2);
  EXPECT_EQ(report["config"]["shard_layout"]["shard_group"]["ranks"], json({0, 1}));
  EXPECT_EQ(report["config"]["shard_layout"]["replicate_group"]["ranks"], json({0, 2}));
  for (const char* f : {"node0.log", "node1.log"}) std::remove(temp_path(f).c_str());
  std::remove(out.c_str());
}

// The precision plan (config.precision_plan, the blog's Table 2) is what the engines allocate: at
// W=1, where nothing is padded or partitioned, each closed-form byte category is the model's
// parameter count times the plan's dtype (zero3's params also hold its persistent parameters'
// full copies, measured by the engine itself: config.backend.options.persistent_numel).
TEST(PrecisionPlan, ClosedFormBytesFollowThePlanAtW1) {
  const auto cfg = models::preset("tiny");
  const int64_t n = models::count_params(cfg).total;
  int checked = 0;
  for (const auto& b : backends::registered_backends()) {
    ASSERT_TRUE(bool(b.training.precision_plan)) << b.name << " registers no precision plan";
    for (const auto& p : b.precisions) {
      const auto spec = tiny_spec(p, json::object());
      const auto plan = b.training.precision_plan(spec);
      const auto bytes = b.training.expected_bytes(spec, backends::Topology(1), 0);
      auto size = [](at::ScalarType t) { return int64_t(c10::elementSize(t)); };
      SCOPED_TRACE(b.name + ":" + p);
      EXPECT_EQ(bytes.grads, n * size(plan.grads));
      EXPECT_EQ(bytes.optimizer, 2 * n * size(plan.optimizer_states));
      EXPECT_EQ(bytes.master_params, plan.master ? n * size(*plan.master) : 0);
      if (b.name != "zero3") EXPECT_EQ(bytes.params, n * size(plan.params));
      else EXPECT_GE(bytes.params, n * size(plan.params));
      ++checked;
    }
  }
  EXPECT_EQ(checked, 23);
}

// The plans as docs/precision.md and docs/backends/*.md describe each mode (load, params, compute,
// reduce, grads, master, optimizer states), with default options.
TEST(PrecisionPlan, EveryModeAsDocumented) {
  const std::map<std::string, std::string> want = {
      {"ddp:fp32", "fp32 fp32 fp32 fp32 fp32 - fp32"},    {"ddp:low", "bf16 bf16 bf16 bf16 bf16 - bf16"},
      {"ddp:mixed", "fp32 fp32 bf16 fp32 fp32 - fp32"},   {"fsdp:fp32", "fp32 fp32 fp32 fp32 fp32 - fp32"},
      {"fsdp:low", "bf16 bf16 bf16 bf16 bf16 - bf16"},    {"fsdp:mixed", "bf16 fp32 bf16 bf16 fp32 - fp32"},
      {"fsdp2:fp32", "fp32 fp32 fp32 fp32 fp32 - fp32"},  {"fsdp2:low", "bf16 bf16 bf16 bf16 bf16 - bf16"},
      {"fsdp2:mixed", "bf16 fp32 bf16 bf16 fp32 - fp32"}, {"zero3:fp32", "fp32 fp32 fp32 fp32 fp32 fp32 fp32"},
      {"zero3:bf16", "bf16 bf16 bf16 bf16 bf16 fp32 fp32"}, {"zero1:fp32", "fp32 fp32 fp32 fp32 fp32 fp32 fp32"},
      {"zero1:bf16", "bf16 bf16 bf16 bf16 bf16 fp32 fp32"}, {"zero2:fp32", "fp32 fp32 fp32 fp32 fp32 fp32 fp32"},
      {"zero2:bf16", "bf16 bf16 bf16 bf16 bf16 fp32 fp32"},
      // fp16 (issue 24): accelerate's MixedPrecision(Policy) in fp16 over an fp32 load; DeepSpeed's fp16 model dtype.
      {"fsdp:fp16", "fp32 fp32 fp16 fp16 fp32 - fp32"},   {"fsdp2:fp16", "fp32 fp32 fp16 fp16 fp32 - fp32"},
      {"zero3:fp16", "fp16 fp16 fp16 fp16 fp16 fp32 fp32"},
      {"zero1:fp16", "fp16 fp16 fp16 fp16 fp16 fp32 fp32"}, {"zero2:fp16", "fp16 fp16 fp16 fp16 fp16 fp32 fp32"},
      // ZeRO stage 0: the basic optimizer on the fp32 parameters; FP16_UnfusedOptimizer's fp32 masters.
      {"zero0:fp32", "fp32 fp32 fp32 fp32 fp32 - fp32"},   {"zero0:bf16", "bf16 bf16 bf16 bf16 bf16 fp32 fp32"},
      {"zero0:fp16", "fp16 fp16 fp16 fp16 fp16 fp32 fp32"}};
  std::map<std::string, std::string> got;
  for (const auto& b : backends::registered_backends())
    for (const auto& p : b.precisions) {
      const auto j = backends::to_json(b.training.precision_plan(tiny_spec(p, json::object())));
      std::string row;
      for (const char* k : {"load", "params", "compute", "reduce", "grads", "master", "optimizer_states"})
        row += (row.empty() ? "" : " ") + (j[k].is_null() ? std::string("-") : j[k].get<std::string>());
      got[b.name + ":" + p] = row;
    }
  EXPECT_EQ(got, want);
  // Options move the plan the way the engines read them: FSDP1 mixed with reduce_dtype fp32, ZeRO-3
  // bf16 with communication_data_type fp32 (DeepSpeed's fp32 gradient reduction).
  EXPECT_EQ(backends::backend("fsdp").training.precision_plan(tiny_spec("mixed", {{"reduce_dtype", "fp32"}})).reduce,
            at::kFloat);
  EXPECT_EQ(backends::backend("zero3")
                .training.precision_plan(tiny_spec("bf16", {{"communication_data_type", "fp32"}}))
                .reduce,
            at::kFloat);
}

// Issue 35, finding 6: `model-info` printed two peaks for one mode (fsdp:mixed 81.00 GiB in the
// estimate table, 77.82 GiB "fits" in the offload table) without saying why: the first was a CPU
// run's (Gloo stages collectives in host memory), the second a GPU run's. Now every mode has one
// peak per device, labelled, and the offload table's "none" row is the gpu run's, in the text and
// in the JSON.
TEST(ModelInfoPeaks, OnePeakPerModeAndDeviceAndTheOffloadTablesNoneRowIsTheGpuRuns) {
  const std::string args = "model-info llama2-70b --world-size 16 --micro-batch 1 --seq-len 2048 "
                           "--activation-checkpointing --device-memory 80";
  const auto info = run_zerobench(args + " --json");
  ASSERT_EQ(info.exit_code, 0) << info.output;
  const auto j = json::parse(info.output);
  const auto& by = j["estimated_peak_bytes_per_rank"]["by_device"];
  ASSERT_TRUE(by.contains("cpu") && by.contains("cuda")) << "no estimated_peak_bytes_per_rank.by_device.{cpu,cuda}";
  int none_rows = 0;
  for (const auto& row : j["offload"]["rows"]) {
    if (row["offload"] != "none" || !row.contains("estimated_device_peak_bytes")) continue;
    EXPECT_EQ(row["estimated_device_peak_bytes"], by["cuda"][row["mode"].get<std::string>()]["peak_bytes"]) << row["mode"];
    ++none_rows;
  }
  EXPECT_GE(none_rows, 4);
  // --device cpu (the default): the full estimate is the cpu run's.
  for (const auto& [mode, e] : j["estimated_peak_bytes_per_rank"]["modes"].items())
    EXPECT_EQ(e["peak_bytes"], by["cpu"][mode]["peak_bytes"]) << mode;
  // The two differ for fsdp:mixed (Gloo's staging), so the labels matter.
  EXPECT_GT(by["cpu"]["fsdp:mixed"]["peak_bytes"].get<int64_t>(), by["cuda"]["fsdp:mixed"]["peak_bytes"].get<int64_t>());
  // The text: one line per mode with both, labelled; the offload table's none row repeats the gpu run's.
  const auto text = run_zerobench(args);
  ASSERT_EQ(text.exit_code, 0) << text.output;
  EXPECT_NE(text.output.find("cpu run: Gloo"), std::string::npos) << text.output;
  EXPECT_NE(text.output.find("gpu run: NCCL"), std::string::npos) << text.output;
  const auto gib = [](const json& bytes) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%.2f", bytes.get<double>() / double(1 << 30));
    return std::string(buf);
  };
  const std::string cpu = gib(by["cpu"]["fsdp:mixed"]["peak_bytes"]), gpu = gib(by["cuda"]["fsdp:mixed"]["peak_bytes"]);
  size_t line_at = std::string::npos;
  for (size_t at = text.output.find("\n  fsdp:mixed "); at != std::string::npos;
       at = text.output.find("\n  fsdp:mixed ", at + 1)) {
    const auto line = text.output.substr(at + 1, text.output.find('\n', at + 1) - at - 1);
    if (line.find(" none ") != std::string::npos) {
      EXPECT_NE(line.find("peak " + std::string(std::max<int>(0, 8 - int(gpu.size())), ' ') + gpu + " |"), std::string::npos)
          << line;
    } else if (line.find("GiB (") != line.rfind("GiB (")) {  // the estimate table: two peaks on the line
      line_at = at;
      EXPECT_LT(line.find(cpu + " GiB"), line.find(gpu + " GiB")) << line;  // cpu run, then gpu run
      EXPECT_NE(line.find(gpu + " GiB"), std::string::npos) << line;
    }
  }
  EXPECT_NE(line_at, std::string::npos) << text.output;
}

// Issue 35, finding 6: ZeRO-3 with offload_optimizer + offload_param (cpu) and HF's "auto" buckets
// (a real file: reduce_bucket_size = H^2, stage3_prefetch_bucket_size = 0.9 H^2, persistence
// 10 H), on the tiny model. The estimate was 20% high at one micro-batch of 64 tokens (peak /
// estimate 0.83) and 1.4% high at the default 4 x 128 (the offload terms counted transients that
// never coexist). Every rank within [0.95, 1.05] on both cells.
TEST(MemoryEstimateHeldOut, Zero3BothOffloadsWithAutoBucketsIsWithinFivePercent) {
  const std::string config = std::string(zb::bench::source_dir()) + "/tests/configs/real/llamafactory_ds_z3_offload_config.json";
  const auto out = temp_path("z3_offload_auto.json");
  for (const std::string cell : {"--micro-batch 1 --seq-len 64", "--micro-batch 4 --seq-len 128"}) {
    const auto r = run_zerobench("run --config " + config + " --model tiny --nproc 2 --steps 3 --threads 1 " + cell +
                                 " --quiet --out " + out);
    ASSERT_EQ(r.exit_code, 0) << cell << "\n" << r.output;
    const auto report = reports::read_report(out);
    const auto& o = report["config"]["backend"]["options"];
    ASSERT_EQ(o["reduce_bucket_size"], 128 * 128) << cell;  // "auto" as HF fills it
    ASSERT_EQ(o["offload"]["optimizer"], "cpu");
    ASSERT_EQ(o["offload"]["param"], "cpu");
    const auto ratios = peak_over_estimate(report);
    ASSERT_EQ(ratios.size(), 2u);
    for (size_t i = 0; i < ratios.size(); ++i) {
      EXPECT_GE(ratios[i], 0.95) << cell << " rank " << i << ": the estimate is more than 5% too high";
      EXPECT_LE(ratios[i], 1.05) << cell << " rank " << i << ": the estimate is more than 5% too low";
    }
  }
  std::remove(out.c_str());
}
