// activation_checkpointing.hpp — which decoder blocks are recomputed in backward: the
// --activation-checkpointing mode (none | full | selective-layer:N | selective-op), parsed once
// from its spelling. Owns: the mode type, its parsing and printing, and the every-N-th-block rule.
// Must not: run anything (models/llama.cpp recomputes, models/activation_memory.cpp counts bytes).
//
// The modes are torchtitan's (torchtitan/distributed/activation_checkpoint.py, ActivationCheckpoint
// config mode = full | selective with selective_ac_option = N | op): `full` wraps every block in
// ptd_checkpoint_wrapper; `selective-layer:N` (_apply_layer_sac) counts the blocks it is handed,
// 1, 2, ..., and wraps the block whose count is a multiple of N (N = 0: every block); zerobench's
// block units are 1..L, so block u is checkpointed when u % N == 0 — blocks N, 2N, ...; with
// N > L none. `selective-op` (_apply_op_sac) wraps every block in a checkpoint whose policy
// (create_selective_checkpoint_contexts) keeps the outputs of the ops in the save list and
// recomputes the rest: aten.mm counted 1, 2, ... per block forward, the odd-numbered ones saved
// (`meta[count] += 1; save unless count % 2 == 0`): of the block's 7 linears wq, wv, w_gate and
// w_down; SDPA is in the list as its CUDA ops (flash, efficient, cudnn) but not as the CPU one
// (_scaled_dot_product_flash_attention_for_cpu), so on CPU it is recomputed, as upstream does, and
// on CUDA its output is kept (keeps_attention; models/attention.hpp).
#pragma once
#include <cstdint>
#include <optional>
#include <string>

namespace zb::models {

struct ActivationCheckpointing {
  enum class Kind { None, Full, SelectiveLayer, SelectiveOp };
  Kind kind = Kind::None;
  int64_t every = 0;  // SelectiveLayer: N

  static ActivationCheckpointing none() { return {}; }
  static ActivationCheckpointing full() { return {Kind::Full, 0}; }
  static ActivationCheckpointing selective_layer(int64_t n) { return {Kind::SelectiveLayer, n}; }
  static ActivationCheckpointing selective_op() { return {Kind::SelectiveOp, 0}; }

  // torchtitan's op-SAC mm rule: the block's aten.mm calls counted 1, 2, ... in its forward; the
  // odd-numbered ones are saved, every second one recomputed.
  static bool op_sac_saves_mm(int64_t mm_count) { return mm_count % 2 != 0; }

  // Anything recomputed in backward.
  bool enabled() const { return kind != Kind::None; }
  // Block `unit` (1..L, models::unit_specs numbering) is wrapped in a checkpoint: recomputed in
  // backward, whole (full, selective-layer) or but for the saved ops' outputs (selective-op).
  bool checkpoints_block(int64_t unit) const {
    if (kind == Kind::Full || kind == Kind::SelectiveOp) return true;
    if (kind != Kind::SelectiveLayer) return false;
    return every == 0 || unit % every == 0;
  }
  // How many of L blocks are checkpointed.
  int64_t checkpointed_blocks(int64_t layers) const {
    int64_t n = 0;
    for (int64_t u = 1; u <= layers; ++u) n += checkpoints_block(u) ? 1 : 0;
    return n;
  }
  // A checkpointed block keeps some ops' outputs and recomputes only the rest (selective-op).
  bool saves_ops() const { return kind == Kind::SelectiveOp; }
  // selective-op keeps SDPA's output (and its logsumexp, RNG state) where SDPA's op is in the save
  // list: on CUDA (flash, efficient; the varlen flash op), not on CPU (models/attention.hpp).
  bool keeps_attention(bool cuda) const { return saves_ops() && cuda; }
  // The flag's spelling: none, full, selective-layer:N, selective-op.
  std::string name() const {
    switch (kind) {
      case Kind::None: return "none";
      case Kind::Full: return "full";
      case Kind::SelectiveLayer: return "selective-layer:" + std::to_string(every);
      case Kind::SelectiveOp: return "selective-op";
    }
    return "none";
  }
  // A config file's boolean (accelerate's fsdp_activation_checkpointing, HF's
  // gradient_checkpointing) wraps every block: full, unless a mode was chosen already.
  ActivationCheckpointing or_full_if(bool config_flag) const { return enabled() || !config_flag ? *this : full(); }
  bool operator==(const ActivationCheckpointing& o) const { return kind == o.kind && every == o.every; }
  bool operator!=(const ActivationCheckpointing& o) const { return !(*this == o); }
};

// The mode a spelling names: none | full | selective-layer:N (N >= 0 decimal, torchtitan's
// isdigit()) | selective-op; `true` / `false` (a bare flag, a matrix cell's boolean) are full /
// none. nullopt for anything else.
inline std::optional<ActivationCheckpointing> parse_activation_checkpointing(const std::string& s) {
  if (s == "none" || s == "false") return ActivationCheckpointing::none();
  if (s == "full" || s == "true" || s.empty()) return ActivationCheckpointing::full();
  if (s == "selective-op") return ActivationCheckpointing::selective_op();
  const std::string prefix = "selective-layer:";
  if (s.rfind(prefix, 0) != 0 || s.size() == prefix.size() || s.size() > prefix.size() + 9) return std::nullopt;
  int64_t n = 0;
  for (size_t i = prefix.size(); i < s.size(); ++i) {
    if (s[i] < '0' || s[i] > '9') return std::nullopt;
    n = n * 10 + (s[i] - '0');
  }
  return ActivationCheckpointing::selective_layer(n);
}

// A report's config.train: activation_checkpointing_mode (reports since issue 37) when it parses,
// else the boolean activation_checkpointing every report has (true: full).
inline ActivationCheckpointing activation_checkpointing_of_report(const std::string& mode, bool enabled) {
  if (const auto m = parse_activation_checkpointing(mode); m && !mode.empty()) return *m;
  return enabled ? ActivationCheckpointing::full() : ActivationCheckpointing::none();
}

// "" when `s` names a mode zerobench runs, else the one-line reason naming it (the CLI's
// validator; CLI11 puts "--activation-checkpointing: " before it).
inline std::string activation_checkpointing_problem(const std::string& s) {
  if (!parse_activation_checkpointing(s))
    return "'" + s + "' is not a mode: expected none, full, selective-layer:N (N >= 0) or selective-op";
  return "";
}

}  // namespace zb::models
