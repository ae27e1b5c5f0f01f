// NVTX ranges a training step emits (checked through the recorder hook, so on any machine):
// step, data, forward/backward, per-unit spans, one range per collective, optimizer step, and
// the "measured" span that nsys --capture-range=nvtx keys on; pushes and pops balance.
#include <gtest/gtest.h>

#include <map>
#include <mutex>

#include "backends/backend_info.hpp"
#include "runtime/nvtx.hpp"
#include "tests/thread_world.hpp"

using namespace zb;

TEST(Nvtx, AnFsdpStepEmitsBalancedRangesForEveryPhaseAndCollective) {
  std::mutex m;
  std::map<std::string, int> kinds;
  std::vector<std::string> names;
  runtime::nvtx::set_recorder([&](const char* kind, const std::string& name, uint64_t) {
    std::lock_guard<std::mutex> lock(m);
    ++kinds[kind];
    if (std::string(kind) == "push" || std::string(kind) == "start") names.push_back(name);
  });
  auto spec = test_support::small_spec(1);
  spec.precision = "fp32";
  spec.train.steps = 2;
  spec.train.warmup = 1;
  test_support::run_ranks(2, [&](runtime::World& world) {
    auto engine = backends::create_engine("fsdp", spec, world);
    auto data = models::make_data_source("random", spec.model.vocab, 1);
    backends::common::Comm side(world.side_channel());
    bench::run_training(*engine, spec, *data, side);
  });
  runtime::nvtx::set_recorder(nullptr);
  EXPECT_EQ(kinds["push"], kinds["pop"]);
  EXPECT_EQ(kinds["start"], kinds["end"]);
  for (const char* expected : {"step 0", "step 1", "data", "forward", "backward", "optimizer_step", "measured",
                               "forward unit0", "forward unit2", "backward unit1", "all_gather unit1",
                               "reduce_scatter unit2", "all_reduce grad_norm"})
    EXPECT_NE(std::find(names.begin(), names.end(), expected), names.end()) << expected << " not emitted";
}
