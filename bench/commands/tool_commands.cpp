// tool_commands.cpp — registers the commands that work on files: `checkpoint consolidate` (a
// sharded or full checkpoint to an HF folder, as DeepSpeed's zero_to_fp32.py) and `translate` (a
// config file as the other framework's equivalent). Their logic is in bench/lifecycle/checkpoint
// and bench/translate/.
#include <CLI/CLI.hpp>

#include <memory>

#include "bench/commands/command.hpp"
#include "bench/lifecycle/checkpoint.hpp"
#include "bench/translate/translate.hpp"

namespace zb::bench {
namespace {

struct ConsolidateArgs {
  std::string from, out;
};

const CommandRegistrar kCheckpoint({"checkpoint", "checkpoint tools", 110, [](CLI::App& cmd) {
  cmd.require_subcommand(1);
  auto a = std::make_shared<ConsolidateArgs>();
  auto* consolidate = cmd.add_subcommand(
      "consolidate", "a zero3 sharded (or any full) checkpoint to a full HF Llama folder, as DeepSpeed's zero_to_fp32.py");
  consolidate->add_option("--from", a->from, "checkpoint dir (with `latest`) or one tag dir")->required();
  consolidate->add_option("--out", a->out, "HF folder to write (config.json, model.safetensors)")->required();
  return CommandAction([a](const std::vector<std::string>&) { return lifecycle::consolidate_command(a->from, a->out); });
}});

const CommandRegistrar kTranslate(
    {"translate",
     "a config file as the other framework's equivalent (accelerate's FSDP vs DeepSpeed guide), with the "
     "mapping of every key",
     120, [](CLI::App& cmd) {
       auto t = std::make_shared<translate::TranslateOptions>();
       cmd.add_option("file", t->file, "accelerate YAML (FSDP, DEEPSPEED, MULTI_GPU) or DeepSpeed JSON");
       cmd.add_option("--to", t->to, "deepspeed|fsdp|fsdp2");
       cmd.add_option("--out", t->out, "write the config here (and F.mapping.md, F.mapping.json)");
       cmd.add_flag("--list-mapping", t->list_mapping, "print the key table as Markdown");
       return CommandAction([t](const std::vector<std::string>&) { return translate::translate_command(*t); });
     }});

}  // namespace
}  // namespace zb::bench
