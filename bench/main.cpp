// main.cpp — the zerobench command line: subcommands, and the one place exceptions become
// exit codes (0 ok, 1 run failed, 2 usage or bad input) with a one-line message.
#include <CLI/CLI.hpp>

#include <iostream>

#include "bench/commands.hpp"
#include "runtime/errors.hpp"

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
  info_cmd->add_option("--world-size", info.world_size, "ranks to shard over")->check(CLI::PositiveNumber);
  info_cmd->add_option("--seq-len", info.seq_len, "sequence length for the attention FLOPs")->check(CLI::PositiveNumber);
  info_cmd->add_flag("--json", info.json, "print JSON");

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

  run.nproc_given = run_cmd->count("--nproc") > 0;
  run.precision_given = run_cmd->count("--precision") > 0;
  run.micro_batch_given = run_cmd->count("--micro-batch") > 0;
  run.grad_accum_given = run_cmd->count("--grad-accum") > 0;
  run.grad_clip_given = run_cmd->count("--grad-clip") > 0;
  const char* rank = std::getenv("RANK");
  const std::string who = rank && std::getenv("WORLD_SIZE") ? "rank " + std::string(rank) + ": " : "";
  try {
    if (*run_cmd) return bench::run_command(run, args);
    if (*info_cmd) return bench::model_info_command(info);
  } catch (const UsageError& e) {
    std::cerr << "zerobench: " << who << "error: " << e.what() << "\n";
    return kExitUsage;
  } catch (const std::exception& e) {
    std::string msg = e.what();
    auto nl = msg.find('\n');  // c10::Error carries a backtrace after the first line
    std::cerr << "zerobench: " << who << "failed: " << msg.substr(0, nl) << "\n";
    return kExitFailed;
  }
  return kExitUsage;
}
