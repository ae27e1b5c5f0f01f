// test_token_data.cpp — real token data through --data (models/token_data.hpp, docs/data.md): a
// Megatron-LM indexed dataset written by megatron-core's own IndexedDatasetBuilder and flat
// uint16/uint32 files read back document for document; the seeded document stream (world-size
// invariant, a hand-computed sample); every corruption planted by editing bytes and refused with
// the file, offset and field named (exit 2 through the binary); a run and a crossval on the file.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <numeric>
#include <nlohmann/json.hpp>

#include "config/config_file.hpp"
#include "models/data.hpp"
#include "models/token_data.hpp"
#include "reports/report.hpp"
#include "runtime/errors.hpp"
#include "tests/run_binary.hpp"

using json = nlohmann::json;
using zb::UsageError;
using zb::models::TokenCorpus;
using zb::models::parse_data_spec;
using zb::test_support::temp_path;
using Doc = std::vector<std::vector<int64_t>>;  // a document: its sequences

namespace {

constexpr int64_t kVocab = 2048;  // --model tiny

// PREFIX.bin/.idx written by megatron-core's IndexedDatasetBuilder (scripts/write_megatron_dataset.py).
void write_megatron(const std::string& prefix, const std::string& dtype, const std::vector<Doc>& docs) {
  const json in = {{"prefix", prefix}, {"dtype", dtype}, {"documents", docs}};
  const auto path = prefix + ".json";
  std::ofstream(path) << in.dump();
  const auto r = zb::test_support::run_command(std::string(ZEROBENCH_PYTHON_EXE) + " " + zb::bench::source_dir() +
                                               "/scripts/write_megatron_dataset.py < " + path + " 2>&1");
  std::remove(path.c_str());
  ASSERT_EQ(r.exit_code, 0) << r.output;
}

std::string read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}
void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}
template <typename T>
void put(std::string& bytes, size_t offset, T v) {
  std::memcpy(&bytes[offset], &v, sizeof v);
}

template <typename T>
std::string flat_file(const std::string& name, const std::vector<int64_t>& ids) {
  std::string bytes;
  for (auto id : ids) {
    T v = T(id);
    bytes.append(reinterpret_cast<const char*>(&v), sizeof v);
  }
  const auto path = temp_path(name);
  write_bytes(path, bytes);
  return path;
}

