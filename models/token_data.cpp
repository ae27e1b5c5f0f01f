// token_data.cpp — file sources for --data (see token_data.hpp, docs/data.md). The Megatron layout
// read here is the one megatron-core writes (megatron/core/datasets/indexed_dataset.py,
// _IndexWriter and IndexedDatasetBuilder), little-endian:
//   .idx: b"MMIDIDX\x00\x00" | u64 version (1) | u8 dtype code | u64 sequence count N |
//         u64 document count D | i32 sequence_lengths[N] | i64 sequence_pointers[N] (byte offsets
//         into .bin) | i64 document_indices[D] (0, then the sequence index ending each document,
//         the last = N) | [i8 sequence_modes[N], multimodal only: ignored]
//   .bin: the tokens of every sequence, in the dtype the code names.
// Also the document-length distribution (lengths:FILE, LengthsCorpus below): exact lengths from a
// JSON or CSV histogram, synthetic tokens.
#include "models/token_data.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <numeric>

#include <nlohmann/json.hpp>

#include "runtime/errors.hpp"

namespace zb::models {

namespace {

enum class Kind { U8, I8, I16, I32, I64, F64, F32, U16, U32 };
struct TokenType {
  Kind kind;
  const char* name;
  int bytes;
};
// megatron-core's DType codes 1..8, in code order.
constexpr TokenType kMegatronTypes[] = {{Kind::U8, "uint8", 1},   {Kind::I8, "int8", 1},      {Kind::I16, "int16", 2},
                                        {Kind::I32, "int32", 4},  {Kind::I64, "int64", 8},    {Kind::F64, "float64", 8},
                                        {Kind::F32, "float32", 4}, {Kind::U16, "uint16", 2}};
constexpr TokenType kUint16{Kind::U16, "uint16", 2};
constexpr TokenType kUint32{Kind::U32, "uint32", 4};

template <typename T>
T load(const unsigned char* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

std::string str(uint64_t v) { return std::to_string(v); }
std::string str(int64_t v) { return std::to_string(v); }

std::string escaped(const unsigned char* p, size_t n) {
  static const char* hex = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < n; ++i) {
    if (p[i] >= 0x20 && p[i] < 0x7f && p[i] != '\\') {
      s += char(p[i]);
    } else {
      s += "\\x";
      s += hex[p[i] >> 4];
      s += hex[p[i] & 15];
    }
  }
  return s;
}

// The token at p (byte `offset` of `file`) as an id in [0, vocab), else a UsageError naming it.
int64_t token_id(const TokenType& t, const unsigned char* p, const std::string& file, uint64_t offset, int64_t vocab) {
  int64_t id = 0;
  double real = 0;
  bool is_real = false;
  switch (t.kind) {
    case Kind::U8: id = *p; break;
    case Kind::I8: id = int8_t(*p); break;
    case Kind::I16: id = load<int16_t>(p); break;
    case Kind::I32: id = load<int32_t>(p); break;
    case Kind::I64: id = load<int64_t>(p); break;
    case Kind::U16: id = load<uint16_t>(p); break;
    case Kind::U32: id = load<uint32_t>(p); break;
    case Kind::F64: real = load<double>(p), is_real = true; break;
    case Kind::F32: real = load<float>(p), is_real = true; break;
  }
  if (is_real) {
    // A float dtype megatron-core reads too; its values must be whole ids.
    if (!(real >= 0 && real < double(vocab) && real == std::floor(real)))
      throw UsageError(file + ": token " + std::to_string(real) + " (" + t.name + ") at byte offset " + str(offset) +
                       " is not a token id in the model's vocabulary [0, " + str(vocab) + ")");
    return int64_t(real);
  }
  if (id < 0 || id >= vocab)
    throw UsageError(file + ": token id " + str(id) + " at byte offset " + str(offset) +
                     " is outside the model's vocabulary [0, " + str(vocab) +
                     ") (a tokenizer larger than the model's vocab?)");
  return id;
}

bool parse_int(const std::string& s, int64_t& out) {
  if (s.empty() || s.size() > 18 || s.find_first_not_of("0123456789") != std::string::npos) return false;
  out = std::stoll(s);
  return true;
}

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

// megatron-core's indexed dataset (the layout above).
class MegatronCorpus : public TokenCorpus {
 public:
  MegatronCorpus(const std::string& prefix, int64_t vocab)
      : TokenCorpus(vocab), prefix_(prefix), idx_(prefix + ".idx"), bin_(prefix + ".bin") {
    const std::string& ip = idx_.path();
    auto at = [&](const std::string& field, uint64_t offset) {
      return ip + " offset " + str(offset) + " (" + field + "): ";
    };
    constexpr uint64_t kHeader = 34;
    if (idx_.size() < kHeader)
      throw UsageError(ip + " offset " + str(idx_.size()) + " (header): the file ends inside the 34-byte header " +
                       "(magic, version, dtype, sequence and document counts): truncated, or not a Megatron .idx");
    static const unsigned char kMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', 0, 0};
    if (std::memcmp(idx_.bytes(0, 9), kMagic, 9) != 0)
      throw UsageError(at("magic", 0) + "'" + escaped(idx_.bytes(0, 9), 9) +
                       "', not 'MMIDIDX\\x00\\x00': not a Megatron-LM indexed dataset index");
    const auto version = load<uint64_t>(idx_.bytes(9, 8));
    if (version != 1)
      throw UsageError(at("version", 9) + str(version) + ", megatron-core writes and reads only version 1");
    const unsigned code = *idx_.bytes(17, 1);
    if (code < 1 || code > 8)
      throw UsageError(at("dtype code", 17) + str(uint64_t(code)) +
                       ", not one of megatron-core's DType codes 1-8 (uint8 int8 int16 int32 int64 float64 float32 uint16)");
    type_ = kMegatronTypes[code - 1];
    sequences_ = load<uint64_t>(idx_.bytes(18, 8));
    const auto doc_indices = load<uint64_t>(idx_.bytes(26, 8));
    const uint64_t room = idx_.size() - kHeader;
    if (sequences_ > room / 12)
      throw UsageError(at("sequence count", 18) + str(sequences_) + " sequences need " +
                       (sequences_ > (uint64_t(1) << 59) ? std::string("more") : str(sequences_ * 12)) +
                       " bytes of lengths and pointers, the file has " + str(room) + " after the header: truncated .idx");
    if (doc_indices > (room - sequences_ * 12) / 8)
      throw UsageError(at("document count", 26) + str(doc_indices) + " document indices run past the end of the file (" +
                       str(idx_.size()) + " bytes): truncated .idx");
    lengths_at_ = kHeader;
    pointers_at_ = lengths_at_ + 4 * sequences_;
    documents_at_ = pointers_at_ + 8 * sequences_;
    const uint64_t bin_size = bin_.size();
    for (uint64_t s = 0; s < sequences_; ++s) {
      const int64_t len = length(s);
      if (len < 0)
        throw UsageError(at("sequence_lengths[" + str(s) + "]", lengths_at_ + 4 * s) + str(len) + ", negative");
      const int64_t ptr = pointer(s);
      const uint64_t bytes = uint64_t(len) * uint64_t(type_.bytes);
      if (ptr < 0 || uint64_t(ptr) > bin_size || bytes > bin_size - uint64_t(ptr))
        throw UsageError(ip + " offset " + str(pointers_at_ + 8 * s) + " (sequence_pointers[" + str(s) + "]) = " + str(ptr) +
                         ", offset " + str(lengths_at_ + 4 * s) + " (sequence_lengths[" + str(s) + "]) = " + str(len) +
                         ": the sequence's " + type_.name + " tokens at bytes [" + str(ptr) + ", " +
                         str(ptr + int64_t(bytes)) + ") run past the end of " + bin_.path() + " (" + str(bin_size) +
                         " bytes): truncated .bin, or a bad pointer or length");
    }
    if (doc_indices == 0)
      throw UsageError(at("document count", 26) + "0 document indices (megatron-core's builder writes at least the "
                       "leading 0): an empty corpus");
    std::vector<int64_t> lengths;
    int64_t prev = 0;
    for (uint64_t j = 0; j < doc_indices; ++j) {
      const int64_t v = doc_index(j);
      const std::string field = "document_indices[" + str(j) + "]";
      if (j == 0 && v != 0)
        throw UsageError(at(field, documents_at_) + str(v) + ", must be 0 (the builder starts them at 0)");
      if (v < prev)
        throw UsageError(at(field, documents_at_ + 8 * j) + str(v) + " is less than document_indices[" + str(j - 1) +
                         "] = " + str(prev) + ": document indices out of order");
      if (uint64_t(v) > sequences_)
        throw UsageError(at(field, documents_at_ + 8 * j) + str(v) + " is past the sequence count " + str(sequences_));
      if (j > 0) {
        int64_t n = 0;
        for (int64_t s = prev; s < v; ++s) n += length(uint64_t(s));
        lengths.push_back(n);
      }
      prev = v;
    }
    if (uint64_t(prev) != sequences_)
      throw UsageError(at("document_indices[" + str(doc_indices - 1) + "]", documents_at_ + 8 * (doc_indices - 1)) +
                       str(prev) + ", must equal the sequence count " + str(sequences_) +
                       " (every sequence in a document, as megatron-core asserts)");
    set_documents(std::move(lengths), prefix_ + ".{idx,bin}");
  }

