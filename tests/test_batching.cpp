// test_batching.cpp — --batching pad|pack|pack-naive (models/batching.hpp, docs/data.md): row
// layouts, padding fractions and counts worked out by hand; the model equivalence (a packed row's
// logits equal each document run alone, fp32; a naive-packed row's do not); pad and pack on the
// same documents give the same loss per real token and the same model FLOPs; refusals (exit 2);
// runs through the binary whose reports carry the honest counts; the document-length
// distribution (scripts/document_lengths.py, --data lengths:FILE) and its bad files (exit 2).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "models/data.hpp"
#include "models/llama.hpp"
#include "models/token_data.hpp"
#include "reports/report.hpp"
#include "runtime/errors.hpp"
#include "tests/run_binary.hpp"

using json = nlohmann::json;
using namespace zb::models;
using zb::test_support::temp_path;

namespace {

constexpr int64_t kVocab = 2048;  // --model tiny
constexpr int64_t kEos = 2;

// A flat uint16 token file of documents of these lengths (each ending with, and counting, the EOS).
std::string token_file(const std::string& name, const std::vector<int64_t>& lengths) {
  std::string bytes;
  uint64_t x = 88172645463325252ULL;
  for (int64_t len : lengths)
    for (int64_t i = 0; i < len; ++i) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      const uint16_t id = i + 1 == len ? uint16_t(kEos) : uint16_t(3 + x % 2000);
      bytes.append(reinterpret_cast<const char*>(&id), sizeof id);
    }
  const auto path = temp_path(name);
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
  return path;
}
std::string spec_of(const std::string& path) { return "tokens:" + path + ":uint16:eos=" + std::to_string(kEos); }

std::vector<int64_t> row(const at::Tensor& t, int64_t r) {
  auto c = t[r].contiguous();
  return std::vector<int64_t>(c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel());
}

// Weights as plain tensors: the simplest UnitParamSource.
struct Weights : UnitParamSource {
  std::vector<std::vector<at::Tensor>> units;
  Weights(const ModelConfig& cfg, uint64_t seed) {
    for (int u = 0; u < unit_count(cfg); ++u) units.push_back(unflatten_unit(cfg, u, init_unit_flat(cfg, u, seed)));
  }
  std::vector<at::Tensor> unit_weights(int unit) override { return units[size_t(unit)]; }
};

double max_rel(const at::Tensor& a, const at::Tensor& b) {
  return (a - b).abs().max().item<double>() / b.abs().max().item<double>();
}

// The batch's per-document counts (Batch: real tokens, documents, labels, sum of length^2).
void expect_counts(const Batch& b, int64_t real_tokens, int64_t documents, int64_t label_tokens, double pairs) {
  EXPECT_EQ(b.real_tokens, real_tokens);
  EXPECT_EQ(b.documents, documents);
  EXPECT_EQ(b.label_tokens, label_tokens);
  EXPECT_EQ(b.attention_pairs, pairs);
}

}  // namespace

