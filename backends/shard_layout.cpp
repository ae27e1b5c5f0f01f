// shard_layout.cpp — see shard_layout.hpp.
#include "backends/shard_layout.hpp"

#include <nlohmann/json.hpp>

#include <stdexcept>
#include <string>

namespace zb::backends {

std::vector<int> ShardLayout::shard_group(int rank) const {
  std::vector<int> ranks;
  const int block = rank / shard_size;
  for (int i = 0; i < shard_size; ++i) ranks.push_back(block * shard_size + i);
  return ranks;
}

std::vector<int> ShardLayout::replicate_group(int rank) const {
  std::vector<int> ranks;
  const int pos = rank % shard_size;
  for (int b = 0; b < replicate_size(); ++b) ranks.push_back(b * shard_size + pos);
  return ranks;
}

int64_t ShardLayout::shard_numel() const {
  int64_t n = 0;
  for (const int64_t p : unit_padded) n += p / shard_size;
  return n;
}

void check_layout(const ShardLayout& l) {
  auto fail = [](const std::string& what) { throw std::logic_error("shard layout: " + what); };
  if (l.world < 1 || l.ranks_per_node < 1) fail("world " + std::to_string(l.world) + " per node " + std::to_string(l.ranks_per_node));
  if (l.shard_size < 1 || l.world % l.shard_size != 0)
    fail("shard group of " + std::to_string(l.shard_size) + " does not divide the world of " + std::to_string(l.world));
  if (l.unit_numel.size() != l.unit_padded.size()) fail("unit_numel and unit_padded differ in length");
  for (size_t u = 0; u < l.unit_padded.size(); ++u)
    if (l.unit_padded[u] < l.unit_numel[u] || l.unit_padded[u] % l.shard_size != 0)
      fail("unit " + std::to_string(u) + " padded to " + std::to_string(l.unit_padded[u]) + " for " +
           std::to_string(l.unit_numel[u]) + " elements over " + std::to_string(l.shard_size) + " ranks");
}

nlohmann::json to_json(const ShardLayout& l) {
  nlohmann::json padding = nlohmann::json::array();
  for (size_t u = 0; u < l.unit_padded.size(); ++u) padding.push_back(l.unit_padding(int(u)));
  return {{"world", l.world},
          {"ranks_per_node", l.ranks_per_node},
          {"shard_group", {{"size", l.shard_size}, {"ranks", l.shard_group(0)}}},
          {"replicate_group", {{"size", l.replicate_size()}, {"ranks", l.replicate_group(0)}}},
          {"separate_groups", l.separate_groups},
          {"unit_padding", padding}};
}

}  // namespace zb::backends
