// run_commands.cpp — registers `run` (train on W ranks, write a report) and `model-info` (counts,
// FLOPs, bytes and the memory estimate per backend mode); their logic is in bench/run/run_command.cpp
// and bench/run/model_info.cpp.
#include <CLI/CLI.hpp>

#include <memory>

#include "bench/commands.hpp"
#include "bench/commands/command.hpp"
#include "bench/flag_checks.hpp"

namespace zb::bench {
namespace {

const CommandRegistrar kRun({"run", "train a model on W ranks and write a JSON report", 10, [](CLI::App& cmd) {
                               auto run = std::make_shared<RunOptions>();
                               add_run_options(cmd, *run);
                               return CommandAction([run, &cmd](const std::vector<std::string>& argv) {
                                 mark_given(cmd, *run);
                                 return run_command(*run, argv);
                               });
                             }});

const CommandRegistrar kModelInfo(
    {"model-info", "parameter counts, FLOPs per token, model-state bytes per rank", 20, [](CLI::App& cmd) {
       auto info = std::make_shared<ModelInfoOptions>();
       cmd.add_option("preset", info->run.model, "model preset")->required();
       add_model_options(cmd, info->run);
       cmd.add_option("--world-size", info->world_size, "ranks to shard over")->check(AtLeastOne());
       cmd.add_option("--seq-len", info->seq_len, "sequence length for the attention FLOPs and the memory estimate")
           ->check(AtLeastOne());
       cmd.add_option("--micro-batch", info->run.train.micro_batch, "samples per rank, for the memory estimate")
           ->check(AtLeastOne())
           ->capture_default_str();
       add_activation_checkpointing_option(cmd, info->run.train.activation_checkpointing,
                                           "estimate memory with activation checkpointing: none, full (bare), "
                                           "selective-layer:N, selective-op");
       cmd.add_option("--device", info->run.device, "cpu (Gloo stages collectives in host memory) or cuda (NCCL)")
           ->check(CLI::IsMember({"cpu", "cuda"}))
           ->capture_default_str();
       cmd.add_option("--device-memory", info->device_memory_gib,
                      "GiB of device memory per rank the offload rows are judged against")
           ->check(CLI::PositiveNumber)
           ->capture_default_str();
       cmd.add_option("--host-memory", info->host_memory_gib,
                      "GiB of host memory the node's ranks share, for the offload rows (0: not judged)")
           ->check(CLI::NonNegativeNumber)
           ->capture_default_str();
       cmd.add_flag("--json", info->json, "print JSON");
       return CommandAction([info](const std::vector<std::string>&) { return model_info_command(*info); });
     }});

}  // namespace
}  // namespace zb::bench
