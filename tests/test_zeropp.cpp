// ZeRO++ in ZeRO3-mode (issue 24): the blockwise quantizer against DeepSpeed's Python reference
// (scripts/crossval/quantizer_reference.py: DeepSpeed's own CUDAQuantizer group choice and its
// unit test's float reference), hpZ bitwise equal to plain ZeRO-3 with its secondary partitions
// and group all-gathers equal to the closed form, qwZ's int8 + scale all-gathers equal to the
// closed form and its loss bounded against plain ZeRO-3, and the options (qgZ resolves, hpZ
// must divide W). Every check is exact (bytes, counts, bits) except the qwZ loss bound.
#include <gtest/gtest.h>

#include <fstream>
#include <iostream>
#include <cstring>
#include <map>
#include <mutex>

#include <ATen/ATen.h>

#include "backends/deepspeed_family/blockwise_quant.hpp"
#include "backends/zero3/zero3_options.hpp"
#include "backends/zero3/zero3_zeropp.hpp"
#include "config/config_notes.hpp"
#include "runtime/errors.hpp"
#include "tests/resolve_run.hpp"
#include "tests/run_binary.hpp"
#include "tests/thread_world.hpp"

using namespace zb;
using backends::zero3::Zero3Options;
using nlohmann::json;
namespace q = zb::backends::deepspeed_family;

