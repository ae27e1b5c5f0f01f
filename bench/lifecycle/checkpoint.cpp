// checkpoint.cpp — sharded and full checkpoints, atomic commits, exact resume (checkpoint.hpp).
#include "bench/lifecycle/checkpoint.hpp"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>

#include "backends/backend_info.hpp"
#include "models/checkpoint/hf_llama.hpp"
#include "models/checkpoint/safetensors.hpp"
#include "runtime/errors.hpp"
#include "runtime/memory.hpp"

namespace zb::bench::lifecycle {

namespace {
using json = nlohmann::json;
namespace ckpt = models::checkpoint;

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

bool exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

int64_t file_size(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 ? int64_t(st.st_size) : 0;
}

void mkdirs(const std::string& path) {
  const auto failed = make_dirs(path);
  if (!failed.empty()) throw RunError("cannot create directory " + failed);
}

void remove_tree(const std::string& path) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) return;
  if (S_ISDIR(st.st_mode)) {
    if (DIR* d = ::opendir(path.c_str())) {
      while (const dirent* e = ::readdir(d)) {
        const std::string name = e->d_name;
        if (name != "." && name != "..") remove_tree(path + "/" + name);
      }
      ::closedir(d);
    }
    ::rmdir(path.c_str());
  } else {
    ::unlink(path.c_str());
  }
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ' || s.back() == '\r')) s.pop_back();
  return s;
}

// File names per rank and the step directory: the backend's CheckpointLayout (BackendInfo::lifecycle.checkpoint).
const backends::CheckpointLayout& layout(const std::string& backend) {
  return backends::backend(backend).lifecycle.checkpoint;
}
std::string model_file(const std::string& backend, int rank) { return layout(backend).model_file(rank); }
std::string optim_file(const std::string& backend, const std::string& precision, int rank) {
  return layout(backend).optim_file(precision, rank);
}
bool is_model_state(const std::string& backend, const std::string& name) { return layout(backend).is_model_state(name); }
std::string tag_for(const std::string& backend, int64_t steps_done) { return layout(backend).tag(steps_done); }

}  // namespace

std::string make_dirs(const std::string& path) {
  std::string cur;
  std::stringstream ss(path);
  std::string part;
  if (!path.empty() && path[0] == '/') cur = "/";
  while (std::getline(ss, part, '/')) {
    if (part.empty()) continue;
    cur += part + "/";
    if (::mkdir(cur.c_str(), 0755) != 0 && errno != EEXIST) return cur + " (" + std::strerror(errno) + ")";
  }
  return "";
}

json checkpoint_identity(const std::string& backend, const backends::EngineSpec& spec, int world_size) {
  const auto& m = spec.model;
  const auto& t = spec.train;
  json id = {{"backend", backend},
          {"precision", spec.precision},
          {"world_size", world_size},
          {"model",
           {{"layers", m.layers}, {"hidden", m.hidden}, {"heads", m.heads}, {"kv_heads", m.kv_heads}, {"ffn", m.ffn},
            {"vocab", m.vocab}, {"rope_theta", m.rope_theta}, {"norm_eps", m.norm_eps}}},
          {"train",
           {{"steps", t.steps},  // the LR schedule's length
            {"micro_batch", t.micro_batch},
            {"seq_len", t.seq_len},
            {"grad_accum", t.grad_accum},
            {"seed", t.seed},
            {"data", t.data},
            {"lr", t.lr},
            {"lr_schedule", t.lr_schedule},
            {"lr_warmup_steps", t.lr_warmup_steps},
            {"weight_decay", t.weight_decay},
            {"grad_clip", t.grad_clip}}},
          {"options", spec.options.json()}};
  // A DeepSpeed scheduler's parameters shape every step's lr (config/deepspeed_scheduler.hpp).
  if (t.deepspeed_scheduler.active())
    id["train"]["lr_schedule_params"] = config::scheduler_params_json(t.deepspeed_scheduler);
  return id;
}

