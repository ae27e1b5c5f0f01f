// ZeRO++ qgZ in ZeRO3-mode (issue 24; backends/zero3/zero3_qgz.hpp): the swizzled int4 quantizer
// (group order, reduction arithmetic) checked by hand and against the kernel arithmetic written in
// Python from the CUDA sources (scripts/crossval/qgz_reference.py); with 2 emulated nodes of 2
// ranks (W=4, --zero3-ranks-per-node 2) every all-to-all and fallback reduce-scatter equal to the
// closed form and to DeepSpeed's formulas written out here; one node: no all-to-all at all and
// losses bitwise equal to plain ZeRO-3; the loss bounded against plain ZeRO-3 (bf16, fp32) and
// the gradient norm D x plain's, as upstream's reduction divides by the nodes only; a planted
// fault in the closed form fails. Every check is exact except the loss bound.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <iostream>
#include <limits>
#include <map>
#include <mutex>

#include <ATen/ATen.h>

#include "backends/deepspeed_family/blockwise_quant.hpp"
#include "backends/deepspeed_family/swizzled_quant.hpp"
#include "backends/zero3/zero3_layout.hpp"
#include "backends/zero3/zero3_options.hpp"
#include "backends/zero3/zero3_qgz.hpp"
#include "runtime/errors.hpp"
#include "tests/resolve_run.hpp"
#include "tests/run_binary.hpp"
#include "tests/thread_world.hpp"

using namespace zb;
using backends::zero3::Zero3Options;
using nlohmann::json;
namespace q = zb::backends::deepspeed_family;

namespace {

at::Tensor values(int64_t n, int64_t seed) {  // deterministic, varied magnitudes, exact zeros in a group
  auto g = at::arange(n, at::kDouble);
  auto v = (g * 0.37 + double(seed)).sin() * (g * 0.011).cos().abs().add(0.01) * 1e-2;
  return v.to(at::kFloat);
}

}  // namespace

TEST(QgzQuantizer, SwizzleMovesPartitionOfNodeNLocalLToLTimesNodesPlusN) {
  // 2 nodes x 2 ranks, 8 groups of 8: partition z (2 groups each) = node z / 2, local z % 2.
  const auto x = values(64, 1);
  const auto s = q::swizzle_quant(x, 8, /*nodes=*/2, /*devices=*/2);
  const auto plain = q::quantize_blockwise(x, 8, 4, true);  // groups in tensor order
  ASSERT_EQ(s.data.numel(), 32);
  ASSERT_EQ(s.scales.sizes(), at::IntArrayRef({8, 1}));
  const int64_t where[4] = {0, 2, 1, 3};  // z = n*2 + l -> l*2 + n ("0 1 2 3 -> 0 2 1 3")
  for (int z = 0; z < 4; ++z) {
    EXPECT_TRUE(s.data.narrow(0, where[z] * 8, 8).equal(plain.data.narrow(0, z * 8, 8))) << "partition " << z;
    EXPECT_TRUE(s.scales.narrow(0, where[z] * 2, 2).equal(plain.params.narrow(0, z * 2, 2))) << "partition " << z;
  }
  // quantized_reduction: two pieces summed in fp16, re-quantized; one piece of zeros is the identity
  // on the dequantized values.
  const auto a = q::quantize_blockwise(values(32, 2), 4, 4, true), b = q::quantize_blockwise(values(32, 3), 4, 4, true);
  const auto red = q::quantized_reduction(at::cat({a.data, b.data}), at::cat({a.params, b.params}), 8, 4, 2);
  const auto sum = (q::dequantize_int4(a.data, a.params, 4) + q::dequantize_int4(b.data, b.params, 4));
  const auto again = q::quantize_blockwise(sum, 4, 4, true);
  EXPECT_TRUE(red.data.equal(again.data));
  EXPECT_TRUE(red.scales.equal(again.params));
  // Shapes the kernel leaves undefined are refused with one line.
  try {
    q::check_swizzle_shape(96, 6, 2, 2, "w");
    FAIL() << "6 groups over 4 ranks";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("not a multiple of the world"), std::string::npos) << e.what();
  }
  EXPECT_THROW(q::check_swizzle_shape(48, 8, 2, 2, "w"), UsageError);  // groups of 6 elements
}

// An inf in a group survives the quantized reduction as NaN (fp16 overflow detection still sees it).
TEST(QgzQuantizer, AnInfBecomesNaNAfterTheRoundTrip) {
  auto x = values(64, 4);
  x[3] = std::numeric_limits<float>::infinity();
  const auto s = q::swizzle_quant(x, 8, 1, 2);
  const auto deq = q::dequantize_int4(s.data, s.scales, 8).to(at::kFloat);
  EXPECT_TRUE(deq.narrow(0, 0, 8).isnan().all().item<bool>());
  EXPECT_TRUE(deq.narrow(0, 8, 56).isfinite().all().item<bool>());
}