  std::string format() const override { return "megatron"; }
  std::vector<std::string> files() const override { return {idx_.path(), bin_.path()}; }

  void read(int64_t d, int64_t offset, int64_t count, int64_t* out) const override {
    auto s = uint64_t(doc_index(uint64_t(d)));
    while (offset >= length(s)) offset -= length(s++);
    while (count > 0) {
      const int64_t take = std::min(count, length(s) - offset);
      const uint64_t at = uint64_t(pointer(s)) + uint64_t(offset) * uint64_t(type_.bytes);
      const unsigned char* p = bin_.bytes(at, uint64_t(take) * uint64_t(type_.bytes));
      for (int64_t t = 0; t < take; ++t)
        *out++ = token_id(type_, p + t * type_.bytes, bin_.path(), at + uint64_t(t * type_.bytes), vocab_);
      count -= take;
      offset = 0;
      ++s;
    }
  }

 private:
  int64_t length(uint64_t s) const { return load<int32_t>(idx_.bytes(lengths_at_ + 4 * s, 4)); }
  int64_t pointer(uint64_t s) const { return load<int64_t>(idx_.bytes(pointers_at_ + 8 * s, 8)); }
  int64_t doc_index(uint64_t j) const { return load<int64_t>(idx_.bytes(documents_at_ + 8 * j, 8)); }