namespace {

// ---------------- the quantizer ----------------

struct RefCase {
  at::Tensor x;       // float32
  int bits = 8;
  bool symmetric = true;
  int64_t groups = 0;  // 0: CUDAQuantizer's adaptive choice
};
struct RefOut {
  int64_t groups = 0;
  at::Tensor q, params, deq;  // q unpacked int8, params float32 [groups, 1|2], deq float32
};

at::Tensor read_raw(const std::string& path, at::ScalarType dtype) {
  std::ifstream f(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  const int64_t n = int64_t(bytes.size()) / int64_t(c10::elementSize(dtype));
  auto t = at::empty({n}, dtype);
  std::memcpy(t.data_ptr(), bytes.data(), bytes.size());
  return t;
}

std::vector<RefOut> run_reference(const std::vector<RefCase>& cases) {
  const auto dir = test_support::make_clean_dir("quant_ref");
  json spec = {{"out_dir", dir}, {"cases", json::array()}};
  for (size_t i = 0; i < cases.size(); ++i) {
    const auto in = dir + "/in" + std::to_string(i);
    const auto x = cases[i].x.contiguous();
    std::ofstream(in, std::ios::binary).write(static_cast<const char*>(x.data_ptr()), std::streamsize(x.nbytes()));
    spec["cases"].push_back({{"input", in},
                             {"numel", x.numel()},
                             {"bits", cases[i].bits},
                             {"symmetric", cases[i].symmetric},
                             {"groups", cases[i].groups ? json(cases[i].groups) : json(nullptr)}});
  }
  std::ofstream(dir + "/spec.json") << spec.dump();
  const auto r = test_support::run_command(std::string(ZEROBENCH_PYTHON_EXE) + " " + zb::bench::source_dir() +
                                           "/scripts/crossval/quantizer_reference.py < " + dir + "/spec.json 2>&1");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  auto out = r.output;
  while (!out.empty() && out.back() == '\n') out.pop_back();
  const json j = json::parse(out.substr(out.rfind('\n') == std::string::npos ? 0 : out.rfind('\n') + 1));
  std::vector<RefOut> res;
  for (size_t i = 0; i < cases.size(); ++i) {
    RefOut o;
    o.groups = j["groups"][i];
    const auto base = dir + "/" + std::to_string(i);
    o.q = read_raw(base + ".q", at::kChar);
    o.params = read_raw(base + ".params", at::kFloat).view({o.groups, -1});
    o.deq = read_raw(base + ".deq", at::kFloat);
    res.push_back(o);
  }
  return res;
}

bool bitwise_equal(const at::Tensor& a, const at::Tensor& b) {
  return a.sizes() == b.sizes() && a.scalar_type() == b.scalar_type() && at::equal(a, b);
}

// Random values with a spread of magnitudes, an all-zero group, exact ties (k + 0.5 steps) and
// values that fp16 rounds (the kernel's __half input).
at::Tensor test_values(int64_t n, int64_t seed) {
  auto g = at::make_generator<at::CPUGeneratorImpl>(seed);
  auto x = at::randn({n}, g, at::kFloat) * at::exp(at::randn({n}, g, at::kFloat));
  x.narrow(0, 0, std::min<int64_t>(n, 256)).zero_();
  if (n >= 1024) {
    x.narrow(0, 256, 256).copy_(at::arange(-128, 128, at::kFloat) * 0.5f + 0.25f);  // ties after scaling
    x[300] = 127.f;
  }
  return x + 1e-4f;  // fp32 values between fp16 neighbours
}

}  // namespace

TEST(BlockwiseQuant, Int8AndInt4SymmetricEqualDeepSpeedsReferenceBitwise) {
  std::vector<RefCase> cases;
  // CUDAQuantizer's adaptive group count, for the tiny model's partition sizes and more.
  for (int64_t n : {32, 2048, 4096, 8192, 11264, 16384, 24000, 45056, 64000})
    cases.push_back({test_values(n, n), 8, true, 0});
  cases.push_back({test_values(4096, 7), 8, true, 16});
  cases.push_back({test_values(4096, 8), 4, true, 8});  // qgZ's bit width
  cases.push_back({test_values(4096, 9), 4, true, 64});
  const auto ref = run_reference(cases);
  ASSERT_EQ(ref.size(), cases.size());
  for (size_t i = 0; i < cases.size(); ++i) {
    const auto& c = cases[i];
    const int64_t groups = c.groups ? c.groups : q::weight_quant_groups(c.x.numel(), "test");
    EXPECT_EQ(groups, ref[i].groups) << "case " << i << ": CUDAQuantizer's group count for " << c.x.numel();
    const auto ours = q::quantize_blockwise(c.x, groups, c.bits, c.symmetric);
    const auto unpacked = c.bits == 8 ? ours.data : q::unpack_int4(ours.data);
    EXPECT_TRUE(bitwise_equal(unpacked, ref[i].q)) << "case " << i;
    EXPECT_TRUE(bitwise_equal(ours.params, ref[i].params)) << "case " << i;
    EXPECT_TRUE(bitwise_equal(q::dequantize_blockwise_fp32(ours.data, ours.params, groups, c.bits, true), ref[i].deq))
        << "case " << i;
  }
  // The check can fail: a wrong group count, truncation instead of round-half-to-even, and
  // skipping the kernel's fp16 read each differ from the reference.
  const auto& c = cases[9];  // 4096 values, 16 groups
  EXPECT_FALSE(bitwise_equal(q::quantize_blockwise(c.x, 32, 8, true).data, ref[9].q));
  const auto v = c.x.to(at::kHalf).to(at::kFloat).view({16, -1});
  const auto scale = at::full({16, 1}, 256.f).div(v.abs().amax(1, true) * 2);
  const auto truncated = (v * scale).trunc().clamp(-128, 127).to(at::kChar).flatten();
  EXPECT_FALSE(bitwise_equal(truncated, ref[9].q));
  const auto no_fp16 = (c.x.view({16, -1}) * at::full({16, 1}, 256.f).div(c.x.view({16, -1}).abs().amax(1, true) * 2))
                           .round()
                           .clamp(-128, 127)
                           .to(at::kChar)
                           .flatten();
  EXPECT_FALSE(bitwise_equal(no_fp16, ref[9].q));
}

TEST(BlockwiseQuant, Int4PacksTheFirstValueInTheHighNibble) {
  const auto v = at::tensor({1, -2, -8, 7}, at::kChar);
  const auto p = q::pack_int4(v);
  ASSERT_EQ(p.numel(), 2);
  EXPECT_EQ(uint8_t(p[0].item<int8_t>()), 0x1E);  // PackedInt4{high: x[1] = -2 (0xE), low... } read as a byte
  EXPECT_EQ(uint8_t(p[1].item<int8_t>()), 0x87);
  EXPECT_TRUE(at::equal(q::unpack_int4(p), v));
}

TEST(BlockwiseQuant, AsymmetricFollowsTheKernelsOffsetRule) {
  // Params<Asymmetric>: offset (max + min) / 2, scale 2^b / (max - min); the reference test's
  // zero point (q_min - min * scale) is another formula, so only the kernel's rule is checked:
  // every value comes back within half a step, min and max within one.
  const auto x = test_values(4096, 3).abs() + 1.0f;
  const auto r = q::quantize_blockwise(x, 8, 8, false);
  ASSERT_EQ(r.params.size(1), 2);
  const auto back = q::dequantize_blockwise_fp32(r.data, r.params, 8, 8, false).view({8, -1});
  const auto xh = x.to(at::kHalf).to(at::kFloat).view({8, -1});
  const auto step = r.params.narrow(1, 0, 1);
  EXPECT_TRUE(((back - xh).abs() <= step * 1.0001).all().item<bool>());
  EXPECT_TRUE(at::allclose(r.params.narrow(1, 1, 1), (xh.amax(1, true) + xh.amin(1, true)) / 2));
}

TEST(BlockwiseQuant, GroupCountRefusesWhatCudaQuantizerAsserts) {
  EXPECT_EQ(q::weight_quant_groups(24000, "t"), 3);
  EXPECT_EQ(q::weight_quant_groups(64000, "t"), 8);
  try {
    q::weight_quant_groups(12, "unit0 parameter 1");
    FAIL() << "12 elements are not a multiple of 8";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("unit0 parameter 1 has 12 elements"), std::string::npos) << e.what();
  }
}

