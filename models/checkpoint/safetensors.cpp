// safetensors.cpp — mapping, validating and writing safetensors files (see safetensors.hpp).
// Validation follows the reference implementation's rules (safetensors/src/tensor.rs,
// Metadata::validate): offsets ascending from 0, contiguous, covering the data section exactly,
// each tensor's size numel * itemsize; header at most 100 MB.
#include "models/checkpoint/safetensors.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>

#include "config/bounded_readers.hpp"
#include "runtime/errors.hpp"

namespace zb::models::checkpoint {

namespace {
using json = nlohmann::json;

constexpr int64_t kMaxHeaderBytes = 100 * 1000 * 1000;

struct DtypeName {
  const char* name;
  at::ScalarType dtype;
};
const DtypeName kDtypes[] = {
    {"BOOL", at::kBool},        {"U8", at::kByte},          {"I8", at::kChar},
    {"I16", at::kShort},        {"U16", at::kUInt16},       {"F16", at::kHalf},
    {"BF16", at::kBFloat16},    {"I32", at::kInt},          {"U32", at::kUInt32},
    {"F32", at::kFloat},        {"F64", at::kDouble},       {"I64", at::kLong},
    {"U64", at::kUInt64},       {"F8_E5M2", at::kFloat8_e5m2}, {"F8_E4M3", at::kFloat8_e4m3fn},
};

bool is_dir(const std::string& p) {
  struct stat st {};
  return stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}
bool is_file(const std::string& p) {
  struct stat st {};
  return stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}
bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}
std::string dirname_of(const std::string& path) {
  const auto slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

void make_dirs(const std::string& dir) {
  std::string cur;
  size_t pos = 0;
  while (pos != std::string::npos) {
    pos = dir.find('/', pos + 1);
    cur = dir.substr(0, pos);
    if (cur.empty() || is_dir(cur)) continue;
    if (mkdir(cur.c_str(), 0755) != 0 && errno != EEXIST)
      throw RunError("cannot create directory " + cur + ": " + std::strerror(errno));
  }
}

void write_all(int fd, const void* data, size_t n, const std::string& path) {
  const auto* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      throw RunError("write " + path + ": " + std::strerror(errno));
    }
    p += w;
    n -= size_t(w);
  }
}

// Writes `path` through `fill(fd, tmp)` into a temp file beside it, fsync, rename: readers see
// the old file or the complete new one.
template <typename Fill>
void write_atomic(const std::string& path, Fill fill) {
  make_dirs(dirname_of(path));
  const std::string tmp = path + ".tmp." + std::to_string(getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw RunError("cannot create " + tmp + ": " + std::strerror(errno));
  try {
    fill(fd, tmp);
    if (fsync(fd) != 0) throw RunError("fsync " + tmp + ": " + std::strerror(errno));
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  ::close(fd);
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    ::unlink(tmp.c_str());
    throw RunError("rename " + tmp + " -> " + path + ": " + std::strerror(errno));
  }
}
}  // namespace

at::ScalarType dtype_from_name(const std::string& name) {
  for (const auto& d : kDtypes)
    if (name == d.name) return d.dtype;
  throw UsageError("safetensors dtype '" + name + "' is not supported");
}

std::string dtype_name(at::ScalarType dtype) {
  for (const auto& d : kDtypes)
    if (dtype == d.dtype) return d.name;
  throw UsageError(std::string("dtype ") + c10::toString(dtype) + " has no safetensors name");
}

