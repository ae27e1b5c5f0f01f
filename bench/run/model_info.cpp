// model_info.cpp — `zerobench model-info`: what a model costs, without allocating it.
#include <cstdio>
#include <iostream>

#include "backends/backend_info.hpp"
#include "backends/engine.hpp"
#include "bench/commands.hpp"
#include "runtime/errors.hpp"

namespace zb::bench {

namespace {
// The spec model-info costs a backend mode with: one micro-batch of --seq-len, the given options.
backends::EngineSpec info_spec(const ModelInfoOptions& o, const models::ModelConfig& cfg, const std::string& precision,
                               const nlohmann::json& options = nlohmann::json::object()) {
  backends::EngineSpec spec;
  spec.model = cfg;
  spec.precision = precision;
  spec.train = o.run.train;
  spec.train.seq_len = o.seq_len;
  spec.train.grad_accum = 1;
  spec.options = options;
  return spec;
}

// The two runs model-info estimates a rank's peak for, one peak each per mode (the same numbers
// in every table): a CPU run (Gloo stages each collective in host memory, and host memory is the
// device's, so host terms count: registry.cpp sets host_is_device) and a GPU run (NCCL; the
// device's terms only, the host's reported apart).
backends::PeakEstimate cpu_run_estimate(const backends::BackendInfo& b, const backends::EngineSpec& spec,
                                        const backends::Topology& topo) {
  return b.training.estimate_peak(spec, topo, 0, /*gloo=*/true);
}
backends::PeakEstimate gpu_run_estimate(const backends::BackendInfo& b, const backends::EngineSpec& spec,
                                        const backends::Topology& topo) {
  auto e = b.training.estimate_peak(spec, topo, 0, /*gloo=*/false);
  e.host_is_device = false;
  return e;
}

// One row per backend mode and offload choice (none first, then BackendInfo::training.offload_choices):
// rank 0's model-state bytes on the device and on the host, the estimated peak of each, and
// whether they fit in --device-memory per rank and --host-memory per node (W ranks on one node).
nlohmann::json offload_rows(const ModelInfoOptions& o, const models::ModelConfig& cfg, const backends::Topology& topo) {
  nlohmann::json rows = nlohmann::json::array();
  const double gib = double(1 << 30);
  for (const auto& b : backends::registered_backends()) {
    if (b.training.offload_choices.empty()) continue;
    std::vector<backends::TrainingFacet::OffloadChoice> choices = {{"none", nlohmann::json::object()}};
    choices.insert(choices.end(), b.training.offload_choices.begin(), b.training.offload_choices.end());
    for (const auto& p : b.precisions)
      for (const auto& c : choices) {
        const auto spec = info_spec(o, cfg, p, c.options);
        const auto bytes = b.training.expected_bytes(spec, topo, 0);
        nlohmann::json row = {{"mode", b.name + ":" + p},
                              {"offload", c.label},
                              {"options", c.options},
                              {"device_model_states_bytes", bytes.total()},
                              {"host_model_states_bytes", bytes.host.total()},
                              {"model_states_bytes", backends::to_json(bytes)}};
        // A GPU run's estimate (host terms apart from the device's), whatever --device says.
        if (b.training.estimate_peak) {
          const auto e = gpu_run_estimate(b, spec, topo);
          row["estimated_device_peak_bytes"] = e.peak_bytes();
          row["estimated_host_peak_bytes"] = e.host_peak_bytes();
          row["fits_device"] = double(e.peak_bytes()) <= o.device_memory_gib * gib;
          if (o.host_memory_gib > 0)
            row["fits_host"] = double(e.host_peak_bytes()) * topo.world <= o.host_memory_gib * gib;
        }
        rows.push_back(row);
      }
  }
  return rows;
}
}  // namespace

int model_info_command(const ModelInfoOptions& o) {
  const auto cfg = o.run.model_config();
  const auto n = models::count_params(cfg);
  const auto f = models::flops_per_token(cfg, o.seq_len, models::ActivationCheckpointing::none());
  const auto f_ac = models::flops_per_token(cfg, o.seq_len, models::ActivationCheckpointing::full());
  nlohmann::json modes = nlohmann::json::object(), estimates = nlohmann::json::object(),
                 plans = nlohmann::json::object();
  nlohmann::json by_device = {{"cpu", nlohmann::json::object()}, {"cuda", nlohmann::json::object()}};
  // One node of W ranks: model-info takes no backend options, so no shard group narrower than the
  // world arises here (HYBRID_SHARD runs report theirs: ranks[i].memory.estimate.topology).
  const backends::Topology topo(o.world_size);
  for (const auto& b : backends::registered_backends()) {
    for (const auto& p : b.precisions) {
      const auto spec = info_spec(o, cfg, p);
      // Per rank: rank 0's bytes, and where ranks differ (FSDP2's AdamW states follow each
      // rank's unpadded rows) every run of consecutive ranks with the same bytes.
      const auto r0 = b.training.expected_bytes(spec, topo, 0);
      auto& m = modes[b.name + ":" + p];
      m = backends::to_json(r0);
      m["total"] = r0.total();
      nlohmann::json ranges = nlohmann::json::array();
      backends::ModelStateBytes prev = r0;
      int first = 0;
      for (int r = 1; r <= o.world_size; ++r) {
        const auto cur = r < o.world_size ? b.training.expected_bytes(spec, topo, r) : backends::ModelStateBytes{};
        if (r < o.world_size && cur == prev) continue;
        auto range = backends::to_json(prev);
        range["first_rank"] = first;
        range["last_rank"] = r - 1;
        range["total"] = prev.total();
        ranges.push_back(range);
        prev = cur;
        first = r;
      }
      if (ranges.size() > 1) m["rank_ranges"] = ranges;
      // The dtypes of each piece of model state (the blog's Table 2), from the engine's own rules.
      plans[b.name + ":" + p] = backends::to_json(b.training.precision_plan(spec));
      // The pre-flight estimate of a rank's peak for one step (backends/memory_estimate.cpp).
      // One peak per mode and device: a CPU run's and a GPU run's (`modes` holds --device's in full).
      if (b.training.estimate_peak) {
        const auto cpu = cpu_run_estimate(b, spec, topo), gpu = gpu_run_estimate(b, spec, topo);
        estimates[b.name + ":" + p] = backends::to_json(o.run.device == "cpu" ? cpu : gpu);
        by_device["cpu"][b.name + ":" + p] = {{"peak_bytes", cpu.peak_bytes()}, {"peak_phase", cpu.peak_phase()}};
        by_device["cuda"][b.name + ":" + p] = {{"peak_bytes", gpu.peak_bytes()},
                                               {"peak_phase", gpu.peak_phase()},
                                               {"host_peak_bytes", gpu.host_peak_bytes()}};
      }
    }
  }
  nlohmann::json j = {{"model", cfg.preset},
                      {"dims",
                       {{"layers", cfg.layers}, {"hidden", cfg.hidden}, {"heads", cfg.heads}, {"kv_heads", cfg.kv_heads},
                        {"ffn", cfg.ffn}, {"vocab", cfg.vocab}, {"head_dim", cfg.head_dim()}}},
                      {"params", {{"total", n.total}, {"non_embedding", n.non_embedding}, {"embedding", n.embedding},
                                  {"per_block", n.per_block}, {"root", n.root}}},
                      {"seq_len", o.seq_len},
                      {"flops_per_token", {{"six_n", f.six_n}, {"palm", f.palm}, {"palm_recompute", f_ac.palm_recompute}}},
                      {"world_size", o.world_size},
                      {"model_state_bytes_per_rank", modes},
                      {"precision_plans", plans},
                      {"estimated_peak_bytes_per_rank",
                       {{"micro_batch", o.run.train.micro_batch},
                        {"seq_len", o.seq_len},
                        {"activation_checkpointing", o.run.train.activation_checkpointing.enabled()},
                        {"activation_checkpointing_mode", o.run.train.activation_checkpointing.name()},
                        {"device", o.run.device},
                        {"modes", estimates},
                        {"by_device", by_device}}},
                      {"offload",
                       {{"device_memory_bytes", int64_t(o.device_memory_gib * double(1 << 30))},
                        {"host_memory_bytes", int64_t(o.host_memory_gib * double(1 << 30))},
                        {"rows", offload_rows(o, cfg, topo)}}}};
  if (o.json) {
    std::cout << j.dump(2) << "\n";
    return kExitOk;
  }
  std::printf("%s: %lld parameters (%lld non-embedding), L=%lld H=%lld heads=%lld kv=%lld ffn=%lld vocab=%lld\n",
              cfg.preset.c_str(), (long long)n.total, (long long)n.non_embedding, (long long)cfg.layers,
              (long long)cfg.hidden, (long long)cfg.heads, (long long)cfg.kv_heads, (long long)cfg.ffn,
              (long long)cfg.vocab);
  std::printf("FLOPs/token at T=%lld: 6N %.4g, PaLM %.4g, PaLM+recompute %.4g\n", (long long)o.seq_len, f.six_n, f.palm,
              f_ac.palm_recompute);
  std::printf("model-state bytes per rank at W=%d:\n", o.world_size);
  for (const auto& [mode, b] : modes.items()) {
    std::printf("  %-14s %10.2f GiB (params %.2f, master %.2f, grads %.2f, optimizer %.2f, buffers %.2f)\n",
                mode.c_str(), b["total"].get<double>() / (1 << 30), b["params"].get<double>() / (1 << 30),
                b["master_params"].get<double>() / (1 << 30), b["grads"].get<double>() / (1 << 30),
                b["optimizer"].get<double>() / (1 << 30), b["buffers"].get<double>() / (1 << 30));
    if (b.contains("rank_ranges"))
      for (const auto& r : b["rank_ranges"])
        std::printf("  %-14s   ranks %d-%d: %lld bytes\n", "", r["first_rank"].get<int>(), r["last_rank"].get<int>(),
                    (long long)r["total"].get<int64_t>());
  }
  std::printf("precision plan (default options; a config file's keys can change reduce/grads):\n");
  std::printf("  %-14s %-5s %-6s %-7s %-6s %-5s %-6s %s\n", "mode", "load", "params", "compute", "reduce", "grads",
              "master", "optimizer");
  for (const auto& [mode, pl] : plans.items())
    std::printf("  %-14s %-5s %-6s %-7s %-6s %-5s %-6s %s\n", mode.c_str(), pl["load"].get<std::string>().c_str(),
                pl["params"].get<std::string>().c_str(), pl["compute"].get<std::string>().c_str(),
                pl["reduce"].get<std::string>().c_str(), pl["grads"].get<std::string>().c_str(),
                pl["master"].is_null() ? "-" : pl["master"].get<std::string>().c_str(),
                pl["optimizer_states"].get<std::string>().c_str());
  std::printf("estimated peak per rank (micro-batch %lld, T=%lld%s), one per device:\n", (long long)o.run.train.micro_batch,
              (long long)o.seq_len,
              o.run.train.activation_checkpointing.enabled()
                  ? (", activation checkpointing " + o.run.train.activation_checkpointing.name()).c_str()
                  : "");
  std::printf("  cpu run: Gloo stages each collective in host memory, which is also the device's (host terms "
              "counted)\n  gpu run: NCCL, the device's memory alone (host terms apart: the offload table)\n");
  std::printf("  %-14s %-33s %s\n", "mode", "   cpu run", "   gpu run");
  for (const auto& [mode, c] : by_device["cpu"].items()) {
    const auto& g = by_device["cuda"][mode];
    if (g.contains("refused")) {
      std::printf("  %-14s %10.2f GiB %-18s %14s %s\n", mode.c_str(), c["peak_bytes"].get<double>() / (1 << 30),
                  ("(" + c["peak_phase"].get<std::string>() + ")").c_str(), "-", ("(" + g["refused"].get<std::string>() + ")").c_str());
      continue;
    }
    std::printf("  %-14s %10.2f GiB %-18s %10.2f GiB %s\n", mode.c_str(), c["peak_bytes"].get<double>() / (1 << 30),
                ("(" + c["peak_phase"].get<std::string>() + ")").c_str(), g["peak_bytes"].get<double>() / (1 << 30),
                ("(" + g["peak_phase"].get<std::string>() + ")").c_str());
  }
  const auto& rows = j["offload"]["rows"];
  if (!rows.empty()) {
    std::printf("offload per rank at W=%d (model states device | host; estimated peak on a gpu run, device | host "
                "(the 'none' rows are the gpu run column above); fits: device <= %.0f GiB%s):\n",
                o.world_size, o.device_memory_gib,
                o.host_memory_gib > 0 ? (", host x W <= " + std::to_string(int64_t(o.host_memory_gib)) + " GiB").c_str() : "");
    for (const auto& r : rows) {
      const bool est = r.contains("estimated_device_peak_bytes");
      std::string fits = !est ? "-" : r["fits_device"].get<bool>() ? "fits" : "does not fit";
      if (est && r.contains("fits_host") && !r["fits_host"].get<bool>()) fits += " (host too small)";
      std::printf("  %-14s %-44s states %8.2f | %8.2f GiB  peak %8.2f | %8.2f GiB  %s\n",
                  r["mode"].get<std::string>().c_str(), r["offload"].get<std::string>().c_str(),
                  r["device_model_states_bytes"].get<double>() / (1 << 30),
                  r["host_model_states_bytes"].get<double>() / (1 << 30),
                  est ? r["estimated_device_peak_bytes"].get<double>() / (1 << 30) : 0.0,
                  est ? r["estimated_host_peak_bytes"].get<double>() / (1 << 30) : 0.0, fits.c_str());
    }
  }
  return kExitOk;
}

}  // namespace zb::bench
