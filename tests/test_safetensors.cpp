// test_safetensors.cpp — safetensors read/write (mapped views, atomic writes, sharded index),
// checked against files written and read by Python's `safetensors` package, and the HF Llama
// name mapping / config.json of models/checkpoint/hf_llama.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>

#include "bench/crossval/crossval.hpp"
#include "models/checkpoint/hf_llama.hpp"
#include "models/checkpoint/safetensors.hpp"
#include "models/llama.hpp"
#include "runtime/errors.hpp"
#include "tests/run_binary.hpp"

namespace ckpt = zb::models::checkpoint;
using zb::test_support::temp_path;

namespace {

std::string make_dir(const std::string& name) {
  const auto d = zb::test_support::make_clean_dir(name);
  EXPECT_FALSE(d.empty()) << "cannot create " << temp_path(name);
  return d;
}

// Runs `code` with the setup venv's python; returns its exit code and output.
zb::test_support::BinaryResult python(const std::string& code) {
  const auto script = temp_path("script.py");
  std::ofstream(script) << code;
  return zb::test_support::run_command(zb::bench::default_python() + " " + script + " 2>&1");
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(bytes.data(), std::streamsize(bytes.size()));
}

std::string header_file(const std::string& header, size_t data_bytes) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[size_t(i)] = char((header.size() >> (8 * i)) & 0xff);
  return out + header + std::string(data_bytes, '\0');
}

}  // namespace

TEST(Safetensors, RoundTripKeepsEveryDtypeShapeAndValue) {
  const auto path = temp_path("roundtrip.safetensors");
  std::vector<ckpt::NamedTensor> in = {
      {"f32", at::randn({3, 5})},
      {"bf16", at::randn({7}).to(at::kBFloat16)},
      {"f16", at::randn({2, 2}).to(at::kHalf)},
      {"f64", at::randn({1}, at::kDouble)},
      {"i64", at::arange(10, at::kLong).view({2, 5})},
      {"i32", at::arange(6, at::kInt)},
      {"u8", at::arange(9, at::kByte).view({3, 3})},
      {"i8", at::arange(-4, 4, at::kChar)},
      {"bool", at::arange(5) % 2 == 0},
      {"scalar", at::scalar_tensor(3.5)},
      {"empty", at::empty({0, 3})},
      {"strided", at::randn({4, 6}).t()},  // written as its contiguous bytes
  };
  ckpt::write_safetensors(path, in, {{"format", "pt"}, {"note", "zerobench"}});
  const auto f = ckpt::SafetensorsFile::open(path);
  EXPECT_EQ(f.metadata().at("note"), "zerobench");
  EXPECT_EQ(f.tensors().size(), in.size());
  for (const auto& t : in) {
    const auto back = f.tensor(t.name);
    EXPECT_EQ(back.scalar_type(), t.tensor.scalar_type()) << t.name;
    EXPECT_EQ(back.sizes(), t.tensor.sizes()) << t.name;
    EXPECT_TRUE(at::equal(back, t.tensor)) << t.name;
    if (back.numel() > 0) {
      EXPECT_EQ(reinterpret_cast<uintptr_t>(back.data_ptr()) % back.element_size(), 0u) << t.name << " misaligned";
    }
  }
  // A view of the mapping, not a copy: the same name gives the same bytes every time.
  EXPECT_EQ(f.tensor("f32").data_ptr(), f.tensor("f32").data_ptr());
  // Writing into a view changes neither the file nor other openings of it (MAP_PRIVATE).
  f.tensor("i64").fill_(0);
  EXPECT_TRUE(at::equal(ckpt::SafetensorsFile::open(path).tensor("i64"), in[4].tensor));
  // The mapping outlives the file object through its views.
  at::Tensor kept;
  {
    kept = ckpt::SafetensorsFile::open(path).tensor("f32");
  }
  EXPECT_TRUE(at::equal(kept, in[0].tensor));
}

TEST(Safetensors, ByteRangesOfATensorAndOfTheDataSection) {
  const auto path = temp_path("ranges.safetensors");
  auto t = at::arange(16, at::kInt);
  ckpt::write_safetensors(path, {{"a", t}});
  const auto f = ckpt::SafetensorsFile::open(path);
  const auto* p = reinterpret_cast<const int32_t*>(f.bytes("a", 8, 8));
  EXPECT_EQ(p[0], 2);
  EXPECT_EQ(p[1], 3);
  EXPECT_EQ(f.data_size(), 64);
  EXPECT_THROW(f.bytes("a", 60, 8), zb::UsageError);
  EXPECT_THROW(f.bytes("missing", 0, 1), zb::UsageError);
  EXPECT_THROW(f.data_bytes(-1, 4), zb::UsageError);
}

