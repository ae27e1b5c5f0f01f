// backend_options.hpp — a backend's options as EngineSpec carries them: type-erased, typed.
// Owns: BackendOptions, the holder of one backend's options struct (zero3::Zero3Options,
// fsdp::FsdpOptions, ...) that resolution (BackendInfo::config.read / apply_flags) parsed and
// validated once, or of a raw JSON object not parsed yet (a test's spec, a report's options
// replayed, model-info's offload choices), which the backend's accessor (e.g.
// zero3::zero3_options(spec)) parses once on first use and keeps (a raw object names no backend:
// each backend that reads it parses it once, into its own struct). JSON leaves it only at the
// report's edge (json()). Must not: know any backend or its keys.
#pragma once
#include <nlohmann/json.hpp>

#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <typeinfo>
#include <utility>
#include <vector>

namespace zb::backends {

class BackendOptions {
 public:
  BackendOptions() = default;  // no options: the empty object (every default)
  // A raw object, not parsed yet (null counts as the empty object).
  BackendOptions(nlohmann::json raw) : raw_(raw.is_null() ? nlohmann::json::object() : std::move(raw)) {}
  BackendOptions(nlohmann::json::initializer_list_t init) : raw_(init) {}  // {{"key", value}, ...}
  BackendOptions(const char*) = delete;  // not a JSON string
  // A backend's parsed, validated struct; json() renders it with the free to_json(const T&).
  template <class T, class = std::enable_if_t<!std::is_convertible_v<T, nlohmann::json> &&
                                              !std::is_same_v<std::decay_t<T>, BackendOptions>>>
  BackendOptions(T typed) : typed_(std::make_shared<const T>(std::move(typed))),
                            type_(&typeid(T)),
                            render_([](const void* p) { return nlohmann::json(to_json(*static_cast<const T*>(p))); }) {}

  // The typed struct. A raw form is parsed with `parse` (the backend's reader, which throws
  // UsageError naming a bad key) once per struct type and kept (copies share what was parsed).
  // Asking a typed holder for another backend's type is a logic error.
  template <class T, class Parse>
  const T& as(Parse&& parse) const {
    if (!typed_) {
      std::lock_guard<std::mutex> lock(cache_->m);
      for (const auto& [type, parsed] : cache_->parsed)
        if (*type == typeid(T)) return *static_cast<const T*>(parsed.get());
      auto parsed = std::make_shared<const T>(parse(raw_));
      cache_->parsed.emplace_back(&typeid(T), parsed);
      return *parsed;
    }
    check<T>(*type_);
    return *static_cast<const T*>(typed_.get());
  }

  // The report's edge: the typed struct rendered, or the raw object as given.
  nlohmann::json json() const { return typed_ ? render_(typed_.get()) : raw_; }
  bool is_typed() const { return typed_ != nullptr; }

  // Tests' and the toy backend's key access on the JSON form. Writing makes the options raw again
  // (the typed struct rendered, then edited): the next accessor call parses the edited object.
  nlohmann::json operator[](const std::string& key) const { return json().value(key, nlohmann::json()); }
  nlohmann::json& operator[](const std::string& key) {
    make_raw();
    return raw_[key];
  }
  std::string dump(int indent = -1) const { return json().dump(indent); }

 private:
  template <class T>
  static void check(const std::type_info& held) {
    if (held != typeid(T))
      throw std::logic_error(std::string("BackendOptions holds ") + held.name() + ", asked for " + typeid(T).name());
  }
  void make_raw() {
    if (typed_) raw_ = render_(typed_.get());
    typed_.reset();
    cache_ = std::make_shared<Cache>();
  }
  struct Cache {
    std::mutex m;
    std::vector<std::pair<const std::type_info*, std::shared_ptr<const void>>> parsed;  // one per type read
  };
  nlohmann::json raw_ = nlohmann::json::object();        // when typed_ is null
  std::shared_ptr<const void> typed_;                     // the parsed struct, immutable
  const std::type_info* type_ = nullptr;
  nlohmann::json (*render_)(const void*) = nullptr;
  std::shared_ptr<Cache> cache_ = std::make_shared<Cache>();  // raw_'s parses, shared by copies of it
};

}  // namespace zb::backends
