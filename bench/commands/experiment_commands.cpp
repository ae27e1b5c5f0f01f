// experiment_commands.cpp — registers the commands that run many `run`s: `matrix` (every cell of
// a benchmark matrix, resumable), `compare` (two or more configs on one workload, interleaved),
// `crossval` (zerobench against the real framework) and `study precision|lifecycle|workload`. Their
// logic is in bench/matrix, bench/compare/, bench/crossval*, bench/study, bench/lifecycle/ and
// bench/workload/.
#include <CLI/CLI.hpp>

#include <cmath>
#include <memory>
#include <sstream>

#include "backends/backend_info.hpp"
#include "bench/commands/command.hpp"
#include "bench/compare/compare_command.hpp"
#include "bench/crossval/crossval.hpp"
#include "bench/flag_checks.hpp"
#include "bench/lifecycle/study_lifecycle.hpp"
#include "bench/matrix/matrix.hpp"
#include "bench/study/study.hpp"
#include "bench/workload/study_workload.hpp"
#include "runtime/errors.hpp"

namespace zb::bench {
namespace {

const CommandRegistrar kMatrix(
    {"matrix", "run every cell of a benchmark matrix (resumable)", 30, [](CLI::App& cmd) {
       auto m = std::make_shared<MatrixOptions>();
       cmd.add_option("file", m->file, "matrix YAML (see bench/matrices/)")->required()->check(CLI::ExistingFile);
       cmd.add_option("--out", m->out_dir, "directory for <cell>.json reports and index.json")->required();
       cmd.add_flag("--force", m->force, "re-run cells that already have a report");
       cmd.add_flag("--retry-failed", m->retry_failed, "re-run cells whose report is failed/oom/timeout");
       cmd.add_option("--timeout", m->timeout_s, "per-cell timeout in seconds (overrides the file)")->check(Positive());
       cmd.add_flag("--dry-run", m->dry_run, "list the cells and their commands");
       return CommandAction([m](const std::vector<std::string>&) { return matrix_command(*m); });
     }});

// --lrs: comma-separated finite, non-negative numbers (positive is checked by the study).
std::vector<double> parse_lrs(const std::string& text) {
  std::vector<double> lrs;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    try {
      size_t pos = 0;
      lrs.push_back(std::stod(item, &pos));
      if (pos != item.size() || !std::isfinite(lrs.back()) || lrs.back() < 0) throw std::invalid_argument(item);
    } catch (const std::exception&) {
      throw UsageError("--lrs: '" + item + "' is not a finite number in the valid range [0, inf)");
    }
  }
  return lrs;
}

const CommandRegistrar kStudy({"study", "studies built from many runs", 80, [](CLI::App& study_cmd) {
  study_cmd.require_subcommand(1);
  auto study = std::make_shared<PrecisionStudyOptions>();
  auto lrs = std::make_shared<std::string>();
  auto* precision = study_cmd.add_subcommand("precision", "the blog's convergence finding: bf16 weights vs fp32 masters");
  precision->add_option("--out", study->out_dir, "directory for reports, summary and figures")->capture_default_str();
  precision->add_option("--lrs", *lrs, "comma-separated learning rates (default 1e-4,3e-3)");
  precision->add_option("--steps", study->steps, "optimizer steps per run")->check(AtLeastOne())->capture_default_str();
  precision->add_option("--nproc", study->nproc, "ranks per run")->check(FiniteRange(1, 64))->capture_default_str();
  precision->add_option("--model", study->model, "model preset")->capture_default_str();
  precision->add_option("--micro-batch", study->micro_batch, "samples per rank")->check(AtLeastOne());
  precision->add_option("--seq-len", study->seq_len, "tokens per sample")->check(AtLeastOne());
  precision->add_option("--seed", study->seed, "seed for weights and data");
  precision->add_option("--timeout", study->timeout_s, "per-run timeout in seconds")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  precision->add_flag("--scale-lr-by-world-size", study->scale_lr_by_world_size,
                      "also run FSDP low with lr x W (the blog's observation)");
  precision->add_option("--modes", study->modes, "only these modes (comma-separated; fp32 always runs)")->delimiter(',');
  precision->add_flag("--force", study->force, "re-run runs that already have a report");

  auto lifecycle = std::make_shared<lifecycle::LifecycleStudyOptions>();
  lifecycle->backend = backends::lifecycle_study_backend();
  auto* lifecycle_cmd = study_cmd.add_subcommand(
      "lifecycle", "the FSDP 70B article's loading and checkpoint problems: load strategy x state-dict type, projections");
  lifecycle_cmd->add_option("--out", lifecycle->out_dir, "directory for reports, checkpoints, summary and table")
      ->capture_default_str();
  lifecycle_cmd->add_option("--models", lifecycle->models, "model presets")->delimiter(',')->capture_default_str();
  lifecycle_cmd->add_option("--worlds", lifecycle->worlds, "world sizes")->delimiter(',')->capture_default_str();
  lifecycle_cmd->add_option("--backend", lifecycle->backend, "backend of every run")->capture_default_str();
  lifecycle_cmd->add_option("--timeout", lifecycle->timeout_s, "per-run timeout in seconds")->capture_default_str();

  auto wl = std::make_shared<workload::WorkloadStudyOptions>();
  auto* workload_cmd = study_cmd.add_subcommand(
      "workload", "the blog's announced study: FSDP-mode vs ZeRO3-mode x pad|pack|pack-naive x activation "
                  "checkpointing on a long-tailed document-length distribution (docs/workload.md)");
  workload_cmd->add_option("--out", wl->out_dir, "directory for reports, summary and figures")->capture_default_str();
  workload_cmd->add_option("--backends", wl->backends, "only these sides: fsdp (the blog's accelerate file), zero3 "
                                                       "(its DeepSpeed file)")->delimiter(',');
  workload_cmd->add_option("--batchings", wl->batchings, "pad, pack, pack-naive (comma-separated)")
      ->delimiter(',')->capture_default_str();
  workload_cmd->add_option("--ac-modes", wl->ac_modes, "activation-checkpointing modes: none, full, selective-layer:N")
      ->delimiter(',')->capture_default_str();
  workload_cmd->add_option("--fsdp-config", wl->fsdp_config, "FSDP-mode's accelerate config")->capture_default_str();
  workload_cmd->add_option("--zero3-config", wl->zero3_config, "ZeRO3-mode's DeepSpeed config")->capture_default_str();
  workload_cmd->add_option("--steps", wl->steps, "optimizer steps per cell (warm-up included)")
      ->check(AtLeastOne())->capture_default_str();
  workload_cmd->add_option("--warmup", wl->warmup, "steps excluded from timing")->check(NonNegative())->capture_default_str();
  workload_cmd->add_option("--nproc", wl->nproc, "ranks per cell")->check(FiniteRange(1, 1024))->capture_default_str();
  workload_cmd->add_option("--model", wl->model, "model preset")->capture_default_str();
  workload_cmd->add_option("--layers", wl->layers, "override the preset's layer count")->check(AtLeastOne());
  workload_cmd->add_option("--micro-batch", wl->micro_batch, "samples per rank (the DeepSpeed file fixes 8)")
      ->check(AtLeastOne())->capture_default_str();
  workload_cmd->add_option("--seq-len", wl->seq_len, "tokens per row")->check(AtLeastOne())->capture_default_str();
  workload_cmd->add_option("--seed", wl->seed, "seed for weights and data")->capture_default_str();
  workload_cmd->add_option("--data", wl->data, "a document file: lengths:FILE|megatron:PREFIX|tokens:... (docs/data.md)")
      ->capture_default_str();
  workload_cmd->add_option("--device", wl->device, "cpu|cuda")->check(CLI::IsMember({"cpu", "cuda"}))->capture_default_str();
  workload_cmd->add_option("--timeout", wl->timeout_s, "per-cell timeout in seconds")->check(Positive())->capture_default_str();
  workload_cmd->add_flag("--force", wl->force, "re-run cells that already have a report");

  return CommandAction([study, lrs, lifecycle, precision, wl, workload_cmd](const std::vector<std::string>&) {
    if (*precision) {
      if (!lrs->empty()) study->lrs = parse_lrs(*lrs);
      return precision_study_command(*study);
    }
    if (*workload_cmd) return workload::workload_study_command(*wl);
    return lifecycle::lifecycle_study_command(*lifecycle);
  });
}});

const CommandRegistrar kCompare(
    {"compare",
     "train two or more configs on one workload, interleaved; Table 2 and 3 with intervals, memory, comm, "
     "curves and a verdict (docs/compare.md)",
     90, [](CLI::App& cmd) {
       auto o = std::make_shared<compare::CompareOptions>();
       compare::add_compare_options(cmd, *o);
       return CommandAction([o, &cmd](const std::vector<std::string>&) { return compare::compare_command(*o, cmd); });
     }});

const CommandRegistrar kCrossval(
    {"crossval",
     "train zerobench and the real framework (FSDP1, FSDP2, DeepSpeed ZeRO-3) on the same weights and "
     "batches; compare loss, grad norm, model-state bytes and collectives step by step",
     100, [](CLI::App& cmd) {
       auto o = std::make_shared<CrossvalOptions>();
       add_crossval_options(cmd, *o);
       return CommandAction([o, &cmd](const std::vector<std::string>&) { return crossval_command(*o, cmd); });
     }});

}  // namespace
}  // namespace zb::bench