int64_t TensorInfo::numel() const {
  int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

// ---- reading ----

struct SafetensorsFile::Mapping {
  std::string path;
  uint8_t* base = nullptr;
  int64_t size = 0;         // file bytes
  int64_t data_offset = 0;  // 8 + header bytes
  std::vector<TensorInfo> tensors;
  std::map<std::string, size_t> index;
  std::map<std::string, std::string> metadata;
  ~Mapping() {
    if (base) munmap(base, size_t(size));
  }
};

SafetensorsFile SafetensorsFile::open(const std::string& path) {
  auto m = std::make_shared<Mapping>();
  m->path = path;
  auto bad = [&](const std::string& what) { return UsageError("safetensors file " + path + ": " + what); };
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw bad(std::string("cannot open: ") + std::strerror(errno));
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw bad("not a regular file");
  }
  m->size = int64_t(st.st_size);
  if (m->size < 8) {
    ::close(fd);
    throw bad("truncated (" + std::to_string(m->size) + " bytes, the 8-byte header size is missing)");
  }
  void* p = mmap(nullptr, size_t(m->size), PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
  ::close(fd);  // the mapping keeps the file
  if (p == MAP_FAILED) throw bad(std::string("mmap failed: ") + std::strerror(errno));
  m->base = static_cast<uint8_t*>(p);

  uint64_t header_size = 0;
  for (int i = 7; i >= 0; --i) header_size = (header_size << 8) | m->base[i];  // little-endian
  if (header_size > uint64_t(kMaxHeaderBytes)) throw bad("header size " + std::to_string(header_size) + " exceeds 100 MB");
  if (int64_t(header_size) > m->size - 8)
    throw bad("header size " + std::to_string(header_size) + " exceeds the file (" + std::to_string(m->size) + " bytes)");
  m->data_offset = 8 + int64_t(header_size);
  // Bounded parse (config/bounded_readers.hpp): the 100 MB size above, nesting depth capped
  // (a tensor entry is 2 levels deep), values capped by the size alone.
  const config::Limits header_limits{kMaxHeaderBytes, config::kMaxNestingDepth, kMaxHeaderBytes};
  const json header = config::parse_json_bounded(reinterpret_cast<const char*>(m->base + 8),
                                                 reinterpret_cast<const char*>(m->base + m->data_offset),
                                                 "safetensors file " + path + ": header: ", header_limits);
  if (!header.is_object()) throw bad("header is not a JSON object");
  const int64_t data_size = m->size - m->data_offset;
  for (const auto& [key, v] : header.items()) {
    if (key == "__metadata__") {
      if (!v.is_object()) throw bad("__metadata__ is not an object");
      for (const auto& [mk, mv] : v.items()) {
        if (!mv.is_string()) throw bad("__metadata__." + mk + " is not a string");
        m->metadata[mk] = mv.get<std::string>();
      }
      continue;
    }
    TensorInfo t;
    t.name = key;
    if (!v.is_object() || !v.contains("dtype") || !v.contains("shape") || !v.contains("data_offsets"))
      throw bad("tensor '" + key + "' needs dtype, shape and data_offsets");
    if (!v["dtype"].is_string()) throw bad("tensor '" + key + "': dtype is not a string");
    try {
      t.dtype = dtype_from_name(v["dtype"].get<std::string>());
    } catch (const UsageError& e) {
      throw bad("tensor '" + key + "': " + e.what());
    }
    if (!v["shape"].is_array()) throw bad("tensor '" + key + "': shape is not an array");
    for (const auto& d : v["shape"]) {
      if (!d.is_number_integer() || d.get<int64_t>() < 0) throw bad("tensor '" + key + "': bad shape " + v["shape"].dump());
      t.shape.push_back(d.get<int64_t>());
    }
    const auto& off = v["data_offsets"];
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_integer() || !off[1].is_number_integer())
      throw bad("tensor '" + key + "': data_offsets must be [begin, end]");
    t.begin = off[0].get<int64_t>();
    t.end = off[1].get<int64_t>();
    if (t.begin < 0 || t.end < t.begin || t.end > data_size)
      throw bad("tensor '" + key + "': data_offsets " + off.dump() + " outside the data section (" +
                std::to_string(data_size) + " bytes)");
    const int64_t want = t.numel() * int64_t(c10::elementSize(t.dtype));
    if (t.nbytes() != want)
      throw bad("tensor '" + key + "': " + std::to_string(t.nbytes()) + " bytes for shape " + v["shape"].dump() + " " +
                v["dtype"].get<std::string>() + " (expected " + std::to_string(want) + ")");
    m->tensors.push_back(std::move(t));
  }
  std::sort(m->tensors.begin(), m->tensors.end(), [](const TensorInfo& a, const TensorInfo& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  int64_t expected = 0;
  for (size_t i = 0; i < m->tensors.size(); ++i) {
    const auto& t = m->tensors[i];
    if (t.begin != expected)
      throw bad("tensor '" + t.name + "' starts at byte " + std::to_string(t.begin) + ", expected " +
                std::to_string(expected) + " (gap or overlap)");
    expected = t.end;
    m->index[t.name] = i;
  }
  if (expected != data_size)
    throw bad("tensors cover " + std::to_string(expected) + " of " + std::to_string(data_size) + " data bytes");
  SafetensorsFile f;
  f.map_ = std::move(m);
  return f;
}

const std::string& SafetensorsFile::path() const { return map_->path; }
const std::vector<TensorInfo>& SafetensorsFile::tensors() const { return map_->tensors; }
const std::map<std::string, std::string>& SafetensorsFile::metadata() const { return map_->metadata; }
int64_t SafetensorsFile::data_size() const { return map_->size - map_->data_offset; }
int64_t SafetensorsFile::file_size() const { return map_->size; }
bool SafetensorsFile::contains(const std::string& name) const { return map_->index.count(name) > 0; }

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> out;
  for (const auto& t : map_->tensors) out.push_back(t.name);
  return out;
}

const TensorInfo& SafetensorsFile::info(const std::string& name) const {
  auto it = map_->index.find(name);
  if (it == map_->index.end()) throw UsageError("safetensors file " + map_->path + ": no tensor '" + name + "'");
  return map_->tensors[it->second];
}

const uint8_t* SafetensorsFile::data_bytes(int64_t offset, int64_t length) const {
  if (offset < 0 || length < 0 || offset + length > data_size())
    throw UsageError("safetensors file " + map_->path + ": byte range [" + std::to_string(offset) + ", " +
                     std::to_string(offset + length) + ") outside the data section (" + std::to_string(data_size()) +
                     " bytes)");
  return map_->base + map_->data_offset + offset;
}

const uint8_t* SafetensorsFile::bytes(const std::string& name, int64_t offset, int64_t length) const {
  const auto& t = info(name);
  if (offset < 0 || length < 0 || offset + length > t.nbytes())
    throw UsageError("safetensors file " + map_->path + ": byte range [" + std::to_string(offset) + ", " +
                     std::to_string(offset + length) + ") outside tensor '" + name + "' (" +
                     std::to_string(t.nbytes()) + " bytes)");
  return data_bytes(t.begin + offset, length);
}

at::Tensor SafetensorsFile::tensor(const std::string& name) const {
  const auto& t = info(name);
  const auto opts = at::TensorOptions().dtype(t.dtype);
  if (t.numel() == 0) return at::empty(t.shape, opts);
  auto* ptr = const_cast<uint8_t*>(data_bytes(t.begin, t.nbytes()));
  if (reinterpret_cast<uintptr_t>(ptr) % c10::elementSize(t.dtype) != 0) {
    auto out = at::empty(t.shape, opts);
    std::memcpy(out.data_ptr(), ptr, size_t(t.nbytes()));
    return out;
  }
  auto keep = map_;  // the mapping lives as long as any view of it
  return at::from_blob(ptr, t.shape, [keep](void*) {}, opts);
}

// ---- writing ----

void write_safetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  struct Entry {
    std::string name;
    at::Tensor data;  // contiguous CPU
  };
  std::vector<Entry> entries;
  std::set<std::string> seen;
  for (const auto& t : tensors) {
    if (t.name.empty() || t.name == "__metadata__")
      throw UsageError("safetensors: invalid tensor name '" + t.name + "'");
    if (!seen.insert(t.name).second) throw UsageError("safetensors: duplicate tensor name '" + t.name + "'");
    if (!t.tensor.defined()) throw UsageError("safetensors: tensor '" + t.name + "' is undefined");
    dtype_name(t.tensor.scalar_type());  // throws for dtypes the format lacks
    entries.push_back({t.name, t.tensor.detach().cpu().contiguous()});
  }
  std::stable_sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    const auto ea = a.data.element_size(), eb = b.data.element_size();
    return ea != eb ? ea > eb : a.name < b.name;
  });
  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  int64_t offset = 0;
  for (const auto& e : entries) {
    const int64_t n = int64_t(e.data.nbytes());
    header[e.name] = {{"dtype", dtype_name(e.data.scalar_type())},
                      {"shape", e.data.sizes().vec()},
                      {"data_offsets", {offset, offset + n}}};
    offset += n;
  }
  std::string text = header.dump();
  text.append((8 - (text.size() % 8)) % 8, ' ');  // data section starts 8-aligned
  uint8_t size_le[8];
  for (int i = 0; i < 8; ++i) size_le[i] = uint8_t((uint64_t(text.size()) >> (8 * i)) & 0xff);

  write_atomic(path, [&](int fd, const std::string& tmp) {
    write_all(fd, size_le, 8, tmp);
    write_all(fd, text.data(), text.size(), tmp);
    for (const auto& e : entries) write_all(fd, e.data.data_ptr(), e.data.nbytes(), tmp);
  });
}

