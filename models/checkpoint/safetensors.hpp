// safetensors.hpp — the safetensors file format (huggingface/safetensors, docs "Format"): read
// by mapping the file (tensors are views of the mapped bytes, never a whole-file copy), write
// atomically from named tensors, and the sharded form HF checkpoints use
// (`model.safetensors.index.json` + `model-0000k-of-0000n.safetensors`).
// Owns: the byte layout (u64 little-endian header size, JSON header with dtype/shape/
// data_offsets and an optional "__metadata__" string map, then the data), its validation, the
// dtype names. Must not: know model tensor names (hf_llama.hpp does) or use std::filesystem
// (libtorch.so exports a broken copy of it; POSIX calls only).
#pragma once
#include <ATen/ATen.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace zb::models::checkpoint {

// "F32", "BF16", "I64", ... <-> ATen dtypes. Throws UsageError for a name or dtype safetensors lacks.
at::ScalarType dtype_from_name(const std::string& name);
std::string dtype_name(at::ScalarType dtype);

// One tensor's entry in a header. Offsets are bytes relative to the start of the data section.
struct TensorInfo {
  std::string name;
  at::ScalarType dtype = at::kFloat;
  std::vector<int64_t> shape;
  int64_t begin = 0, end = 0;
  int64_t numel() const;
  int64_t nbytes() const { return end - begin; }
};

// A safetensors file mapped read-only into memory (MAP_PRIVATE: writing to a returned tensor
// copies that page for this process and never changes the file). Cheap to copy: copies share
// the mapping, which lives until the last copy and the last tensor view are gone.
class SafetensorsFile {
 public:
  // Maps and validates `path`; throws UsageError naming the file and the first problem
  // (truncated, header not JSON, unknown dtype, size not numel*itemsize, overlapping or
  // out-of-range offsets, data not fully covered).
  static SafetensorsFile open(const std::string& path);

  const std::string& path() const;
  // Entries in data order (ascending offsets).
  const std::vector<TensorInfo>& tensors() const;
  std::vector<std::string> names() const;
  bool contains(const std::string& name) const;
  const TensorInfo& info(const std::string& name) const;  // throws UsageError if absent
  const std::map<std::string, std::string>& metadata() const;

  // A CPU tensor over the mapped bytes (no copy), shaped and typed as the header says. If the
  // data are not aligned to the element size (legal in the format, never produced by the
  // reference writer) the tensor is a copy instead.
  at::Tensor tensor(const std::string& name) const;
  // Bytes [offset, offset + length) of one tensor's data; throws UsageError when out of range.
  const uint8_t* bytes(const std::string& name, int64_t offset, int64_t length) const;
  // Bytes [offset, offset + length) of the data section (e.g. a shard-sized read of a large file).
  const uint8_t* data_bytes(int64_t offset, int64_t length) const;
  int64_t data_size() const;
  int64_t file_size() const;

 private:
  struct Mapping;
  std::shared_ptr<Mapping> map_;
};

struct NamedTensor {
  std::string name;
  at::Tensor tensor;  // any device/layout; written as its contiguous CPU bytes
};

// Writes `path` atomically (temp file in the same directory, fsync, rename): either the old
// file or the complete new one exists. Tensors are laid out by element size (largest first)
// then name, as the Python writer does, so every tensor is aligned to its element size.
// Throws UsageError for duplicate/empty names or "__metadata__"; RunError on I/O failure.
void write_safetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

// Writes `bytes` to `path` atomically (temp file beside it, fsync, rename); creates parent dirs.
void write_file_atomic(const std::string& path, const std::string& bytes);

// A checkpoint directory (or one file): `model.safetensors`, or `model.safetensors.index.json`
// whose weight_map names the shard holding each tensor. Shards are mapped on first use.
class SafetensorsCheckpoint {
 public:
  // `path`: a .safetensors file, an index .json, or a directory holding model.safetensors or
  // model.safetensors.index.json. Throws UsageError naming what is missing or inconsistent.
  static SafetensorsCheckpoint open(const std::string& path);

  std::vector<std::string> names() const;  // sorted
  bool contains(const std::string& name) const;
  const TensorInfo& info(const std::string& name) const;
  at::Tensor tensor(const std::string& name) const;  // view of the mapped shard
  std::string file_of(const std::string& name) const;  // path of the shard holding it
  const std::map<std::string, std::string>& metadata() const;  // the index's "metadata" (strings) or the file's
  bool sharded() const { return sharded_; }

 private:
  const SafetensorsFile& shard(const std::string& file) const;
  std::string dir_;
  bool sharded_ = false;
  std::map<std::string, std::string> weight_map_;  // tensor -> shard file name (relative)
  std::map<std::string, std::string> metadata_;
  std::shared_ptr<std::map<std::string, SafetensorsFile>> shards_;
};

// Writes `tensors` into directory `dir` as HF's save_pretrained lays them out: one
// `<prefix>.safetensors` if they fit in `max_shard_bytes` (0 = no limit), else
// `<prefix>-0000k-of-0000n.safetensors` shards (tensors in the given order, a new shard when
// the next tensor would overflow) plus `<prefix>.safetensors.index.json` with
// metadata.total_size and weight_map; the index is written last. Returns the files written.
std::vector<std::string> write_checkpoint(const std::string& dir, const std::vector<NamedTensor>& tensors,
                                          int64_t max_shard_bytes = 0, const std::string& prefix = "model",
                                          const std::map<std::string, std::string>& metadata = {});

}  // namespace zb::models::checkpoint
