// bounded_readers.hpp — reading user-supplied YAML and JSON files so that a hostile file cannot
// take the process down: a cap on the document's bytes, on its nesting depth, and on the nodes
// and scalar bytes a walk of the document visits with every YAML alias expanded (a counted walk:
// a budget of visited nodes, so small anchors/aliases keep working and an alias bomb stops
// within the budget). Every breach is a UsageError (exit 2) naming the file, the limit and its
// value (docs/configs.md "Limits").
// Why the walk: yaml-cpp shares an aliased node in the parsed tree (YAML::Load of a 400-byte
// bomb is cheap); the blow-up happens when the tree is traversed or converted with the aliases
// followed (bench/config_file.cpp's YAML -> JSON conversion expanded ~3e10 nodes). The parse
// itself is bounded by the byte cap and yaml-cpp 0.7's own DepthGuard (2000 levels).
// DeepSpeed (runtime/config.py DeepSpeedConfig: json.load / hjson) and accelerate
// (commands/config/config_args.py load_config_from_file: yaml.safe_load) never expand an alias
// into a copy: PyYAML's composer builds one shared Python object per anchor.
// Owns: the limits (named constants) and the bounded read/parse/walk. Must not: interpret any
// key (the readers in bench/ and backends/ do), or know a framework.
#pragma once
#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>

namespace zb::config {

// The limits, documented in docs/configs.md ("Limits"). Real files are far below them: the
// largest file of tests/configs/real/ is ~5 KB, 4 levels deep, ~150 nodes.
inline constexpr int64_t kMaxConfigFileBytes = 1 << 20;           // accelerate/DeepSpeed/matrix file
inline constexpr int kMaxNestingDepth = 64;                       // mappings/sequences inside each other
inline constexpr int64_t kMaxDocumentNodes = 100000;              // nodes visited, aliases expanded
inline constexpr int64_t kMaxDocumentScalarBytes = 2 << 20;       // scalar bytes visited, aliases expanded
inline constexpr int64_t kMaxModelJsonBytes = 16 << 20;           // --model-dir config.json / index.json

struct Limits {
  int64_t max_bytes = kMaxConfigFileBytes;
  int max_depth = kMaxNestingDepth;
  int64_t max_nodes = kMaxDocumentNodes;
  int64_t max_scalar_bytes = kMaxDocumentScalarBytes;
};

// The file's bytes; UsageError if it cannot be read or is larger than `max_bytes` (checked with
// fstat before reading, and again while reading, so a growing file or a pipe cannot exceed it).
// `where` prefixes every message ("--config F: ").
std::string read_file_bounded(const std::string& path, const std::string& where, int64_t max_bytes);

// YAML::Load of `text` (at most limits.max_bytes) followed by a counted walk of the tree, aliases
// followed: depth, nodes and scalar bytes within `limits`, or UsageError naming the limit.
YAML::Node load_yaml_bounded(const std::string& text, const std::string& where, const Limits& limits = {});

// The counted walk alone (for a tree already parsed).
void check_yaml_bounds(const YAML::Node& root, const std::string& where, const Limits& limits = {});

// The tree as JSON, built by the same counted walk (it stops at the budget, so it never expands
// an alias bomb). `scalar` types one scalar node (e.g. PyYAML's YAML 1.1 resolvers).
nlohmann::json yaml_to_json_bounded(const YAML::Node& root, const std::function<nlohmann::json(const YAML::Node&)>& scalar,
                                    const std::string& where, const Limits& limits = {});

// JSON text (at most limits.max_bytes) parsed with the depth and node budget enforced while
// parsing (nlohmann's parser callback); `extra` sees every event as well (e.g. DeepSpeed's
// duplicate-key refusal) and may throw. Syntax errors and number overflows are UsageErrors.
nlohmann::json parse_json_bounded(const char* begin, const char* end, const std::string& where, const Limits& limits = {},
                                  bool ignore_comments = false, const nlohmann::json::parser_callback_t& extra = nullptr);
inline nlohmann::json parse_json_bounded(const std::string& text, const std::string& where, const Limits& limits = {},
                                         bool ignore_comments = false,
                                         const nlohmann::json::parser_callback_t& extra = nullptr) {
  return parse_json_bounded(text.data(), text.data() + text.size(), where, limits, ignore_comments, extra);
}

// A message for one line: at most `max_chars`, its start and end kept around an elision marker
// (a refused value may be a whole structure, up to the limits above).
inline constexpr size_t kMaxMessageChars = 1000;
std::string clip_message(const std::string& message, size_t max_chars = kMaxMessageChars);

}  // namespace zb::config