  std::string prefix_;
  MappedFile idx_, bin_;
  TokenType type_ = kUint16;
  uint64_t sequences_ = 0, lengths_at_ = 0, pointers_at_ = 0, documents_at_ = 0;
};

// A flat file of uint16/uint32 tokens; a document ends at (and includes) each EOS id, and the
// tokens after the last EOS, if any, are one more document. Every token is checked while the
// file is scanned for the EOS ids.
class FlatCorpus : public TokenCorpus {
 public:
  FlatCorpus(const DataSpec& spec, int64_t vocab)
      : TokenCorpus(vocab), file_(spec.path), type_(spec.token_bytes == 2 ? kUint16 : kUint32) {
    if (spec.eos >= vocab)
      throw UsageError("--data '" + spec.value + "': eos=" + str(spec.eos) + " is outside the model's vocabulary [0, " +
                       str(vocab) + ")");
    const uint64_t size = file_.size(), b = uint64_t(type_.bytes);
    if (size % b != 0)
      throw UsageError(file_.path() + " offset " + str(size - size % b) + " (last token): the file's " + str(size) +
                       " bytes are not a multiple of " + str(b) + " (" + type_.name + " tokens): truncated, or not " +
                       type_.name);
    const uint64_t n = size / b;
    const unsigned char* p = n ? file_.bytes(0, size) : nullptr;
    std::vector<int64_t> lengths;
    int64_t start = 0;
    starts_.push_back(0);
    for (uint64_t i = 0; i < n; ++i) {
      if (token_id(type_, p + i * b, file_.path(), i * b, vocab) != spec.eos) continue;
      lengths.push_back(int64_t(i) + 1 - start);
      start = int64_t(i) + 1;
      starts_.push_back(start);
    }
    if (uint64_t(start) < n) {
      lengths.push_back(int64_t(n) - start);
      starts_.push_back(int64_t(n));
    }
    set_documents(std::move(lengths), file_.path());
  }

