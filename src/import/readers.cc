// Which reader a recorded trace takes (readers.h).
#include "import/readers.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string_view>

namespace tokentrace::import {

bool ReadRecorded(const std::string& path, RecordedTrace* out, std::string* error) {
  FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) {
    *error = "cannot open '" + path + "' (" + std::strerror(errno) + ")";
    return false;
  }
  char head[16] = {};
  const size_t n = std::fread(head, 1, sizeof head, f);
  std::fclose(f);
  const bool read = n == sizeof head && std::string_view(head, 15) == "SQLite format 3"
                        ? ReadNsys(path, out, error)
                        : ReadKineto(path, out, error);
  for (auto& [pid, process] : out->processes) process.pid = pid;
  return read;
}

}  // namespace tokentrace::import