void write_file_atomic(const std::string& path, const std::string& bytes) {
  write_atomic(path, [&](int fd, const std::string& tmp) { write_all(fd, bytes.data(), bytes.size(), tmp); });
}

// ---- checkpoints (one file or an index with shards) ----

SafetensorsCheckpoint SafetensorsCheckpoint::open(const std::string& path_in) {
  std::string path = path_in;
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  SafetensorsCheckpoint c;
  c.shards_ = std::make_shared<std::map<std::string, SafetensorsFile>>();
  std::string index_path, single_path;
  if (is_dir(path)) {
    c.dir_ = path;
    if (is_file(path + "/model.safetensors.index.json")) index_path = path + "/model.safetensors.index.json";
    else if (is_file(path + "/model.safetensors")) single_path = path + "/model.safetensors";
    else throw UsageError("checkpoint " + path + ": neither model.safetensors nor model.safetensors.index.json");
  } else if (ends_with(path, ".json")) {
    c.dir_ = dirname_of(path);
    index_path = path;
  } else {
    c.dir_ = dirname_of(path);
    single_path = path;
  }
  if (!single_path.empty()) {
    auto f = SafetensorsFile::open(single_path);
    const std::string rel = single_path.substr(c.dir_.size() + (c.dir_ == "/" ? 0 : 1));
    for (const auto& t : f.tensors()) c.weight_map_[t.name] = rel;
    c.metadata_ = f.metadata();
    c.shards_->emplace(rel, std::move(f));
    return c;
  }
  c.sharded_ = true;
  // Bounded read and parse (config/bounded_readers.hpp): kMaxModelJsonBytes, depth, values.
  const std::string where = "checkpoint index " + index_path + ": ";
  const config::Limits index_limits{config::kMaxModelJsonBytes, config::kMaxNestingDepth, config::kMaxModelJsonBytes};
  const json index = config::parse_json_bounded(
      config::read_file_bounded(index_path, where, config::kMaxModelJsonBytes), where, index_limits);
  if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object())
    throw UsageError("checkpoint index " + index_path + ": weight_map is missing");
  if (index.contains("metadata") && index["metadata"].is_object())
    for (const auto& [k, v] : index["metadata"].items()) c.metadata_[k] = v.is_string() ? v.get<std::string>() : v.dump();
  for (const auto& [name, file] : index["weight_map"].items()) {
    if (!file.is_string()) throw UsageError("checkpoint index " + index_path + ": weight_map." + name + " is not a string");
    const auto rel = file.get<std::string>();
    if (rel.empty() || rel[0] == '/' || rel.find("..") != std::string::npos)
      throw UsageError("checkpoint index " + index_path + ": shard name '" + rel + "' must be a plain relative path");
    c.weight_map_[name] = rel;
    if (!c.shards_->count(rel)) c.shards_->emplace(rel, SafetensorsFile::open(c.dir_ + "/" + rel));
    if (!c.shards_->at(rel).contains(name))
      throw UsageError("checkpoint index " + index_path + ": '" + name + "' is not in shard " + rel);
  }
  return c;
}

