// zero3_qgz.cpp — ZeRO++ qgZ in the ZeRO3-mode engine (see zero3_qgz.hpp for the semantics and the
// upstream lines followed): the local/global all-to-all groups, and the bucket reduction of
// all_to_all_quant_reduce in place of reduce_scatter_coalesced when more than one node runs.
// Must not: fill or flush the bucket (zero3_optimizer.cpp), or quantize by itself
// (backends/deepspeed_family/swizzled_quant.cpp).
#include "backends/zero3/zero3_qgz.hpp"

#include <algorithm>
#include <string>

#include "backends/deepspeed_family/swizzled_quant.hpp"
#include "backends/zero3/zero3_engine_impl.hpp"
#include "runtime/errors.hpp"

namespace zb::backends::zero3 {

QgzTopology qgz_topology(const Zero3Options& o, int world, int local_size) {
  QgzTopology t;
  if (!o.zero_quantized_gradients || world <= 1) return t;
  const int64_t per_node = o.qgz_ranks_per_node > 0 ? o.qgz_ranks_per_node : local_size;
  if (per_node <= 0 || per_node > world || world % per_node != 0)
    throw UsageError("--zero3-ranks-per-node " + std::to_string(per_node) + " (qgZ's ranks per node) does not divide "
                     "the world size " + std::to_string(world));
  t.devices = int(per_node);
  t.nodes = world / t.devices;  // num_nodes = global_world_size // local_world_size
  return t;
}

bool qgz_quantized(const std::vector<int64_t>& shape, int world) {
  int64_t numel = 1;
  for (auto d : shape) numel *= d;
  return shape.size() > 1 && numel % (2 * int64_t(world)) == 0;
}

int64_t qgz_groups(const std::vector<int64_t>& shape, int world) {
  return std::max({shape.at(0), shape.at(1), int64_t(world)});
}

void check_qgz_shapes(const std::vector<ParamLayout>& layout, const QgzTopology& t) {
  if (!t.active()) return;
  const int world = t.nodes * t.devices;
  for (const auto& l : layout)
    if (qgz_quantized(l.shape, world))
      deepspeed_family::check_swizzle_shape(l.numel, qgz_groups(l.shape, world), t.nodes, t.devices,
                                            "unit" + std::to_string(l.unit) + " parameter " + std::to_string(l.index));
}

QgzBackwardComm qgz_backward_comm(const std::vector<ParamLayout>& layout, const QgzTopology& t, int world,
                                  int64_t comm_elem_bytes) {
  QgzBackwardComm c;
  for (const auto& l : layout) {
    if (!qgz_quantized(l.shape, world)) {
      c.reduce_scatter_count += 1;
      c.reduce_scatter_bytes += int64_t(world) * l.part_numel * comm_elem_bytes;  // the (padded) input
      continue;
    }
    const int64_t groups = qgz_groups(l.shape, world);
    const int64_t local = l.numel / 2 + groups * 4;                         // int4 data + fp32 scales
    const int64_t global = l.numel / 2 / t.devices + groups / t.devices * 4;  // after quantized_reduction
    c.all_to_all_count += 4;
    c.local_bytes += local;
    c.global_bytes += global;
    c.all_to_all_bytes += local + global;
  }
  return c;
}

// ---- the engine ----

void Zero3Engine::init_qgz() {
  const auto& w = comm_.world();
  qgz_ = qgz_topology(opts_, w.size, w.local_size);
  if (!qgz_.active()) return;
  check_qgz_shapes(layout_, qgz_);
  // _get_local_all_to_all_group: dist.new_group per node (local_i) and per local index (global_j);
  // a rank joins its own two (World::subgroup keys a group by its ranks; members only).
  const int D = qgz_.devices, node = w.rank / D, local = w.rank % D;
  std::vector<int> local_ranks, global_ranks;
  for (int j = 0; j < D; ++j) local_ranks.push_back(node * D + j);
  for (int i = 0; i < qgz_.nodes; ++i) global_ranks.push_back(i * D + local);
  qgz_local_ = w.subgroup("qgz_local_" + std::to_string(node), local_ranks);
  qgz_global_ = w.subgroup("qgz_global_" + std::to_string(local), global_ranks);
}

// __avg_scatter_grads -> all_to_all_quant_reduce over the bucket (already sorted by id, on the
// reduce-and-partition stream): each gradient on its own, as upstream's loop; the collectives are
// blocking (deepspeed.comm all_to_all_single and reduce_scatter_fn with async_op=False). The
// partitions are gathered into one fp32 buffer (it holds fp16, bf16 and fp32 values exactly, so
// partition_grads' cast to grad_accum_dtype rounds once, as upstream's `.to(...)`).
void Zero3Engine::qgz_reduce_and_partition() {
  auto& s = streams();
  const int W = comm_.size(), rank = comm_.rank(), D = qgz_.devices, N = qgz_.nodes;
  int64_t total = 0;
  for (const auto& e : bucket_) total += layout_[size_t(e.id)].part_numel;
  auto out = at::zeros({total}, bucket_.front().grad.options().dtype(at::kFloat));
  int64_t off = 0;
  std::vector<int> ids;
  for (const auto& e : bucket_) {
    const auto& l = layout_[size_t(e.id)];
    const auto name = module_name(l.unit, l.index);
    ids.push_back(e.id);
    auto dst = out.narrow(0, off, l.part_numel);
    off += l.part_numel;
    if (!qgz_quantized(l.shape, W)) {
      // reduce_scatter_coalesced([tensor]): the tensor itself when W divides it, else each rank's
      // chunk padded to ceil(numel / W) (torch.empty upstream; zeros here); pre-divided by W.
      s.op("avg+reduce_scatter qgz fallback " + name);
      at::Tensor in;
      if (l.numel % W == 0) {
        in = e.grad;
      } else {
        in = at::zeros({int64_t(W) * l.part_numel}, e.grad.options());
        for (int r = 0; r < W; ++r) {
          const int64_t begin = std::min<int64_t>(int64_t(r) * l.part_numel, l.numel);
          const int64_t n = std::min<int64_t>(l.part_numel, l.numel - begin);
          if (n > 0) in.narrow(0, int64_t(r) * l.part_numel, n).copy_(e.grad.narrow(0, begin, n));
        }
      }
      in.div_(W);
      auto mine = in.narrow(0, int64_t(rank) * l.part_numel, l.part_numel);
      comm_.reduce_scatter_sum(mine, in, "qgz_fallback " + name);
      dst.copy_(mine);
      continue;
    }
    const int64_t groups = qgz_groups(l.shape, W);  // intra_quant_group
    s.op("qgz swizzle_quant " + name, {e.grad});
    auto intra = deepspeed_family::swizzle_quant(e.grad, groups, N, D);
    auto local_data = at::empty_like(intra.data), local_scales = at::empty_like(intra.scales);
    comm_.all_to_all_single(local_data, intra.data, "qgz_local " + name, &qgz_local_);
    comm_.all_to_all_single(local_scales, intra.scales, "qgz_local_scales " + name, &qgz_local_);
    s.op("qgz quantized_reduction " + name);
    auto inter = deepspeed_family::quantized_reduction(local_data, local_scales, groups, groups / D, D);
    auto global_data = at::empty_like(inter.data), global_scales = at::empty_like(inter.scales);
    comm_.all_to_all_single(global_data, inter.data, "qgz_global " + name, &qgz_global_);
    comm_.all_to_all_single(global_scales, inter.scales, "qgz_global_scales " + name, &qgz_global_);
    s.op("qgz dequantize + mean over nodes " + name);
    // fp16 [numel / D]
    const auto full = deepspeed_family::dequantize_int4(global_data, global_scales, global_scales.numel());
    // sum(list(final_output.chunk(num_nodes))) / num_nodes, in fp16 (Python's sum starts at 0).
    const auto chunks = full.chunk(N);
    at::Tensor mean = chunks[0];
    for (int i = 1; i < N; ++i) mean = mean + chunks[size_t(i)];
    mean = mean / N;
    dst.copy_(mean);  // [numel / W] = part_numel: no padding (W divides numel)
  }
  bucket_.clear();
  bucket_numel_ = 0;
  ipg_in_use_ = false;  // every read of the bucket is done
  const bool copy = first_micro_batch_, boundary = boundary_;
  s.enqueue(rp_stream_, std::vector<common::PendingCollective>{},
            offload_optimizer() ? "partition_grads (offload: grad partitions to host)" : "partition_grads",
            [this, ids, out, copy, boundary] { partition_grads(ids, out, copy, boundary); });
  param_reduce_events_.push_back(s.record(rp_stream_, "partitioned"));
}

}  // namespace zb::backends::zero3
