// main.cpp — the zerobench command line: subcommands, and the one place exceptions become
// exit codes (0 ok, 1 run failed, 2 usage or bad input) with a one-line message.
#include <CLI/CLI.hpp>
#include <sys/stat.h>

#include <cmath>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>

#include "bench/commands.hpp"
#include "bench/compare/compare_command.hpp"
#include "runtime/world.hpp"
#include "bench/crossval.hpp"
#include "bench/lifecycle/checkpoint.hpp"
#include "bench/lifecycle/study_lifecycle.hpp"
#include "bench/flag_checks.hpp"
#include "bench/matrix.hpp"
#include "bench/micro_command.hpp"
#include "bench/project_command.hpp"
#include "bench/study.hpp"
#include "bench/translate/translate.hpp"
#include "reports/regress.hpp"
#include "reports/report.hpp"
#include "reports/table.hpp"
#include "runtime/errors.hpp"

namespace {
// `zerobench table`: render reports as Markdown, CSV or HTML.
int table_command(const std::vector<std::string>& inputs, const zb::reports::TableOptions& opts, const std::string& out) {
  const auto reports = zb::reports::load_reports(inputs);
  const auto text = zb::reports::render_table(reports, opts);
  if (out.empty()) {
    std::cout << text;
    return zb::kExitOk;
  }
  zb::reports::write_text_atomic(out, text);
  std::cerr << "table: " << out << "\n";
  return zb::kExitOk;
}

// `zerobench regress`: 0 pass, 1 regression, 2 bad input.
// A file whose JSON has a top-level "benchmarks" array (Google Benchmark output), or nullptr.
std::unique_ptr<nlohmann::json> google_benchmark_file(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return nullptr;  // the report loader says why
  std::ifstream in(path);
  auto j = std::make_unique<nlohmann::json>(nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false));
  return zb::reports::is_google_benchmark_json(*j) ? std::move(j) : nullptr;
}

int regress_command(const std::string& baseline, const std::string& current, const zb::reports::RegressOptions& o,
                    bool as_json) {
  const auto gb_base = google_benchmark_file(baseline), gb_cur = google_benchmark_file(current);
  if (bool(gb_base) != bool(gb_cur))
    throw zb::UsageError("regress: " + std::string(gb_base ? baseline : current) +
                         " is Google Benchmark JSON and the other is not (compare like with like)");
  const auto result = gb_base ? zb::reports::compare_benchmarks(*gb_base, *gb_cur, o)
                              : zb::reports::compare_reports(zb::reports::load_reports({baseline}),
                                                             zb::reports::load_reports({current}), o);
  std::cout << (as_json ? result.to_json().dump(2) + "\n" : result.to_text());
  return result.regression() ? zb::kExitFailed : zb::kExitOk;
}
}  // namespace