TEST(Safetensors, WritesAtomicallyAndRejectsBadNames) {
  const auto path = temp_path("atomic.safetensors");
  ckpt::write_safetensors(path, {{"x", at::ones({2})}});
  EXPECT_THROW(ckpt::write_safetensors(path, {{"x", at::ones({2})}, {"x", at::ones({2})}}), zb::UsageError);
  EXPECT_THROW(ckpt::write_safetensors(path, {{"__metadata__", at::ones({2})}}), zb::UsageError);
  EXPECT_THROW(ckpt::write_safetensors(path, {{"c", at::randn({2}, at::kComplexFloat)}}), zb::UsageError);
  // The failed writes left the previous file intact and no temp files behind.
  EXPECT_TRUE(at::equal(ckpt::SafetensorsFile::open(path).tensor("x"), at::ones({2})));
  EXPECT_NE(access((path + ".tmp." + std::to_string(getpid())).c_str(), F_OK), 0);
}

TEST(Safetensors, RejectsMalformedFilesNamingTheProblem) {
  const auto dir = make_dir("bad_files");
  auto expect_bad = [&](const std::string& name, const std::string& bytes, const std::string& needle) {
    const auto path = dir + "/" + name;
    write_bytes(path, bytes);
    try {
      ckpt::SafetensorsFile::open(path);
      ADD_FAILURE() << name << " was accepted";
    } catch (const zb::UsageError& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(path), std::string::npos) << msg;
      EXPECT_NE(msg.find(needle), std::string::npos) << name << ": " << msg;
    }
  };
  expect_bad("short", "abc", "truncated");
  expect_bad("huge_header", std::string("\xff\xff\xff\x00\x00\x00\x00\x00", 8) + "{}", "header size");
  expect_bad("not_json", header_file("{not json", 0), "not valid JSON");
  expect_bad("bad_dtype", header_file(R"({"a":{"dtype":"F31","shape":[1],"data_offsets":[0,4]}})", 4), "F31");
  expect_bad("bad_size", header_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", 4), "expected 8");
  expect_bad("gap",
             header_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
                         12),
             "gap or overlap");
  expect_bad("uncovered", header_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 8), "cover 4 of 8");
  expect_bad("outside", header_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 2), "outside");
  EXPECT_THROW(ckpt::SafetensorsFile::open(dir + "/does_not_exist"), zb::UsageError);
}

// One Python process (importing torch costs ~10 s here): it checks what zerobench wrote — one
// file and a sharded checkpoint with its index, read as transformers reads them — and writes a
// file of its own for zerobench to read.
TEST(Safetensors, InteroperatesWithPythonSafetensorsBothWays) {
  const auto from_cpp = temp_path("from_cpp.safetensors");
  ckpt::write_safetensors(from_cpp,
                          {{"w", at::arange(12, at::kFloat).view({3, 4}) / 8},
                           {"b", (at::arange(5, at::kFloat) - 2).to(at::kBFloat16)},
                           {"ids", at::arange(7, at::kLong) * 3},
                           {"mask", at::arange(4) < 2}},
                          {{"format", "pt"}});
  const auto dir = make_dir("sharded_py");
  std::vector<ckpt::NamedTensor> in;
  for (int i = 0; i < 5; ++i) in.push_back({"t" + std::to_string(i), at::full({100}, float(i))});  // 400 B each
  ASSERT_EQ(ckpt::write_checkpoint(dir, in, /*max_shard_bytes=*/900).size(), 4u);
  const auto from_python = temp_path("from_python.safetensors");
  const auto r = python(
      "import json, torch\n"
      "from safetensors import safe_open\n"
      "from safetensors.torch import load_file, save_file\n"
      "with safe_open('" + from_cpp + "', 'pt') as f:\n"
      "    assert f.metadata() == {'format': 'pt'}, f.metadata()\n"
      "    assert torch.equal(f.get_tensor('w'), torch.arange(12, dtype=torch.float32).reshape(3, 4) / 8)\n"
      "    assert torch.equal(f.get_tensor('b'), (torch.arange(5, dtype=torch.float32) - 2).to(torch.bfloat16))\n"
      "    assert torch.equal(f.get_tensor('ids'), torch.arange(7) * 3)\n"
      "    assert torch.equal(f.get_tensor('mask'), torch.arange(4) < 2)\n"
      "d = '" + dir + "'\n"
      "index = json.load(open(d + '/model.safetensors.index.json'))\n"
      "assert index['metadata']['total_size'] == 2000\n"
      "assert len(set(index['weight_map'].values())) == 3\n"
      "for name, shard in index['weight_map'].items():\n"
      "    assert torch.equal(load_file(d + '/' + shard)[name], torch.full((100,), float(name[1:])))\n"
      "save_file({'w': torch.arange(12, dtype=torch.float32).reshape(3, 4) / 8,\n"
      "           'b': (torch.arange(5, dtype=torch.float32) - 2).to(torch.bfloat16),\n"
      "           'ids': torch.arange(7, dtype=torch.int64) * 3,\n"
      "           'h': torch.tensor([0.5, -1.25], dtype=torch.float16)},\n"
      "          '" + from_python + "', metadata={'format': 'pt', 'who': 'python'})\n"
      "print('ok')\n");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  ASSERT_NE(r.output.find("ok"), std::string::npos) << r.output;
  const auto f = ckpt::SafetensorsFile::open(from_python);
  EXPECT_EQ(f.metadata().at("who"), "python");
  EXPECT_TRUE(at::equal(f.tensor("w"), at::arange(12, at::kFloat).view({3, 4}) / 8));
  EXPECT_TRUE(at::equal(f.tensor("b"), (at::arange(5, at::kFloat) - 2).to(at::kBFloat16)));
  EXPECT_TRUE(at::equal(f.tensor("ids"), at::arange(7, at::kLong) * 3));
  EXPECT_TRUE(at::equal(f.tensor("h"), at::tensor({0.5, -1.25}, at::kFloat).to(at::kHalf)));
}