ResumePoint find_resume(const std::string& dir, const std::string& backend, const backends::EngineSpec& spec,
                        int world_size) {
  ResumePoint p;
  if (exists(dir + "/metadata.json")) {
    p.tag_dir = dir;
  } else if (exists(dir + "/latest")) {
    p.tag_dir = dir + "/" + trim(read_text(dir + "/latest"));
  } else {
    throw UsageError("--resume " + dir + ": no `latest` file and no metadata.json (not a zerobench checkpoint)");
  }
  if (!exists(p.tag_dir + "/metadata.json"))
    throw UsageError("--resume " + dir + ": " + p.tag_dir + "/metadata.json is missing (an incomplete checkpoint)");
  try {
    p.metadata = json::parse(read_text(p.tag_dir + "/metadata.json"));
  } catch (const std::exception& e) {
    throw UsageError("--resume " + dir + ": metadata.json is not JSON (" + e.what() + ")");
  }
  const json want = checkpoint_identity(backend, spec, world_size);
  const json& have = p.metadata.at("identity");
  for (const auto& [key, value] : want.items()) {
    if (!have.contains(key)) throw UsageError("--resume " + dir + ": checkpoint lacks " + key);
    if (value.is_object() && key != "options") {
      for (const auto& [k, v] : value.items())
        if (!have[key].contains(k) || have[key][k] != v)
          throw UsageError("--resume " + dir + ": checkpoint " + key + "." + k + " " +
                           (have[key].contains(k) ? have[key][k].dump() : "missing") + ", this run " + v.dump());
    } else if (have[key] != value) {
      throw UsageError("--resume " + dir + ": checkpoint " + key + " " + have[key].dump() + ", this run " + value.dump());
    }
  }
  p.step = p.metadata.at("step").get<int64_t>();
  p.state_dict = p.metadata.at("state_dict").get<std::string>();
  if (p.step >= spec.train.steps)
    throw UsageError("--resume " + dir + ": the checkpoint has " + std::to_string(p.step) + " steps done, --steps " +
                     std::to_string(spec.train.steps) + " leaves none to run");
  return p;
}

Checkpointer::Checkpointer(CheckpointOptions opts, std::string backend, const backends::EngineSpec& spec,
                           backends::Engine& engine, backends::common::Comm& side, FaultInjection fault)
    : opts_(std::move(opts)), backend_(std::move(backend)), spec_(spec), engine_(engine), side_(side),
      fault_(std::move(fault)) {
  if ((enabled() || !opts_.resume.empty()) && engine_.state_tensors().empty())
    throw UsageError("--backend " + backend_ + " cannot checkpoint (no state tensors)");
}

double Checkpointer::barrier() {
  const double t0 = now_s();
  auto t = at::zeros({1}, at::TensorOptions().dtype(at::kFloat).device(side_.world().device));
  side_.all_reduce_sum(t, "checkpoint_barrier");
  (void)t.cpu();
  return now_s() - t0;
}

void Checkpointer::after_step(int64_t step) {
  if (enabled() && (step + 1) % opts_.every == 0) save(step + 1);
}

