// mapping.hpp — the key table of `zerobench translate` (internal to bench/translate): for each
// source key (by where it sits in the file) and each target framework, the target key, the kind
// of correspondence and the reason; and the reasons for target keys written with no source key.
// Owns: the table's text (docs/configs.md shows it through `zerobench translate --list-mapping`).
// Must not: read files or compute values (translate.cpp does; a value-dependent verdict, e.g.
// HYBRID_SHARD being approximate where FULL_SHARD is exact, is refined there).
#pragma once
#include <string>
#include <vector>

#include "bench/translate/translate.hpp"

namespace zb::bench::translate {

enum class Scope {
  kTop,     // an accelerate config's top-level keys
  kFsdp,    // accelerate fsdp_config.* (keys without the fsdp_ prefix get it, as commands/launch.py does)
  kPlugin,  // accelerate deepspeed_config.* (DeepSpeedPlugin fields)
  kDs,      // a DeepSpeed JSON (alone, or the deepspeed_config_file an accelerate config names)
};
std::string to_string(Scope s);

inline constexpr unsigned kToDs = 1, kToFsdp = 2, kToFsdp2 = 4, kToAnyFsdp = kToFsdp | kToFsdp2;
unsigned target_bit(Target t);

struct Rule {
  Scope scope;
  std::string key;     // normalized source key; "x.*" matches x and everything under it; "*" anything
  unsigned to;         // target bits this rule serves
  std::string target;  // target key(s), comma-separated; "(…)" = no literal key; "" = none
  Kind kind;
  std::string reason;
};
const std::vector<Rule>& rules();
// The rule for a normalized key: exact match first, then the longest "x.*" prefix, then "*".
// Never null: every scope ends in a "*" rule for every target.
const Rule& find_rule(Scope scope, const std::string& key, Target to);

struct AddedRule {
  unsigned to;
  std::string target;  // target key
  std::string reason;
};
const std::vector<AddedRule>& added_rules();
// Why the translation writes `target_key` when no source key set it.
std::string added_reason(Target to, const std::string& target_key);

// DeepSpeed's aliases for zero_optimization keys (runtime/zero/config.py DeepSpeedZeroConfig,
// pydantic alias / populate_by_name) and bf16's old name: the canonical spelling.
std::string canonical_ds_key(const std::string& dotted);

}  // namespace zb::bench::translate
