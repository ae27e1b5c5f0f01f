// `zerobench study workload` (bench/workload/): its cells and options, the findings and
// consistency checks computed from synthetic reports (exact text; a planted fault flagged), bad
// values (exit 2, one line), the committed results regenerated from their reports, and a 2-cell run.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "bench/matrix/matrix.hpp"
#include "bench/workload/study_workload.hpp"
#include "runtime/errors.hpp"
#include "tests/run_binary.hpp"

using nlohmann::json;
namespace wl = zb::bench::workload;

namespace {

std::vector<std::string> ids(const std::vector<wl::WorkloadCell>& cells) {
  std::vector<std::string> v;
  for (const auto& c : cells) v.push_back(c.id);
  return v;
}

std::string read(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// A finished cell's report with the fields the study reads (2 ranks; rank 1 peaks 1 MiB lower).
zb::reports::RunReport report(double tps, double mfu, double padding, double docs, double span, double peak_mib,
                              int64_t recompute_flops, double loss, const std::vector<double>& step_times = {}) {
  zb::reports::RunReport r;
  r.status.state = "ok";
  zb::reports::Summary s;
  s.tokens_per_gpu_per_s.median = tps;
  s.mfu = mfu;
  s.final_loss = loss;
  if (recompute_flops > 0) s.recompute_flops_per_step = recompute_flops;
  zb::reports::BatchingSummary b;
  b.padding_fraction = padding;
  b.documents_per_rank_per_step = docs;
  b.attention_span = span;
  b.real_tokens_per_rank_per_step = 2048 * (1 - padding);
  s.batching = b;
  r.summary = s;
  std::vector<zb::reports::RankRecord> ranks(2);
  for (int k = 0; k < 2; ++k) {
    const int64_t peak = int64_t((peak_mib - k) * 1024 * 1024);
    ranks[size_t(k)].rank = k;
    ranks[size_t(k)].memory.peak_program_bytes = peak;
    ranks[size_t(k)].memory.peak_tracked_bytes = peak + 4096;
    ranks[size_t(k)].memory.estimated_peak_bytes = peak;
  }
  r.ranks = ranks;
  if (!step_times.empty()) {  // measured steps; the summary's median step time is their median
    std::vector<zb::reports::StepRecord> steps;
    for (size_t i = 0; i < step_times.size(); ++i) {
      zb::reports::StepRecord st;
      st.step = int64_t(i);
      st.measured = true;
      st.time_s = step_times[i];
      steps.push_back(st);
    }
    r.steps = steps;
    auto sorted = step_times;
    std::sort(sorted.begin(), sorted.end());
    r.summary->step_time_s.median = sorted[sorted.size() / 2];
  }
  return r;
}

// Two sides x pad/pack/pack-naive x none/full, numbers chosen so every ratio is exact.
struct WorkloadCells {
  std::vector<wl::WorkloadCell> cells;
  std::vector<zb::reports::RunReport> reports;
};
WorkloadCells workload_cells() {
  wl::WorkloadStudyOptions o;
  o.ac_modes = {"none", "full"};
  WorkloadCells s;
  s.cells = wl::workload_cells(o);
  for (const auto& c : s.cells) {
    const bool fsdp = c.side.label == "fsdp", full = c.ac == "full";
    const double side = fsdp ? 1.0 : 0.5;  // ZeRO3-mode at half FSDP-mode's throughput
    double tps = 0, pad = 0, docs = 0, span = 0;
    if (c.batching == "pad") tps = 100, pad = 0.875, docs = 8, span = 20;
    if (c.batching == "pack") tps = 400, pad = 0.0625, docs = 60, span = 20;
    if (c.batching == "pack-naive") tps = 500, pad = 0, docs = 64, span = 256;
    if (full) tps *= 0.75;
    s.reports.push_back(report(tps * side, 0.01 * side, pad, docs, span, (fsdp ? 10.0 : 12.0) - (full ? 2.0 : 0.0),
                               full ? 500000000 : 0, 7.5));
  }
  return s;
}

}  // namespace

TEST(WorkloadStudy, CellsAreSideThenBatchingThenAcInTheOrderGiven) {
  const wl::WorkloadStudyOptions o;
  const auto cells = wl::workload_cells(o);
  ASSERT_EQ(cells.size(), 18u);
  EXPECT_EQ(ids(cells).front(), "fsdp_pad_ac-none");
  EXPECT_EQ(cells[1].id, "fsdp_pad_ac-full");
  EXPECT_EQ(cells[2].id, "fsdp_pad_ac-selective-layer-2");
  EXPECT_EQ(cells[3].id, "fsdp_pack_ac-none");
  EXPECT_EQ(cells[8].id, "fsdp_pack-naive_ac-selective-layer-2");
  EXPECT_EQ(cells[9].id, "zero3_pad_ac-none");
  EXPECT_EQ(ids(cells).back(), "zero3_pack-naive_ac-selective-layer-2");
  EXPECT_EQ(cells[9].side.title, "ZeRO3-mode");

  wl::WorkloadStudyOptions sub;
  sub.backends = {"zero3"};
  sub.batchings = {"pack", "pad"};
  sub.ac_modes = {"selective-layer:2", "none"};
  EXPECT_EQ(ids(wl::workload_cells(sub)), (std::vector<std::string>{"zero3_pack_ac-selective-layer-2", "zero3_pack_ac-none",
                                                                     "zero3_pad_ac-selective-layer-2", "zero3_pad_ac-none"}));
}

TEST(WorkloadStudy, EachCellRunsTheBlogFileWithItsBatchingAndAcMode) {
  wl::WorkloadStudyOptions o;
  o.steps = 10;
  o.layers = 4;
  const auto cells = wl::workload_cells(o);
  const auto spec = wl::workload_matrix(o, cells);
  ASSERT_EQ(spec.cells.size(), cells.size());
  std::string args;
  for (const auto& a : zb::bench::cell_run_args(spec.cells[14])) args += a + " ";  // zero3, pack, selective-layer:2
  EXPECT_EQ(spec.cells[14].id, "zero3_pack_ac-selective-layer-2");
  EXPECT_NE(args.find("--config "), std::string::npos) << args;
  EXPECT_NE(args.find("deepspeed_zero3_blog.json --model tiny --layers 4 --nproc 2 --micro-batch 8 --seq-len 256 "
                      "--steps 10 --warmup 2 --data lengths:"),
            std::string::npos)
      << args;
  EXPECT_NE(args.find("workload/doc_lengths_t256.json --batching pack --activation-checkpointing selective-layer:2 "
                      "--seed 1234 --device cpu"),
            std::string::npos)
      << args;
  // Every cell parses exactly as `zerobench run` would, and resolves to the side's backend.
  for (size_t i = 0; i < cells.size(); ++i) {
    const auto r = zb::bench::validate_cell(spec.cells[i]);
    EXPECT_EQ(r.backend, cells[i].side.label) << cells[i].id;
    EXPECT_EQ(r.micro_batch, 8) << cells[i].id;
  }
}

TEST(WorkloadStudy, BadValuesAreOneUsageLine) {
  auto refused = [](wl::WorkloadStudyOptions o, const std::string& names) {
    try {
      wl::workload_cells(o);
      ADD_FAILURE() << "accepted " << names;
    } catch (const zb::UsageError& e) {
      EXPECT_NE(std::string(e.what()).find(names), std::string::npos) << e.what();
    }
  };
  wl::WorkloadStudyOptions o;
  o.batchings = {"pad", "bogus"};
  refused(o, "--batchings: unknown batching 'bogus' (pad, pad-longest, pack, pack-naive)");
  o = {};
  o.batchings = {"pad", "pad"};
  refused(o, "'pad' is listed twice");
  o = {};
  o.ac_modes = {"sometimes"};
  refused(o, "'sometimes' is not a mode");
  o = {};
  o.backends = {"ddp"};
  refused(o, "--backends: unknown backend 'ddp' (fsdp, zero3)");
  o = {};
  o.zero3_config = "no/such/file.json";
  refused(o, "no file 'no/such/file.json'");

  // Through the binary: exit 2 and one line naming the value, nothing run.
  const auto dir = zb::test_support::temp_path("workload_bad");
  for (const std::string& args : {std::string("--batchings pad,bogus"), std::string("--ac-modes none,sometimes"),
                                  std::string("--backends fsdp,ddp"), std::string("--micro-batch 4")}) {
    const auto r = zb::test_support::run_zerobench("study workload --out " + dir + " " + args);
    EXPECT_EQ(r.exit_code, 2) << args << "\n" << r.output;
    EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << args << "\n" << r.output;
  }
  // --micro-batch 4 conflicts with the DeepSpeed file's explicit 8, as HF's fill_match refuses it.
  EXPECT_NE(zb::test_support::run_zerobench("study workload --out " + dir + " --micro-batch 4").output.find(
                "train_micro_batch_size_per_gpu"),
            std::string::npos);
  EXPECT_NE(system(("test -e " + dir).c_str()), 0);  // nothing written
}

TEST(WorkloadStudy, FindingsAreComputedFromTheNumbers) {
  const auto s = workload_cells();
  const auto f = wl::workload_findings(s.cells, s.reports);
  EXPECT_TRUE(f.checks.empty()) << f.checks.front();
  EXPECT_TRUE(f.failed.empty());
  ASSERT_EQ(f.findings.size(), 7u);
  EXPECT_EQ(f.findings[0],
            "FSDP-mode, AC none: pack trains 4.00× pad's real tokens/GPU/s (400.0 vs 100.0) at padding fraction 0.062 "
            "vs 0.875, 60.0 vs 8.0 documents/rank/step; MFU 0.0100 vs 0.0100.");
  EXPECT_EQ(f.findings[1],
            "FSDP-mode, AC none: pack-naive trains 5.00× pad's and 1.25× pack's real tokens/GPU/s (500.0) at padding "
            "fraction 0.000, but under one causal mask across documents: attention span 256.0 tokens vs pack's 20.0 "
            "(MFU counts the span: 0.0100).");
  EXPECT_EQ(f.findings[2].rfind("ZeRO3-mode, AC none: pack trains 4.00× pad's ", 0), 0u) << f.findings[2];
  EXPECT_EQ(f.findings[4],
            "FSDP-mode, pack: AC full changes real tokens/GPU/s by -25.0% (300.0 vs 400.0) and the peak by -2.00 MiB "
            "(8.00 vs 10.00 MiB), recomputing 0.500 GFLOP/step.");
  EXPECT_EQ(f.findings[6],
            "FSDP-mode / ZeRO3-mode: real tokens/GPU/s 2.00× (geometric mean over 6 matched cells, range 2.00–2.00), "
            "peak memory 0.82× (range 0.80–0.83).");
  ASSERT_EQ(f.cells.size(), 12u);
  EXPECT_EQ(f.cells[0]["id"], "fsdp_pad_ac-none");
  EXPECT_EQ(f.cells[0]["peak_mib"].get<double>(), 10.0);            // the largest rank's program-order peak
  EXPECT_EQ(f.cells[0]["peak_over_estimate"].get<double>(), 1.0);
  EXPECT_EQ(f.cells[1]["recompute_gflops_per_step"].get<double>(), 0.5);
  const auto table = wl::workload_table_markdown(s.cells, s.reports);
  EXPECT_NE(table.find("| FSDP-mode (fsdp) | pad | none | 100.0 | - | 0.0100 | 0.875 | 8.0 | 20.0 | 10.00 | 10.00 | 10.00 | "
                       "1.000 | 0.000 | 7.5000 | ok |"),
            std::string::npos)
      << table;
}

// Throughput differences inside the cells' 95% intervals (the median step time's, over the
// measured steps) are said to be unresolved; the backend ratio counts the pairs that are resolved.
TEST(WorkloadStudy, DifferencesWithinTheIntervalsAreSaidToBeUnresolved) {
  auto s = workload_cells();
  const std::vector<double> steady = {1, 1, 1, 1, 1}, noisy = {0.125, 1, 1, 1, 8};  // n = 5: [min, max]
  s.reports[0] = report(100, 0.01, 0.875, 8, 20, 10, 0, 7.5, steady);     // fsdp pad none: [100, 100]
  s.reports[2] = report(400, 0.01, 0.0625, 60, 20, 10, 0, 7.5, noisy);    // fsdp pack none: [50, 3200]
  s.reports[6] = report(50, 0.005, 0.875, 8, 20, 12, 0, 7.5, steady);     // zero3 pad none: [50, 50]
  const auto f = wl::workload_findings(s.cells, s.reports);
  const std::string note = " [within the two cells' 95% intervals: not resolved]";
  ASSERT_GE(f.findings[0].size(), note.size());
  EXPECT_EQ(f.findings[0].substr(f.findings[0].size() - note.size()), note) << f.findings[0];
  EXPECT_EQ(f.findings[2].find(note), std::string::npos) << f.findings[2];  // zero3: no intervals, no note
  EXPECT_NE(f.findings.back().find("; the throughputs differ beyond their 95% intervals in 1 of 1 pairs."),
            std::string::npos)
      << f.findings.back();
  EXPECT_EQ(f.cells[2]["real_tokens_per_gpu_per_s_interval"], json({50.0, 3200.0}));
  EXPECT_NE(wl::workload_table_markdown(s.cells, s.reports).find("| pack | none | 400.0 | 50.0 – 3200.0 |"),
            std::string::npos);
}

// The planted faults: a pack cell padding more than pad, pack-naive with padding, FLOPs
// recomputed without AC. Each is flagged; a failed cell is listed and left out of the ratios.
TEST(WorkloadStudy, ChecksFlagAPlantedFault) {
  auto s = workload_cells();
  s.reports[2].summary->batching->padding_fraction = 0.9;  // fsdp, pack, none: more than pad's 0.875
  auto f = wl::workload_findings(s.cells, s.reports);
  ASSERT_EQ(f.checks.size(), 1u);
  EXPECT_EQ(f.checks[0],
            "fsdp, AC none: pack's padding fraction 0.9000 exceeds pad's 0.8750 (packing whole documents into rows "
            "cannot pad more than one document a row)");
  EXPECT_NE(wl::workload_findings_markdown(f).find("Consistency checks that FAILED"), std::string::npos);

  s = workload_cells();
  s.reports[5].summary->batching->padding_fraction = 0.01;  // fsdp, pack-naive, full
  s.reports[6].summary->recompute_flops_per_step = 7;       // zero3, pad, none
  s.reports[9].summary->batching->documents_per_rank_per_step = 4;  // zero3, pack, full: fewer than pad's 8
  f = wl::workload_findings(s.cells, s.reports);
  ASSERT_EQ(f.checks.size(), 3u);
  EXPECT_EQ(f.checks[0], "fsdp, AC full: pack-naive's padding fraction is 0.0100, not 0 (it concatenates documents)");
  EXPECT_EQ(f.checks[1], "zero3, AC full: pack holds 4.00 documents/rank/step, fewer than pad's 8.00");
  EXPECT_EQ(f.checks[2], "zero3, pad, AC none: 7 FLOP/step recomputed without AC");

  s = workload_cells();
  s.reports[3].status = {"oom", "rank 0 killed by signal 9", std::nullopt, {}};  // fsdp, pack, full
  f = wl::workload_findings(s.cells, s.reports);
  ASSERT_EQ(f.failed.size(), 1u);
  EXPECT_EQ(f.failed[0], "fsdp_pack_ac-full (oom: rank 0 killed by signal 9)");
  EXPECT_EQ(f.findings.size(), 6u);  // no AC finding for fsdp
  EXPECT_NE(f.findings.back().find("over 5 matched cells"), std::string::npos) << f.findings.back();
  EXPECT_TRUE(f.cells[3]["real_tokens_per_gpu_per_s_median"].is_null());
}

// The committed results: re-running the command on a copy of the committed reports reuses every
// cell and writes the committed summary again, byte for byte; the docs hold that table.
TEST(WorkloadStudy, CommittedResultsRegenerateFromTheirReports) {
  const std::string src = zb::bench::source_dir(), committed = src + "/reports/results/cpu/workload";
  const auto dir = zb::test_support::make_clean_dir("workload_committed");
  ASSERT_EQ(system(("cp " + committed + "/*.json " + dir + "/").c_str()), 0);
  const auto r = zb::test_support::run_command("cd " + src + " && " + zb::test_support::zerobench_bin() + " study workload --out " + dir +
                                               " 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.find("ok    "), std::string::npos);  // nothing ran: every cell "(ok)"
  EXPECT_EQ(read(dir + "/summary.md"), read(committed + "/summary.md"));
  EXPECT_EQ(json::parse(read(dir + "/summary.json")), json::parse(read(committed + "/summary.json")));
  const auto check = zb::test_support::run_command("python3 " + src + "/scripts/splice_table.py workload-study --check " +
                                                   committed + "/summary.md " + src + "/docs/workload.md 2>&1");
  EXPECT_EQ(check.exit_code, 0) << check.output;
  system(("rm -rf " + dir).c_str());
}

// End to end, 2 cells of 2 steps: the reports, summary, table and figures are written, the AC cell
// recomputed FLOPs and the no-AC cell none, and a re-run reuses both cells.
TEST(WorkloadStudy, TwoCellsEndToEnd) {
  const auto dir = zb::test_support::temp_path("workload_e2e");
  const std::string args = "study workload --backends zero3 --batchings pack --ac-modes none,full --steps 2 "
                           "--warmup 1 --out " + dir;
  auto r = zb::test_support::run_zerobench(args);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto summary = json::parse(read(dir + "/summary.json"));
  EXPECT_EQ(summary["schema"]["name"], "zerobench.workload-study");
  ASSERT_EQ(summary["cells"].size(), 2u);
  const auto& none = summary["cells"][0];
  const auto& full = summary["cells"][1];
  EXPECT_EQ(none["id"], "zero3_pack_ac-none");
  EXPECT_EQ(full["id"], "zero3_pack_ac-full");
  for (const auto* c : {&none, &full}) {
    EXPECT_EQ((*c)["status"], "ok") << c->dump();
    EXPECT_GT((*c)["real_tokens_per_gpu_per_s_median"].get<double>(), 0);
    // Greedy packing of the t256 distribution leaves the tail of a row (about 0.17 in 2 steps), far
    // below the 0.86 padding one document a row needs.
    EXPECT_LT((*c)["padding_fraction"].get<double>(), 0.5);
  }
  EXPECT_EQ(none["recompute_gflops_per_step"].get<double>(), 0.0);
  EXPECT_GT(full["recompute_gflops_per_step"].get<double>(), 0.0);
  EXPECT_LT(full["peak_mib"].get<double>(), none["peak_mib"].get<double>());  // full AC keeps block inputs only
  EXPECT_TRUE(summary["checks_failed"].empty());
  EXPECT_NE(read(dir + "/summary.md").find("| ZeRO3-mode (zero3) | pack | full |"), std::string::npos);
  EXPECT_EQ(read(dir + "/real_tokens_by_batching.svg").substr(0, 5), "<svg ");
  EXPECT_EQ(read(dir + "/peak_memory_by_ac.svg").substr(0, 5), "<svg ");
  r = zb::test_support::run_zerobench(args);  // reuses both reports
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("(ok)"), std::string::npos) << r.output;
  system(("rm -rf " + dir).c_str());
}
