// full_parameters.cpp — see full_parameters.hpp.
#include "backends/common/full_parameters.hpp"

namespace zb::backends::common {

at::Tensor gathered_full(Comm& comm, const at::Tensor& shard, int64_t padded, int64_t numel,
                         const runtime::World* group) {
  auto in = shard.contiguous();
  auto full = at::empty({padded}, in.options());
  comm.all_gather(full, in, "full_parameters", group);
  return unpadded_fp32(full, numel);
}

at::Tensor unpadded_fp32(const at::Tensor& full, int64_t numel) { return full.narrow(0, 0, numel).to(at::kFloat).cpu(); }

}  // namespace zb::backends::common
