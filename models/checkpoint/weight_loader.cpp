// weight_loader.cpp — the three loading strategies over a mapped HF Llama checkpoint.
#include "models/checkpoint/weight_loader.hpp"

#include <unistd.h>

#include <cmath>
#include <fstream>
#include <sstream>

#include "config/bounded_readers.hpp"
#include "models/checkpoint/hf_llama.hpp"
#include "runtime/errors.hpp"

namespace zb::models::checkpoint {

LoadStrategy load_strategy_from_name(const std::string& name) {
  if (name == "all-ranks") return LoadStrategy::kAllRanks;
  if (name == "rank0-broadcast") return LoadStrategy::kRank0Broadcast;
  if (name == "sharded") return LoadStrategy::kSharded;
  throw UsageError("--load-strategy: '" + name + "' is not one of all-ranks, rank0-broadcast, sharded");
}

std::string load_strategy_name(LoadStrategy s) {
  switch (s) {
    case LoadStrategy::kAllRanks: return "all-ranks";
    case LoadStrategy::kRank0Broadcast: return "rank0-broadcast";
    case LoadStrategy::kSharded: return "sharded";
  }
  return "?";
}

// config.json's fields checked and read (read_model_dir_config's second half).
static ModelConfig model_config_from_config_json(const nlohmann::json& c, const std::string& path);

ModelConfig read_model_dir_config(const std::string& dir) {
  const std::string path = dir + "/config.json";
  // Bounded read and parse (config/bounded_readers.hpp): kMaxModelJsonBytes, depth, values.
  const std::string where = "--model-dir: " + path + ": ";
  const config::Limits limits{config::kMaxModelJsonBytes, config::kMaxNestingDepth, config::kMaxModelJsonBytes};
  const nlohmann::json c = config::parse_json_bounded(config::read_file_bounded(path, where, limits.max_bytes), where, limits);
  try {
    return model_config_from_config_json(c, path);
  } catch (const nlohmann::json::exception& e) {  // a field of the wrong type: the file's fault (exit 2)
    throw UsageError(where + "a value of the wrong type or out of range (" + e.what() + ")");
  }
}

static ModelConfig model_config_from_config_json(const nlohmann::json& c, const std::string& path) {
  // transformers' GraniteConfig (models/granite/configuration_granite.py) scales embeddings,
  // residuals, attention scores and logits; zerobench's decoder is Llama's, so only the neutral
  // values are honoured.
  for (const char* key : {"embedding_multiplier", "residual_multiplier", "logits_scaling"}) {
    if (c.contains(key) && c[key].is_number() && c[key].get<double>() != 1.0)
      throw UsageError("--model-dir: " + path + ": " + key + " " + c[key].dump() +
                       " is not supported (zerobench's decoder is Llama's: 1.0)");
  }
  if (c.contains("attention_multiplier") && c["attention_multiplier"].is_number()) {
    const auto cfg = model_config_from_hf(c);
    const double expect = 1.0 / std::sqrt(double(cfg.head_dim()));
    if (std::abs(c["attention_multiplier"].get<double>() - expect) > 1e-12 * expect)
      throw UsageError("--model-dir: " + path + ": attention_multiplier " + c["attention_multiplier"].dump() +
                       " is not supported (Llama's 1/sqrt(head_dim) = " + std::to_string(expect) + ")");
  }
  try {
    return model_config_from_hf(c);
  } catch (const UsageError& e) {
    throw UsageError("--model-dir: " + path + ": " + e.what());
  }
}

CheckpointWeightLoader::CheckpointWeightLoader(std::string dir, ModelConfig cfg, LoadStrategy strategy, int rank,
                                               at::Device device, BroadcastFn broadcast)
    : dir_(std::move(dir)), cfg_(std::move(cfg)), strategy_(strategy), rank_(rank), device_(device),
      broadcast_(std::move(broadcast)) {
  // Every rank that reads checks the names and shapes of the whole model up front (headers only).
  if (strategy_ != LoadStrategy::kRank0Broadcast || rank_ == 0)
    for (int u = 0; u < int(unit_count(cfg_)); ++u) read_hf_llama_unit(ckpt(), cfg_, u);
  sample_rss();
}

const SafetensorsCheckpoint& CheckpointWeightLoader::ckpt() {
  if (!ckpt_) ckpt_ = SafetensorsCheckpoint::open(dir_);
  return *ckpt_;
}

void CheckpointWeightLoader::sample_rss() {
  std::ifstream statm("/proc/self/statm");
  int64_t total = 0, resident = 0;
  statm >> total >> resident;
  stats_.peak_rss_sampled_bytes = std::max(stats_.peak_rss_sampled_bytes, resident * int64_t(sysconf(_SC_PAGESIZE)));
}

at::Tensor CheckpointWeightLoader::read(int unit, int64_t begin, int64_t length) {
  auto out = at::empty({length}, at::kFloat);
  const auto names = hf_unit_names(cfg_, unit);
  const auto specs = unit_specs(cfg_, unit);
  int64_t offset = 0;  // the tensor's first element in the unit's flat layout
  for (size_t i = 0; i < specs.size(); ++i) {
    const int64_t n = specs[i].numel();
    const int64_t s = std::max(begin, offset), e = std::min(begin + length, offset + n);
    if (e > s) {
      // A view of the mapped tensor; narrowing touches (and copies) only the pages of [s, e).
      auto t = ckpt().tensor(names[i]).reshape({-1}).narrow(0, s - offset, e - s);
      out.narrow(0, s - begin, e - s).copy_(t);
      stats_.bytes_read += (e - s) * int64_t(t.element_size());
      ++stats_.tensors_touched;
    }
    offset += n;
  }
  sample_rss();
  return out;
}

at::Tensor CheckpointWeightLoader::range(int unit, int64_t begin, int64_t length) {
  if (strategy_ == LoadStrategy::kSharded) return read(unit, begin, length);
  if (cached_unit_ != unit) {
    cached_ = at::Tensor();
    const int64_t n = [&] {
      int64_t total = 0;
      for (const auto& p : unit_specs(cfg_, unit)) total += p.numel();
      return total;
    }();
    if (strategy_ == LoadStrategy::kAllRanks) {
      cached_ = read(unit, 0, n);
    } else {
      // sync_module_states: rank 0 holds the loaded unit, the others an empty one; one broadcast
      // from rank 0 on the compute device (FSDP moves the module to the device first).
      at::Tensor t = rank_ == 0 ? read(unit, 0, n).to(device_) : at::empty({n}, at::TensorOptions().dtype(at::kFloat).device(device_));
      broadcast_(t);
      if (rank_ != 0) stats_.bytes_received += n * int64_t(sizeof(float));
      cached_ = t;
      sample_rss();
    }
    cached_unit_ = unit;
  }
  return cached_.narrow(0, begin, length);
}

void CheckpointWeightLoader::release() {
  cached_ = at::Tensor();
  cached_unit_ = -1;
  ckpt_.reset();
}

}  // namespace zb::models::checkpoint
