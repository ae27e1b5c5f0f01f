// zero12_program.cpp — ZeRO-1/2's projection program (see zero12_program.hpp). It mirrors the
// engine (zero12_reduce.cpp, zero12_step.cpp), which follows DeepSpeedZeroOptimizer
// (deepspeed/runtime/zero/stage_1_and_2.py): gradient hooks fill the IPG bucket
// (reduce_independent_p_g_buckets_and_remove_grads), a full bucket is averaged (average_tensor:
// all-reduces of the per-owner slices in groups closing past reduce_bucket_size, or one whole
// all-reduce without reduce_scatter) on the reduction stream with overlap_comm, else on the
// compute stream; stage 2 reduces in every micro-batch, stage 1 only in the boundary one (with
// overlap_comm from the hooks, else reduce_gradients after backward in module order); the step
// (bf16: the 1-byte overflow all-reduce; the norm all-reduce; AdamW on the fp32 partition; one
// all_gather_into_tensor of the whole flat buffer). Must not: cost a collective itself.
#include "backends/zero12/zero12_program.hpp"

#include <string>
#include <vector>

#include "backends/zero12/zero12_layout.hpp"
#include "backends/zero12/zero12_options.hpp"
#include "runtime/errors.hpp"

namespace zb::backends::zero12 {

namespace {
using json = nlohmann::json;
using common::CollectiveCost;
using common::CollectiveKind;
using common::ExecModel;
using common::Program;
using common::program_compute_dtype;
using common::program_dtype_or;
using common::ProgramDtype;
using common::ProgramInput;

class Zero12Builder {
 public:
  Zero12Builder(const ProgramInput& in, const CollectiveCost& cost) : in_(in), cost_(cost), W_(in.world) {
    // The report's resolved options as the engine's record (a key a report lacks: the default).
    const Zero12Resolved r = zero12_resolved_from_json(in.options, in.backend == "zero1" ? 1 : 2);
    stage_ = r.options.stage;
    bucket_size_ = r.options.reduce_bucket_size;
    overlap_ = r.options.overlap_comm;
    reduce_scatter_ = r.options.reduce_scatter;
    model_ = program_dtype_or(r.precision.model_dtype, program_compute_dtype(in.precision));
    comm_ = program_dtype_or(r.precision.communication_data_type, model_);
    layout_ = flat_layout(in.model, W_, r.options.round_robin_gradients);
    // id of (unit, index) in the flat layout
    for (int k = 0; k < int(layout_.params.size()); ++k) {
      const auto& p = layout_.params[size_t(k)];
      if (int(first_of_unit_.size()) <= p.unit) first_of_unit_.resize(size_t(p.unit) + 1);
      auto& v = first_of_unit_[size_t(p.unit)];
      if (int(v.size()) <= p.index) v.resize(size_t(p.index) + 1, -1);
      v[size_t(p.index)] = k;
    }
  }

  Program build() {
    for (int64_t m = 0; m < in_.train.grad_accum; ++m) micro_batch(m + 1 == in_.train.grad_accum);
    optimizer_step();
    return std::move(prog_);
  }

 private:
  int units() const { return int(first_of_unit_.size()); }
  static double total(const std::vector<double>& v) {
    double t = 0;
    for (double x : v) t += x;
    return t;
  }
  double share(const std::vector<int>& ids) const {
    int64_t n = 0;
    for (int k : ids) n += layout_.params[size_t(k)].numel;
    return layout_.numel > 0 ? double(n) / double(layout_.numel) : 0.0;
  }
  int id(int u, int i) const { return first_of_unit_[size_t(u)][size_t(i)]; }

  void micro_batch(bool boundary) {
    boundary_ = boundary;
    // The engine records one forward and one backward range (per_unit_times false, as DDP): the
    // backward is spread over the units by their share of the parameters, so that the bucket
    // reductions interleave with it as the hooks fire.
    prog_.compute("F", total(in_.costs.forward_s));
    // Backward, gradients in autograd's order: LM head, final norm, each block's weights in
    // reverse, the embedding last (the order zero3_program.cpp uses for the same model).
    const double bwd = total(in_.costs.backward_s);
    prog_.compute("B", bwd * share({id(0, 2), id(0, 1)}));
    hook(id(0, 2));
    hook(id(0, 1));
    for (int u = units() - 1; u >= 1; --u) {
      prog_.compute("B", bwd * share(first_of_unit_[size_t(u)]));
      for (int i = int(first_of_unit_[size_t(u)].size()) - 1; i >= 0; --i) hook(id(u, i));
    }
    prog_.compute("B", bwd * share({id(0, 0)}));
    hook(id(0, 0));
    // allreduce_gradients: stage 2 runs the epilogue every micro-batch; stage 1 at the boundary
    // through reduce_gradients (without overlap_comm every parameter now, in module order).
    if (stage_ == 2) {
      epilogue();
    } else if (boundary_) {
      if (!overlap_)
        for (int k : layout_.module_order) add_to_bucket(k);
      epilogue();
    }
  }

  // process_gradients -> reduce_ready_partitions_and_remove_grads.
  void hook(int k) {
    if ((stage_ == 2 || overlap_) && (stage_ == 2 || boundary_)) add_to_bucket(k);
  }

