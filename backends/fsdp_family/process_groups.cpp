// process_groups.cpp — see process_groups.hpp.
#include "backends/fsdp_family/process_groups.hpp"

#include <stdexcept>

namespace zb::backends::fsdp_family {

ShardGroups shard_groups(const runtime::World& world, const ShardLayout& layout, const std::string& prefix) {
  if (layout.world != world.size)
    throw std::logic_error(prefix + ": shard layout for a world of " + std::to_string(layout.world) + ", not " +
                           std::to_string(world.size));
  ShardGroups g;
  if (!layout.separate_groups) {
    g.shard = world;
    return g;
  }
  g.shard = world.subgroup(prefix + "_shard", layout.shard_group(world.rank));
  g.replicate = world.subgroup(prefix + "_replicate", layout.replicate_group(world.rank));
  return g;
}

}  // namespace zb::backends::fsdp_family