namespace {

at::Tensor read_raw(const std::string& path, at::ScalarType dtype) {
  std::ifstream f(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  auto t = at::empty({int64_t(bytes.size() / c10::elementSize(dtype))}, dtype);
  std::memcpy(t.data_ptr(), bytes.data(), bytes.size());
  return t;
}

}  // namespace

// The whole qgZ reduction of one [rows, cols] gradient over 2 nodes x 2 ranks, every rank's input
// given, against scripts/crossval/qgz_reference.py (the kernels' index arithmetic and fp16 sums in
// Python, DeepSpeed's own all_to_all_quant_reduce driving it): bitwise.
TEST(QgzQuantizer, FourRankReductionEqualsThePythonReferenceBitwise) {
  const int nodes = 2, devices = 2, W = 4;
  const int64_t rows = 16, cols = 24, n = rows * cols, groups = std::max<int64_t>({rows, cols, W});
  const auto dir = test_support::make_clean_dir("qgz_ref");
  std::vector<at::Tensor> grads;
  for (int r = 0; r < W; ++r) {
    grads.push_back(values(n, 10 + r).to(at::kHalf));
    std::ofstream(dir + "/in" + std::to_string(r), std::ios::binary)
        .write(static_cast<const char*>(grads.back().data_ptr()), n * 2);
  }
  const json spec = {{"dir", dir}, {"rows", rows}, {"cols", cols}, {"nodes", nodes}, {"devices", devices}};
  std::ofstream(dir + "/spec.json") << spec.dump();
  const auto r = test_support::run_command(std::string(ZEROBENCH_PYTHON_EXE) + " " + zb::bench::source_dir() +
                                           "/scripts/crossval/qgz_reference.py < " + dir + "/spec.json 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // This side: the same steps as zero3_qgz.cpp, the all-to-alls done by hand.
  std::vector<q::Int4Quantized> intra;
  for (const auto& g : grads) intra.push_back(q::swizzle_quant(g, groups, nodes, devices));
  const int64_t piece = n / 2 / devices, spiece = groups / devices;  // per local peer
  std::vector<q::Int4Quantized> inter(W);
  for (int rank = 0; rank < W; ++rank) {
    const int node = rank / devices, local = rank % devices;
    std::vector<at::Tensor> d, s;
    for (int j = 0; j < devices; ++j) {  // local all-to-all: peer j's chunk `local`
      d.push_back(intra[size_t(node * devices + j)].data.narrow(0, local * piece, piece));
      s.push_back(intra[size_t(node * devices + j)].scales.narrow(0, local * spiece, spiece));
    }
    inter[size_t(rank)] = q::quantized_reduction(at::cat(d), at::cat(s), groups, groups / devices, devices);
  }
  for (int rank = 0; rank < W; ++rank) {
    const int node = rank / devices, local = rank % devices;
    const int64_t gpiece = n / 2 / devices / nodes, gspiece = groups / devices / nodes;
    std::vector<at::Tensor> d, s;
    for (int m = 0; m < nodes; ++m) {  // global all-to-all: node m's rank `local`, chunk `node`
      d.push_back(inter[size_t(m * devices + local)].data.narrow(0, node * gpiece, gpiece));
      s.push_back(inter[size_t(m * devices + local)].scales.narrow(0, node * gspiece, gspiece));
    }
    const auto sc = at::cat(s);
    const auto full = q::dequantize_int4(at::cat(d), sc, sc.numel());
    const auto chunks = full.chunk(nodes);
    const auto mean = (chunks[0] + chunks[1]) / nodes;
    const auto ref = read_raw(dir + "/out" + std::to_string(rank), at::kHalf);
    ASSERT_EQ(ref.numel(), n / W);
    EXPECT_TRUE(mean.equal(ref)) << "rank " << rank << ": max |diff| "
                                 << (mean.to(at::kFloat) - ref.to(at::kFloat)).abs().max().item<float>();
    // It approximates D x the mean over ranks of this rank's partition (no division by D upstream).
    auto exact = at::zeros({n / W}, at::kFloat);
    for (const auto& g : grads) exact += g.to(at::kFloat).narrow(0, rank * (n / W), n / W);
    exact = exact / nodes;
    EXPECT_LT((mean.to(at::kFloat) - exact).abs().max().item<float>(), 0.25 * exact.abs().max().item<float>());
  }
}

namespace {

backends::EngineSpec qgz_spec(const std::string& precision, int64_t accum, const Zero3Options& o) {
  auto s = test_support::small_spec(accum);
  s.precision = precision;
  s.train.steps = 3;
  s.options = backends::zero3::to_json(o);
  return s;
}

struct Run {
  std::vector<double> losses, norms;
  backends::common::CollectiveStats a2a, rs;
  std::map<std::string, int64_t> a2a_bytes;  // by label prefix: qgz_local, qgz_global
  json options;
};

Run train(const backends::EngineSpec& spec, int w) {
  Run out;
  std::mutex m;
  test_support::run_ranks(w, [&](runtime::World& world) {
    auto data = models::make_data_source(spec.train.data, spec.model.vocab, spec.train.seed);
    auto engine = backends::create_engine("zero3", spec, world);
    backends::common::Comm side(world.side_channel());
    engine->comm().set_interval_recording(true);
    auto result = bench::run_training(*engine, spec, *data, side);
    if (world.rank != 0) return;
    std::lock_guard<std::mutex> lock(m);
    for (const auto& s : result.steps) {
      out.losses.push_back(s.loss);
      out.norms.push_back(s.grad_norm);
    }
    using K = backends::common::CollectiveKind;
    out.a2a = result.comm_last_step[size_t(K::kAllToAll)];
    out.rs = result.comm_last_step[size_t(K::kReduceScatter)];
    for (const auto& i : engine->comm().take_intervals())  // every step: the last step's is a third
      if (i.kind == K::kAllToAll) out.a2a_bytes[i.label.substr(0, i.label.find(' '))] += i.bytes;
    out.options = engine->resolved_options();
  });
  return out;
}

}  // namespace

TEST(ZeroPPQgz, TwoEmulatedNodesAllToAllBytesEqualDeepSpeedsFormulasAndTheLossIsBounded) {
  for (const std::string precision : {"bf16", "fp32"}) {
    Zero3Options o;
    const auto plain = train(qgz_spec(precision, 2, o), 4);
    o.zero_quantized_gradients = true;
    o.qgz_ranks_per_node = 2;
    const auto spec = qgz_spec(precision, 2, o);
    const auto qg = train(spec, 4);
    EXPECT_EQ(qg.options["zero_quantized_gradients"], true);
    EXPECT_EQ(qg.options["qgz_ranks_per_node"], 2);
    // DeepSpeed's formulas per micro-batch (coalesced_collectives.py all_to_all_quant_reduce),
    // W = 4, D = 2 ranks per node: a 1-D gradient (the norms) -> reduce_scatter_coalesced([t]):
    // one reduce-scatter of its numel elements (W divides them: no padding); a 2-D one with
    // G = max(rows, cols, W) -> all-to-all of numel/2 int4 bytes and 4G scale bytes in the local
    // group, then numel/2/D and 4G/D in the global group.
    const int64_t W = 4, D = 2, e = precision == "bf16" ? 2 : 4, accum = 2;
    int64_t a2a = 0, local = 0, global = 0, rs = 0, rs_bytes = 0;
    for (const auto& u : models::unit_param_specs(spec.model))
      for (const auto& p : u) {
        if (p.shape.size() == 1) {
          rs += 1;
          rs_bytes += p.numel() * e;
          continue;
        }
        const int64_t G = std::max({p.shape[0], p.shape[1], W});
        a2a += 4;
        local += p.numel() / 2 + 4 * G;
        global += p.numel() / 2 / D + 4 * G / D;
      }
    EXPECT_EQ(qg.a2a.count, accum * a2a) << precision;
    EXPECT_EQ(qg.a2a.bytes, accum * (local + global)) << precision;
    EXPECT_EQ(qg.a2a_bytes.at("qgz_local") + qg.a2a_bytes.at("qgz_local_scales"), 3 * accum * local);
    EXPECT_EQ(qg.a2a_bytes.at("qgz_global") + qg.a2a_bytes.at("qgz_global_scales"), 3 * accum * global);
    EXPECT_EQ(qg.rs.count, accum * rs) << precision;
    EXPECT_EQ(qg.rs.bytes, accum * rs_bytes) << precision;
    // The closed form equals both.
    int sub_groups = 0;
    const auto layout = backends::zero3::param_layouts(spec.model, 4, o, &sub_groups);
    const backends::zero3::QgzTopology t{2, 2};
    const auto c = backends::zero3::qgz_backward_comm(layout, t, 4, e);
    EXPECT_EQ(c.all_to_all_count * accum, qg.a2a.count);
    EXPECT_EQ(c.all_to_all_bytes * accum, qg.a2a.bytes);
    EXPECT_EQ(c.reduce_scatter_count * accum, qg.rs.count);
    EXPECT_EQ(c.reduce_scatter_bytes * accum, qg.rs.bytes);
    EXPECT_EQ(c.local_bytes, local);
    // A planted fault: a closed form that forgets the scales (or takes one node of 4) differs.
    EXPECT_NE(c.all_to_all_bytes - 4 * [&] {
      int64_t g = 0;
      for (const auto& l : layout)
        if (l.shape.size() > 1) g += std::max({l.shape[0], l.shape[1], W});
      return g;
    }(), qg.a2a.bytes / accum);
    EXPECT_NE(backends::zero3::qgz_backward_comm(layout, {1, 4}, 4, e).all_to_all_bytes * accum, qg.a2a.bytes);
    // Numerics: int4 with one group per row (or column) rounds each gradient by up to absmax/16 of
    // its group, twice; and the reduction sums over the D local ranks and averages over nodes
    // only, so gradients (and the norm) are D x plain's. AdamW is invariant to that factor but
    // for eps, and the clip (0.05) rescales both; the losses move by the int4 rounding only.
    ASSERT_EQ(qg.losses.size(), plain.losses.size());
    EXPECT_EQ(qg.losses[0], plain.losses[0]) << "the first forward is before any update";
    EXPECT_NEAR(qg.norms[0] / plain.norms[0], double(D), 0.1 * double(D)) << precision;
    for (size_t i = 0; i < plain.losses.size(); ++i)
      std::cout << "qgZ " << precision << " step " << i << ": loss " << qg.losses[i] << " vs plain " << plain.losses[i]
                << " (relative " << std::abs(qg.losses[i] - plain.losses[i]) / plain.losses[i] << "), grad norm "
                << qg.norms[i] << " vs " << plain.norms[i] << "\n";
    for (size_t i = 1; i < plain.losses.size(); ++i) {
      EXPECT_NE(qg.losses[i], plain.losses[i]) << "int4 gradients must change the update";
      EXPECT_LT(std::abs(qg.losses[i] - plain.losses[i]), 1e-3 * std::abs(plain.losses[i])) << "step " << i;
    }
  }
}

TEST(ZeroPPQgz, OneNodeFallsBackToPlainZero3WithNoAllToAll) {
  Zero3Options o;
  const auto plain = train(qgz_spec("bf16", 1, o), 4);
  o.zero_quantized_gradients = true;  // ranks per node: LOCAL_WORLD_SIZE = 4 (thread ranks): one node
  const auto qg = train(qgz_spec("bf16", 1, o), 4);
  EXPECT_EQ(qg.a2a.count, 0);
  EXPECT_EQ(qg.a2a.bytes, 0);
  EXPECT_EQ(qg.rs.count, plain.rs.count);
  EXPECT_EQ(qg.rs.bytes, plain.rs.bytes);
  EXPECT_EQ(qg.losses, plain.losses);
  EXPECT_EQ(qg.options["qgz_ranks_per_node"], 0);
  EXPECT_FALSE(backends::zero3::qgz_topology(o, 4, 4).active());
  EXPECT_TRUE(backends::zero3::qgz_topology(o, 4, 2).active()) << "2 ranks per node: 2 nodes";
}

TEST(ZeroPPQgz, FlagsResolveAndBadRanksPerNodeIsOneLine) {
  const auto r = test_support::resolve_run({"--backend", "zero3", "--nproc", "4", "--zero3-quantized-gradients", "true",
                                            "--zero3-ranks-per-node", "2"});
  EXPECT_EQ(r.spec.options["zero_quantized_gradients"], true);
  EXPECT_EQ(r.spec.options["qgz_ranks_per_node"], 2);
  Zero3Options o;
  o.zero_quantized_gradients = true;
  o.qgz_ranks_per_node = 3;
  try {
    backends::zero3::qgz_topology(o, 4, 4);
    FAIL() << "3 ranks per node in a world of 4";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("--zero3-ranks-per-node 3"), std::string::npos) << e.what();
  }
  // The report: all_to_all appears (with its bytes) in an emulated 2 x 2 run, and not otherwise.
  const auto out = test_support::temp_path("qgz_emulated.json");
  const auto base = "run --backend zero3 --model tiny --layers 1 --precision bf16 --micro-batch 1 --seq-len 16 "
                    "--steps 1 --warmup 0 --threads 1 --quiet --emulate-world-size 4 --emulate-rank 1 --out " + out;
  auto run = test_support::run_zerobench(std::string(base) + " --zero3-quantized-gradients true --zero3-ranks-per-node 2");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  auto report = json::parse(std::ifstream(out));
  EXPECT_GT(report["ranks"][0]["comm"]["all_to_all"]["bytes"].get<int64_t>(), 0) << report["ranks"][0]["comm"].dump();
  EXPECT_GT(report["steps"][0]["comm"]["all_to_all"]["count"].get<int64_t>(), 0);
  run = test_support::run_zerobench(base);
  ASSERT_EQ(run.exit_code, 0) << run.output;
  report = json::parse(std::ifstream(out));
  EXPECT_FALSE(report["ranks"][0]["comm"].contains("all_to_all"));
  EXPECT_FALSE(report["steps"][0]["comm"].contains("all_to_all"));
  std::remove(out.c_str());
}
