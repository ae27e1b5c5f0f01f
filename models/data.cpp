// data.cpp — synthetic token streams (see data.hpp) and the DataSource over a token file
// (models/token_data.hpp). Randomness is splitmix64, which is fully specified, so data are
// bit-identical across compilers and machines (std:: distributions are not).
#include "models/data.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "models/batching.hpp"
#include "models/token_data.hpp"
#include "runtime/errors.hpp"

namespace zb::models {

namespace {
uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}
double uniform01(uint64_t& state) { return double(splitmix64(state) >> 11) * 0x1.0p-53; }
uint64_t sample_stream(uint64_t seed, int64_t index) {
  uint64_t s = seed ^ 0x5DEECE66DULL;
  splitmix64(s);
  return s ^ (uint64_t(index) * 0xD1B54A32D192ED03ULL);
}
int64_t pick(const double* cum, int64_t n, double u) {
  return std::min<int64_t>(std::upper_bound(cum, cum + n, u) - cum, n - 1);
}

// Real tokens from a Megatron indexed dataset or a flat token file in the seeded document order
// of DocumentStream: packed naively (one causal mask across document boundaries) or, with
// --batching pad|pack, rows of whole documents (models/batching.hpp).
class FileData : public DataSource {
 public:
  FileData(const DataSpec& spec, int64_t vocab, uint64_t seed, Batching batching)
      : kind_(spec.value),
        stream_(std::shared_ptr<const TokenCorpus>(TokenCorpus::open(spec, vocab)), seed),
        batcher_(stream_, batching) {}
  std::string kind() const override { return kind_; }
  // Unknown: real text has no computable entropy rate (reports leave the floor out).
  double entropy_floor_nats() const override { return std::numeric_limits<double>::quiet_NaN(); }
  const TokenCorpus& corpus() const { return stream_.corpus(); }
  Batch samples(int64_t first, int64_t count, int64_t seq_len) const override {
    if (batcher_.mode() != Batching::PackNaive) return batcher_.samples(first, count, seq_len);
    Batch b = DataSource::samples(first, count, seq_len);
    b.documents = 0;
    for (int64_t i = 0; i < count; ++i) b.documents += batcher_.naive_documents(first + i, seq_len);
    return b;
  }

 protected:
  void fill_sample(int64_t index, int64_t length, int64_t* out) const override { stream_.fill(index, length, out); }

 private:
  std::string kind_;
  DocumentStream stream_;
  DocumentBatcher batcher_;
};
}  // namespace

const TokenCorpus* token_corpus(const DataSource& data) {
  const auto* file = dynamic_cast<const FileData*>(&data);
  return file ? &file->corpus() : nullptr;
}

Batch DataSource::samples(int64_t first, int64_t count, int64_t seq_len) const {
  auto all = at::empty({count, seq_len + 1}, at::kLong);
  auto* p = all.data_ptr<int64_t>();
  for (int64_t i = 0; i < count; ++i) fill_sample(first + i, seq_len + 1, p + i * (seq_len + 1));
  Batch b;
  b.tokens = all.narrow(1, 0, seq_len).contiguous();
  b.targets = all.narrow(1, 1, seq_len).contiguous();
  b.real_tokens = b.label_tokens = count * seq_len;
  b.documents = count;  // synthetic: each row is one sequence
  b.attention_pairs = double(count) * double(seq_len) * double(seq_len);
  return b;
}

int64_t first_sample_index(int64_t step, int64_t accum_index, int64_t grad_accum, int rank, int world,
                           int64_t micro_batch) {
  return ((step * grad_accum + accum_index) * world + rank) * micro_batch;
}

RowStats row_stats(const DataSource& data, const std::vector<int64_t>& steps, int64_t grad_accum, int world,
                   int64_t micro_batch, int64_t seq_len) {
  double real = 0, documents = 0, labels = 0, pairs = 0, slots = 0, widths = 0;
  for (const int64_t step : steps)
    for (int64_t a = 0; a < grad_accum; ++a) {
      int64_t widest = 0;
      for (int r = 0; r < world; ++r) {
        const auto b = data.samples(first_sample_index(step, a, grad_accum, r, world, micro_batch), micro_batch, seq_len);
        real += double(b.real_tokens), documents += double(b.documents), labels += double(b.label_tokens);
        pairs += b.attention_pairs, slots += double(b.tokens.numel());
        widest = std::max<int64_t>(widest, b.tokens.dim() == 2 ? b.tokens.size(1) : seq_len);
      }
      widths += double(widest);
    }
  const double per = std::max(1.0, double(steps.size()) * double(world));
  RowStats s;
  s.real_tokens = real / per;
  s.documents = documents / per;
  s.label_tokens = labels / per;
  s.padding_fraction = slots > 0 ? 1.0 - real / slots : 0.0;
  s.attention_span = real > 0 ? pairs / real : 0.0;
  const double micro_batches = double(steps.size()) * double(grad_accum);
  s.width = micro_batches > 0 ? widths / micro_batches : double(seq_len);
  return s;
}