// ---------------- the engine ----------------

namespace {

backends::EngineSpec zeropp_spec(const std::string& precision, int64_t accum, const Zero3Options& o) {
  auto s = test_support::small_spec(accum);
  s.precision = precision;
  s.train.steps = 3;
  s.options = backends::zero3::to_json(o);
  return s;
}

Zero3Options release_after_use() {  // every weight re-gathered in backward: hpZ's secondary path
  Zero3Options o;
  o.stage3_param_persistence_threshold = 0;
  o.stage3_max_reuse_distance = 0;
  o.stage3_prefetch_bucket_size = 0;
  return o;
}

struct Run {
  std::vector<double> losses;
  std::vector<at::Tensor> params;
  backends::ModelStateBytes bytes;
  std::map<std::string, int64_t> gathers;  // all-gathers of the last step by label suffix
  backends::common::CollectiveStats ag;
  json options;
};

// Trains on W thread-ranks; rank 0's losses, parameters, bytes and the last step's all-gathers
// by kind of label ("hpz", "int8", "scales", "world": the rest).
Run train(const backends::EngineSpec& spec, int w) {
  Run out;
  std::mutex m;
  test_support::run_ranks(w, [&](runtime::World& world) {
    auto data = models::make_data_source(spec.train.data, spec.model.vocab, spec.train.seed);
    auto engine = backends::create_engine("zero3", spec, world);
    backends::common::Comm side(world.side_channel());
    engine->comm().set_tracing(true);
    auto result = bench::run_training(*engine, spec, *data, side);
    auto params = engine->full_parameters();
    if (world.rank != 0) return;
    std::lock_guard<std::mutex> lock(m);
    for (const auto& s : result.steps) out.losses.push_back(s.loss);
    out.params = params;
    out.bytes = result.model_state_bytes;
    out.ag = result.comm_last_step[size_t(backends::common::CollectiveKind::kAllGather)];
    out.options = engine->resolved_options();
    // The trace of all steps, by kind (with no persistence, every step issues the same).
    for (const auto& e : engine->comm().trace()) {
      if (e.rfind("all_gather:", 0) != 0) continue;
      const auto suffix = e.find(" hpz") != std::string::npos ? "hpz" : "world";
      const auto kind = e.find(" scales") != std::string::npos ? "scales" : e.find(" int8") != std::string::npos ? "int8" : "";
      out.gathers[std::string(suffix) + (*kind ? std::string("_") + kind : "")] += 1;
    }
  });
  return out;
}

int64_t param_count(const backends::EngineSpec& spec) {
  int64_t n = 0;
  for (const auto& u : models::unit_param_specs(spec.model)) n += int64_t(u.size());
  return n;
}

}  // namespace