  std::string format() const override { return "tokens"; }
  std::vector<std::string> files() const override { return {file_.path()}; }

  void read(int64_t d, int64_t offset, int64_t count, int64_t* out) const override {
    const uint64_t b = uint64_t(type_.bytes), at = uint64_t(starts_[size_t(d)] + offset) * b;
    const unsigned char* p = file_.bytes(at, uint64_t(count) * b);
    for (int64_t t = 0; t < count; ++t) out[t] = token_id(type_, p + uint64_t(t) * b, file_.path(), at + uint64_t(t) * b, vocab_);
  }

 private:
  MappedFile file_;
  TokenType type_;
  std::vector<int64_t> starts_;  // token index of each document's first token
};

// A document-length distribution (--data lengths:FILE, docs/data.md): exact lengths and counts
// as scripts/document_lengths.py writes them from a corpus, as JSON
//   {"format": "zerobench-document-lengths", "version": 1, "documents": D, "tokens": N,
//    "histogram": [{"length": L, "count": C}, ...]}
// or CSV (a "length,count" header, then one "L,C" line per length). Documents are the histogram's
// lengths, each repeated count times in file order; their tokens are synthesised: uniform ids
// drawn by splitmix64 from (document, offset). Reads are bounded: the file, the documents.
class LengthsCorpus : public TokenCorpus {
 public:
  static constexpr uint64_t kMaxFileBytes = uint64_t(64) << 20;
  static constexpr int64_t kMaxDocuments = int64_t(1) << 24;
  static constexpr int64_t kMaxLength = int64_t(1) << 31;

  LengthsCorpus(const std::string& path, int64_t vocab) : TokenCorpus(vocab), path_(path) {
    const MappedFile file(path);
    if (file.size() > kMaxFileBytes)
      throw UsageError(path + ": " + str(file.size()) + " bytes: a lengths file is at most " + str(kMaxFileBytes) + " bytes");
    const auto* p = file.size() ? file.bytes(0, file.size()) : nullptr;
    const std::string text(reinterpret_cast<const char*>(p), size_t(file.size()));
    std::vector<std::pair<int64_t, int64_t>> entries;  // (length, count)
    const bool csv = path.size() > 4 && path.compare(path.size() - 4, 4, ".csv") == 0;
    csv ? parse_csv(text, entries) : parse_json(text, entries);
    std::vector<int64_t> lengths;
    for (size_t i = 0; i < entries.size(); ++i) {
      const auto [length, count] = entries[i];
      const std::string where = path + ": histogram[" + std::to_string(i) + "]";
      if (length < 1 || length > kMaxLength)
        throw UsageError(where + ".length " + str(length) + " must lie in [1, " + str(kMaxLength) + "]");
      if (count < 1) throw UsageError(where + ".count " + str(count) + " must be at least 1");
      if (count > kMaxDocuments - int64_t(lengths.size()))
        throw UsageError(where + ".count " + str(count) + ": more than " + str(kMaxDocuments) +
                         " documents in all (one length is held per document)");
      lengths.insert(lengths.end(), size_t(count), length);
    }
    if (declared_documents_ >= 0 && declared_documents_ != int64_t(lengths.size()))
      throw UsageError(path + ": documents " + str(declared_documents_) + " but the histogram counts " +
                       str(int64_t(lengths.size())));
    const int64_t tokens = std::accumulate(lengths.begin(), lengths.end(), int64_t(0));
    if (declared_tokens_ >= 0 && declared_tokens_ != tokens)
      throw UsageError(path + ": tokens " + str(declared_tokens_) + " but the histogram's lengths sum to " + str(tokens));
    set_documents(std::move(lengths), path);
  }