std::vector<std::string> SafetensorsCheckpoint::names() const {
  std::vector<std::string> out;
  for (const auto& kv : weight_map_) out.push_back(kv.first);
  return out;
}

bool SafetensorsCheckpoint::contains(const std::string& name) const { return weight_map_.count(name) > 0; }

const SafetensorsFile& SafetensorsCheckpoint::shard(const std::string& file) const { return shards_->at(file); }

std::string SafetensorsCheckpoint::file_of(const std::string& name) const {
  auto it = weight_map_.find(name);
  if (it == weight_map_.end()) throw UsageError("checkpoint " + dir_ + ": no tensor '" + name + "'");
  return dir_ + "/" + it->second;
}

const TensorInfo& SafetensorsCheckpoint::info(const std::string& name) const {
  auto it = weight_map_.find(name);
  if (it == weight_map_.end()) throw UsageError("checkpoint " + dir_ + ": no tensor '" + name + "'");
  return shard(it->second).info(name);
}

at::Tensor SafetensorsCheckpoint::tensor(const std::string& name) const {
  auto it = weight_map_.find(name);
  if (it == weight_map_.end()) throw UsageError("checkpoint " + dir_ + ": no tensor '" + name + "'");
  return shard(it->second).tensor(name);
}

const std::map<std::string, std::string>& SafetensorsCheckpoint::metadata() const { return metadata_; }

