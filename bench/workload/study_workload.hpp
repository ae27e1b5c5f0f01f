// study_workload.hpp — `zerobench study workload`: the FSDP vs DeepSpeed blog's announced next study
// (issue 37), measured. Trains the blog's two config files (FSDP-mode: its accelerate YAML,
// ZeRO3-mode: its DeepSpeed JSON) on a long-tailed document-length distribution under every
// batching (pad, pack, pack-naive) x activation-checkpointing mode (none, full, selective-layer:2),
// each cell a `zerobench run` of the matrix runner (failed cells recorded, finished ones reused),
// then writes a summary JSON, a Markdown table, SVG figures and findings computed from the numbers.
// Owns: the study's cells, their numbers (read from the typed RunReport through reports/columns),
// the findings and the consistency checks behind them. Must not: reimplement running (it is a
// matrix) or read report fields from JSON by key.
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "reports/run_report.hpp"

namespace zb::bench {
struct MatrixSpec;
}

namespace zb::bench::workload {

struct WorkloadStudyOptions {
  std::string out_dir = "out/workload";
  std::vector<std::string> backends;  // a subset of the sides, by label (empty: fsdp, zero3)
  std::vector<std::string> batchings = {"pad", "pack", "pack-naive"};
  std::vector<std::string> ac_modes = {"none", "full", "selective-layer:2"};
  std::string fsdp_config = "bench/configs/accelerate_fsdp_blog.yaml";
  std::string zero3_config = "bench/configs/deepspeed_zero3_blog.json";
  int64_t steps = 12;  // optimizer steps per cell, --warmup included
  int64_t warmup = 2;
  int nproc = 2;
  std::string model = "tiny";
  int64_t layers = 0;  // > 0: override the preset's layer count (a GPU-sized slice of a 7B model)
  int64_t micro_batch = 8;  // the blog's DeepSpeed file fixes train_micro_batch_size_per_gpu: 8
  int64_t seq_len = 256;
  uint64_t seed = 1234;
  std::string data = "lengths:bench/configs/workload/doc_lengths_t256.json";
  std::string device = "cpu";
  bool force = false;
  double timeout_s = 600;
};

// One side of the comparison: a config file and the label its cells carry.
struct WorkloadSide {
  std::string label;   // fsdp | zero3 (the backend the file selects)
  std::string title;   // FSDP-mode | ZeRO3-mode
  std::string config;  // the file, as found (relative to the working directory, else the source tree)
};

struct WorkloadCell {
  std::string id;  // <side>_<batching>_ac-<mode>, file-name safe
  WorkloadSide side;
  std::string batching, ac;
};

// The cells in run order: side (fsdp, zero3), then batching, then AC mode, each in the order the
// options list them. Throws UsageError (exit 2, one line naming the value) for an unknown or
// repeated backend, batching or AC mode, or a config file that does not exist.
std::vector<WorkloadCell> workload_cells(const WorkloadStudyOptions& o);
// The matrix the cells run as (`zerobench run` options of each cell).
MatrixSpec workload_matrix(const WorkloadStudyOptions& o, const std::vector<WorkloadCell>& cells);

// What the study reads from one cell's report (reports/columns.hpp formulas); NaN where the
// report has no value (a failed cell: ok = false, state and error set).
struct CellNumbers {
  bool ok = false;
  std::string state, error;
  double real_tps = 0, mfu = 0, padding_fraction = 0, documents_per_step = 0, attention_span = 0,
         real_tokens_per_step = 0, peak_mib = 0, tracked_peak_mib = 0, estimate_mib = 0, peak_over_estimate = 0,
         recompute_gflops_per_step = 0, final_loss = 0;
  // The real-token throughput's 95% interval: the median step time's order-statistic interval over
  // the measured steps (reports/stats.hpp, as `zerobench table` draws it); NaN without steps.
  double real_tps_lo = 0, real_tps_hi = 0;
};
CellNumbers cell_numbers(const reports::RunReport& r);

// The study's conclusions, computed from the cells' numbers: `findings` (sentences with the
// numbers in them), `checks` (consistency checks that failed: a pack cell padding more than pad,
// pack-naive padding at all, recomputed FLOPs that do not follow the AC mode), `failed` (cells that
// did not finish), `cells` (every cell's numbers, the summary's rows).
struct WorkloadFindings {
  std::vector<std::string> findings, checks, failed;
  nlohmann::json cells = nlohmann::json::array();
};
WorkloadFindings workload_findings(const std::vector<WorkloadCell>& cells, const std::vector<reports::RunReport>& reports);

// The Markdown table (one row per cell, in cell order) and the findings list.
std::string workload_table_markdown(const std::vector<WorkloadCell>& cells,
                                    const std::vector<reports::RunReport>& reports);
std::string workload_findings_markdown(const WorkloadFindings& f);

// Exit 0 when every cell finished and every check held, 1 otherwise, 2 for bad options, 130 if
// interrupted. Re-running reuses the cells that have a report (--force re-runs them).
int workload_study_command(const WorkloadStudyOptions& o);

}  // namespace zb::bench::workload