  std::string format() const override { return "lengths"; }
  std::vector<std::string> files() const override { return {path_}; }

  void read(int64_t d, int64_t offset, int64_t count, int64_t* out) const override {
    for (int64_t t = 0; t < count; ++t) {
      uint64_t s = uint64_t(d) * 0x9E3779B97F4A7C15ULL ^ uint64_t(offset + t) * 0xD1B54A32D192ED03ULL;
      out[t] = int64_t(splitmix64(s) % uint64_t(vocab_));
    }
  }

 private:
  void parse_json(const std::string& text, std::vector<std::pair<int64_t, int64_t>>& entries) {
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(text);
    } catch (const nlohmann::json::parse_error& e) {
      throw UsageError(path_ + ": not JSON (byte " + std::to_string(e.byte) + ")");
    }
    auto field = [&](const char* key) -> const nlohmann::json& {
      if (!j.is_object() || !j.contains(key)) throw UsageError(path_ + ": field '" + key + "' is missing");
      return j[key];
    };
    if (field("format") != "zerobench-document-lengths")
      throw UsageError(path_ + ": field 'format' is " + field("format").dump() + ", not \"zerobench-document-lengths\"");
    if (field("version") != 1) throw UsageError(path_ + ": field 'version' is " + field("version").dump() + ", not 1");
    declared_documents_ = count_field(field("documents"), "documents");
    declared_tokens_ = count_field(field("tokens"), "tokens");
    const auto& h = field("histogram");
    if (!h.is_array()) throw UsageError(path_ + ": field 'histogram' is not an array");
    for (size_t i = 0; i < h.size(); ++i) {
      const std::string where = "histogram[" + std::to_string(i) + "]";
      if (!h[i].is_object() || !h[i].contains("length") || !h[i].contains("count"))
        throw UsageError(path_ + ": " + where + " must be {\"length\": L, \"count\": C}");
      entries.emplace_back(count_field(h[i]["length"], where + ".length"), count_field(h[i]["count"], where + ".count"));
    }
  }

  void parse_csv(const std::string& text, std::vector<std::pair<int64_t, int64_t>>& entries) {
    size_t line_start = 0;
    int64_t line_no = 0;
    while (line_start < text.size()) {
      size_t end = text.find('\n', line_start);
      if (end == std::string::npos) end = text.size();
      std::string line = text.substr(line_start, end - line_start);
      line_start = end + 1;
      ++line_no;
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (line_no == 1) {
        if (line != "length,count")
          throw UsageError(path_ + ": line 1 is '" + line.substr(0, 40) + "', not the header 'length,count'");
        continue;
      }
      if (line.empty()) continue;
      const auto comma = line.find(',');
      int64_t length = 0, count = 0;
      if (comma == std::string::npos || !parse_int(line.substr(0, comma), length) ||
          !parse_int(line.substr(comma + 1), count))
        throw UsageError(path_ + ": line " + str(line_no) + " '" + line.substr(0, 40) + "' is not LENGTH,COUNT");
      entries.emplace_back(length, count);
    }
    if (line_no == 0) throw UsageError(path_ + ": empty (a CSV lengths file starts with 'length,count')");
  }