// Pad: one document piece a row. Lengths 5 3 7 2 9 with T = 8 are pieces 5 3 7 2 8 1 (the 9 is
// cut): 6 rows, 26 real tokens of 48 slots, padding 22/48, 26 - 6 = 20 labels, sum l^2 = 152.
TEST(Batching, PadRowsAndPaddingFractionByHand) {
  const auto path = token_file("pad_hand.bin", {5, 3, 7, 2, 9});
  const auto data = make_data_source(spec_of(path), kVocab, 7, "pad");
  const auto b = data->samples(0, 6, 8);
  expect_counts(b, 26, 6, 20, 152.0);
  EXPECT_EQ(b.targets.ne(-100).sum().item<int64_t>(), 20);
  EXPECT_EQ(b.document_ids.ge(0).sum().item<int64_t>(), 26);
  // Row 0 is the first document of the seeded order, then padding.
  DocumentStream stream(TokenCorpus::open(parse_data_spec(spec_of(path)), kVocab), 7);
  const auto doc = stream.corpus().document(stream.order()[0]);
  const auto n = int64_t(std::min<size_t>(doc.size(), 8));
  std::vector<int64_t> tokens(8, 0), targets(8, -100), positions(8, 0), ids(8, -1);
  for (int64_t t = 0; t < n; ++t) tokens[t] = doc[t], positions[t] = t, ids[t] = 0;
  for (int64_t t = 0; t + 1 < n; ++t) targets[t] = doc[t + 1];
  for (int64_t t = n; t < 8; ++t) positions[t] = t - n;
  EXPECT_EQ(row(b.tokens, 0), tokens);
  EXPECT_EQ(row(b.targets, 0), targets);
  EXPECT_EQ(row(b.position_ids, 0), positions);
  EXPECT_EQ(row(b.document_ids, 0), ids);
  // The row stream wraps: row 6 is row 0; and a sample depends only on its index.
  EXPECT_TRUE(data->samples(6, 1, 8).tokens.equal(b.tokens.narrow(0, 0, 1)));
  EXPECT_TRUE(data->samples(3, 2, 8).tokens.equal(b.tokens.narrow(0, 3, 2)));
  std::remove(path.c_str());
}

// Pad-longest (HF DataCollatorWithPadding's padding="longest"): pad's rows, each micro-batch cut
// to the width of its longest row. Every micro-batch of every size equals pad's narrowed to that
// width, with the same counts; the 9-token document's pieces (8 and 1) bound the widths by T = 8.
TEST(Batching, PadLongestIsPadCutToTheMicroBatchsLongestRow) {
  const auto path = token_file("pad_longest.bin", {5, 3, 7, 2, 9});
  const auto pad = make_data_source(spec_of(path), kVocab, 7, "pad");
  const auto longest = make_data_source(spec_of(path), kVocab, 7, "pad-longest");
  int64_t narrower = 0;
  for (int64_t count : {1, 2, 3, 6})
    for (int64_t first = 0; first < 7; ++first) {
      const auto p = pad->samples(first, count, 8);
      const auto l = longest->samples(first, count, 8);
      const int64_t width = p.document_ids.ge(0).sum(1).max().item<int64_t>();
      ASSERT_EQ(l.tokens.size(1), width) << first << " " << count;
      narrower += width < 8 ? 1 : 0;
      EXPECT_TRUE(l.tokens.equal(p.tokens.narrow(1, 0, width)));
      EXPECT_TRUE(l.targets.equal(p.targets.narrow(1, 0, width)));
      EXPECT_TRUE(l.position_ids.equal(p.position_ids.narrow(1, 0, width)));
      EXPECT_TRUE(l.document_ids.equal(p.document_ids.narrow(1, 0, width)));
      expect_counts(l, p.real_tokens, p.documents, p.label_tokens, p.attention_pairs);
    }
  EXPECT_GT(narrower, 0);  // some micro-batches are narrower than T
  std::remove(path.c_str());
}

// Pack: five documents of 3 tokens, T = 8: rows [3 3 pad2] [3 3 pad2] [3 pad5]: 15 real of 24,
// padding 9/24, 10 labels, sum l^2 = 45; positions restart per document.
TEST(Batching, PackRowsByHand) {
  const auto path = token_file("pack_hand.bin", {3, 3, 3, 3, 3});
  const auto data = make_data_source(spec_of(path), kVocab, 7, "pack");
  const auto b = data->samples(0, 3, 8);
  expect_counts(b, 15, 5, 10, 45.0);
  EXPECT_EQ(row(b.position_ids, 0), (std::vector<int64_t>{0, 1, 2, 0, 1, 2, 0, 1}));
  EXPECT_EQ(row(b.document_ids, 0), (std::vector<int64_t>{0, 0, 0, 1, 1, 1, -1, -1}));
  EXPECT_EQ(row(b.document_ids, 2), (std::vector<int64_t>{0, 0, 0, -1, -1, -1, -1, -1}));
  const auto tok = row(b.tokens, 0);
  EXPECT_EQ(row(b.targets, 0), (std::vector<int64_t>{tok[1], tok[2], -100, tok[4], tok[5], -100, -100, -100}));
  EXPECT_EQ(tok[2], kEos);
  EXPECT_TRUE(data->samples(3, 1, 8).tokens.equal(b.tokens.narrow(0, 0, 1)));  // the next epoch
  // pack-naive (the default) keeps the stream: every slot real, one causal block of T a row.
  const auto naive = make_data_source(spec_of(path), kVocab, 7)->samples(0, 3, 8);
  EXPECT_FALSE(naive.document_ids.defined());
  EXPECT_EQ(naive.real_tokens, 24);
  EXPECT_EQ(naive.attention_pairs, 3 * 64.0);
  // Inputs [0,8), [8,16), [16,24) of the 15-token stream (wrapping): documents 0-2, 2-4 and 0, 0-2.
  EXPECT_EQ(naive.documents, 3 + 4 + 3);
  std::remove(path.c_str());
}

