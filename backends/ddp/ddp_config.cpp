// ddp_config.cpp — ddp's config/CLI hooks (see ddp_config.hpp; docs/configs.md).
#include "backends/ddp/ddp_config.hpp"

#include "runtime/errors.hpp"

namespace zb::backends::ddp {

nlohmann::json to_json(const DdpOptions& o) { return {{"bucket_cap_mb", o.bucket_cap_mb}}; }

DdpOptions ddp_options_from_json(const nlohmann::json& j) {
  DdpOptions o;
  o.bucket_cap_mb = j.value("bucket_cap_mb", o.bucket_cap_mb);
  return o;
}

const DdpOptions& ddp_options(const BackendOptions& options) { return options.as<DdpOptions>(ddp_options_from_json); }

nlohmann::json to_json(const DdpResolved& r) {
  auto j = to_json(r.options);
  j["gradient_as_bucket_view"] = true;  // the engine's gradients are views into its buckets
  j["sync_each_batch"] = r.sync_each_batch;
  j["optimizer"] = r.optimizer;
  j["param_dtype"] = dtype_long_name(r.param_dtype);
  j["storage_dtype"] = dtype_long_name(r.storage_dtype);
  return j;
}

DdpResolved ddp_resolved_from_json(const nlohmann::json& j) {
  DdpResolved r;
  r.options = ddp_options_from_json(j);
  r.param_dtype = dtype_key(j, "param_dtype");
  r.storage_dtype = dtype_key(j, "storage_dtype");
  r.sync_each_batch = j.value("sync_each_batch", r.sync_each_batch);
  r.optimizer = j.value("optimizer", r.optimizer);
  return r;
}

int config_claim(const ConfigIdentity& id) {
  if (!id.accelerate) return 0;
  const auto& t = id.distributed_type;
  return t == "MULTI_GPU" || t == "MULTI_CPU" || t == "NO" ? 2 : 0;
}

void read_config(const ConfigInput& in, ResolvedConfig& out) {
  auto& notes = out.provenance.notes;
  const std::string& mp = in.launch->mixed_precision;
  if (mp == "fp16" || mp == "fp8")
    throw UsageError("mixed_precision " + mp + ": " + mp + " is not implemented in zerobench (bf16 or no)");
  // accelerate's native AMP: fp32 weights, bf16 autocast compute: ddp "mixed".
  out.precision = mp == "bf16" ? "mixed" : "fp32";
  out.options = DdpOptions{};
  notes.apply("distributed_type", in.launch->distributed_type,
              "backend ddp (DistributedDataParallel, bucket_cap_mb 25 as accelerate's default)");
  const auto& req = in.request;
  config::note_mixed_precision(in.file.root, req.precision_given ? req.precision + " (--precision)" : out.precision, mp,
                               notes);
}

std::vector<BackendFlag> cli_flags() {
  BackendFlag bucket;
  bucket.name = "--bucket-cap-mb";
  bucket.help = "ddp: gradient all-reduce bucket size in MiB";
  bucket.kind = BackendFlag::Kind::kPositive;
  bucket.default_text = "25";
  bucket.refused_elsewhere = false;  // as before: other backends do not read it
  return {bucket};
}

void apply_flags(const FlagValues& given, bool /*from_file*/, EngineSpec& spec, config::ConfigNotes& /*notes*/) {
  // DistributedDataParallel's bucket_cap_mb: the flag's value, else the options' (DdpOptions' default).
  DdpOptions o = ddp_options(spec.options);
  if (const auto it = given.find("--bucket-cap-mb"); it != given.end()) o.bucket_cap_mb = it->second.number;
  spec.options = o;
}

// torch/nn/parallel/distributed.py (DistributedDataParallel's bucket_cap_mb).
std::vector<OptionEffect> option_effects() {
  return {{"bucket_cap_mb", "DDP all-reduce bucket size: how many all-reduces a step issues"},
          {"gradient_as_bucket_view", "gradients are views into the all-reduce buckets: one gradient-sized copy less per rank"},
          {"storage_dtype", "dtype the parameters, gradients and optimizer states are held in"}};
}

}  // namespace zb::backends::ddp
