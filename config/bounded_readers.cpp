// bounded_readers.cpp — see bounded_readers.hpp.
#include "config/bounded_readers.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "runtime/errors.hpp"

namespace zb::config {

namespace {
using json = nlohmann::json;

std::string over(const std::string& what, int64_t limit, const char* name) {
  return what + " (zerobench's limit " + name + " = " + std::to_string(limit) + "; docs/configs.md \"Limits\")";
}

// The walk: every node visited once per path that reaches it (an alias is visited again each
// time it is referenced), so the budget bounds exactly the work (and the output) of an expanding
// traversal. `build` is null for a check only.
struct Walk {
  const std::string& where;
  const Limits& limits;
  const std::function<json(const YAML::Node&)>* scalar = nullptr;
  int64_t nodes = 0, scalar_bytes = 0;

  void visit(const YAML::Node& n, int depth) {
    if (++nodes > limits.max_nodes)
      throw UsageError(where + over("more than " + std::to_string(limits.max_nodes) +
                                        " nodes once YAML aliases are expanded (an alias bomb?)",
                                    limits.max_nodes, "kMaxDocumentNodes"));
    if (depth > limits.max_depth)
      throw UsageError(where + over("nested deeper than " + std::to_string(limits.max_depth) + " levels", limits.max_depth,
                                    "kMaxNestingDepth"));
    if (n.IsScalar()) {
      scalar_bytes += int64_t(n.Scalar().size());
      if (scalar_bytes > limits.max_scalar_bytes)
        throw UsageError(where + over("more than " + std::to_string(limits.max_scalar_bytes) +
                                          " bytes of scalars once YAML aliases are expanded",
                                      limits.max_scalar_bytes, "kMaxDocumentScalarBytes"));
    }
  }

  json build(const YAML::Node& n, int depth) {
    visit(n, depth);
    switch (n.Type()) {
      case YAML::NodeType::Null:
      case YAML::NodeType::Undefined: return nullptr;
      case YAML::NodeType::Scalar: return scalar ? (*scalar)(n) : json(n.Scalar());
      case YAML::NodeType::Sequence: {
        json a = json::array();
        for (const auto& e : n) a.push_back(build(e, depth + 1));
        return a;
      }
      case YAML::NodeType::Map: {
        json o = json::object();
        for (const auto& kv : n) {
          visit(kv.first, depth + 1);  // a key is a node too (its content is read as a scalar only)
          o[kv.first.Scalar()] = build(kv.second, depth + 1);  // the last duplicate wins (PyYAML)
        }
        return o;
      }
    }
    return nullptr;
  }

  void check(const YAML::Node& n, int depth) {
    visit(n, depth);
    if (n.IsSequence()) {
      for (const auto& e : n) check(e, depth + 1);
    } else if (n.IsMap()) {
      for (const auto& kv : n) {
        check(kv.first, depth + 1);
        check(kv.second, depth + 1);
      }
    }
  }
};

void check_size(int64_t size, const std::string& where, int64_t max_bytes) {
  if (size > max_bytes)
    throw UsageError(where + over(std::to_string(size) + " bytes, more than " + std::to_string(max_bytes), max_bytes,
                                  max_bytes == kMaxModelJsonBytes ? "kMaxModelJsonBytes" : "kMaxConfigFileBytes"));
}
}  // namespace

std::string read_file_bounded(const std::string& path, const std::string& where, int64_t max_bytes) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw UsageError(where + "cannot read the file (" + std::strerror(errno) + ")");
  struct stat st {};
  if (::fstat(fd, &st) != 0 || S_ISDIR(st.st_mode)) {
    ::close(fd);
    throw UsageError(where + "not a readable file");
  }
  if (S_ISREG(st.st_mode)) {
    try {
      check_size(int64_t(st.st_size), where, max_bytes);
    } catch (...) {
      ::close(fd);
      throw;
    }
  }
  std::string text;
  char buf[65536];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof(buf))) > 0) {
    text.append(buf, size_t(n));
    if (int64_t(text.size()) > max_bytes) {
      ::close(fd);
      check_size(int64_t(text.size()), where, max_bytes);
    }
  }
  const int err = errno;
  ::close(fd);
  if (n < 0) throw UsageError(where + "cannot read the file (" + std::strerror(err) + ")");
  return text;
}

YAML::Node load_yaml_bounded(const std::string& text, const std::string& where, const Limits& limits) {
  check_size(int64_t(text.size()), where, limits.max_bytes);
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    throw UsageError(where + "not valid YAML: " + e.what());
  }
  check_yaml_bounds(root, where, limits);
  return root;
}

void check_yaml_bounds(const YAML::Node& root, const std::string& where, const Limits& limits) {
  Walk w{where, limits};
  w.check(root, 0);
}

json yaml_to_json_bounded(const YAML::Node& root, const std::function<json(const YAML::Node&)>& scalar,
                          const std::string& where, const Limits& limits) {
  Walk w{where, limits, &scalar};
  return w.build(root, 0);
}

json parse_json_bounded(const char* begin, const char* end, const std::string& where, const Limits& limits,
                        bool ignore_comments, const json::parser_callback_t& extra) {
  check_size(int64_t(end - begin), where, limits.max_bytes);
  int64_t nodes = 0;
  json::parser_callback_t cb = [&](int depth, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::object_start || event == json::parse_event_t::array_start ||
        event == json::parse_event_t::value) {
      // object_start/array_start arrive at the container's own depth; its elements one deeper.
      if (depth > limits.max_depth)
        throw UsageError(where + over("nested deeper than " + std::to_string(limits.max_depth) + " levels",
                                      limits.max_depth, "kMaxNestingDepth"));
      if (++nodes > limits.max_nodes)
        throw UsageError(where + over("more than " + std::to_string(limits.max_nodes) + " values", limits.max_nodes,
                                      "kMaxDocumentNodes"));
    }
    return extra ? extra(depth, event, parsed) : true;
  };
  try {
    return json::parse(begin, end, cb, /*allow_exceptions=*/true, ignore_comments);
  } catch (const json::exception& e) {  // parse_error, and out_of_range for a number that overflows
    std::string msg = e.what();
    if (auto p = msg.find("parse error"); p != std::string::npos) msg = msg.substr(p);
    throw UsageError(where + "not valid JSON: " + msg);
  }
}

std::string clip_message(const std::string& message, size_t max_chars) {
  std::string m = message;
  std::replace(m.begin(), m.end(), '\n', ' ');  // one line
  if (m.size() <= max_chars) return m;
  const size_t head = max_chars * 2 / 3, tail = max_chars / 4;
  return m.substr(0, head) + " ... (" + std::to_string(m.size() - head - tail) + " characters left out) ... " +
         m.substr(m.size() - tail);
}

}  // namespace zb::config
