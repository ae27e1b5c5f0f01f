// config_hooks.hpp — the types a backend's descriptor uses to take part in config files and the
// command line (the config/CLI block of BackendInfo, backends/backend_info.hpp): what a config
// file is (to claim it), what a claimed file's reader gets and gives back, and a backend's own
// CLI flags as data (bench/run_options registers them on CLI11; backends never include CLI11).
// Owns: these types, and the bridge between config/'s TrainingArguments and EngineSpec's
// TrainConfig. Must not: name a backend, read a file (config/ does) or parse a command line.
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "backends/engine.hpp"
#include "config/accelerate_config.hpp"
#include "config/config_file.hpp"
#include "config/deepspeed_config.hpp"

namespace zb::backends {

// What a config file is, as far as choosing the backend that runs it goes.
struct ConfigIdentity {
  bool accelerate = false;       // an accelerate config; false: a DeepSpeed JSON on its own
  std::string distributed_type;  // accelerate's, upper case ("FSDP", "DEEPSPEED", "MULTI_GPU", ...); "" for a DeepSpeed JSON
  int fsdp_version = 0;          // with distributed_type FSDP: 1 or 2 (config::AccelerateLaunch); else 0
  int zero_stage = -1;           // a DeepSpeed JSON's zero_optimization.stage; -1 unknown (accelerate: read later)
};

// The command line's side of a config file: which file, through which flag, and the flags a file
// may not contradict.
struct ConfigRequest {
  std::string path, flag;          // the file and the flag that named it (--config, --accelerate-config, ...)
  std::string backend;             // --backend (meaningful when backend_given)
  bool backend_given = false;
  std::string precision;           // --precision (meaningful when precision_given)
  bool precision_given = false;
  TrainConfig train;               // the flags' values
  std::set<std::string> given;     // flags the command line set ("--micro-batch", ...)
  int world_size = 1;              // the run's world size
  int64_t hidden = 0;              // model hidden size ("auto" bucket sizes)
};

// What a backend's config reader gets: the file as read, its accelerate top level (null for a
// DeepSpeed JSON) and the command line's side.
struct ConfigInput {
  const config::LoadedConfig& file;
  const config::AccelerateLaunch* launch;
  const ConfigRequest& request;
};

struct ResolvedConfig {
  std::string backend;             // the backend that claimed the file
  std::string precision;           // the backend's precision name ("" = the file does not say)
  TrainConfig train;               // request.train with the file's settings applied
  BackendOptions options;          // the backend's options struct, validated (EngineSpec::options)
  config::ConfigProvenance provenance;
};

// One backend-specific command-line flag, declared by the backend, registered by bench/run_options.
struct BackendFlag {
  enum class Kind {
    kText,      // a string (choices: CLI::IsMember when not empty)
    kCount,     // an integer >= min_count (CLI11 refuses a fraction)
    kPositive,  // a number > 0
    kSwitch,    // a flag without a value
  };
  std::string name;                  // "--sharding-strategy"
  std::string help;                  // --help's text
  Kind kind = Kind::kText;
  std::vector<std::string> choices;  // kText: the accepted values (empty: any)
  int64_t min_count = 0;             // kCount: the least value
  std::string default_text;          // shown by --help as the default ("" = none)
  // Given with another backend: refused ("... need --backend X") unless false (then not read).
  bool refused_elsewhere = true;
};

// What changing one of a backend's options does, for `zerobench compare`'s config differences
// (bench/compare/config_diff.cpp looks a differing key up by its last component). A backend
// describes the keys its options and its report's resolved options hold; a key several backends
// share is described once (the first registered backend's sentence is the one shown).
struct OptionEffect {
  std::string key;     // "sharding_strategy", "stage3_max_live_parameters", ...
  std::string effect;  // one sentence, paraphrasing the upstream documentation of the option
};

// A flag's value as the command line gave it.
struct FlagValue {
  std::string text;     // as typed ("true" for a switch)
  int64_t count = 0;    // kCount
  double number = 0;    // kPositive
};
using FlagValues = std::map<std::string, FlagValue>;  // only the flags the command line gave

// The bridge between config/'s TrainingArguments (a DeepSpeed file's training settings) and
// EngineSpec's TrainConfig.
config::TrainingArguments training_arguments(const TrainConfig& t);
void apply_training_arguments(const config::TrainingArguments& a, TrainConfig& t);
// The DeepSpeed reader's TrainerArgs for a request.
config::TrainerArgs trainer_args(const ConfigRequest& req);

// The first registered backend's name: the run's backend when neither --backend nor a file says.
std::string default_backend_name();

}  // namespace zb::backends
