// render.cpp — `zerobench translate`'s outputs: the target file's text (DeepSpeed JSON, or an
// accelerate YAML emitted with yaml-cpp and typed so PyYAML's safe_load reads it back the same),
// the mapping as Markdown and JSON, the rule table (--list-mapping), and the command itself.
// Must not: decide any mapping (translate.cpp and mapping.cpp do).
#include <yaml-cpp/yaml.h>

#include <iostream>
#include <regex>
#include <sstream>

#include "bench/translate/mapping.hpp"
#include "bench/translate/translate.hpp"
#include "reports/report.hpp"
#include "runtime/errors.hpp"

namespace zb::bench::translate {

namespace {
using ojson = nlohmann::ordered_json;

// A string PyYAML's resolvers would read as a bool, null or number (YAML 1.1): quote it.
bool needs_quotes(const std::string& s) {
  static const std::regex special(
      "^(y|Y|yes|Yes|YES|n|N|no|No|NO|true|True|TRUE|false|False|FALSE|on|On|ON|off|Off|OFF|null|Null|NULL|~|)$");
  static const std::regex numeric("^[-+]?[.0-9].*$");
  return std::regex_match(s, special) || std::regex_match(s, numeric) || s.find(": ") != std::string::npos ||
         s.find(" #") != std::string::npos;
}

void emit(YAML::Emitter& out, const ojson& v) {
  if (v.is_object()) {
    out << YAML::BeginMap;
    for (const auto& [k, x] : v.items()) {
      out << YAML::Key << k << YAML::Value;
      emit(out, x);
    }
    out << YAML::EndMap;
  } else if (v.is_array()) {
    out << YAML::Flow << YAML::BeginSeq;
    for (const auto& x : v) emit(out, x);
    out << YAML::EndSeq;
  } else if (v.is_string()) {
    const auto s = v.get<std::string>();
    if (needs_quotes(s)) out << YAML::SingleQuoted << s;
    else out << s;
  } else if (v.is_null()) {
    out << YAML::Null;
  } else {
    out << v.dump();  // booleans and numbers as JSON writes them, which PyYAML reads back alike
  }
}

std::string cell(std::string s) {
  for (size_t i = 0; (i = s.find('|', i)) != std::string::npos; i += 2) s.replace(i, 1, "\\|");
  for (auto& ch : s)
    if (ch == '\n') ch = ' ';
  return s.empty() ? "—" : s;
}
}  // namespace

std::string render_config(const Translation& t) {
  if (t.target == Target::kDeepSpeed) return t.config.dump(2) + "\n";
  YAML::Emitter out;
  emit(out, t.config);
  return "# zerobench translate " + t.source_path + " --to " + to_string(t.target) +
         " (the mapping: zerobench translate ... --out F writes F.mapping.md)\n" + out.c_str() + "\n";
}

std::string mapping_markdown(const Translation& t) {
  std::ostringstream o;
  o << "## zerobench translate: " << t.source_path << " (" << t.source_kind << ") -> " << to_string(t.target) << "\n\n";
  o << "- source: " << (t.source_refusal.empty() ? "zerobench runs it" : "zerobench refuses to run it: " + t.source_refusal)
    << "\n";
  o << "- translation: "
    << (t.target_refusal.empty() ? "zerobench runs it" : "zerobench refuses to run it: " + t.target_refusal) << "\n";
  for (const auto& n : t.notes) o << "- NOTE: " << n << "\n";
  o << "\n| source key | value | target key | value | kind | reason |\n|---|---|---|---|---|---|\n";
  for (const auto& e : t.mapping)
    o << "| " << cell(e.source_key) << " | " << cell(e.source_value) << " | " << cell(e.target_key) << " | "
      << cell(e.target_value) << " | " << to_string(e.kind) << " | "
      << cell(e.reason + (e.refused.empty() ? "" : " **zerobench run refuses it: " + e.refused + "**")) << " |\n";
  return o.str();
}

nlohmann::json mapping_json(const Translation& t) {
  nlohmann::json entries = nlohmann::json::array();
  for (const auto& e : t.mapping)
    entries.push_back({{"source_key", e.source_key},
                       {"source_value", e.source_value},
                       {"target_key", e.target_key},
                       {"target_value", e.target_value},
                       {"kind", to_string(e.kind)},
                       {"reason", e.reason},
                       {"refused_by_zerobench", e.refused}});
  return {{"source", t.source_path},        {"source_kind", t.source_kind},       {"target", to_string(t.target)},
          {"source_refusal", t.source_refusal}, {"target_refusal", t.target_refusal}, {"notes", t.notes},
          {"mapping", entries}};
}

std::string list_mapping_markdown() {
  std::ostringstream o;
  const auto targets = [](unsigned bits) {
    std::string s;
    const std::pair<unsigned, Target> names[] = {{kToDs, Target::kDeepSpeed}, {kToFsdp, Target::kFsdp}, {kToFsdp2, Target::kFsdp2}};
    for (const auto& [bit, target] : names)
      if (bits & bit) s += (s.empty() ? "" : ", ") + to_string(target);
    return s;
  };
  o << "| source (where) | source key | --to | target key | kind | reason |\n|---|---|---|---|---|---|\n";
  for (const auto& r : rules())
    o << "| " << to_string(r.scope) << " | `" << r.key << "` | " << targets(r.to) << " | " << cell(r.target) << " | "
      << to_string(r.kind) << " | " << cell(r.reason) << " |\n";
  o << "\nTarget keys written with no source key (kind `added`):\n\n| --to | target key | why |\n|---|---|---|\n";
  for (const auto& r : added_rules()) o << "| " << targets(r.to) << " | `" << r.target << "` | " << cell(r.reason) << " |\n";
  return o.str();
}

int translate_command(const TranslateOptions& o) {
  if (o.list_mapping) {
    std::cout << list_mapping_markdown();
    return kExitOk;
  }
  if (o.file.empty()) throw UsageError("translate: FILE is required (or --list-mapping)");
  if (o.to.empty()) throw UsageError("translate: --to deepspeed|fsdp|fsdp2 is required");
  const auto t = translate_file(o.file, parse_target(o.to));
  const auto text = render_config(t);
  const auto md = mapping_markdown(t);
  std::cerr << md;
  if (o.out.empty()) {
    std::cout << text;
    return kExitOk;
  }
  reports::write_text_atomic(o.out, text);
  reports::write_text_atomic(o.out + ".mapping.md", md);
  reports::write_text_atomic(o.out + ".mapping.json", mapping_json(t).dump(2) + "\n");
  std::cerr << "translate: wrote " << o.out << ", " << o.out << ".mapping.md, " << o.out << ".mapping.json\n";
  return kExitOk;
}

}  // namespace zb::bench::translate
