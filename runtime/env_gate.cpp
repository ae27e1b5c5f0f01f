// env_gate.cpp — one CUDA stack per process (see env_gate.hpp).
#include "runtime/env_gate.hpp"

#include <fstream>
#include <set>
#include <sstream>

namespace zb::runtime {

const std::vector<std::string>& cuda_library_families() {
  static const std::vector<std::string> families = {"libcudart.so", "libnccl.so", "libcupti.so"};
  return families;
}

std::map<std::string, std::vector<std::string>> loaded_cuda_libraries(const std::string& maps_text) {
  // A maps line: "address perms offset dev inode pathname"; the path is the sixth field and may
  // hold spaces (anything after the inode). Mapped files are listed resolved (no symlinks).
  std::map<std::string, std::set<std::string>> found;
  std::istringstream in(maps_text);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string addr, perms, offset, dev, inode;
    if (!(fields >> addr >> perms >> offset >> dev >> inode)) continue;
    std::string path;
    std::getline(fields, path);
    const auto first = path.find_first_not_of(' ');
    if (first == std::string::npos) continue;
    path = path.substr(first);
    if (path.empty() || path[0] != '/') continue;  // [heap], [stack], anonymous
    const auto deleted = path.rfind(" (deleted)");
    if (deleted != std::string::npos && deleted + 10 == path.size()) path.resize(deleted);
    const std::string base = path.substr(path.rfind('/') + 1);
    for (const auto& family : cuda_library_families())
      if (base.rfind(family, 0) == 0) found[family].insert(path);
  }
  std::map<std::string, std::vector<std::string>> out;
  for (const auto& family : cuda_library_families()) {
    const auto& files = found[family];
    out[family] = std::vector<std::string>(files.begin(), files.end());
  }
  return out;
}

std::string check_one_cuda_stack(const std::string& maps_text, bool require_each) {
  std::string problems;
  for (const auto& [family, files] : loaded_cuda_libraries(maps_text)) {
    if (files.size() == 1 || (files.empty() && !require_each)) continue;
    if (!problems.empty()) problems += "; ";
    if (files.empty()) {
      problems += "no " + family + "* loaded";
    } else {
      problems += std::to_string(files.size()) + " " + family + "* loaded (";
      for (size_t i = 0; i < files.size(); ++i) problems += (i ? ", " : "") + files[i];
      problems += ")";
    }
  }
  return problems;
}

std::string read_self_maps() {
  std::ifstream f("/proc/self/maps");
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

}  // namespace zb::runtime
