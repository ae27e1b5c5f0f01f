// report.cpp — atomic write, read, failed reports (see report.hpp); validation is the typed
// record's (reports/run_report.cpp).
#include "reports/report.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cerrno>
#include <cstring>
#include <fstream>

#include "reports/report_builder.hpp"  // now_iso8601
#include "reports/run_report.hpp"
#include "runtime/errors.hpp"

namespace zb::reports {

namespace {
using json = nlohmann::json;
}  // namespace

std::vector<std::string> validate_report(const json& r) { return validate_run_report(r); }

// mkdir -p with POSIX calls: libtorch.so exports its own std::filesystem symbols, which
// interpose the C++ runtime's and crash, so the project stays off std::filesystem.
void make_directories(const std::string& dir) {
  for (size_t pos = 1; pos <= dir.size(); ++pos) {
    if (pos == dir.size() || dir[pos] == '/') {
      const std::string prefix = dir.substr(0, pos);
      if (::mkdir(prefix.c_str(), 0755) != 0 && errno != EEXIST)
        throw RunError("cannot create directory " + prefix + ": " + std::strerror(errno));
    }
  }
}

void write_json_atomic(const std::string& path, const json& value) { write_text_atomic(path, value.dump(2) + "\n"); }

void write_text_atomic(const std::string& path_given, const std::string& text) {
  std::string path = path_given;
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
    // Not a regular file (/dev/null, /dev/stdout, a FIFO): write into it. Renaming over it
    // would replace the device node or pipe with a regular file (--out /dev/null as root
    // once turned /dev/null into a file for every process on the machine).
    std::ofstream out(path);
    if (!out) throw RunError("cannot write " + path);
    out << text;
    out.flush();
    if (!out) throw RunError("write to " + path + " failed");
    return;
  }
  // A symbolic link to a regular file: replace the file it names, and keep the link.
  if (::lstat(path.c_str(), &st) == 0 && S_ISLNK(st.st_mode)) {
    if (char* real = ::realpath(path.c_str(), nullptr)) {
      path = real;
      std::free(real);
    }
  }
  const auto slash = path.rfind('/');
  if (slash != std::string::npos && slash > 0) make_directories(path.substr(0, slash));
  const std::string tmp = path + ".tmp." + std::to_string(getpid());
  {
    std::ofstream out(tmp, std::ios::trunc);
    if (!out) throw RunError("cannot write " + tmp);
    out << text;
    out.flush();
    if (!out) throw RunError("write to " + tmp + " failed");
  }
  int fd = ::open(tmp.c_str(), O_RDONLY);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    throw RunError("cannot rename " + tmp + " to " + path);
  }
}

json read_report(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw UsageError("cannot read report " + path);
  json r;
  try {
    in >> r;
  } catch (const std::exception& e) {
    throw UsageError("report " + path + " is not valid JSON: " + e.what());
  }
  auto problems = validate_report(r);
  if (!problems.empty()) throw UsageError("report " + path + " does not match the schema: " + problems.front());
  return r;
}

json failed_report(const std::string& state, const std::string& error, const json& config) {
  return {{"schema", {{"name", kSchemaName}, {"version", kSchemaVersion}}},
          {"run_id", "failed-" + std::to_string(std::chrono::system_clock::now().time_since_epoch().count())},
          {"created", now_iso8601()},
          {"status", {{"state", state}, {"error", error}}},
          {"config", config}};
}

}  // namespace zb::reports