std::vector<std::string> write_checkpoint(const std::string& dir, const std::vector<NamedTensor>& tensors,
                                          int64_t max_shard_bytes, const std::string& prefix,
                                          const std::map<std::string, std::string>& metadata_in) {
  if (max_shard_bytes < 0) throw UsageError("max shard size must be >= 0, got " + std::to_string(max_shard_bytes));
  auto metadata = metadata_in;
  metadata.emplace("format", "pt");  // transformers refuses safetensors files without it
  std::vector<std::vector<NamedTensor>> shards(1);
  int64_t in_shard = 0, total = 0;
  for (const auto& t : tensors) {
    const int64_t n = int64_t(t.tensor.nbytes());
    if (max_shard_bytes > 0 && !shards.back().empty() && in_shard + n > max_shard_bytes) {
      shards.emplace_back();
      in_shard = 0;
    }
    shards.back().push_back(t);
    in_shard += n;
    total += n;
  }
  make_dirs(dir);
  std::vector<std::string> written;
  if (shards.size() == 1) {
    written.push_back(dir + "/" + prefix + ".safetensors");
    write_safetensors(written.back(), shards.front(), metadata);
    return written;
  }
  json weight_map = json::object();
  for (size_t s = 0; s < shards.size(); ++s) {
    char name[64];
    std::snprintf(name, sizeof(name), "-%05zu-of-%05zu.safetensors", s + 1, shards.size());
    const std::string file = prefix + name;
    for (const auto& t : shards[s]) weight_map[t.name] = file;
    written.push_back(dir + "/" + file);
    write_safetensors(written.back(), shards[s], metadata);
  }
  // The index last: a reader that finds it finds every shard complete.
  json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
  const std::string index_path = dir + "/" + prefix + ".safetensors.index.json";
  const std::string text = index.dump(2) + "\n";
  write_file_atomic(index_path, text);
  written.push_back(index_path);
  return written;
}

}  // namespace zb::models::checkpoint
