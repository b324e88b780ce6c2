#include "core/comm_kernels.h"

#include <cctype>

namespace tokentrace {
namespace {

constexpr std::string_view kNcclPrefixes[] = {"ncclDevKernel_", "ncclKernel_", "ncclSymkDevKernel_",
                                              "ncclSymDevKernel_"};

// The identifier that names the function: "_Z<len><id>..." (a mangled free function) gives
// <id>; anything else (a demangled name, "void f(...)" with its return type) the text up to
// the first '(' or '<' after an optional "void ".
std::string_view FunctionIdentifier(std::string_view name) {
  if (name.starts_with("_Z") && name.size() > 2 &&
      std::isdigit(static_cast<unsigned char>(name[2]))) {
    size_t i = 2, len = 0;
    while (i < name.size() && std::isdigit(static_cast<unsigned char>(name[i]))) {
      len = len * 10 + static_cast<size_t>(name[i] - '0');
      if (len > name.size()) return {};
      ++i;
    }
    return name.substr(i, len);
  }
  if (name.starts_with("void ")) name.remove_prefix(5);
  return name.substr(0, name.find_first_of("(<"));
}

// oneRankReduce is in an anonymous namespace, so its mangled name is nested, and NCCL's
// relocatable device code renames such internal kernels with a "__nv_static_<n>__<file>_"
// prefix: "__nv_static_32__b4148644_10_onerank_cu_fdf47990__ZN43_GLOBAL__N__b4148644_10_
// onerank_cu_fdf4799013oneRankReduceI13FuncPreMulSumIfEEEvPvS3_mmb" (libnccl 2.28.9), or the
// same without the prefix. Demangled: "(anonymous namespace)::oneRankReduce<...>(...)".
bool IsOneRankReduce(std::string_view name) {
  if (name.find("13oneRankReduceI") != std::string_view::npos) return true;  // mangled
  const size_t at = name.find("oneRankReduce<");
  return at != std::string_view::npos && (at == 0 || name[at - 1] == ':' || name[at - 1] == ' ');
}

}  // namespace

bool IsCommKernel(std::string_view name) {
  const std::string_view id = FunctionIdentifier(name);
  for (std::string_view p : kNcclPrefixes) {
    if (id.starts_with(p)) return true;
  }
  return IsOneRankReduce(name);
}

bool IsCollectiveSite(std::string_view name) {
  static const char* const kNames[] = {"all_reduce",     "allreduce",  "all_gather", "allgather",
                                       "reduce_scatter", "all_to_all", "alltoall",   "broadcast",
                                       "barrier",        "nccl",       "c10d"};
  std::string lower(name);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (const char* n : kNames) {
    if (lower.find(n) != std::string::npos) return true;
  }
  return false;
}

}  // namespace tokentrace