// The model equivalence: each document of a packed row, run alone (its own RoPE positions from
// 0, causal), gives the packed row's logits at its positions (fp32, 1e-5 of the largest logit).
// Under one causal mask (pack-naive) the later documents see the earlier ones and differ. (With the
// mask but positions 0..T-1 they would not: RoPE scores depend on relative positions only, so
// restarting position_ids matters to the mask's documents only through rounding.)
TEST(Batching, PackedLogitsEqualEachDocumentAlone) {
  const auto path = token_file("pack_equiv.bin", {5, 9, 4, 6});
  const auto cfg = preset("tiny");
  const int64_t T = 32;
  const auto b = make_data_source(spec_of(path), kVocab, 3, "pack")->samples(0, 1, T);
  ASSERT_EQ(b.documents, 4);
  Weights w(cfg, 11);
  at::NoGradGuard no_grad;
  const auto full = make_rope_cache(cfg, T, at::kFloat, at::kCPU);
  const auto packed = forward_logits(cfg, w, b.tokens, document_attention(full, b.position_ids, b.document_ids));
  const auto naive = forward_logits(cfg, w, b.tokens, full);
  int64_t start = 0;
  for (int64_t d = 0; d < b.documents; ++d) {
    const int64_t l = b.document_ids[0].eq(d).sum().item<int64_t>();
    const auto tokens = b.tokens.narrow(1, start, l);
    const auto alone = forward_logits(cfg, w, tokens, make_rope_cache(cfg, l, at::kFloat, at::kCPU));
    EXPECT_LE(max_rel(packed.narrow(1, start, l), alone), 1e-5) << "document " << d;
    if (d > 0) {
      EXPECT_GT(max_rel(naive.narrow(1, start, l), alone), 1e-3) << "document " << d;
    }
    start += l;
  }
  std::remove(path.c_str());
}

