// token_data.hpp — real token data read from files (--data, docs/data.md). Owns: the --data
// spelling of a file source (megatron:PREFIX, tokens:PATH:uint16|uint32:eos=ID), the read-only
// memory map, the Megatron-LM indexed dataset reader (PREFIX.idx: MMIDIDX header, sequence lengths
// and pointers, document indices; PREFIX.bin: the tokens), the flat token file reader (documents
// end at the EOS id), their checks (UsageError naming the file, byte offset and field), and the
// seeded document order that turns a corpus into the sample stream (naive packing: documents
// concatenated, one causal mask). Free of ATen: the option parser includes it to check spellings.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace zb::models {

class DataSource;

struct DataSpec {
  enum class Format { Synthetic, Megatron, Flat, Lengths };
  Format format = Format::Synthetic;
  std::string value;    // the --data value as given
  std::string path;     // Megatron: the prefix (PREFIX.bin, PREFIX.idx); flat: the file
  int token_bytes = 0;  // flat: 2 (uint16) or 4 (uint32)
  int64_t eos = -1;     // flat: the id that ends each document
};

// Parses a --data value: random, markov, megatron:PREFIX or tokens:PATH:uint16|uint32:eos=ID.
// Checks the spelling only (no file is opened); throws UsageError naming the value.
DataSpec parse_data_spec(const std::string& value);
// For CLI validators: "" if parse_data_spec accepts value, else its message without "--data ".
std::string data_spec_problem(const std::string& value);

// A file mapped read-only (POSIX mmap). Every read goes through bytes(offset, n), which checks
// that [offset, offset + n) lies inside the file.
class MappedFile {
 public:
  explicit MappedFile(const std::string& path);  // UsageError if it cannot be opened or mapped
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  const std::string& path() const { return path_; }
  uint64_t size() const { return size_; }
  const unsigned char* bytes(uint64_t offset, uint64_t n) const;

 private:
  std::string path_;
  uint64_t size_ = 0;
  void* map_ = nullptr;
};

// A corpus of documents of token ids, checked against the model's vocabulary as tokens are read.
// Documents are numbered in file order; document d's tokens are read with read().
class TokenCorpus {
 public:
  virtual ~TokenCorpus() = default;
  // Opens and checks the files of a Megatron or flat spec (UsageError naming file, offset, field).
  static std::unique_ptr<TokenCorpus> open(const DataSpec& spec, int64_t vocab);

  virtual std::string format() const = 0;  // "megatron" or "tokens"
  virtual std::vector<std::string> files() const = 0;
  int64_t documents() const { return int64_t(doc_tokens_.size()); }
  int64_t tokens() const { return total_; }
  int64_t document_tokens(int64_t d) const { return doc_tokens_[size_t(d)]; }
  // Tokens [offset, offset + count) of document d into out; each id checked to lie in [0, vocab).
  virtual void read(int64_t d, int64_t offset, int64_t count, int64_t* out) const = 0;
  std::vector<int64_t> document(int64_t d) const;

 protected:
  explicit TokenCorpus(int64_t vocab) : vocab_(vocab) {}
  // The documents' token counts, in file order; UsageError naming `what` if there are no tokens.
  void set_documents(std::vector<int64_t> lengths, const std::string& what);

  int64_t vocab_;

 private:
  std::vector<int64_t> doc_tokens_;
  int64_t total_ = 0;
};

// The sample stream of a corpus: the documents in a permutation drawn from the seed (Fisher-Yates
// on splitmix64), concatenated into one stream that wraps around; sample i is the stream's tokens
// [i*T, i*T + T + 1) for T = length - 1. A sample depends only on (seed, i).
class DocumentStream {
 public:
  DocumentStream(std::shared_ptr<const TokenCorpus> corpus, uint64_t seed);
  const TokenCorpus& corpus() const { return *corpus_; }
  const std::vector<int64_t>& order() const { return order_; }  // document ids, stream order
  // length tokens starting at stream position (index * (length - 1)) mod tokens.
  void fill(int64_t index, int64_t length, int64_t* out) const;

 private:
  std::shared_ptr<const TokenCorpus> corpus_;
  std::vector<int64_t> order_;
  std::vector<int64_t> start_;  // start_[k]: stream position of order_[k]; start_.back() = tokens
};

// The corpus behind a DataSource made from a file spec; nullptr for synthetic data.
const TokenCorpus* token_corpus(const DataSource& data);

}  // namespace zb::models