TEST(ZeroPPHpz, EqualsPlainZero3BitwiseAndGathersBackwardWithinTheGroup) {
  for (const std::string precision : {"fp32", "bf16"}) {
    auto o = release_after_use();
    const auto plain = train(zeropp_spec(precision, 2, o), 4);
    o.zero_hpz_partition_size = 2;
    const auto spec = zeropp_spec(precision, 2, o);
    const auto hpz = train(spec, 4);
    ASSERT_EQ(hpz.losses.size(), plain.losses.size());
    for (size_t i = 0; i < plain.losses.size(); ++i) EXPECT_EQ(hpz.losses[i], plain.losses[i]) << precision << " step " << i;
    for (size_t u = 0; u < plain.params.size(); ++u) EXPECT_TRUE(at::equal(hpz.params[u], plain.params[u])) << precision;
    EXPECT_EQ(hpz.options["hpz_group_size"], 2);
    EXPECT_EQ(hpz.options["hpz_group"], json({0, 1}));
    // Per step (3 steps, 2 micro-batches, every weight released after use): the first forward
    // gathers each weight over the world; its backward and the second micro-batch's forward and
    // backward gather it from the secondary partitions within the group of 2.
    // (+ n: full_parameters() gathers each fp32 master once over the world after training.)
    const int64_t n = param_count(spec), steps = 3;
    EXPECT_EQ(hpz.gathers.at("world"), steps * n + n);
    EXPECT_EQ(hpz.gathers.at("hpz"), steps * 3 * n);
    EXPECT_EQ(plain.gathers.at("world"), steps * 4 * n + n);
    EXPECT_EQ(plain.gathers.count("hpz"), 0u);
    // The same bytes arrive (each gather fills the padded parameter), from nearer ranks.
    EXPECT_EQ(hpz.ag.bytes, plain.ag.bytes);
    EXPECT_EQ(hpz.ag.count, plain.ag.count);
    // Bytes: plain ZeRO-3's plus the secondary partitions, [padded / 2] per weight (no
    // persistence), in params; equal to the closed form.
    const int64_t e = precision == "bf16" ? 2 : 4;
    int64_t secondary = 0;
    for (const auto& u : models::unit_param_specs(spec.model))
      for (const auto& p : u) secondary += (p.numel() + 3) / 4 * 4 / 2 * e;
    auto expected = plain.bytes;
    expected.params += secondary;
    EXPECT_EQ(hpz.bytes, expected) << precision;
    EXPECT_EQ(backends::backend("zero3").training.expected_bytes(spec, 4, 0), expected) << precision;
    // A planted fault: a closed form without the secondary partitions differs.
    EXPECT_FALSE(backends::backend("zero3").training.expected_bytes(zeropp_spec(precision, 2, release_after_use()), 4,
                                                                    0) == hpz.bytes);
  }
}

TEST(ZeroPPQwz, GathersInt8AndScalesAsTheClosedFormAndBoundsTheLoss) {
  for (const int hpz_size : {1, 2}) {
    auto o = release_after_use();
    o.zero_hpz_partition_size = hpz_size;
    const auto plain = train(zeropp_spec("bf16", 1, o), 4);
    o.zero_quantized_weights = true;
    const auto spec = zeropp_spec("bf16", 1, o);
    const auto qw = train(spec, 4);
    // Bytes per step: each weight gathered once in forward, once in backward (one micro-batch),
    // each time int8 data and fp32 scales (two all-gathers); with hpZ the backward one from the
    // secondary partition within the group of 2, quantized too.
    int64_t bytes = 0;
    for (const auto& u : models::unit_param_specs(spec.model))
      for (const auto& p : u) {
        const int64_t padded = (p.numel() + 3) / 4 * 4;
        const auto fwd = backends::zero3::quantized_gather_bytes(padded / 4, 4);
        const auto bwd = hpz_size > 1 ? backends::zero3::quantized_gather_bytes(padded / 2, 2) : fwd;
        bytes += fwd.data + fwd.scales + bwd.data + bwd.scales;
      }
    const int64_t n = param_count(spec);
    EXPECT_EQ(qw.ag.count, 4 * n) << "hpz " << hpz_size;
    EXPECT_EQ(qw.ag.bytes, bytes) << "hpz " << hpz_size;
    EXPECT_EQ(plain.ag.bytes, 2 * 2 * [&] {
      int64_t t = 0;
      for (const auto& u : models::unit_param_specs(spec.model))
        for (const auto& p : u) t += (p.numel() + 3) / 4 * 4;
      return t;
    }()) << "bf16 plain: 2 bytes per element, two gathers per weight";
    if (hpz_size > 1) { EXPECT_EQ(qw.gathers.at("hpz_int8"), 3 * n); }
    // Numerics: int8 with ~8000-element groups rounds each weight by at most absmax/256 of its
    // group (plus the fp16 read); the loss moves, measured <= 2.3e-4 relative over 3 steps of
    // the tiny model: bounded at 1e-3.
    ASSERT_EQ(qw.losses.size(), plain.losses.size());
    EXPECT_NE(qw.losses[0], plain.losses[0]) << "the quantized weights must change the loss";
    for (size_t i = 0; i < plain.losses.size(); ++i)
      std::cout << "qwZ hpz " << hpz_size << " step " << i << ": loss " << qw.losses[i] << " vs plain "
                << plain.losses[i] << " (relative " << std::abs(qw.losses[i] - plain.losses[i]) / plain.losses[i]
                << ")\n";
    for (size_t i = 0; i < plain.losses.size(); ++i)
      EXPECT_LT(std::abs(qw.losses[i] - plain.losses[i]), 1e-3 * std::abs(plain.losses[i])) << "step " << i;
  }
}