TEST(Safetensors, ShardedCheckpointWithIndexRoundTrips) {
  const auto dir = make_dir("sharded");
  std::vector<ckpt::NamedTensor> in;
  for (int i = 0; i < 5; ++i) in.push_back({"t" + std::to_string(i), at::full({100}, float(i))});  // 400 B each
  const auto files = ckpt::write_checkpoint(dir, in, /*max_shard_bytes=*/900);
  ASSERT_EQ(files.size(), 4u);  // 3 shards (2 + 2 + 1 tensors) + index
  EXPECT_EQ(files[0], dir + "/model-00001-of-00003.safetensors");
  EXPECT_EQ(files.back(), dir + "/model.safetensors.index.json");
  const auto c = ckpt::SafetensorsCheckpoint::open(dir);
  EXPECT_TRUE(c.sharded());
  EXPECT_EQ(c.names().size(), 5u);
  EXPECT_EQ(c.metadata().at("total_size"), "2000");
  for (const auto& t : in) EXPECT_TRUE(at::equal(c.tensor(t.name), t.tensor)) << t.name;
  EXPECT_EQ(c.file_of("t4"), dir + "/model-00003-of-00003.safetensors");
  EXPECT_TRUE(at::equal(ckpt::SafetensorsCheckpoint::open(dir + "/model.safetensors.index.json").tensor("t2"), in[2].tensor));
  // An index naming a tensor its shard lacks is refused.
  std::ofstream(dir + "/model.safetensors.index.json")
      << R"({"metadata":{},"weight_map":{"t9":"model-00001-of-00003.safetensors"}})";
  EXPECT_THROW(ckpt::SafetensorsCheckpoint::open(dir), zb::UsageError);
  // Unsharded: one model.safetensors, no index.
  const auto single = make_dir("single");
  EXPECT_EQ(ckpt::write_checkpoint(single, in).size(), 1u);
  EXPECT_FALSE(ckpt::SafetensorsCheckpoint::open(single).sharded());
  EXPECT_EQ(ckpt::SafetensorsCheckpoint::open(single).metadata().at("format"), "pt");
}

