// data.hpp — deterministic synthetic training data. Owns: uniform random tokens and a seeded
// sparse Markov-chain language with a known entropy rate (the best achievable loss).
// A sample depends only on (seed, global sample index), never on world size, so a W-rank run
// and a 1-rank run with a W× larger micro-batch see the same global batch.
#pragma once
#include <ATen/ATen.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace zb::models {

struct Batch {
  at::Tensor tokens;   // [B, T] int64
  at::Tensor targets;  // [B, T] int64 (tokens shifted by one); -100: no label (padding, a document's last token)
  // Per-document attention (--batching pad|pack, models/batching.hpp): [B, T] int64 positions
  // restarting at 0 per document, and per-row document ids (-1 on padding) that the block-diagonal
  // causal mask is built from. Undefined: one causal mask over each row, positions 0..T-1.
  at::Tensor position_ids, document_ids;
  int64_t real_tokens = 0;     // positions that hold a document's token (not padding)
  int64_t documents = 0;       // documents in the rows (a document cut by a row boundary counts in each)
  int64_t label_tokens = 0;    // targets other than -100
  double attention_pairs = 0;  // sum over the attention blocks of length^2 (T^2 a row under one causal mask)
};

class DataSource {
 public:
  virtual ~DataSource() = default;
  virtual std::string kind() const = 0;
  // Best achievable mean cross-entropy in nats (the data's entropy rate).
  virtual double entropy_floor_nats() const = 0;
  // Samples [first, first + count) of the infinite deterministic stream, each T+1 tokens long
  // (per-document batching: rows of documents, see Batch).
  virtual Batch samples(int64_t first, int64_t count, int64_t seq_len) const;

 protected:
  virtual void fill_sample(int64_t index, int64_t length, int64_t* out) const = 0;
};

// Global index of the first sample of a rank's micro-batch: the global batch of one optimizer
// step is grad_accum × world × micro_batch samples, ordered (accum, rank, sample).
int64_t first_sample_index(int64_t step, int64_t accum_index, int64_t grad_accum, int rank, int world,
                           int64_t micro_batch);

// What the rows of some optimizer steps hold, per rank per step (summary.batching, docs/data.md):
// real tokens (padding excluded), documents, label tokens, the padding fraction (padding ÷ slots)
// and the attention span (the sum of attention-block length² ÷ real tokens: T under one causal
// mask a row); and the row width the step pays for: the mean over micro-batches of the widest
// rank's width (pad-longest collates each micro-batch to its longest row, ≤ T; every other mode
// T), the slowest rank setting the pace of each micro-batch. `run` counts its measured steps;
// `project` the steps it prices, at its W and shape.
struct RowStats {
  double real_tokens = 0, documents = 0, label_tokens = 0, padding_fraction = 0, attention_span = 0;
  double width = 0;
};
RowStats row_stats(const DataSource& data, const std::vector<int64_t>& steps, int64_t grad_accum, int world,
                   int64_t micro_batch, int64_t seq_len);

// batching: --batching ("" = pack-naive); pad and pack need documents (a file), else UsageError.
std::unique_ptr<DataSource> make_data_source(const std::string& kind, int64_t vocab, uint64_t seed,
                                             const std::string& batching = "");

// The Markov language: each token has `branching` successors with Dirichlet(1)-drawn weights
// sharpened by `sharpness`; sequences start from the stationary distribution.
class MarkovData : public DataSource {
 public:
  MarkovData(int64_t vocab, uint64_t seed, int branching = 8, double sharpness = 2.0);
  std::string kind() const override { return "markov"; }
  double entropy_floor_nats() const override { return entropy_rate_; }
  const std::vector<double>& stationary() const { return stationary_; }

 protected:
  void fill_sample(int64_t index, int64_t length, int64_t* out) const override;

 private:
  int64_t vocab_;
  uint64_t seed_;
  int branching_;
  std::vector<int64_t> next_;     // [vocab * branching] successor tokens
  std::vector<double> cumprob_;   // [vocab * branching] cumulative transition probabilities
  std::vector<double> stationary_cum_;
  std::vector<double> stationary_;
  double entropy_rate_ = 0;
};

class RandomData : public DataSource {
 public:
  RandomData(int64_t vocab, uint64_t seed) : vocab_(vocab), seed_(seed) {}
  std::string kind() const override { return "random"; }
  double entropy_floor_nats() const override;

 protected:
  void fill_sample(int64_t index, int64_t length, int64_t* out) const override;

 private:
  int64_t vocab_;
  uint64_t seed_;
};

}  // namespace zb::models