  void add_to_bucket(int k) {
    const int64_t n = layout_.params[size_t(k)].numel;
    if (n == 0) return;
    if (bucket_elements_ + n > bucket_size_) reduce_ipg_grads();
    if (n > bucket_size_) extra_large_ = k;
    bucket_elements_ += n;
    bucket_.push_back(k);
  }

  void reduce_ipg_grads() {
    average_tensor();
    bucket_.clear();
    bucket_elements_ = 0;
    extra_large_ = -1;
  }

  void all_reduce(int64_t elements) {
    const int64_t bytes = elements * comm_.bytes;
    const int c = prog_.issue(CollectiveKind::kAllReduce, "ipg_bucket", bytes,
                              cost_(CollectiveKind::kAllReduce, comm_.name, bytes, W_, in_.nodes), true);
    if (overlap_)
      inflight_.push_back(c);
    else
      prog_.wait(c);  // on the compute stream: the next kernel follows it
  }

  // average_tensor: with overlap_comm the compute stream first waits for the reduction stream.
  void average_tensor() {
    if (overlap_) {
      for (int c : inflight_) prog_.wait(c);
      inflight_.clear();
    }
    if (bucket_.empty()) return;
    if (!reduce_scatter_) return all_reduce(bucket_elements_);
    // The slices by owning rank (consecutive slices of one owner merged), grouped until a group
    // passes reduce_bucket_size elements.
    std::vector<std::pair<int, int64_t>> slices;  // (owner, elements)
    for (int k : bucket_) {
      const auto& p = layout_.params[size_t(k)];
      std::vector<std::pair<int, int64_t>> owners;
      for (int r = 0; r < W_; ++r) {
        const int64_t lo = int64_t(r) * layout_.partition, hi = lo + layout_.partition;
        if (lo <= p.offset && p.offset < hi)
          owners.push_back({r, 0});
        else if (p.offset < lo && lo < p.offset + p.numel)
          owners.push_back({r, lo - p.offset});
      }
      for (size_t j = 0; j < owners.size(); ++j) {
        const int64_t n = j + 1 == owners.size() ? p.numel - owners[j].second : owners[j + 1].second - owners[j].second;
        if (!slices.empty() && slices.back().first == owners[j].first)
          slices.back().second += n;
        else
          slices.push_back({owners[j].first, n});
      }
    }
    int64_t group = 0;
    for (const auto& s : slices) {
      group += s.second;
      if (group > bucket_size_) {
        all_reduce(group);
        group = 0;
      }
    }
    if (group > 0) all_reduce(group);
  }

  // independent_gradient_partition_epilogue: the last bucket; the host waits for the reduction
  // stream (overlap_comm).
  void epilogue() {
    reduce_ipg_grads();
    for (int c : inflight_) in_.exec == ExecModel::kHostIsDevice ? prog_.wait(c) : prog_.host_wait(c);
    inflight_.clear();
  }

  void small_all_reduce(const char* label, int64_t bytes) {
    const int c = prog_.issue(CollectiveKind::kAllReduce, label, bytes,
                              cost_(CollectiveKind::kAllReduce, "fp32", bytes, W_, in_.nodes), true);
    prog_.wait(c);  // the host reads the result (.item())
  }

  void optimizer_step() {
    if (model_.name == "bf16" || model_.name == "fp16") small_all_reduce("overflow", 1);  // has_overflow: one byte, MAX
    small_all_reduce("grad_norm", 4);                             // get_grad_norm_direct: fp32 scalar
    prog_.compute("optimizer", in_.costs.optimizer_s);
    if (W_ > 1) {  // all_gather_dp_groups: one all_gather_into_tensor of the whole flat buffer
      const int64_t bytes = layout_.padded * model_.bytes;
      const int c = prog_.issue(CollectiveKind::kAllGather, "partitions", bytes,
                                cost_(CollectiveKind::kAllGather, model_.name, bytes, W_, in_.nodes), true);
      prog_.wait(c);
    }
    prog_.compute("other", in_.costs.other_s);
  }

  const ProgramInput& in_;
  const CollectiveCost& cost_;
  int W_;
  int stage_ = 2;
  int64_t bucket_size_ = config::zero_keys::kDefaultReduceBucketSize, bucket_elements_ = 0;
  bool overlap_ = false, reduce_scatter_ = true, boundary_ = true;
  ProgramDtype model_, comm_;
  FlatLayout layout_;
  std::vector<std::vector<int>> first_of_unit_;
  std::vector<int> bucket_, inflight_;
  int extra_large_ = -1;
  Program prog_;
};

// Per rank: the partition of the one aligned flat buffer its fp32 master and AdamW cover.
int64_t shard_elements(const models::ModelConfig& model, const json& /*options*/, int world) {
  return flat_layout(model, world).partition;
}
}  // namespace

common::ProjectionHooks projection_hooks() {
  common::ProjectionHooks h;
  h.program = [](const ProgramInput& in, const CollectiveCost& cost) { return Zero12Builder(in, cost).build(); };
  h.shard_elements = shard_elements;
  h.per_unit_times = false;  // one forward and one backward range, as DDP
  return h;
}

}  // namespace zb::backends::zero12