TEST(HfLlama, NamesFollowTransformersLlamaAndParseBack) {
  const auto cfg = zb::models::preset("tiny");
  EXPECT_EQ(ckpt::hf_param_name(0, 0), "model.embed_tokens.weight");
  EXPECT_EQ(ckpt::hf_param_name(0, 1), "model.norm.weight");
  EXPECT_EQ(ckpt::hf_param_name(0, 2), "lm_head.weight");
  const std::vector<std::string> block = {
      "model.layers.1.input_layernorm.weight", "model.layers.1.self_attn.q_proj.weight",
      "model.layers.1.self_attn.k_proj.weight", "model.layers.1.self_attn.v_proj.weight",
      "model.layers.1.self_attn.o_proj.weight", "model.layers.1.post_attention_layernorm.weight",
      "model.layers.1.mlp.gate_proj.weight", "model.layers.1.mlp.up_proj.weight",
      "model.layers.1.mlp.down_proj.weight"};
  EXPECT_EQ(ckpt::hf_unit_names(cfg, 2), block);
  for (int u = 0; u < int(zb::models::unit_count(cfg)); ++u)
    for (int i = 0; i < int(zb::models::unit_specs(cfg, u).size()); ++i) {
      const auto ref = ckpt::parse_hf_param_name(cfg, ckpt::hf_param_name(u, i));
      ASSERT_TRUE(ref.has_value());
      EXPECT_EQ(ref->unit, u);
      EXPECT_EQ(ref->index, i);
    }
  EXPECT_FALSE(ckpt::parse_hf_param_name(cfg, "model.layers.2.mlp.up_proj.weight"));  // tiny has 2 layers
  EXPECT_FALSE(ckpt::parse_hf_param_name(cfg, "model.layers.0.self_attn.rotary_emb.inv_freq"));
  EXPECT_FALSE(ckpt::parse_hf_param_name(cfg, "model.layers.x.mlp.up_proj.weight"));
}

TEST(HfLlama, ConfigJsonRoundTripsTheModelShape) {
  auto cfg = zb::models::preset("small");
  const auto j = ckpt::hf_llama_config(cfg, at::kBFloat16);
  EXPECT_EQ(j["model_type"], "llama");
  EXPECT_EQ(j["architectures"][0], "LlamaForCausalLM");
  EXPECT_EQ(j["num_key_value_heads"], cfg.kv_heads);
  EXPECT_EQ(j["intermediate_size"], cfg.ffn);
  EXPECT_EQ(j["tie_word_embeddings"], false);
  EXPECT_EQ(j["torch_dtype"], "bfloat16");
  const auto back = ckpt::model_config_from_hf(j);
  EXPECT_EQ(back.layers, cfg.layers);
  EXPECT_EQ(back.hidden, cfg.hidden);
  EXPECT_EQ(back.heads, cfg.heads);
  EXPECT_EQ(back.kv_heads, cfg.kv_heads);
  EXPECT_EQ(back.ffn, cfg.ffn);
  EXPECT_EQ(back.vocab, cfg.vocab);
  EXPECT_DOUBLE_EQ(back.norm_eps, cfg.norm_eps);
  auto tied = j;
  tied["tie_word_embeddings"] = true;
  EXPECT_THROW(ckpt::model_config_from_hf(tied), zb::UsageError);
  auto missing = j;
  missing.erase("hidden_size");
  EXPECT_THROW(ckpt::model_config_from_hf(missing), zb::UsageError);
}

TEST(HfLlama, WritesAndReadsTheInitialWeightsOfEveryUnit) {
  const auto cfg = zb::models::preset("tiny");
  const auto dir = make_dir("hf_llama");
  std::vector<at::Tensor> units;
  for (int u = 0; u < int(zb::models::unit_count(cfg)); ++u) units.push_back(zb::models::init_unit_flat(cfg, u, 7));
  ckpt::write_hf_llama(dir, cfg, units, at::kFloat, /*max_shard_bytes=*/1 << 20);  // tiny is ~5 MB: sharded
  const auto c = ckpt::SafetensorsCheckpoint::open(dir);
  EXPECT_TRUE(c.sharded());
  for (int u = 0; u < int(units.size()); ++u) {
    const auto w = ckpt::read_hf_llama_unit(c, cfg, u);
    const auto expected = zb::models::unflatten_unit(cfg, u, units[size_t(u)]);
    ASSERT_EQ(w.size(), expected.size());
    for (size_t i = 0; i < w.size(); ++i) EXPECT_TRUE(at::equal(w[i], expected[i])) << u << "/" << i;
  }
  std::ifstream config(dir + "/config.json");
  EXPECT_EQ(nlohmann::json::parse(config)["num_hidden_layers"], cfg.layers);
  // A model with more layers than the checkpoint: the missing tensor is named.
  auto bigger = cfg;
  bigger.layers = 3;
  try {
    ckpt::read_hf_llama_unit(c, bigger, 3);
    ADD_FAILURE() << "missing layer accepted";
  } catch (const zb::UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("model.layers.2.input_layernorm.weight"), std::string::npos) << e.what();
  }
}