// Pad and pack on the same documents: the same loss per real label token (fp32), the same model
// FLOPs (attention from the documents' lengths), fewer slots for pack, and both below the FLOPs
// one causal mask over every row would claim.
TEST(Batching, PadAndPackGiveTheSameLossPerLabelAndTheSameModelFlops) {
  const auto path = token_file("pad_pack.bin", {5, 9, 4, 6, 12, 3, 7});
  const auto cfg = preset("tiny");
  const int64_t T = 16;
  const auto pad = make_data_source(spec_of(path), kVocab, 5, "pad")->samples(0, 7, T);
  const auto packed = make_data_source(spec_of(path), kVocab, 5, "pack");
  int64_t rows = 1;  // the rows of one epoch: the first that hold all 7 documents
  while (packed->samples(0, rows, T).documents < 7) ++rows;
  const auto pack = packed->samples(0, rows, T);
  ASSERT_EQ(pad.documents, 7);
  ASSERT_EQ(pack.documents, 7);
  ASSERT_EQ(pack.document_ids.ge(0).sum().item<int64_t>(), 46);
  EXPECT_EQ(pad.real_tokens, 46);
  EXPECT_EQ(pack.real_tokens, 46);
  EXPECT_EQ(pad.label_tokens, 39);
  EXPECT_EQ(pack.label_tokens, 39);
  EXPECT_EQ(pad.attention_pairs, 25 + 81 + 16 + 36 + 144 + 9 + 49.0);
  EXPECT_EQ(pack.attention_pairs, pad.attention_pairs);
  EXPECT_LT(pack.tokens.numel(), pad.tokens.numel());
  Weights w(cfg, 11);
  at::NoGradGuard no_grad;
  const auto full = make_rope_cache(cfg, T, at::kFloat, at::kCPU);
  ForwardOptions sum;
  sum.sum_loss = true;
  auto loss = [&](const Batch& b) {
    return forward_loss(cfg, w, b.tokens, b.targets, document_attention(full, b.position_ids, b.document_ids), sum)
               .item<double>() /
           double(b.label_tokens);
  };
  const double l_pad = loss(pad), l_pack = loss(pack);
  EXPECT_NEAR(l_pad, l_pack, 1e-5 * l_pad);
  EXPECT_NEAR(l_pad, std::log(double(kVocab)), 0.2);  // near ln V at init: a real per-token mean
  const auto f_pad = flops_per_real_token(cfg, pad.attention_pairs / double(pad.real_tokens), ActivationCheckpointing::none());
  const auto f_pack = flops_per_real_token(cfg, pack.attention_pairs / double(pack.real_tokens), ActivationCheckpointing::none());
  EXPECT_EQ(f_pad.palm * double(pad.real_tokens), f_pack.palm * double(pack.real_tokens));
  EXPECT_LT(f_pack.palm, flops_per_token(cfg, T, ActivationCheckpointing::none()).palm);
  std::remove(path.c_str());
}

