// config_resolve.cpp — which registered backend runs a config file (see config_resolve.hpp).
#include "bench/run/config_resolve.hpp"

#include <optional>

#include "backends/backend_info.hpp"
#include "config/accelerate_deepspeed.hpp"
#include "config/bounded_readers.hpp"
#include "runtime/errors.hpp"

namespace zb::bench {

namespace {

const backends::BackendInfo* find_backend(const std::string& name) {
  for (const auto& b : backends::registered_backends())
    if (b.name == name) return &b;
  return nullptr;
}

int claim(const backends::BackendInfo& b, const backends::ConfigIdentity& id) {
  return b.config.claim && b.config.read ? b.config.claim(id) : 0;
}

const backends::BackendInfo* strongest_claim(const backends::ConfigIdentity& id) {
  const backends::BackendInfo* chosen = nullptr;
  int best = 0;
  for (const auto& b : backends::registered_backends())
    if (const int c = claim(b, id); c > best) {
      best = c;
      chosen = &b;
    }
  return chosen;
}

// "FSDP (fsdp), DEEPSPEED (zero3) and ..." from the descriptors, in registration order.
std::string claimed_types() {
  std::vector<std::string> parts;
  for (const auto& b : backends::registered_backends())
    if (!b.config.claim_text.empty()) parts.push_back(b.config.claim_text + " (" + b.name + ")");
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) out += (i == 0 ? "" : i + 1 == parts.size() ? " and " : ", ") + parts[i];
  return out;
}

// The file read and resolved into `out` (resolve_config adds the file to every message).
void resolve_into(const ConfigRequest& req, ResolvedConfig& out) {
  const auto d = config::load_config(req.path, req.flag);
  out.provenance.sources.push_back({req.path, config::sha256_hex(d.bytes), d.accelerate ? "accelerate" : "deepspeed"});
  if (req.flag == "--deepspeed-config" && d.accelerate)
    throw UsageError("this is an accelerate config, not a DeepSpeed JSON (use --config)");
  if (req.flag == "--accelerate-config" && !d.accelerate)
    throw UsageError("this is a DeepSpeed JSON, not an accelerate config (use --config)");
  backends::ConfigIdentity id;
  id.accelerate = d.accelerate;
  std::optional<config::AccelerateLaunch> launch;
  if (d.accelerate) {
    launch = config::read_accelerate_launch(d.root, req.world_size, req.given.count("--nproc") > 0,
                                            out.provenance.notes, req.precision_given);
    id.distributed_type = launch->distributed_type;
    id.fsdp_version = launch->fsdp_version;
    if (id.distributed_type == "DEEPSPEED") id.zero_stage = config::accelerate_deepspeed_zero_stage(d.root);
  } else {
    id.zero_stage = config::deepspeed_zero_stage(d.root);
  }
  const backends::BackendInfo* chosen = strongest_claim(id);
  if (!chosen) {
    if (d.accelerate)
      throw UsageError("distributed_type " + config::scalar_text(d.root["distributed_type"]) + ": zerobench runs " +
                       claimed_types());
    throw UsageError("a DeepSpeed JSON: no registered backend runs DeepSpeed configs");
  }
  out.backend = chosen->name;
  chosen->config.read({d, launch ? &*launch : nullptr, req}, out);
  // --backend X agrees with the file when X claims it too (e.g. --backend fsdp names FSDP, which an
  // accelerate file runs as version 1 or 2).
  if (req.backend_given && req.backend != out.backend) {
    const auto* named = find_backend(req.backend);
    if (!named || claim(*named, id) == 0)
      throw UsageError("--backend " + req.backend + " conflicts with the file, which configures " + out.backend);
  }
}
}  // namespace

std::string claiming_backend(const backends::ConfigIdentity& id) {
  const auto* b = strongest_claim(id);
  return b ? b->name : std::string();
}

ResolvedConfig resolve_config(const ConfigRequest& req) {
  const std::string where = req.flag + " " + req.path + ": ";
  ResolvedConfig out;
  out.train = req.train;
  try {
    config::file_faults_are_usage(where, [&] { resolve_into(req, out); });
  } catch (const UsageError& e) {
    const std::string msg = e.what();
    throw UsageError(config::clip_message(msg.rfind(req.flag, 0) == 0 ? msg : where + msg));
  }
  return out;
}

}  // namespace zb::bench