void Checkpointer::save(int64_t steps_done) {
  at::NoGradGuard no_grad;
  const int rank = side_.rank(), W = side_.size();
  const bool rss_reset = runtime::reset_peak_rss();
  const double t0 = now_s();
  const std::string tag = tag_for(backend_, steps_done);
  const std::string tmp = opts_.dir + "/.tmp-" + tag, final_dir = opts_.dir + "/" + tag;
  if (rank == 0) {
    remove_tree(tmp);  // a save killed earlier
    mkdirs(tmp);
  }
  barrier();
  // Test hook (--fault-inject save-error:RANK:STEPS): this rank's write fails as a full disk makes
  // it fail, so a test sees the rank's own message reach the report's status.error.
  if (fault_.kind == "save-error" && fault_.rank == rank && fault_.step == steps_done)
    throw RunError("cannot write " + tmp + "/" + optim_file(backend_, spec_.precision, rank) +
                   ": No space left on device (planted by --fault-inject save-error)");
  int64_t written = 0;
  const auto state = engine_.state_tensors();
  if (opts_.state_dict == "sharded") {
    std::vector<ckpt::NamedTensor> model, optim;
    for (const auto& [name, t] : state) (is_model_state(backend_, name) ? model : optim).push_back({name, t});
    const std::string mf = model_file(backend_, rank), of = optim_file(backend_, spec_.precision, rank);
    if (!model.empty() && mf != of) {
      ckpt::write_safetensors(tmp + "/" + mf, model, {{"rank", std::to_string(rank)}});
      written += file_size(tmp + "/" + mf);
    }
    if (mf == of) optim.insert(optim.begin(), model.begin(), model.end());
    ckpt::write_safetensors(tmp + "/" + of, optim, {{"rank", std::to_string(rank)}});
    written += file_size(tmp + "/" + of);
  } else {
    // FULL_STATE_DICT, rank0_only: the parameters gathered (every rank takes part), rank 0 writes
    // the HF folder; every rank's optimizer state is sent to rank 0 (one broadcast per tensor and
    // rank: rank 0 alone keeps them) for an exact resume.
    const auto units = engine_.full_parameters();
    std::vector<ckpt::NamedTensor> gathered;
    for (int r = 0; r < W; ++r)
      for (const auto& [name, t] : state) {
        at::Tensor buf = r == rank ? t.clone() : at::empty_like(t);
        side_.broadcast(buf, r, "checkpoint_gather");
        if (rank == 0) gathered.push_back({"rank" + std::to_string(r) + "." + name, buf.cpu()});
      }
    if (rank == 0) {
      ckpt::write_hf_llama(tmp, spec_.model, units, at::kFloat);
      ckpt::write_safetensors(tmp + "/optimizer.safetensors", gathered);
      for (const char* f : {"config.json", "model.safetensors", "optimizer.safetensors"}) written += file_size(tmp + "/" + f);
    }
  }
  // Test hook (--fault-inject save-sigkill:RANK:STEPS): die with this rank's part written and the
  // checkpoint not committed.
  if (fault_.kind == "save-sigkill" && fault_.rank == rank && fault_.step == steps_done) raise(SIGKILL);
  if (rank == 0) {
    json meta = {{"format", "zerobench-checkpoint"},
                 {"version", 1},
                 {"state_dict", opts_.state_dict},
                 {"step", steps_done},
                 {"tag", tag},
                 {"identity", checkpoint_identity(backend_, spec_, W)}};
    json ranks = json::array();
    for (int r = 0; r < W; ++r)
      ranks.push_back(opts_.state_dict == "sharded"
                          ? json{{"model", model_file(backend_, r)}, {"optim", optim_file(backend_, spec_.precision, r)}}
                          : json{{"optim", "optimizer.safetensors"}, {"prefix", "rank" + std::to_string(r) + "."}});
    meta["ranks"] = ranks;
    json tensors = json::array();
    for (const auto& [name, t] : state)
      tensors.push_back({{"name", name}, {"dtype", ckpt::dtype_name(t.scalar_type())}, {"shape", t.sizes().vec()}});
    meta["tensors_per_rank"] = tensors;
    const auto text = meta.dump(2);
    ckpt::write_file_atomic(tmp + "/metadata.json", text);
    written += int64_t(text.size());
  }
  // Everyone's part is on disk before rank 0 commits; the wait here is the article's timeout risk
  // (the others idle in a collective while rank 0 gathers and writes).
  stats_.longest_wait_s = std::max(stats_.longest_wait_s, barrier());
  if (rank == 0) {
    if (exists(final_dir)) remove_tree(final_dir);  // the same step saved again
    if (::rename(tmp.c_str(), final_dir.c_str()) != 0) throw RunError("cannot rename " + tmp + " to " + final_dir);
    ckpt::write_file_atomic(opts_.dir + "/latest", tag);
  }
  stats_.longest_wait_s = std::max(stats_.longest_wait_s, barrier());
  const double dt = now_s() - t0;
  ++stats_.saves;
  stats_.save_s_total += dt;
  stats_.save_s_max = std::max(stats_.save_s_max, dt);
  stats_.bytes_written += written;
  if (rss_reset) stats_.peak_rss_bytes = std::max(stats_.peak_rss_bytes, runtime::hwm_rss_bytes());
  stats_.last_tag = tag;
}

