// Metric formulas, report schema validation and atomic writes.
#include <gtest/gtest.h>

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>

#include "reports/metrics.hpp"
#include "reports/report.hpp"
#include "runtime/errors.hpp"

using namespace zb::reports;

TEST(Metrics, PercentilesInterpolateLikeNumpy) {
  auto d = summarize({4, 1, 3, 2, 5});
  EXPECT_DOUBLE_EQ(d.median, 3);
  EXPECT_DOUBLE_EQ(d.p10, 1.4);
  EXPECT_DOUBLE_EQ(d.p90, 4.6);
  EXPECT_DOUBLE_EQ(d.min, 1);
  EXPECT_DOUBLE_EQ(d.max, 5);
  EXPECT_EQ(d.n, 5);
  EXPECT_DOUBLE_EQ(summarize({1, 2, 3, 4}).median, 2.5);
}

TEST(Metrics, TokensPerGpuAndBusBandwidth) {
  EXPECT_DOUBLE_EQ(tokens_per_gpu_per_s(32768, 10.4), 32768 / 10.4);
  EXPECT_DOUBLE_EQ(bus_bandwidth_gbps(4000000000, 2.0, 0.75), 1.5);
  EXPECT_DOUBLE_EQ(flops_utilisation(1e9, 1000, 0), 0.0);
}

TEST(Report, FailedReportIsValidAndOkReportNeedsItsSections) {
  auto failed = failed_report("timeout", "rank 1 hung", {{"world_size", 2}});
  EXPECT_TRUE(validate_report(failed).empty());
  auto bogus = failed;
  bogus["status"]["state"] = "ok";  // an ok report must carry env, summary, ranks, steps
  auto problems = validate_report(bogus);
  ASSERT_FALSE(problems.empty());
  EXPECT_NE(problems.front().find("env/device"), std::string::npos) << problems.front();
  bogus = failed;
  bogus["schema"]["version"] = 99;
  EXPECT_FALSE(validate_report(bogus).empty());
  bogus = failed;
  bogus["status"]["state"] = "exploded";
  EXPECT_FALSE(validate_report(bogus).empty());
}

TEST(Report, AtomicWriteIntoADeviceOrPipeWritesItAndALinkKeepsItsLink) {
  // --out /dev/null once renamed a regular file over /dev/null (as root: for every process on the
  // machine). A FIFO stands in for the device here: it must stay a FIFO and receive the text.
  const std::string dir = "/tmp/zb_report_fifo_" + std::to_string(getpid());
  ASSERT_EQ(::mkdir(dir.c_str(), 0755), 0);
  const std::string fifo = dir + "/pipe";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  const int rd = ::open(fifo.c_str(), O_RDONLY | O_NONBLOCK);  // a reader, so the write does not block
  ASSERT_GE(rd, 0);
  write_text_atomic(fifo, "{}\n");
  struct stat st {};
  ASSERT_EQ(::lstat(fifo.c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode)) << "the pipe was replaced by a file";
  char buf[8] = {};
  EXPECT_EQ(::read(rd, buf, sizeof buf), 3);
  EXPECT_EQ(std::string(buf, 3), "{}\n");
  ::close(rd);
  // A link to a report: the report is replaced, the link stays a link.
  const std::string target = dir + "/target.json", link = dir + "/link.json";
  std::ofstream(target) << "old";
  ASSERT_EQ(::symlink(target.c_str(), link.c_str()), 0);
  write_text_atomic(link, "new");
  ASSERT_EQ(::lstat(link.c_str(), &st), 0);
  EXPECT_TRUE(S_ISLNK(st.st_mode)) << "the link was replaced by a file";
  std::ifstream in(target);
  std::string got((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(got, "new");
  for (const auto& f : {fifo, target, link}) std::remove(f.c_str());
  rmdir(dir.c_str());
}

TEST(Report, AtomicWriteLeavesNoTempFileAndReadValidates) {
  const std::string dir = "/tmp/zb_report_" + std::to_string(getpid());
  const std::string path = dir + "/sub/r.json";
  write_json_atomic(path, failed_report("failed", "x", nlohmann::json::object()));
  EXPECT_NO_THROW(read_report(path));
  DIR* d = opendir((dir + "/sub").c_str());
  ASSERT_NE(d, nullptr);
  while (dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    EXPECT_EQ(name, "r.json") << "left behind: " << name;
  }
  closedir(d);
  std::ofstream(path) << "{\"schema\": {\"name\": \"zerobench.rep";  // truncated file
  EXPECT_THROW(read_report(path), zb::UsageError);
  std::remove(path.c_str());
  rmdir((dir + "/sub").c_str());
  rmdir(dir.c_str());
}