TEST(ZeroPPOptions, FlagsAndFileKeysResolveAndRefuseWithOneLine) {
  const auto r = test_support::resolve_run({"--backend", "zero3", "--nproc", "4", "--zero3-hpz-partition-size", "2",
                                            "--zero3-quantized-weights", "true"});
  EXPECT_EQ(r.spec.options["zero_hpz_partition_size"], 2);
  EXPECT_EQ(r.spec.options["zero_quantized_weights"], true);
  EXPECT_EQ(r.spec.options["zero_quantized_gradients"], false);
  // qgZ runs (tests/test_qgz.cpp): the flag resolves.
  EXPECT_EQ(test_support::resolve_run({"--backend", "zero3", "--zero3-quantized-gradients", "true"})
                .spec.options["zero_quantized_gradients"],
            true);
  auto spec = zeropp_spec("bf16", 1, [] {
    Zero3Options o;
    o.zero_hpz_partition_size = 3;
    return o;
  }());
  try {
    backends::backend("zero3").training.expected_bytes(spec, 4, 0);
    FAIL() << "hpZ 3 does not divide 4";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("zero_hpz_partition_size 3 does not divide the world size 4"), std::string::npos);
  }
  // qwZ: a partition CUDAQuantizer cannot group is refused before anything runs (tiny at W=3:
  // the norms' 128 elements pad to 129, partitions of 43).
  try {
    Zero3Options o;
    o.zero_quantized_weights = true;
    backends::backend("zero3").training.expected_bytes(zeropp_spec("bf16", 1, o), 3, 0);
    FAIL() << "partitions of 43 elements cannot be quantized";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("not a multiple of 8"), std::string::npos) << e.what();
  }
  EXPECT_EQ(backends::zero3::effective_hpz(backends::zero3::zero3_options(spec.options), 2), 2)
      << "min(N, W) as _create_zero_param_parallel_group: 3 -> 2 in a world of 2";
  // A DeepSpeed file: the keys honoured, nontrainable listed as ignored; qgZ with a weight shape
  // DeepSpeed's swizzle kernel leaves undefined (--hidden 100: groups of 100 elements, not a
  // multiple of 8) is refused naming the key.
  const auto p = test_support::temp_path("zeropp.json");
  std::ofstream(p) << R"({"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": true}, "zero_optimization":
      {"stage": 3, "zero_hpz_partition_size": 2, "zero_quantized_weights": true,
       "zero_quantized_nontrainable_weights": true}})";
  const auto f = test_support::resolve_run({"--config", p, "--nproc", "4"});
  EXPECT_EQ(f.spec.options["zero_hpz_partition_size"], 2);
  EXPECT_EQ(f.spec.options["zero_quantized_weights"], true);
  EXPECT_NE(config::ignored_json(f.provenance.notes.ignored).dump().find("zero_quantized_nontrainable_weights"),
            std::string::npos);
  std::ofstream(p) << R"({"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 3,
      "zero_quantized_gradients": true}})";
  const auto bad = test_support::run_zerobench("run --config " + p + " --steps 1 --warmup 0 --model tiny --hidden 100 "
                                               "--heads 2 --kv-heads 2 --nproc 4 --zero3-ranks-per-node 2");
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_NE(bad.output.find("zero_quantized_gradients: unit"), std::string::npos) << bad.output;
  std::remove(p.c_str());
}
