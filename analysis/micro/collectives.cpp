// collectives.cpp — the collective benchmarks: all-gather into a tensor, reduce-scatter a
// tensor, all-reduce, broadcast, through the engines' own counted Comm. Each kind is one row of
// a table (nccl-tests' struct testColl: byte counts, run; the bandwidth formula is comm.hpp's
// busbw_factor, the one the reports use). Sizes follow nccl-tests' "size" S: all-gather =
// output bytes, reduce-scatter = input bytes, all-reduce/broadcast = tensor bytes; a size is
// rounded down so that each rank's part is whole elements. Counters (GB/s = 1e9 bytes/s):
//   bytes       S, the message size
//   algbw       S / t                       (nccl-tests doc/PERFORMANCE.md)
//   busbw       algbw * factor, factor (W-1)/W all-gather/reduce-scatter, 2(W-1)/W all-reduce, 1 broadcast
//   world_size  W
// with t the mean per-op time (Google Benchmark's real_time: manual time, max over ranks).
// With --concurrent-gemm (CPU) every rank runs its square GEMM on a thread of its own while its
// collectives are timed (concurrent_gemm.hpp), counter concurrent_gemm_runs (GEMMs started).
#include <benchmark/benchmark.h>

#include <memory>

#include "analysis/micro/concurrent_gemm.hpp"
#include "analysis/micro/harness.hpp"

namespace zb::analysis::micro {

namespace {
using backends::common::CollectiveKind;
using backends::common::Comm;

struct CollectiveBench {
  CollectiveKind kind;
  // Element counts of input and output for a size of `size_elems` elements on `w` ranks.
  void (*counts)(int64_t size_elems, int w, int64_t* in, int64_t* out);
  void (*run)(Comm& comm, at::Tensor& out, at::Tensor& in);
};

const CollectiveBench kBenches[] = {
    {CollectiveKind::kAllGather,
     [](int64_t s, int w, int64_t* in, int64_t* out) {
       *in = s / w;
       *out = *in * w;
     },
     [](Comm& c, at::Tensor& out, at::Tensor& in) { c.all_gather(out, in, "micro"); }},
    {CollectiveKind::kReduceScatter,
     [](int64_t s, int w, int64_t* in, int64_t* out) {
       *out = s / w;
       *in = *out * w;
     },
     [](Comm& c, at::Tensor& out, at::Tensor& in) { c.reduce_scatter_sum(out, in, "micro"); }},
    {CollectiveKind::kAllReduce, [](int64_t s, int, int64_t* in, int64_t* out) { *in = *out = s; },
     [](Comm& c, at::Tensor&, at::Tensor& in) { c.all_reduce_sum(in, "micro"); }},
    {CollectiveKind::kBroadcast, [](int64_t s, int, int64_t* in, int64_t* out) { *in = *out = s; },
     [](Comm& c, at::Tensor&, at::Tensor& in) { c.broadcast(in, 0, "micro"); }},
};

// The size Comm counts for this kind (comm.hpp's byte convention).
int64_t counted_bytes(CollectiveKind kind, const at::Tensor& in, const at::Tensor& out) {
  return int64_t(kind == CollectiveKind::kAllGather ? out.nbytes() : in.nbytes());
}

// The sizes of one (kind, dtype): the nccl-tests grid, or exactly what `micro --for` asks for.
std::vector<int64_t> sizes_of(const SuiteOptions& o, CollectiveKind kind, at::ScalarType dtype) {
  if (!o.exact) return collective_sizes(o.min_bytes, o.max_bytes);
  std::vector<int64_t> out;
  for (const auto& c : o.exact->collectives)
    if (c.kind == kind && c.dtype == dtype) out.push_back(c.bytes);
  return out;
}
}  // namespace

void register_collective_benchmarks(Harness& h, const SuiteOptions& o) {
  const int w = h.size();
  for (const auto& bench : kBenches) {
    for (const auto dtype : o.dtypes) {
      const int64_t elt = int64_t(c10::elementSize(dtype));
      for (const int64_t size : sizes_of(o, bench.kind, dtype)) {
        int64_t in_n = 0, out_n = 0;
        bench.counts(size / elt, w, &in_n, &out_n);
        if (in_n == 0 || out_n == 0) continue;  // smaller than one element per rank
        const std::string name = std::string(backends::common::collective_name(bench.kind)) + "/" + dtype_name(dtype) +
                                 "/W:" + std::to_string(w) + "/bytes:" + std::to_string(size);
        benchmark::RegisterBenchmark(name.c_str(),
                                     [&h, bench, dtype, in_n, out_n, w, beside = o.concurrent_gemm](benchmark::State& state) {
                                       const auto opts = at::TensorOptions().dtype(dtype).device(h.device());
                                       // The training step's compute beside the collective (fp32 probe).
                                       std::unique_ptr<ConcurrentGemm> gemm;
                                       if (beside) gemm = std::make_unique<ConcurrentGemm>(h.device(), at::kFloat);
                                       auto in = at::ones({in_n}, opts);
                                       auto out = bench.kind == CollectiveKind::kAllGather ||
                                                          bench.kind == CollectiveKind::kReduceScatter
                                                      ? at::empty({out_n}, opts)
                                                      : in;
                                       const double per_op = h.run_loop(state, [&] { bench.run(h.comm(), out, in); });
                                       const double bytes = double(counted_bytes(bench.kind, in, out));
                                       const double algbw = per_op > 0 ? bytes / per_op / 1e9 : 0.0;
                                       state.counters["bytes"] = bytes;
                                       state.counters["algbw"] = algbw;
                                       state.counters["busbw"] = algbw * backends::common::busbw_factor(bench.kind, w);
                                       state.counters["world_size"] = double(w);
                                       if (gemm) state.counters["concurrent_gemm_runs"] = double(gemm->runs());
                                       state.SetLabel(dtype_name(dtype));
                                     })
            ->UseManualTime()
            ->Unit(benchmark::kMicrosecond);
      }
    }
  }
}

}  // namespace zb::analysis::micro