  int64_t count_field(const nlohmann::json& v, const std::string& name) const {
    if (!v.is_number_integer()) throw UsageError(path_ + ": field '" + name + "' is " + v.dump().substr(0, 40) + ", not an integer");
    return v.get<int64_t>();
  }

  std::string path_;
  int64_t declared_documents_ = -1, declared_tokens_ = -1;
};

}  // namespace

DataSpec parse_data_spec(const std::string& value) {
  DataSpec spec;
  spec.value = value;
  if (value == "random" || value == "markov") return spec;
  const std::string usage =
      " (random, markov, megatron:PREFIX, tokens:PATH:uint16|uint32:eos=ID or lengths:FILE.json|csv; docs/data.md)";
  if (value.rfind("lengths:", 0) == 0) {
    spec.format = DataSpec::Format::Lengths;
    spec.path = value.substr(8);
    if (spec.path.empty()) throw UsageError("--data '" + value + "': lengths: needs a file path" + usage);
    return spec;
  }
  if (value.rfind("megatron:", 0) == 0) {
    spec.format = DataSpec::Format::Megatron;
    spec.path = value.substr(9);
    // Megatron's tools take the prefix; a path to either file names the same dataset.
    for (const char* ext : {".idx", ".bin"})
      if (spec.path.size() > 4 && spec.path.compare(spec.path.size() - 4, 4, ext) == 0) spec.path.resize(spec.path.size() - 4);
    if (spec.path.empty()) throw UsageError("--data '" + value + "': megatron: needs the dataset's path prefix" + usage);
    return spec;
  }
  if (value.rfind("tokens:", 0) == 0) {
    // tokens:PATH:TYPE:eos=ID, split from the right (PATH may hold ':').
    const std::string rest = value.substr(7);
    const auto c2 = rest.rfind(':');
    const auto c1 = c2 == std::string::npos || c2 == 0 ? std::string::npos : rest.rfind(':', c2 - 1);
    if (c1 == std::string::npos)
      throw UsageError("--data '" + value + "': a flat token file is tokens:PATH:uint16|uint32:eos=ID" + usage);
    spec.format = DataSpec::Format::Flat;
    spec.path = rest.substr(0, c1);
    const std::string type = rest.substr(c1 + 1, c2 - c1 - 1), eos = rest.substr(c2 + 1);
    if (spec.path.empty()) throw UsageError("--data '" + value + "': tokens: needs a file path" + usage);
    if (type == "uint16") spec.token_bytes = 2;
    else if (type == "uint32") spec.token_bytes = 4;
    else throw UsageError("--data '" + value + "': token type '" + type + "' must be uint16 or uint32" + usage);
    if (eos.rfind("eos=", 0) != 0 || !parse_int(eos.substr(4), spec.eos))
      throw UsageError("--data '" + value + "': '" + eos + "' must be eos=ID, the id ending each document" + usage);
    if (spec.token_bytes == 2 && spec.eos > 0xFFFF)
      throw UsageError("--data '" + value + "': eos=" + str(spec.eos) + " does not fit uint16");
    if (spec.eos > int64_t(0xFFFFFFFF))
      throw UsageError("--data '" + value + "': eos=" + str(spec.eos) + " does not fit uint32");
    return spec;
  }
  throw UsageError("--data '" + value + "' is not a data source" + usage);
}

std::string data_spec_problem(const std::string& value) {
  try {
    parse_data_spec(value);
    return "";
  } catch (const UsageError& e) {
    const std::string m = e.what();
    return m.rfind("--data ", 0) == 0 ? m.substr(7) : m;
  }
}

