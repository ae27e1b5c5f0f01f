// config_resolve.hpp — the one place a config file meets the backends: the file is read
// (config/), each registered backend says how strongly it claims it (BackendInfo::config.claim),
// and the strongest one's reader turns it into the run's backend, precision, train settings and
// options. Owns: the choice, the refusal when no backend claims a file, and the --backend /
// --accelerate-config / --deepspeed-config consistency checks. Must not: name a backend or read a
// format's keys.
#pragma once
#include "backends/config_hooks.hpp"

namespace zb::bench {

using backends::ConfigRequest;
using backends::ResolvedConfig;
using config::ConfigProvenance;
using config::config_num_processes;
using config::file_sha256;
using config::read_config_tree;

// The backend that runs a file of this identity (the strongest claim), "" when none does.
std::string claiming_backend(const backends::ConfigIdentity& id);

// Throws UsageError: one line naming the file, the key, its value and why.
ResolvedConfig resolve_config(const ConfigRequest& request);

}  // namespace zb::bench
