// batching.hpp — how the documents of a token corpus become micro-batches (--batching,
// docs/data.md). Owns: the pad and pack row layouts (documents in the seeded stream order, split
// into pieces of at most --seq-len tokens), position_ids restarting at 0 per document, the
// per-row document ids the block-diagonal causal mask is built from, labels -100 where a position
// has no next token in its document (HF DataCollatorWithFlattening), and each batch's counts
// (real tokens, documents, labels, attention pairs). pack-naive keeps DocumentStream's samples.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "models/data.hpp"
#include "models/token_data.hpp"

namespace zb::models {

// PadLongest: pad's rows, each micro-batch only as wide as its longest row (HF
// DataCollatorWithPadding's padding="longest", its default) instead of --seq-len.
enum class Batching { PackNaive, Pad, Pack, PadLongest };
// "pack-naive", "pad", "pad-longest" or "pack"; UsageError naming any other value.
Batching parse_batching(const std::string& value);
const char* batching_name(Batching b);
// Rows of documents with per-document attention (position_ids, the block-diagonal mask): pad,
// pad-longest and pack; "" and pack-naive are one causal mask a row.
bool per_document_batching(const std::string& value);

class DocumentBatcher {
 public:
  DocumentBatcher(const DocumentStream& stream, Batching mode);
  Batching mode() const { return mode_; }
  // Rows [first, first + count) of this mode's infinite deterministic row stream, seq_len wide.
  Batch samples(int64_t first, int64_t count, int64_t seq_len) const;
  // pack-naive: the documents DocumentStream's sample `index` (seq_len inputs) touches.
  int64_t naive_documents(int64_t index, int64_t seq_len) const;

 private:
  // Pieces of the stream for one seq_len: piece p is chunk p - pieces_before[k] of the k-th
  // document in stream order; pack rows hold pieces [row_start[r], row_start[r + 1]).
  struct Layout {
    std::vector<int64_t> pieces_before;  // [documents + 1]
    std::vector<int64_t> row_start;      // pack only: [rows + 1], the last = pieces
  };
  const Layout& layout(int64_t seq_len) const;
  void piece(const Layout& l, int64_t p, int64_t seq_len, int64_t* doc, int64_t* offset, int64_t* length) const;

  const DocumentStream& stream_;
  Batching mode_;
  std::vector<int64_t> start_;  // start_[k]: stream position of the k-th document; back() = tokens
  mutable std::mutex mutex_;
  mutable std::map<int64_t, std::unique_ptr<Layout>> layouts_;
};

}  // namespace zb::models