int64_t Checkpointer::resume() {
  at::NoGradGuard no_grad;
  const double t0 = now_s();
  const int rank = side_.rank();
  const auto p = find_resume(opts_.resume, backend_, spec_, side_.size());
  const auto& files = p.metadata.at("ranks").at(size_t(rank));
  std::map<std::string, ckpt::SafetensorsFile> opened;
  auto file = [&](const std::string& name) -> const ckpt::SafetensorsFile& {
    auto it = opened.find(name);
    if (it == opened.end()) it = opened.emplace(name, ckpt::SafetensorsFile::open(p.tag_dir + "/" + name)).first;
    return it->second;
  };
  const std::string prefix = files.value("prefix", "");
  for (auto& [name, t] : engine_.state_tensors()) {
    const std::string fname = p.state_dict == "sharded" && is_model_state(backend_, name) ? files.at("model").get<std::string>()
                                                                                         : files.at("optim").get<std::string>();
    const auto& f = file(fname);
    if (!f.contains(prefix + name))
      throw UsageError("--resume " + opts_.resume + ": " + fname + " lacks " + prefix + name);
    const auto src = f.tensor(prefix + name);
    if (src.sizes() != t.sizes() || src.scalar_type() != t.scalar_type())
      throw UsageError("--resume " + opts_.resume + ": " + prefix + name + " is " + ckpt::dtype_name(src.scalar_type()) +
                       " " + c10::str(src.sizes()) + ", this run's " + ckpt::dtype_name(t.scalar_type()) + " " +
                       c10::str(t.sizes()));
    t.copy_(src);
    stats_.bytes_read += int64_t(src.nbytes());
  }
  engine_.state_loaded();
  stats_.resumed_from_step = p.step;
  stats_.load_s = now_s() - t0;
  return p.step;
}

int consolidate_command(const std::string& from, const std::string& out) {
  std::string tag_dir = from;
  if (!exists(from + "/metadata.json") && exists(from + "/latest")) tag_dir = from + "/" + trim(read_text(from + "/latest"));
  if (!exists(tag_dir + "/metadata.json")) throw UsageError("consolidate --from " + from + ": no metadata.json");
  const json meta = json::parse(read_text(tag_dir + "/metadata.json"));
  const json& id = meta.at("identity");
  models::ModelConfig cfg = models::preset("tiny");
  cfg.preset = "hf";
  cfg.layers = id["model"]["layers"];
  cfg.hidden = id["model"]["hidden"];
  cfg.heads = id["model"]["heads"];
  cfg.kv_heads = id["model"]["kv_heads"];
  cfg.ffn = id["model"]["ffn"];
  cfg.vocab = id["model"]["vocab"];
  cfg.rope_theta = id["model"]["rope_theta"];
  cfg.norm_eps = id["model"]["norm_eps"];
  cfg.validate();
  const int W = id.at("world_size");
  const std::string backend = id.at("backend");
  std::vector<at::Tensor> units;
  if (meta.at("state_dict") == "full") {
    const auto c = ckpt::SafetensorsCheckpoint::open(tag_dir);
    for (int u = 0; u < int(models::unit_count(cfg)); ++u) {
      std::vector<at::Tensor> ws;
      for (auto& t : ckpt::read_hf_llama_unit(c, cfg, u)) ws.push_back(t.reshape({-1}).to(at::kFloat));
      units.push_back(at::cat(ws));
    }
  } else {
    std::string can;  // the backends whose sharded checkpoints consolidate
    const backends::BackendInfo* info = nullptr;
    for (const auto& b : backends::registered_backends()) {
      if (b.name == backend) info = &b;
      if (b.lifecycle.checkpoint.consolidate) can += (can.empty() ? "" : ", ") + b.name;
    }
    if (!info || !info->lifecycle.checkpoint.consolidate)
      throw UsageError("consolidate: a sharded " + backend + " checkpoint is not supported (" + can +
                       " sharded or any full checkpoint; save --state-dict full)");
    units = info->lifecycle.checkpoint.consolidate(tag_dir, meta, cfg, W);
  }
  ckpt::write_hf_llama(out, cfg, units, at::kFloat);
  std::cout << "wrote " << out << " (config.json, model.safetensors) from " << tag_dir << "\n";
  return 0;
}

}  // namespace zb::bench::lifecycle
