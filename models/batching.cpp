// batching.cpp — pad and pack rows of a document stream (see batching.hpp, docs/data.md).
// Conventions, from upstream: HF transformers' DataCollatorWithFlattening (data/data_collator.py)
// gives every document position_ids 0..l-1 and the label -100 at its first token, which after
// the causal-LM shift (loss/loss_utils.py ForCausalLMLoss) leaves a document of l tokens l - 1
// labels and no prediction across a boundary; padding positions carry the label -100.
#include "models/batching.hpp"

#include <algorithm>

#include "runtime/errors.hpp"

namespace zb::models {

Batching parse_batching(const std::string& value) {
  if (value == "pack-naive") return Batching::PackNaive;
  if (value == "pad") return Batching::Pad;
  if (value == "pad-longest") return Batching::PadLongest;
  if (value == "pack") return Batching::Pack;
  throw UsageError("--batching '" + value + "' must be pad, pad-longest, pack or pack-naive");
}

bool per_document_batching(const std::string& value) {
  return value == "pad" || value == "pad-longest" || value == "pack";
}

const char* batching_name(Batching b) {
  switch (b) {
    case Batching::Pad: return "pad";
    case Batching::PadLongest: return "pad-longest";
    case Batching::Pack: return "pack";
    case Batching::PackNaive: break;
  }
  return "pack-naive";
}

DocumentBatcher::DocumentBatcher(const DocumentStream& stream, Batching mode) : stream_(stream), mode_(mode) {
  const auto& order = stream_.order();
  start_.resize(order.size() + 1);
  start_[0] = 0;
  for (size_t k = 0; k < order.size(); ++k) start_[k + 1] = start_[k] + stream_.corpus().document_tokens(order[k]);
}

const DocumentBatcher::Layout& DocumentBatcher::layout(int64_t seq_len) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto& slot = layouts_[seq_len];
  if (slot) return *slot;
  auto l = std::make_unique<Layout>();
  const auto& order = stream_.order();
  l->pieces_before.resize(order.size() + 1);
  l->pieces_before[0] = 0;
  for (size_t k = 0; k < order.size(); ++k) {
    const int64_t n = stream_.corpus().document_tokens(order[k]);
    l->pieces_before[k + 1] = l->pieces_before[k] + (n + seq_len - 1) / seq_len;  // empty documents: no piece
  }
  if (mode_ == Batching::Pack) {
    // Greedy in stream order: a row takes whole pieces while they fit; the next piece that does
    // not fit opens the next row (the rest of the row is padding). Rows restart at each epoch.
    const int64_t pieces = l->pieces_before.back();
    l->row_start.push_back(0);
    int64_t used = 0;
    for (int64_t p = 0; p < pieces; ++p) {
      int64_t doc = 0, offset = 0, length = 0;
      piece(*l, p, seq_len, &doc, &offset, &length);
      if (used + length > seq_len) {
        l->row_start.push_back(p);
        used = 0;
      }
      used += length;
    }
    l->row_start.push_back(pieces);
  }
  slot = std::move(l);
  return *slot;
}

void DocumentBatcher::piece(const Layout& l, int64_t p, int64_t seq_len, int64_t* doc, int64_t* offset,
                            int64_t* length) const {
  const auto& before = l.pieces_before;
  const auto k = size_t(std::upper_bound(before.begin(), before.end(), p) - before.begin() - 1);
  *doc = stream_.order()[k];
  *offset = (p - before[k]) * seq_len;
  *length = std::min(seq_len, stream_.corpus().document_tokens(*doc) - *offset);
}

int64_t DocumentBatcher::naive_documents(int64_t index, int64_t seq_len) const {
  // The documents DocumentStream::fill's inputs [pos, pos + seq_len) touch (empty ones skipped).
  const int64_t tokens = start_.back();
  __extension__ typedef unsigned __int128 u128;
  int64_t pos = int64_t(u128(uint64_t(index)) * uint64_t(seq_len) % uint64_t(tokens)), left = seq_len, n = 0;
  auto k = size_t(std::upper_bound(start_.begin(), start_.end(), pos) - start_.begin() - 1);
  int64_t offset = pos - start_[k];
  while (left > 0) {
    const int64_t take = std::min(start_[k + 1] - start_[k] - offset, left);
    if (take > 0) ++n, left -= take;
    offset = 0;
    k = (k + 1) % (start_.size() - 1);
  }
  return n;
}

Batch DocumentBatcher::samples(int64_t first, int64_t count, int64_t seq_len) const {
  const Layout& l = layout(seq_len);
  const int64_t pieces = l.pieces_before.back();
  const int64_t rows = mode_ == Batching::Pack ? int64_t(l.row_start.size()) - 1 : pieces;
  // pad-longest: the micro-batch is as wide as its longest row (a piece is at most seq_len).
  int64_t T = seq_len;
  if (mode_ == Batching::PadLongest) {
    T = 1;
    for (int64_t i = 0; i < count; ++i) {
      int64_t doc = 0, offset = 0, length = 0;
      piece(l, (first + i) % rows, seq_len, &doc, &offset, &length);
      T = std::max(T, length);
    }
  }
  Batch b;
  b.tokens = at::zeros({count, T}, at::kLong);  // padding: token 0 (never a label, never attended to)
  b.targets = at::full({count, T}, -100, at::kLong);
  b.position_ids = at::zeros({count, T}, at::kLong);
  b.document_ids = at::full({count, T}, -1, at::kLong);
  auto* tok = b.tokens.data_ptr<int64_t>();
  auto* tgt = b.targets.data_ptr<int64_t>();
  auto* pos = b.position_ids.data_ptr<int64_t>();
  auto* ids = b.document_ids.data_ptr<int64_t>();
  for (int64_t i = 0; i < count; ++i) {
    const int64_t r = (first + i) % rows;
    const int64_t p0 = mode_ == Batching::Pack ? l.row_start[size_t(r)] : r;
    const int64_t p1 = mode_ == Batching::Pack ? l.row_start[size_t(r) + 1] : r + 1;
    int64_t cursor = i * T, used = 0;
    for (int64_t p = p0; p < p1; ++p) {
      int64_t doc = 0, offset = 0, length = 0;
      piece(l, p, seq_len, &doc, &offset, &length);
      stream_.corpus().read(doc, offset, length, tok + cursor);
      for (int64_t t = 0; t < length; ++t) {
        pos[cursor + t] = t;
        ids[cursor + t] = p - p0;
        if (t + 1 < length) tgt[cursor + t] = tok[cursor + t + 1];
      }
      b.real_tokens += length;
      b.label_tokens += length - 1;
      b.documents += 1;
      b.attention_pairs += double(length) * double(length);
      cursor += length;
      used += length;
    }
    // Padding: positions 0, 1, ... from the first padded slot; one causal block of its own, so
    // no row of the mask is empty (SDPA would return NaN there) and no document attends to it.
    for (int64_t t = 0; used + t < T; ++t) pos[cursor + t] = t;
  }
  return b;
}

}  // namespace zb::models