int main(int argc, char** argv) {
  using namespace zb;
  std::vector<std::string> args(argv, argv + argc);
  CLI::App app{"zerobench — FSDP-mode vs ZeRO3-mode LLM training benchmarks"};
  app.require_subcommand(1);

  bench::RunOptions run;
  auto* run_cmd = app.add_subcommand("run", "train a model on W ranks and write a JSON report");
  bench::add_run_options(*run_cmd, run);

  bench::ModelInfoOptions info;
  auto* info_cmd = app.add_subcommand("model-info", "parameter counts, FLOPs per token, model-state bytes per rank");
  info_cmd->add_option("preset", info.run.model, "model preset")->required();
  bench::add_model_options(*info_cmd, info.run);
  info_cmd->add_option("--world-size", info.world_size, "ranks to shard over")->check(bench::AtLeastOne());
  info_cmd->add_option("--seq-len", info.seq_len, "sequence length for the attention FLOPs and the memory estimate")
      ->check(bench::AtLeastOne());
  info_cmd->add_option("--micro-batch", info.run.train.micro_batch, "samples per rank, for the memory estimate")
      ->check(bench::AtLeastOne())
      ->capture_default_str();
  info_cmd->add_flag("--activation-checkpointing", info.run.train.activation_checkpointing,
                     "estimate memory with activation checkpointing");
  info_cmd->add_option("--device", info.run.device, "cpu (Gloo stages collectives in host memory) or cuda (NCCL)")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  info_cmd->add_flag("--json", info.json, "print JSON");

  bench::MatrixOptions matrix;
  auto* matrix_cmd = app.add_subcommand("matrix", "run every cell of a benchmark matrix (resumable)");
  matrix_cmd->add_option("file", matrix.file, "matrix YAML (see bench/matrices/)")->required()->check(CLI::ExistingFile);
  matrix_cmd->add_option("--out", matrix.out_dir, "directory for <cell>.json reports and index.json")->required();
  matrix_cmd->add_flag("--force", matrix.force, "re-run cells that already have a report");
  matrix_cmd->add_flag("--retry-failed", matrix.retry_failed, "re-run cells whose report is failed/oom/timeout");
  matrix_cmd->add_option("--timeout", matrix.timeout_s, "per-cell timeout in seconds (overrides the file)")
      ->check(bench::Positive());
  matrix_cmd->add_flag("--dry-run", matrix.dry_run, "list the cells and their commands");

  std::vector<std::string> table_inputs;
  reports::TableOptions table;
  std::string table_out;
  auto* table_cmd = app.add_subcommand("table", "tables (Markdown, CSV, HTML with SVG plots) from reports");
  table_cmd->add_option("inputs", table_inputs, "report files or matrix directories")->required();
  table_cmd->add_option("--format", table.format, "md|csv|html")->check(CLI::IsMember({"md", "csv", "html"}));
  table_cmd->add_option("--out", table_out, "write to this file instead of stdout");
  table_cmd->add_option("--baseline", table.baseline, "cell to compare every row against");

  std::string regress_baseline, regress_current;
  reports::RegressOptions regress;
  bool regress_json = false;
  std::string regress_timing = "gate";
  auto* regress_cmd = app.add_subcommand(
      "regress", "compare reports (or Google Benchmark JSON from `micro`) with baselines; exit 1 on a regression");
  regress_cmd->add_option("--baseline", regress_baseline, "baseline report file or directory")->required();
  regress_cmd->add_option("--current", regress_current, "current report file or directory")->required();
  regress_cmd->add_option("--threshold", regress.threshold, "timing: relative median change that counts (0.05)")
      ->check(bench::FiniteRange(0, 1));
  regress_cmd->add_option("--alpha", regress.alpha, "timing: Mann-Whitney significance level (0.05)")
      ->check(bench::FiniteRange(0, 1));
  regress_cmd->add_option("--memory-threshold", regress.memory_threshold, "allocator peaks: allowed growth (0.05)")
      ->check(bench::FiniteRange(0, 10));
  regress_cmd
      ->add_option("--numerics-rtol", regress.numerics_rtol,
                   "per-step loss, grad norm, lr: allowed relative difference on the same machine kind (0 = bitwise)")
      ->check(bench::FiniteRange(0, 1));
  regress_cmd
      ->add_option("--numerics-rtol-other-machine", regress.numerics_rtol_other_machine,
                   "... between different machine kinds (env.device, cpu_capability, torch, threads) (0.02)")
      ->check(bench::FiniteRange(0, 1));
  regress_cmd->add_option("--timing", regress_timing, "gate|report: whether slower timings fail the check")
      ->check(CLI::IsMember({"gate", "report"}));
  regress_cmd->add_flag("--json", regress_json, "print the verdict as JSON");

  bench::micro::MicroOptions micro;
  auto* micro_cmd = app.add_subcommand("micro", "Google Benchmark micro-benchmarks (collectives, GEMMs, copies) on W ranks");
  bench::micro::add_micro_options(*micro_cmd, micro);

  bench::projection::ProjectOptions project;
  auto* project_cmd = app.add_subcommand(
      "project", "predict a measured run on W ranks x N nodes from a calibration (micro JSON or a preset)");
  bench::projection::add_project_options(*project_cmd, project);

  bench::PrecisionStudyOptions study;
  std::string study_lrs;
  auto* study_cmd = app.add_subcommand("study", "studies built from many runs");
  study_cmd->require_subcommand(1);
  auto* precision_cmd = study_cmd->add_subcommand("precision", "the blog's convergence finding: bf16 weights vs fp32 masters");
  precision_cmd->add_option("--out", study.out_dir, "directory for reports, summary and figures")->capture_default_str();
  precision_cmd->add_option("--lrs", study_lrs, "comma-separated learning rates (default 1e-4,3e-3)");
  precision_cmd->add_option("--steps", study.steps, "optimizer steps per run")->check(bench::AtLeastOne())->capture_default_str();
  precision_cmd->add_option("--nproc", study.nproc, "ranks per run")->check(bench::FiniteRange(1, 64))->capture_default_str();
  precision_cmd->add_option("--model", study.model, "model preset")->capture_default_str();
  precision_cmd->add_option("--micro-batch", study.micro_batch, "samples per rank")->check(bench::AtLeastOne());
  precision_cmd->add_option("--seq-len", study.seq_len, "tokens per sample")->check(bench::AtLeastOne());
  precision_cmd->add_option("--seed", study.seed, "seed for weights and data");
  precision_cmd->add_option("--timeout", study.timeout_s, "per-run timeout in seconds")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  precision_cmd->add_flag("--scale-lr-by-world-size", study.scale_lr_by_world_size,
                          "also run FSDP low with lr x W (the blog's observation)");
  precision_cmd->add_option("--modes", study.modes, "only these modes (comma-separated; fp32 always runs)")
      ->delimiter(',');
  precision_cmd->add_flag("--force", study.force, "re-run runs that already have a report");

  bench::lifecycle::LifecycleStudyOptions lifecycle_study;
  auto* lifecycle_cmd = study_cmd->add_subcommand(
      "lifecycle", "the FSDP 70B article's loading and checkpoint problems: load strategy x state-dict type, projections");
  lifecycle_cmd->add_option("--out", lifecycle_study.out_dir, "directory for reports, checkpoints, summary and table")
      ->capture_default_str();
  lifecycle_cmd->add_option("--models", lifecycle_study.models, "model presets")->delimiter(',')->capture_default_str();
  lifecycle_cmd->add_option("--worlds", lifecycle_study.worlds, "world sizes")->delimiter(',')->capture_default_str();
  lifecycle_cmd->add_option("--backend", lifecycle_study.backend, "backend of every run")->capture_default_str();
  lifecycle_cmd->add_option("--timeout", lifecycle_study.timeout_s, "per-run timeout in seconds")->capture_default_str();

  bench::compare::CompareOptions compare;
  auto* compare_cmd = app.add_subcommand(
      "compare", "train two or more configs on one workload, interleaved; Table 2 and 3 with intervals, memory, comm, "
                 "curves and a verdict (docs/compare.md)");
  bench::compare::add_compare_options(*compare_cmd, compare);

  bench::CrossvalOptions crossval;
  auto* crossval_cmd = app.add_subcommand(
      "crossval", "train zerobench and the real framework (FSDP1, FSDP2, DeepSpeed ZeRO-3) on the same weights and "
                  "batches; compare loss, grad norm, model-state bytes and collectives step by step");
  bench::add_crossval_options(*crossval_cmd, crossval);

  // Checkpoint tools (bench/lifecycle/checkpoint.hpp).
  std::string consolidate_from, consolidate_out;
  auto* checkpoint_cmd = app.add_subcommand("checkpoint", "checkpoint tools");
  checkpoint_cmd->require_subcommand(1);
  auto* consolidate_cmd = checkpoint_cmd->add_subcommand(
      "consolidate", "a zero3 sharded (or any full) checkpoint to a full HF Llama folder, as DeepSpeed's zero_to_fp32.py");
  consolidate_cmd->add_option("--from", consolidate_from, "checkpoint dir (with `latest`) or one tag dir")->required();
  consolidate_cmd->add_option("--out", consolidate_out, "HF folder to write (config.json, model.safetensors)")->required();

  bench::translate::TranslateOptions translate;
  auto* translate_cmd = app.add_subcommand(
      "translate", "a config file as the other framework's equivalent (accelerate's FSDP vs DeepSpeed guide), with the "
                   "mapping of every key");
  translate_cmd->add_option("file", translate.file, "accelerate YAML (FSDP, DEEPSPEED, MULTI_GPU) or DeepSpeed JSON");
  translate_cmd->add_option("--to", translate.to, "deepspeed|fsdp|fsdp2");
  translate_cmd->add_option("--out", translate.out, "write the config here (and F.mapping.md, F.mapping.json)");
  translate_cmd->add_flag("--list-mapping", translate.list_mapping, "print the key table as Markdown");

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << "zerobench: error: " << e.what() << " (see zerobench --help)\n";
    return kExitUsage;
  }

  bench::mark_given(*run_cmd, run);
  const char* rank = std::getenv("RANK");
  const std::string who = rank && std::getenv("WORLD_SIZE") ? "rank " + std::string(rank) + ": " : "";
  try {
    if (*run_cmd) return bench::run_command(run, args);
    if (*info_cmd) return bench::model_info_command(info);
    if (*crossval_cmd) return bench::crossval_command(crossval, *crossval_cmd);
    if (*matrix_cmd) return bench::matrix_command(matrix);
    if (*compare_cmd) return bench::compare::compare_command(compare, *compare_cmd);
    if (*project_cmd) return bench::projection::project_command(project);
    if (*micro_cmd) {
      micro.benchmark_args = micro_cmd->remaining();
      micro.max_bytes_given = micro_cmd->count("--max-bytes") > 0;
      return bench::micro::micro_command(micro, args);
    }
    if (*precision_cmd) {
      if (!study_lrs.empty()) {
        study.lrs.clear();
        std::stringstream ss(study_lrs);
        std::string item;
        while (std::getline(ss, item, ',')) {
          try {
            size_t pos = 0;
            study.lrs.push_back(std::stod(item, &pos));
            if (pos != item.size() || !std::isfinite(study.lrs.back()) || study.lrs.back() < 0)
              throw std::invalid_argument(item);
          } catch (const std::exception&) {
            throw UsageError("--lrs: '" + item + "' is not a finite number in the valid range [0, inf)");
          }
        }
      }
      return bench::precision_study_command(study);
    }
    if (*lifecycle_cmd) return bench::lifecycle::lifecycle_study_command(lifecycle_study);
    if (*consolidate_cmd) return bench::lifecycle::consolidate_command(consolidate_from, consolidate_out);
    if (*translate_cmd) return bench::translate::translate_command(translate);
    if (*table_cmd) return table_command(table_inputs, table, table_out);
    if (*regress_cmd) {
      regress.gate_timing = regress_timing == "gate";
      return regress_command(regress_baseline, regress_current, regress, regress_json);
    }
  } catch (const UsageError& e) {
    std::cerr << "zerobench: " << who << "error: " << e.what() << "\n";
    runtime::abort_process_groups_at_exit();  // an error: NCCL communicators are aborted, not drained
    return kExitUsage;
  } catch (const std::exception& e) {
    runtime::abort_process_groups_at_exit();
    std::string msg = e.what();
    auto nl = msg.find('\n');  // c10::Error carries a backtrace after the first line
    std::cerr << "zerobench: " << who << "failed: " << msg.substr(0, nl) << "\n";
    return kExitFailed;
  }
  return kExitUsage;
}