// The UsageError opening (and, with read, reading every document of) a spec gives; "" if none.
std::string open_error(const std::string& value, int64_t vocab = kVocab, bool read = false) {
  try {
    auto c = TokenCorpus::open(parse_data_spec(value), vocab);
    if (read)
      for (int64_t d = 0; d < c->documents(); ++d) c->document(d);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

#define EXPECT_HAS(text, part) EXPECT_NE(std::string(text).find(part), std::string::npos) << "want '" << (part) << "' in: " << (text)

// Documents of known lengths and tokens: one-sequence, several sequences, an empty one.
std::vector<Doc> sample_docs() {
  std::vector<Doc> docs;
  const std::vector<std::vector<int>> lengths = {{7}, {3, 5}, {0}, {12}, {1, 1, 1}, {20}, {2}};
  int64_t next = 1;
  for (const auto& d : lengths) {
    Doc doc;
    for (int len : d) {
      std::vector<int64_t> seq;
      for (int i = 0; i < len; ++i) seq.push_back((next++ * 37) % kVocab);
      doc.push_back(seq);
    }
    docs.push_back(doc);
  }
  return docs;
}
std::vector<int64_t> joined(const Doc& d) {
  std::vector<int64_t> out;
  for (const auto& s : d) out.insert(out.end(), s.begin(), s.end());
  return out;
}

// A good dataset under a fresh prefix (the corruption tests edit copies of it).
std::string good_megatron(const std::string& name, const std::string& dtype = "uint16") {
  const auto prefix = temp_path(name);
  write_megatron(prefix, dtype, sample_docs());
  return prefix;
}

}  // namespace

// zerobench's reader sees exactly the documents and tokens the builder wrote, in both builder
// paths (add_document; add_item + end_document), for the dtype preprocess_data.py picks for a
// small vocabulary (uint16) and the builder's default (int32); a .idx/.bin path names the prefix.
TEST(TokenData, MegatronReaderSeesTheBuildersDocuments) {
  const auto docs = sample_docs();
  for (const std::string dtype : {"uint16", "int32"}) {
    const auto prefix = good_megatron("mg_" + dtype, dtype);
    for (const auto& spelling : {"megatron:" + prefix, "megatron:" + prefix + ".idx", "megatron:" + prefix + ".bin"}) {
      auto c = TokenCorpus::open(parse_data_spec(spelling), kVocab);
      EXPECT_EQ(c->format(), "megatron");
      ASSERT_EQ(c->documents(), int64_t(docs.size())) << dtype;
      int64_t total = 0;
      for (size_t d = 0; d < docs.size(); ++d) {
        EXPECT_EQ(c->document(int64_t(d)), joined(docs[d])) << dtype << " document " << d;
        total += int64_t(joined(docs[d]).size());
      }
      EXPECT_EQ(c->tokens(), total);
      EXPECT_EQ(c->tokens(), 7 + 8 + 0 + 12 + 3 + 20 + 2);
      // A read starting inside a multi-sequence document crosses its sequence boundary.
      std::vector<int64_t> part(4);
      c->read(1, 2, 4, part.data());
      const auto doc1 = joined(docs[1]);
      EXPECT_EQ(part, std::vector<int64_t>(doc1.begin() + 2, doc1.begin() + 6));
    }
  }
}

// Flat files: documents end at (and include) the EOS id; tokens after the last EOS are one more
// document; uint32 holds ids past 65535.
TEST(TokenData, FlatFilesSplitAtTheEosId) {
  const auto p16 = flat_file<uint16_t>("flat16.bin", {5, 6, 3, 7, 3, 3, 8, 9});
  auto c = TokenCorpus::open(parse_data_spec("tokens:" + p16 + ":uint16:eos=3"), kVocab);
  EXPECT_EQ(c->format(), "tokens");
  ASSERT_EQ(c->documents(), 4);
  EXPECT_EQ(c->document(0), (std::vector<int64_t>{5, 6, 3}));
  EXPECT_EQ(c->document(1), (std::vector<int64_t>{7, 3}));
  EXPECT_EQ(c->document(2), (std::vector<int64_t>{3}));
  EXPECT_EQ(c->document(3), (std::vector<int64_t>{8, 9}));
  EXPECT_EQ(c->tokens(), 8);

  const auto p32 = flat_file<uint32_t>("flat32.bin", {70000, 99999, 1, 2, 99999});
  c = TokenCorpus::open(parse_data_spec("tokens:" + p32 + ":uint32:eos=99999"), 100000);
  ASSERT_EQ(c->documents(), 2);
  EXPECT_EQ(c->document(0), (std::vector<int64_t>{70000, 99999}));
  EXPECT_EQ(c->document(1), (std::vector<int64_t>{1, 2, 99999}));
  std::remove(p16.c_str());
  std::remove(p32.c_str());
}

// One document: the stream is that document repeated, so samples can be written out by hand.
// T = 4: sample i is stream tokens [4i, 4i + 5).
TEST(TokenData, HandComputedSamples) {
  const auto path = flat_file<uint16_t>("one_doc.bin", {10, 11, 12, 13, 14, 15, 16, 17, 18, 19});
  const auto data = zb::models::make_data_source("tokens:" + path + ":uint16:eos=19", kVocab, 7);
  const auto b = data->samples(0, 3, 4);
  const std::vector<int64_t> tokens(b.tokens.data_ptr<int64_t>(), b.tokens.data_ptr<int64_t>() + 12);
  const std::vector<int64_t> targets(b.targets.data_ptr<int64_t>(), b.targets.data_ptr<int64_t>() + 12);
  EXPECT_EQ(tokens, (std::vector<int64_t>{10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 10, 11}));
  EXPECT_EQ(targets, (std::vector<int64_t>{11, 12, 13, 14, 15, 16, 17, 18, 19, 10, 11, 12}));
  EXPECT_TRUE(std::isnan(data->entropy_floor_nats()));  // unknown for real data, never made up
  std::remove(path.c_str());
}

// The stream is the documents in the seeded order, concatenated and wrapping; a sample depends on
// (seed, global index) only: W=1 with micro-batch 4 sees W=2 x micro-batch 2's global batch.
TEST(TokenData, StreamIsTheSeededDocumentOrderAndIgnoresWorldSize) {
  const auto docs = sample_docs();
  const auto prefix = good_megatron("mg_stream");
  std::shared_ptr<const TokenCorpus> corpus = TokenCorpus::open(parse_data_spec("megatron:" + prefix), kVocab);
  const zb::models::DocumentStream stream(corpus, 1234), again(corpus, 1234), other(corpus, 99);
  auto sorted = stream.order();
  std::sort(sorted.begin(), sorted.end());
  std::vector<int64_t> ids(docs.size());
  std::iota(ids.begin(), ids.end(), int64_t(0));
  EXPECT_EQ(sorted, ids);  // a permutation of the documents
  EXPECT_EQ(stream.order(), again.order());
  EXPECT_NE(stream.order(), other.order());
  std::vector<int64_t> flat;
  for (auto d : stream.order()) {
    const auto j = joined(docs[size_t(d)]);
    flat.insert(flat.end(), j.begin(), j.end());
  }
  const int64_t n = int64_t(flat.size()), T = 16;
  ASSERT_EQ(flat.size(), 52u);
  for (int64_t i : {0, 1, 2, 3, 5, 11}) {  // 52 tokens: sample 3 and later wrap around
    std::vector<int64_t> got(size_t(T + 1));
    stream.fill(i, T + 1, got.data());
    for (int64_t t = 0; t <= T; ++t) EXPECT_EQ(got[size_t(t)], flat[size_t((i * T + t) % n)]) << "sample " << i << " token " << t;
  }

  const auto data = zb::models::make_data_source("megatron:" + prefix, kVocab, 1234);
  using zb::models::first_sample_index;
  for (int64_t step = 0; step < 3; ++step) {
    const auto whole = data->samples(first_sample_index(step, 0, 1, 0, 1, 4), 4, T);
    const auto r0 = data->samples(first_sample_index(step, 0, 1, 0, 2, 2), 2, T);
    const auto r1 = data->samples(first_sample_index(step, 0, 1, 1, 2, 2), 2, T);
    EXPECT_TRUE(at::equal(whole.tokens, at::cat({r0.tokens, r1.tokens}))) << step;
    EXPECT_TRUE(at::equal(whole.targets, at::cat({r0.targets, r1.targets}))) << step;
  }
}

// Every corruption planted by editing bytes of a good dataset: refused naming file, offset, field.
TEST(TokenData, CorruptMegatronFilesAreRefusedNamingOffsetAndField) {
  const auto good = good_megatron("mg_good");
  const auto idx = read_bytes(good + ".idx"), bin = read_bytes(good + ".bin");
  ASSERT_EQ(open_error("megatron:" + good, kVocab, true), "");
  // 10 sequences (doc 1 has 2, doc 4 has 3), 8 document indices: 0 1 3 4 5 8 9 10.
  const uint64_t n = 10, lengths = 34, pointers = 34 + 4 * n, doc_indices = 34 + 12 * n;
  ASSERT_EQ(idx.size(), doc_indices + 8 * 8);
  const auto bad = temp_path("mg_bad");
  auto with = [&](const std::string& idx_bytes, const std::string& bin_bytes) {
    write_bytes(bad + ".idx", idx_bytes);
    write_bytes(bad + ".bin", bin_bytes);
    return open_error("megatron:" + bad, kVocab, true);
  };
  std::string e;

  e = with(idx, bin.substr(0, bin.size() - 2));  // truncated .bin: the last sequence's last token
  EXPECT_HAS(e, bad + ".idx offset " + std::to_string(pointers + 8 * 9) + " (sequence_pointers[9]) = 100, offset " +
                   std::to_string(lengths + 4 * 9) + " (sequence_lengths[9]) = 2: the sequence's uint16 tokens at bytes "
                   "[100, 104) run past the end of " + bad + ".bin (102 bytes): truncated .bin");

  auto m = idx;
  m[0] = 'X';
  EXPECT_HAS(with(m, bin), bad + ".idx offset 0 (magic): 'XMIDIDX\\x00\\x00'");
  m = idx;
  put<uint64_t>(m, 9, 2);
  EXPECT_HAS(with(m, bin), "offset 9 (version): 2");
  m = idx;
  m[17] = 9;
  EXPECT_HAS(with(m, bin), "offset 17 (dtype code): 9");
  m = idx;
  put<int64_t>(m, pointers + 8 * 4, int64_t(bin.size()));  // a pointer at the end of .bin (12 tokens there)
  EXPECT_HAS(with(m, bin), "offset " + std::to_string(pointers + 32) + " (sequence_pointers[4]) = 104");
  m = idx;
  put<int32_t>(m, lengths + 4 * 5, 1000);  // a length past the end
  EXPECT_HAS(with(m, bin), "offset " + std::to_string(lengths + 20) + " (sequence_lengths[5]) = 1000");
  m = idx;
  put<int32_t>(m, lengths + 4 * 5, -1);
  EXPECT_HAS(with(m, bin), "(sequence_lengths[5]): -1, negative");
  m = idx;
  put<int64_t>(m, doc_indices + 8 * 3, 1);  // document_indices = 0 1 3 [1] ...: out of order
  EXPECT_HAS(with(m, bin), "offset " + std::to_string(doc_indices + 24) + " (document_indices[3]): 1 is less than "
                           "document_indices[2] = 3: document indices out of order");
  m = idx;
  put<int64_t>(m, doc_indices + 8 * 7, 9);  // the last index short of the sequence count
  EXPECT_HAS(with(m, bin), "(document_indices[7]): 9, must equal the sequence count 10");
  e = with(idx.substr(0, 20), bin);
  EXPECT_HAS(e, bad + ".idx offset 20 (header)");
  e = with(idx.substr(0, doc_indices + 8), bin);  // document indices cut off
  EXPECT_HAS(e, "offset 26 (document count): 8 document indices run past the end of the file");
  e = with(idx.substr(0, pointers), bin);  // sequence pointers cut off
  EXPECT_HAS(e, "offset 18 (sequence count): 10 sequences");
  write_bytes(bad + ".idx", idx);
  std::remove((bad + ".bin").c_str());
  EXPECT_HAS(open_error("megatron:" + bad), "cannot open '" + bad + ".bin'");
  for (const auto& p : {good, bad})
    for (const char* ext : {".idx", ".bin"}) std::remove((p + ext).c_str());
}

// A token id outside the model's vocabulary (a tokenizer larger than the model), an empty corpus,
// a flat file cut inside a token, an EOS outside the vocabulary.
TEST(TokenData, UnsuitableDataIsRefused) {
  const auto big = temp_path("mg_vocab");
  write_megatron(big, "uint16", {{{1, 2, 3}}, {{4, 2048, 6}}});
  // The .bin offset of token 2048: document 1 starts after 3 uint16 tokens, +1 token.
  EXPECT_HAS(open_error("megatron:" + big, kVocab, true),
             big + ".bin: token id 2048 at byte offset 8 is outside the model's vocabulary [0, 2048)");
  EXPECT_EQ(open_error("megatron:" + big, 4096, true), "");
  const auto empty = temp_path("mg_empty");
  write_megatron(empty, "uint16", {{{}}, {{}}});
  EXPECT_HAS(open_error("megatron:" + empty), "no tokens (2 documents): an empty corpus cannot train");

  const auto f = flat_file<uint16_t>("flat_vocab.bin", {1, 2, 3, 5000, 3});
  EXPECT_HAS(open_error("tokens:" + f + ":uint16:eos=3"), f + ": token id 5000 at byte offset 6 is outside");
  const auto odd = temp_path("flat_odd.bin");
  write_bytes(odd, std::string("\x01\x00\x02\x00\x03", 5));
  EXPECT_HAS(open_error("tokens:" + odd + ":uint16:eos=3"),
             odd + " offset 4 (last token): the file's 5 bytes are not a multiple of 2 (uint16 tokens)");
  EXPECT_HAS(open_error("tokens:" + odd + ":uint32:eos=3"), "not a multiple of 4 (uint32 tokens)");
  const auto none = temp_path("flat_empty.bin");
  write_bytes(none, "");
  EXPECT_HAS(open_error("tokens:" + none + ":uint16:eos=3"), none + ": no tokens (0 documents)");
  EXPECT_HAS(open_error("tokens:" + f + ":uint16:eos=2048"), "eos=2048 is outside the model's vocabulary [0, 2048)");
  for (const auto& p : {f, odd, none}) std::remove(p.c_str());
  for (const auto& p : {big, empty})
    for (const char* ext : {".idx", ".bin"}) std::remove((p + ext).c_str());
}

// Bad spellings exit 2 with one line naming the value, before any file is opened.
TEST(TokenData, BadSpellingsExit2NamingTheValue) {
  for (const std::string v : {"megatron:", "tokens:/x:uint8:eos=1", "tokens:/x:uint16:eos=abc", "tokens:/x:uint16",
                              "tokens::uint16:eos=1", "tokens:/x:uint16:eos=70000", "wikitext", "tokens:/x:uint32:eos=-1"}) {
    EXPECT_THROW(parse_data_spec(v), UsageError) << v;
    const auto r = zb::test_support::run_zerobench("run --model tiny --steps 1 --data '" + v + "'");
    EXPECT_EQ(r.exit_code, 2) << v << "\n" << r.output;
    EXPECT_HAS(r.output, "'" + v + "'");
    EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
  }
  EXPECT_NO_THROW(parse_data_spec("tokens:/a:b/c:uint32:eos=0"));  // PATH may hold ':'
  EXPECT_EQ(parse_data_spec("tokens:/a:b/c:uint32:eos=0").path, "/a:b/c");
}

// A bad file through the binary: exit 2, one line, before any rank starts (the launcher's check).
TEST(TokenData, BadFilesExit2ThroughTheBinary) {
  const auto big = temp_path("mg_cli_vocab");
  write_megatron(big, "uint16", {{{1, 2, 3, 4, 5, 6, 7, 8}}, {{9, 3000, 11}}});
  auto r = zb::test_support::run_zerobench("run --model tiny --nproc 2 --steps 2 --warmup 1 --seq-len 4 --micro-batch 1 --data megatron:" + big);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_HAS(r.output, "token id 3000 at byte offset");
  EXPECT_HAS(r.output, "[0, 2048)");
  EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
  auto bin = read_bytes(big + ".bin");
  write_bytes(big + ".bin", bin.substr(0, bin.size() - 1));
  r = zb::test_support::run_zerobench("run --model tiny --nproc 2 --steps 2 --warmup 1 --data megatron:" + big);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_HAS(r.output, "truncated .bin");
  EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
  for (const char* ext : {".idx", ".bin"}) std::remove((big + ext).c_str());
}

namespace {
// A corpus large enough for a few steps of tiny: 24 documents of 1..60 tokens.
std::string e2e_megatron(const std::string& name) {
  std::vector<Doc> docs;
  for (int d = 0; d < 24; ++d) {
    std::vector<int64_t> seq;
    for (int i = 0; i < 1 + (d * 29) % 60; ++i) seq.push_back((d * 97 + i * 13 + 1) % kVocab);
    docs.push_back({seq});
  }
  const auto prefix = temp_path(name);
  write_megatron(prefix, "uint16", docs);
  return prefix;
}
}  // namespace

// A run trains on the file: finite losses, the report names the data, and every rank's batch of
// every step (its sha256 in the report) is the one the seeded stream gives.
TEST(TokenData, RunTrainsOnAMegatronDataset) {
  const auto prefix = e2e_megatron("mg_run");
  const auto out = temp_path("mg_run.json");
  const auto r = zb::test_support::run_zerobench("run --backend fsdp --model tiny --nproc 2 --steps 2 --warmup 1 --seq-len 16 "
                                                 "--micro-batch 2 --threads 1 --quiet --data megatron:" + prefix +
                                                 " --out " + out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto report = zb::reports::read_report(out);
  for (const auto& s : report["steps"]) EXPECT_TRUE(std::isfinite(s["loss"].get<double>())) << s.dump();
  const auto& d = report["config"]["data"];
  EXPECT_EQ(d["kind"], "megatron:" + prefix);
  EXPECT_EQ(d["format"], "megatron");
  EXPECT_EQ(d["batching"], "pack-naive");
  EXPECT_EQ(d["files"], json::array({prefix + ".idx", prefix + ".bin"}));
  auto corpus = TokenCorpus::open(parse_data_spec("megatron:" + prefix), kVocab);
  EXPECT_EQ(d["documents"], 24);
  EXPECT_EQ(d["tokens"], corpus->tokens());
  EXPECT_TRUE(d["entropy_floor_nats"].is_null());
  EXPECT_FALSE(report["summary"].contains("entropy_floor_nats"));
  const auto data = zb::models::make_data_source("megatron:" + prefix, kVocab, report["config"]["train"]["seed"].get<uint64_t>());
  for (int rank = 0; rank < 2; ++rank)
    for (int64_t step = 0; step < 2; ++step) {
      const auto b = data->samples(zb::models::first_sample_index(step, 0, 1, rank, 2, 2), 2, 16);
      std::string bytes(static_cast<const char*>(b.tokens.data_ptr()), b.tokens.nbytes());
      bytes.append(static_cast<const char*>(b.targets.data_ptr()), b.targets.nbytes());
      EXPECT_EQ(report["ranks"][size_t(rank)]["batch_sha256"][size_t(step)], zb::config::sha256_hex(bytes)) << rank << " " << step;
    }
  std::remove(out.c_str());
  for (const char* ext : {".idx", ".bin"}) std::remove((prefix + ext).c_str());
}

// crossval writes the batches both sides train on from the same stream: PyTorch FSDP1 on the
// file agrees with zerobench's fsdp (fp32 is bitwise in docs/crossval.md), batches equal.
TEST(TokenData, CrossvalOnAMegatronDatasetAgrees) {
  const auto prefix = e2e_megatron("mg_crossval");
  const auto out = temp_path("mg_crossval.json");
  const auto r = zb::test_support::run_zerobench("crossval --backend fsdp --precision fp32 --model tiny --nproc 2 "
                                                 "--steps 2 --seq-len 16 --micro-batch 2 --data megatron:" + prefix +
                                                 " --out " + out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::ifstream f(out);
  const auto doc = json::parse(f);
  EXPECT_TRUE(doc["verdict"]["agree"].get<bool>()) << doc["verdict"].dump(2);
  ASSERT_EQ(doc["modes"].size(), 1u);
  const auto& mode = doc["modes"][size_t(0)];
  EXPECT_TRUE(mode["batches_equal"].get<bool>());
  ASSERT_EQ(mode["steps"].size(), 2u);
  for (const auto& s : mode["steps"]) EXPECT_EQ(s["loss_rel_diff"].get<double>(), 0.0) << s.dump();
  std::remove(out.c_str());
  for (const char* ext : {".idx", ".bin"}) std::remove((prefix + ext).c_str());
}