std::unique_ptr<DataSource> make_data_source(const std::string& kind, int64_t vocab, uint64_t seed,
                                             const std::string& batching) {
  const Batching mode = batching.empty() ? Batching::PackNaive : parse_batching(batching);
  if (kind == "markov" || kind == "random") {
    if (mode != Batching::PackNaive)
      throw UsageError("--batching " + batching + " needs documents: --data " + kind +
                       " is one unbroken sequence a row (give --data megatron:, tokens: or lengths:)");
    if (kind == "markov") return std::make_unique<MarkovData>(vocab, seed);
    return std::make_unique<RandomData>(vocab, seed);
  }
  return std::make_unique<FileData>(parse_data_spec(kind), vocab, seed, mode);  // UsageError for a bad value
}

MarkovData::MarkovData(int64_t vocab, uint64_t seed, int branching, double sharpness)
    : vocab_(vocab), seed_(seed), branching_(int(std::min<int64_t>(branching, vocab))) {
  uint64_t rng = seed * 0x9E3779B97F4A7C15ULL + 17;
  next_.resize(size_t(vocab_ * branching_));
  cumprob_.resize(next_.size());
  std::vector<double> probs(size_t(vocab_ * branching_));
  for (int64_t s = 0; s < vocab_; ++s) {
    double total = 0;
    for (int k = 0; k < branching_; ++k) {
      next_[size_t(s * branching_ + k)] = int64_t(splitmix64(rng) % uint64_t(vocab_));
      // Exponential draws normalise to Dirichlet(1); the power sharpens them (lower entropy).
      double w = std::pow(-std::log(1.0 - uniform01(rng)), sharpness);
      probs[size_t(s * branching_ + k)] = w;
      total += w;
    }
    double cum = 0;
    for (int k = 0; k < branching_; ++k) {
      auto i = size_t(s * branching_ + k);
      probs[i] /= total;
      cum += probs[i];
      cumprob_[i] = cum;
    }
    cumprob_[size_t(s * branching_ + branching_ - 1)] = 1.0;
  }
  // Stationary distribution by power iteration (the chain is random-sparse: irreducible and
  // aperiodic with overwhelming probability; the lazy step guarantees convergence regardless).
  std::vector<double> pi(static_cast<size_t>(vocab_), 1.0 / double(vocab_));
  std::vector<double> nxt(static_cast<size_t>(vocab_), 0.0);
  for (int it = 0; it < 5000; ++it) {
    std::fill(nxt.begin(), nxt.end(), 0.0);
    for (int64_t s = 0; s < vocab_; ++s)
      for (int k = 0; k < branching_; ++k)
        nxt[size_t(next_[size_t(s * branching_ + k)])] += pi[size_t(s)] * probs[size_t(s * branching_ + k)];
    double diff = 0;
    for (int64_t s = 0; s < vocab_; ++s) {
      double v = 0.5 * (pi[size_t(s)] + nxt[size_t(s)]);
      diff += std::abs(v - pi[size_t(s)]);
      pi[size_t(s)] = v;
    }
    if (diff < 1e-13) break;
  }
  stationary_ = pi;
  stationary_cum_.resize(pi.size());
  double cum = 0;
  for (size_t s = 0; s < pi.size(); ++s) stationary_cum_[s] = (cum += pi[s]);
  stationary_cum_.back() = 1.0;
  // Entropy rate H = sum_s pi(s) * H(P(.|s)); duplicate successors merged so H is exact.
  entropy_rate_ = 0;
  for (int64_t s = 0; s < vocab_; ++s) {
    std::vector<std::pair<int64_t, double>> row;
    for (int k = 0; k < branching_; ++k) row.emplace_back(next_[size_t(s * branching_ + k)], probs[size_t(s * branching_ + k)]);
    std::sort(row.begin(), row.end());
    double h = 0, acc = 0;
    for (size_t k = 0; k < row.size(); ++k) {
      acc += row[k].second;
      if (k + 1 == row.size() || row[k + 1].first != row[k].first) {
        if (acc > 0) h -= acc * std::log(acc);
        acc = 0;
      }
    }
    entropy_rate_ += pi[size_t(s)] * h;
  }
}

void MarkovData::fill_sample(int64_t index, int64_t length, int64_t* out) const {
  uint64_t rng = sample_stream(seed_, index);
  int64_t s = pick(stationary_cum_.data(), vocab_, uniform01(rng));
  for (int64_t t = 0; t < length; ++t) {
    out[t] = s;
    s = next_[size_t(s * branching_ + pick(&cumprob_[size_t(s * branching_)], branching_, uniform01(rng)))];
  }
}

double RandomData::entropy_floor_nats() const { return std::log(double(vocab_)); }

void RandomData::fill_sample(int64_t index, int64_t length, int64_t* out) const {
  uint64_t rng = sample_stream(seed_, index);
  for (int64_t t = 0; t < length; ++t) out[t] = int64_t(splitmix64(rng) % uint64_t(vocab_));
}

}  // namespace zb::models
