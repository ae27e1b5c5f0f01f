// translate.hpp — `zerobench translate FILE --to deepspeed|fsdp|fsdp2`: a config file of one
// framework written as the equivalent config of the other, following accelerate's concept guide
// "FSDP vs DeepSpeed" (huggingface/accelerate docs/source/concept_guides/fsdp_and_deepspeed.md)
// and its sharding table (docs/source/usage_guides/fsdp.md "Mapping between FSDP sharding
// strategies and DeepSpeed ZeRO Stages"); FSDP1 -> FSDP2 names as accelerate's
// commands/to_fsdp2.py (ARGUMENT_KEY_MAPPING / ARGUMENT_VALUE_MAPPING) renames them.
// Owns: reading the source's raw keys (through config/config_file.hpp read_config_tree), the
// concepts they set, the target file, and the mapping table in which EVERY leaf key of the source
// appears with one verdict (mapped / approximate / no counterpart / ignored by zerobench already),
// plus the target keys the translation adds. Must not: run anything, or decide how zerobench runs
// a file (bench/config_file.cpp and the backends' readers do; translate only asks them).
#pragma once
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace zb::bench::translate {

enum class Target { kDeepSpeed, kFsdp, kFsdp2 };
Target parse_target(const std::string& to);  // deepspeed|fsdp|fsdp2; throws UsageError naming it
std::string to_string(Target t);

// How one key crosses over.
enum class Kind {
  kMapped,          // exact: the guide names the counterpart and the value carries over
  kApproximate,     // a counterpart that behaves alike but not the same (the reason says how)
  kNoCounterpart,   // the other framework has no such setting (the reason says why)
  kIgnored,         // zerobench already ignores it: launcher, logging, TPU settings
  kAdded,           // no source key: the target key the translation writes, and why
};
std::string to_string(Kind k);

struct MappingEntry {
  std::string source_key;    // dotted, as the file spells it ("fsdp_config.fsdp_sharding_strategy"); "" for kAdded
  std::string source_value;  // as written
  std::string target_key;    // dotted target key(s), comma-separated; "" when none
  std::string target_value;  // as written into the target ("" when none)
  Kind kind = Kind::kNoCounterpart;
  std::string reason;
  std::string refused;       // non-empty: `zerobench run` refuses this target key today, and why
};

struct Translation {
  std::string source_path;
  std::string source_kind;   // fsdp | fsdp2 | deepspeed | ddp (what the source configures)
  Target target = Target::kDeepSpeed;
  nlohmann::ordered_json config;  // the target file's content
  std::vector<MappingEntry> mapping;
  std::string source_refusal;  // "" or why `zerobench run --config SOURCE` refuses the source
  std::string target_refusal;  // "" or why `zerobench run --config TARGET` would refuse the target
  std::vector<std::string> notes;  // loud notes (e.g. a deepspeed_config_file that cannot be read)
};

// Reads `path` (any file `zerobench run --config` accepts, runnable or not) and translates it.
// Throws UsageError: unreadable or invalid file, or a target of the source's own framework.
Translation translate_file(const std::string& path, Target to);

// The target file's text: DeepSpeed JSON, or an accelerate YAML.
std::string render_config(const Translation& t);
std::string mapping_markdown(const Translation& t);
nlohmann::json mapping_json(const Translation& t);

// Leaf keys of a raw config tree, dotted (scalars, arrays and empty mappings are leaves).
std::vector<std::string> leaf_keys(const nlohmann::json& tree, const std::string& prefix = "");
// The check that nothing was dropped: the keys of `expected` that no mapping entry names as its
// source key (empty = every key is accounted for).
std::vector<std::string> unmapped_keys(const std::vector<MappingEntry>& mapping,
                                       const std::vector<std::string>& expected);

// The rule table itself as Markdown (docs/configs.md "Translating between FSDP and DeepSpeed").
std::string list_mapping_markdown();

struct TranslateOptions {
  std::string file, to, out;
  bool list_mapping = false;
};
// `zerobench translate`: the config to stdout (or --out F), the mapping to stderr (and with --out,
// F.mapping.md and F.mapping.json). 0 ok, 2 bad input.
int translate_command(const TranslateOptions& o);

}  // namespace zb::bench::translate