TEST(Batching, RefusalsExit2NamingTheValue) {
  auto r = zb::test_support::run_zerobench("run --backend ddp --model tiny --steps 3 --warmup 1 --data random --batching pack --quiet");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--batching pack needs documents"), std::string::npos) << r.output;
  r = zb::test_support::run_zerobench("run --backend ddp --model tiny --steps 3 --warmup 1 --batching packed --quiet");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("packed"), std::string::npos) << r.output;
  // crossval trains pad|pack rows on both sides (docs/crossval.md); without documents it refuses as run does.
  r = zb::test_support::run_zerobench("crossval --backend fsdp --model tiny --steps 3 --warmup 1 --batching pad --data random "
                                      "--out " + temp_path("refused_crossval.json"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--batching pad needs documents"), std::string::npos) << r.output;
}

// Through the binary: documents of 3 tokens, T = 6. Pad, 4 rows a micro-batch, and pack, 2 rows
// of two documents, train on the same 4 documents every step: the same losses (fp32), padding
// 1/2 against 0, the same real tokens and model FLOPs per step; tokens/GPU/s counts real tokens.
TEST(Batching, PadAndPackRunsTrainAlikeAndReportHonestCounts) {
  const auto path = token_file("run_docs.bin", {3, 3, 3, 3});
  json reports[2];
  const char* modes[2] = {"pad", "pack"};
  for (int m = 0; m < 2; ++m) {
    const auto out = temp_path(std::string("batching_") + modes[m] + ".json");
    const auto r = zb::test_support::run_zerobench(
        std::string("run --backend fsdp --model tiny --nproc 2 --steps 4 --warmup 1 --seq-len 6 --grad-accum 2 "
                    "--threads 1 --quiet --micro-batch 1 --batching ") +
        modes[m] + " --data " + spec_of(path) + " --out " + out);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    reports[m] = zb::reports::read_report(out);
    std::remove(out.c_str());
  }
  std::remove(path.c_str());
  const auto &pad = reports[0]["summary"]["batching"], &pack = reports[1]["summary"]["batching"];
  EXPECT_EQ(pad["mode"], "pad");
  EXPECT_EQ(pack["mode"], "pack");
  EXPECT_EQ(reports[1]["config"]["data"]["batching"], "pack");
  // pad: 2 ranks x 2 micro-batches x 1 row of one 3-token document: 6 real of 12 slots a rank.
  EXPECT_EQ(pad["real_tokens_per_rank_per_step"], 6.0);
  EXPECT_EQ(pad["documents_per_rank_per_step"], 2.0);
  EXPECT_EQ(pad["label_tokens_per_rank_per_step"], 4.0);
  EXPECT_EQ(pad["padding_fraction"], 0.5);
  EXPECT_EQ(pad["attention_span"], 3.0);
  // pack: a row holds two documents: 12 real of 12 slots, 4 documents a rank (each step is two epochs).
  EXPECT_EQ(pack["real_tokens_per_rank_per_step"], 12.0);
  EXPECT_EQ(pack["documents_per_rank_per_step"], 4.0);
  EXPECT_EQ(pack["padding_fraction"], 0.0);
  EXPECT_EQ(pack["attention_span"], 3.0);
  for (const auto& rep : reports) {
    const auto& s = rep["summary"];
    const double real = s["batching"]["real_tokens_per_rank_per_step"].get<double>();
    EXPECT_DOUBLE_EQ(s["tokens_per_gpu_per_s"]["median"].get<double>(), real / s["step_time_s"]["median"].get<double>());
    const auto f = flops_per_real_token(preset("tiny"), 3.0, ActivationCheckpointing::none());
    EXPECT_DOUBLE_EQ(s["flops_per_token"]["palm"].get<double>(), f.palm);
    EXPECT_TRUE(zb::reports::validate_report(rep).empty());
  }
  // The report check catches a padding fraction out of range and a missing count (planted).
  auto bad = reports[0];
  bad["summary"]["batching"]["padding_fraction"] = 1.5;
  EXPECT_EQ(zb::reports::validate_report(bad).size(), 1u);
  bad = reports[1];
  bad["summary"]["batching"].erase("real_tokens_per_rank_per_step");
  EXPECT_EQ(zb::reports::validate_report(bad).size(), 1u);
}

// Each pad step trains on documents 0-3 of the order (one a rank's micro-batch), and each pack
// step too (two a row), and each pad-longest step (rows of 3): the losses and the updates agree
// to fp32 rounding.
TEST(Batching, PadAndPackOnTheSameDocumentsLoseTheSame) {
  const auto path = token_file("same_docs.bin", {3, 3, 3, 3});
  std::vector<double> losses[3];
  const char* modes[3] = {"pad", "pack", "pad-longest"};
  for (int m = 0; m < 3; ++m) {
    const auto out = temp_path(std::string("same_") + modes[m] + ".json");
    const auto r = zb::test_support::run_zerobench(
        std::string("run --backend ddp --model tiny --steps 3 --warmup 1 --seq-len 6 --threads 1 --quiet --batching ") +
        modes[m] + " --micro-batch " + (m == 1 ? "2" : "4") + " --data " + spec_of(path) + " --out " + out);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const auto report = zb::reports::read_report(out);
    for (const auto& s : report["steps"]) losses[m].push_back(s["loss"].get<double>());
    std::remove(out.c_str());
  }
  std::remove(path.c_str());
  ASSERT_EQ(losses[0].size(), 3u);
  EXPECT_NEAR(losses[0][0], losses[1][0], 1e-5 * losses[0][0]);  // the same weights: fp32 rounding
  for (size_t i = 1; i < 3; ++i) EXPECT_NEAR(losses[0][i], losses[1][i], 1e-4 * losses[0][i]) << "step " << i;
  // pad-longest: pad's rows without the columns no row uses (3 of 6 here).
  ASSERT_EQ(losses[2].size(), 3u);
  EXPECT_NEAR(losses[0][0], losses[2][0], 1e-5 * losses[0][0]);
  for (size_t i = 1; i < 3; ++i) EXPECT_NEAR(losses[0][i], losses[2][i], 1e-4 * losses[0][i]) << "step " << i;
  EXPECT_LT(losses[0][2], losses[0][0]);  // it trains
}

// A corpus's length distribution, extracted by scripts/document_lengths.py (JSON and CSV), trains
// as --data lengths:FILE: the same document lengths (synthetic tokens), the same pad rows' counts.
TEST(Batching, LengthsFileCarriesTheCorpusLengths) {
  const std::vector<int64_t> lengths = {5, 9, 4, 6, 12, 3, 7, 4, 4};
  const auto path = token_file("lengths_src.bin", lengths);
  for (const char* ext : {".json", ".csv"}) {
    const auto out = temp_path(std::string("lengths") + ext);
    const auto r = zb::test_support::run_command(std::string(ZEROBENCH_PYTHON_EXE) + " " + zb::bench::source_dir() +
                                                 "/scripts/document_lengths.py --data " + spec_of(path) + " --out " + out +
                                                 " 2>&1");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const auto corpus = TokenCorpus::open(parse_data_spec("lengths:" + out), kVocab);
    std::vector<int64_t> got;
    for (int64_t d = 0; d < corpus->documents(); ++d) got.push_back(corpus->document_tokens(d));
    auto want = lengths;
    std::sort(want.begin(), want.end());
    EXPECT_EQ(got, want) << ext;  // histogram order: by length
    const auto a = make_data_source("lengths:" + out, kVocab, 5, "pad")->samples(0, 9, 16);
    const auto b = make_data_source(spec_of(path), kVocab, 5, "pad")->samples(0, 9, 16);
    EXPECT_EQ(a.real_tokens, b.real_tokens);
    EXPECT_EQ(a.attention_pairs, b.attention_pairs);
    EXPECT_EQ(a.label_tokens, b.label_tokens);
    EXPECT_TRUE(a.tokens.lt(kVocab).all().item<bool>());
    std::remove(out.c_str());
  }
  std::remove(path.c_str());
}

// Bad lengths files: one line naming the file and the field (exit 2 through the binary).
TEST(Batching, BadLengthsFilesAreRefusedNamingTheField) {
  const auto path = temp_path("bad_lengths.json");
  auto error = [&](const std::string& text) {
    std::ofstream(path, std::ios::trunc) << text;
    try {
      TokenCorpus::open(parse_data_spec("lengths:" + path), kVocab);
    } catch (const zb::UsageError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  const std::string head = R"({"format": "zerobench-document-lengths", "version": 1, )";
  EXPECT_EQ(error(head + R"("documents": 2, "tokens": 7, "histogram": [{"length": 3, "count": 1}, {"length": 4, "count": 1}]})"), "");
  EXPECT_NE(error("{\"format\": ").find("not JSON (byte"), std::string::npos);
  EXPECT_NE(error(R"({"format": "x", "version": 1})").find("field 'format'"), std::string::npos);
  EXPECT_NE(error(head + R"("tokens": 7, "histogram": []})").find("field 'documents' is missing"), std::string::npos);
  EXPECT_NE(error(head + R"("documents": 2, "tokens": 7, "histogram": [{"length": 0, "count": 2}]})").find("histogram[0].length 0"),
            std::string::npos);
  EXPECT_NE(error(head + R"("documents": 2, "tokens": 7, "histogram": [{"length": 3, "count": -1}]})").find("histogram[0].count"),
            std::string::npos);
  EXPECT_NE(error(head + R"("documents": 2, "tokens": 8, "histogram": [{"length": 3, "count": 1}, {"length": 4, "count": 1}]})")
                .find("tokens 8 but the histogram's lengths sum to 7"),
            std::string::npos);
  EXPECT_NE(error(head + R"("documents": 3, "tokens": 7, "histogram": [{"length": 3, "count": 1}, {"length": 4, "count": 1}]})")
                .find("documents 3 but the histogram counts 2"),
            std::string::npos);
  EXPECT_NE(error(head + R"("documents": 1, "tokens": 3, "histogram": [{"length": 3, "count": 99999999999}]})")
                .find("more than 16777216 documents"),
            std::string::npos);
  EXPECT_NE(error(head + R"("documents": 1.5, "tokens": 3, "histogram": []})").find("field 'documents' is 1.5"), std::string::npos);
  const auto csv = temp_path("bad_lengths.csv");
  std::ofstream(csv, std::ios::trunc) << "length,count\n3,1\n4;1\n";
  try {
    TokenCorpus::open(parse_data_spec("lengths:" + csv), kVocab);
    ADD_FAILURE() << "a bad CSV line was accepted";
  } catch (const zb::UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("line 3 '4;1' is not LENGTH,COUNT"), std::string::npos) << e.what();
  }
  // Through the binary: exit 2, the file and field named.
  std::ofstream(path, std::ios::trunc) << head + R"("documents": 2, "tokens": 7, "histogram": [{"length": 0, "count": 2}]})";
  const auto r = zb::test_support::run_zerobench("run --backend ddp --model tiny --steps 2 --warmup 1 --batching pack --quiet --data lengths:" + path);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find(path + ": histogram[0].length 0"), std::string::npos) << r.output;
  std::remove(path.c_str());
  std::remove(csv.c_str());
}

// The loss is averaged over the step's label tokens, not per micro-batch or per rank: the same
// rows split 1 x 4, 4 x 1 (micro-batch x grad_accum) or over 2 ranks give the same losses.
// Documents of 2, 5, 3 and 4 tokens have 1, 4, 2 and 3 labels: a mean of per-micro-batch means
// (or of per-rank means) would differ.
TEST(Batching, TheLossAveragesOverTheStepsLabelsHoweverTheRowsAreSplit) {
  const auto path = token_file("split_docs.bin", {2, 5, 3, 4});
  const std::vector<std::string> layouts = {"--micro-batch 4", "--micro-batch 1 --grad-accum 4",
                                            "--micro-batch 1 --grad-accum 2 --nproc 2"};
  std::vector<std::vector<double>> losses;
  for (size_t k = 0; k < layouts.size(); ++k) {
    const auto out = temp_path("split_" + std::to_string(k) + ".json");
    const auto r = zb::test_support::run_zerobench("run --backend ddp --model tiny --steps 3 --warmup 1 --seq-len 6 "
                                                   "--threads 1 --quiet --batching pad " + layouts[k] + " --data " +
                                                   spec_of(path) + " --out " + out);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const auto report = zb::reports::read_report(out);
    losses.emplace_back();
    for (const auto& s : report["steps"]) losses.back().push_back(s["loss"].get<double>());
    std::remove(out.c_str());
  }
  std::remove(path.c_str());
  for (size_t k = 1; k < layouts.size(); ++k) {
    ASSERT_EQ(losses[k].size(), 3u);
    EXPECT_NEAR(losses[k][0], losses[0][0], 1e-6 * losses[0][0]) << layouts[k];
    for (size_t i = 1; i < 3; ++i) EXPECT_NEAR(losses[k][i], losses[0][i], 1e-4 * losses[0][i]) << layouts[k] << " step " << i;
  }
}

// The memory estimate knows the per-document shapes: with pack, the additive [B, 1, T, T] mask
// (512 KiB here), RoPE at the positions and the ids; its peak meets the tracked peak as pack-naive's does.
TEST(Batching, MemoryEstimateCountsTheMaskAndPositions) {
  const auto path = token_file("memory_docs.bin", std::vector<int64_t>(40, 100));
  int64_t gap[2] = {0, 0};
  const char* modes[2] = {"pack-naive", "pack"};
  for (int m = 0; m < 2; ++m) {
    const auto out = temp_path(std::string("memory_") + modes[m] + ".json");
    const auto r = zb::test_support::run_zerobench(std::string("run --backend ddp --model tiny --steps 2 --warmup 1 --seq-len 256 "
                                                               "--micro-batch 2 --threads 1 --quiet --batching ") +
                                                   modes[m] + " --data " + spec_of(path) + " --out " + out);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const auto mem = zb::reports::read_report(out)["ranks"][0]["memory"];
    gap[m] = mem["peak_tracked_bytes"].get<int64_t>() - mem["estimated_peak_bytes"].get<int64_t>();
    std::remove(out.c_str());
  }
  std::remove(path.c_str());
  EXPECT_LE(std::abs(gap[0]), 1024) << gap[0];
  EXPECT_EQ(gap[1], gap[0]);
}