MappedFile::MappedFile(const std::string& path) : path_(path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw UsageError("--data: cannot open '" + path + "': " + std::strerror(errno));
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw UsageError("--data: '" + path + "' is not a regular file");
  }
  size_ = uint64_t(st.st_size);
  if (size_ > 0) {
    void* m = mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    const int err = errno;
    if (m == MAP_FAILED) {
      ::close(fd);
      throw UsageError("--data: cannot map '" + path + "': " + std::strerror(err));
    }
    map_ = m;
  }
  ::close(fd);
}

MappedFile::~MappedFile() {
  if (map_) munmap(map_, size_);
}

const unsigned char* MappedFile::bytes(uint64_t offset, uint64_t n) const {
  if (offset > size_ || n > size_ - offset)
    throw UsageError(path_ + ": a read of " + str(n) + " bytes at offset " + str(offset) + " runs past the end of the file (" +
                     str(size_) + " bytes)");
  return static_cast<const unsigned char*>(map_) + offset;
}

std::unique_ptr<TokenCorpus> TokenCorpus::open(const DataSpec& spec, int64_t vocab) {
  if (spec.format == DataSpec::Format::Megatron) return std::make_unique<MegatronCorpus>(spec.path, vocab);
  if (spec.format == DataSpec::Format::Flat) return std::make_unique<FlatCorpus>(spec, vocab);
  if (spec.format == DataSpec::Format::Lengths) return std::make_unique<LengthsCorpus>(spec.path, vocab);
  throw UsageError("--data '" + spec.value + "' is synthetic, not a file");
}

std::vector<int64_t> TokenCorpus::document(int64_t d) const {
  std::vector<int64_t> out(size_t(document_tokens(d)));
  read(d, 0, int64_t(out.size()), out.data());
  return out;
}

void TokenCorpus::set_documents(std::vector<int64_t> lengths, const std::string& what) {
  doc_tokens_ = std::move(lengths);
  total_ = std::accumulate(doc_tokens_.begin(), doc_tokens_.end(), int64_t(0));
  if (total_ == 0)
    throw UsageError(what + ": no tokens (" + str(int64_t(doc_tokens_.size())) + " documents): an empty corpus cannot train");
}

DocumentStream::DocumentStream(std::shared_ptr<const TokenCorpus> corpus, uint64_t seed) : corpus_(std::move(corpus)) {
  const int64_t n = corpus_->documents();
  order_.resize(size_t(n));
  std::iota(order_.begin(), order_.end(), int64_t(0));
  uint64_t rng = seed ^ 0x646F63756D656E74ULL;  // "document"
  for (int64_t i = n - 1; i > 0; --i) std::swap(order_[size_t(i)], order_[size_t(splitmix64(rng) % uint64_t(i + 1))]);
  start_.resize(size_t(n) + 1);
  start_[0] = 0;
  for (int64_t k = 0; k < n; ++k) start_[size_t(k) + 1] = start_[size_t(k)] + corpus_->document_tokens(order_[size_t(k)]);
}

void DocumentStream::fill(int64_t index, int64_t length, int64_t* out) const {
  __extension__ typedef unsigned __int128 u128;  // index * (length - 1) may pass 2^63
  const auto pos = int64_t(u128(uint64_t(index)) * uint64_t(std::max<int64_t>(length - 1, 0)) % uint64_t(corpus_->tokens()));
  // The last k with start_[k] <= pos (skips empty documents, which start where the next one does).
  auto k = size_t(std::upper_bound(start_.begin(), start_.end(), pos) - start_.begin() - 1);
  int64_t offset = pos - start_[k], filled = 0;
  while (filled < length) {
    const int64_t d = order_[k];
    const int64_t take = std::min(corpus_->document_tokens(d) - offset, length - filled);
    if (take > 0) corpus_->read(d, offset, take, out + filled);
    filled += std::max<int64_t>(take, 0);
    offset = 0;
    k = (k + 1) % order_.size();
  }
}

}  // namespace zb::models
