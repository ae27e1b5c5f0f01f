// zero3_qgz.hpp — ZeRO++ qgZ (zero_quantized_gradients) in ZeRO3-mode, as DeepSpeed 0.19.8 runs it:
//  - When: stage3.py __avg_scatter_grads calls all_to_all_quant_reduce only when the engine made
//    all2all_process_group (zero_quantized_gradients true, engine.py) and num_nodes =
//    world // get_accelerator().device_count() > 1; otherwise reduce_scatter_coalesced over the
//    bucket, as without qgZ. zerobench's device_count is the ranks per node: the job's
//    LOCAL_WORLD_SIZE, or --zero3-ranks-per-node (qgz_ranks_per_node: emulated nodes on one host).
//  - Groups (utils/groups.py _get_local_all_to_all_group): local_i = ranks [i*D, (i+1)*D) of node i
//    (D ranks per node), global_j = ranks {j, j+D, ...} (local index j on every node).
//  - Per gradient of the bucket, sorted by id (coalesced_collectives.py all_to_all_quant_reduce):
//    dim 1, or numel % (2 W) != 0: reduce_scatter_coalesced([tensor]) over the world — one
//    reduce-scatter for that tensor alone (pre-divided by W, padded to a multiple of W);
//    else G = max(shape[0], shape[1], W) groups: swizzle_quant (int4, symmetric), all-to-all of
//    the int4 data then of the fp32 scales within local_i, quantized_reduction (sum of the D
//    local pieces, re-quantized in G / D groups), all-to-all of data then scales within global_j,
//    dequantize to fp16, and the mean of the num_nodes chunks: (sum over all W ranks) / num_nodes.
//    There is no division by D: a quantized gradient partition is D x plain ZeRO-3's mean (and so
//    is the global gradient norm); __avg_scatter_grads applies no other factor on this path.
//  - Memory: no persistent buffer; transients per tensor (int4 data numel / 2 bytes, its received
//    copy, the reduced numel / 2 / D bytes and its copy, scales, the fp16 result [numel / D]).
// Owns: the pure functions below (the engine in zero3_qgz.cpp, the closed form and the tests use
// them). Must not: allocate tensors.
#pragma once
#include <cstdint>
#include <vector>

#include "backends/zero3/zero3_layout.hpp"

namespace zb::backends::zero3 {

struct QgzTopology {
  int nodes = 1, devices = 1;  // num_nodes, local_world_size (= device_count)
  bool active() const { return nodes > 1; }
};
// qgZ's nodes and ranks per node: ranks_per_node (0: local_size) must divide the world; inactive
// (nodes 1) when qgZ is off. Throws UsageError naming --zero3-ranks-per-node otherwise.
QgzTopology qgz_topology(const Zero3Options& o, int world, int local_size);

// Whether a gradient of `shape` takes the quantized all-to-all path (else its own reduce-scatter).
bool qgz_quantized(const std::vector<int64_t>& shape, int world);
// intra_quant_group = max(shape[0], shape[1], W).
int64_t qgz_groups(const std::vector<int64_t>& shape, int world);
// Throws UsageError naming the parameter where DeepSpeed's kernels are undefined (swizzled_quant.hpp).
void check_qgz_shapes(const std::vector<ParamLayout>& layout, const QgzTopology& t);

// Closed form: what one backward pass (one micro-batch) communicates per rank under an active qgZ.
struct QgzBackwardComm {
  int64_t all_to_all_count = 0, all_to_all_bytes = 0;  // 4 per quantized tensor (local data, scales, global data, scales)
  int64_t local_bytes = 0, global_bytes = 0;           // of which within local_i / within global_j
  int64_t reduce_scatter_count = 0, reduce_scatter_bytes = 0;  // the fallbacks, one per tensor
};
QgzBackwardComm qgz_backward_comm(const std::vector<ParamLayout>& layout, const QgzTopology& t, int world,
                                  int64_t comm_elem_bytes);

}  // namespace zb::backends::zero3
