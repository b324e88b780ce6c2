// Cross-rank report and merge at scale: writes R synthetic rank files of T
// tokens each, then runs `tokentrace report DIR` and `tokentrace merge OUT DIR` as child
// processes and prints, as one markdown table row, their wall time and peak resident memory
// (wait4's ru_maxrss of the child).
//
//   ranks_bench TOKENTRACE_CLI DIR RANKS TOKENS [LAYERS]
//
// Each token of each rank: a root call and, per layer, attn, mlp and mlp.all_reduce (so
// 1 + 3 * LAYERS calls; LAYERS defaults to 4), each but the root with a call_gpu row. Rank 3 (or
// the last) is 5 ms slower at the middle token; the others wait in all_reduce. Files go to
// DIR/rank<r>.sqlite, replaced.
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/launch_meta.h"
#include "store/store.h"

namespace {

using tokentrace::Batch;
using tokentrace::SiteKind;

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

bool WriteRank(const std::string& path, int rank, int ranks, uint32_t tokens, int layers) {
  std::string error;
  auto store = tokentrace::Store::Open(path, &error);
  if (!store) {
    std::fprintf(stderr, "%s\n", error.c_str());
    return false;
  }
  const int64_t offset = 1700000000000000000LL - rank * 1000000000LL;  // another host's clock
  Batch head;
  head.meta = {{tokentrace::kMetaRank, std::to_string(rank)},
               {tokentrace::kMetaHost, "bench"},
               {tokentrace::kMetaLaunchId, "bench"},
               {"pid", std::to_string(rank + 100)},
               {tokentrace::kMetaAnchorStart, tokentrace::FormatAnchor({0, offset})},
               {tokentrace::kMetaAnchorExit, tokentrace::FormatAnchor({1, offset + 1})}};
  head.sites.push_back({1, "self", SiteKind::kRoot, true});
  for (int l = 0; l < layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l);
    head.sites.push_back({2u + 3u * l, p + ".attn", SiteKind::kModule, false});
    head.sites.push_back({3u + 3u * l, p + ".mlp", SiteKind::kModule, false});
    head.sites.push_back({4u + 3u * l, p + ".mlp.all_reduce", SiteKind::kModule, false});
  }
  if (!store->Write(head, &error)) return false;
  const int slow_rank = ranks > 3 ? 3 : ranks - 1;
  uint64_t id = 1;
  Batch b;
  for (uint32_t t = 1; t <= tokens; ++t) {
    const int64_t begin = t * 100000000LL;
    const int64_t extra = t == tokens / 2 ? 5000000 : 0;  // everyone is held up...
    const int64_t mine = rank == slow_rank ? extra : 0;   // ...by the slow rank's work
    const uint64_t root = id++;
    int64_t at = begin;
    for (int l = 0; l < layers; ++l) {
      b.call_gpu.push_back({id, t, 4, 200000, at, at + 250000});  // attn's kernels
      b.calls.push_back({id++, 2u + 3u * l, t, t, root, 0, at, at + 300000});
      at += 300000;
      const int64_t work = 500000 + (l == 0 ? mine : 0);
      const uint64_t mlp = id++;
      const int64_t reduce_end = at + 500000 + (l == 0 ? extra : 0) + 50000;
      b.calls.push_back({mlp, 3u + 3u * l, t, t, root, 0, at, reduce_end});
      b.call_gpu.push_back({mlp, t, 2, 400000, at, at + 450000});
      // NCCL's kernel spans the wait for the slowest rank.
      b.call_gpu.push_back({id, t, 1, reduce_end - at - work, at + work, reduce_end});
      b.calls.push_back({id++, 4u + 3u * l, t, t, mlp, 0, at + work, reduce_end});
      at = reduce_end;
    }
    b.calls.push_back({root, 1, t, t, 0, 0, begin, at});
    if (t % 1000 == 0 || t == tokens) {
      if (!store->Write(b, &error)) {
        std::fprintf(stderr, "%s\n", error.c_str());
        return false;
      }
      b = Batch();
    }
  }
  return true;
}

// Runs argv, output to /dev/null; wall seconds and the child's peak RSS in MiB.
bool Measure(const std::vector<std::string>& argv, double* seconds, double* rss_mib) {
  const double start = Now();
  pid_t pid = fork();
  if (pid == 0) {
    if (!freopen("/dev/null", "w", stdout)) _exit(98);
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(99);
  }
  int status = 0;
  rusage ru{};
  wait4(pid, &status, 0, &ru);
  *seconds = Now() - start;
  *rss_mib = static_cast<double>(ru.ru_maxrss) / 1024.0;
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 5) {
    std::fprintf(stderr, "usage: ranks_bench TOKENTRACE_CLI DIR RANKS TOKENS [LAYERS]\n");
    return 2;
  }
  const std::string cli = argv[1], dir = argv[2];
  const int ranks = std::atoi(argv[3]);
  const uint32_t tokens = static_cast<uint32_t>(std::atoi(argv[4]));
  const int layers = argc > 5 ? std::atoi(argv[5]) : 4;
  mkdir(dir.c_str(), 0755);
  const std::string files = dir + "/ranks";
  mkdir(files.c_str(), 0755);
  double start = Now();
  int64_t bytes = 0;
  for (int r = 0; r < ranks; ++r) {
    const std::string path = files + "/rank" + std::to_string(r) + ".sqlite";
    if (!WriteRank(path, r, ranks, tokens, layers)) return 1;
    struct stat st;
    if (stat(path.c_str(), &st) == 0) bytes += st.st_size;
  }
  const double write_s = Now() - start;
  double report_s = 0, report_mib = 0, merge_s = 0, merge_mib = 0;
  if (!Measure({cli, "report", files}, &report_s, &report_mib)) {
    std::fprintf(stderr, "ranks_bench: report failed\n");
    return 1;
  }
  const std::string merged = dir + "/merged.sqlite";
  if (!Measure({cli, "merge", merged, files}, &merge_s, &merge_mib)) {
    std::fprintf(stderr, "ranks_bench: merge failed\n");
    return 1;
  }
  struct stat st;
  const double merged_mib = stat(merged.c_str(), &st) == 0 ? st.st_size / 1048576.0 : 0;
  const double calls = static_cast<double>(ranks) * tokens * (1 + 3 * layers);
  // | ranks | tokens | calls | input MiB | write s | report s | report peak MiB | merge s |
  // merge peak MiB | merged MiB |
  std::printf("| %d | %u | %.2f M | %.0f | %.1f | %.1f | %.1f | %.1f | %.1f | %.0f |\n", ranks,
              tokens, calls / 1e6, bytes / 1048576.0, write_s, report_s, report_mib, merge_s,
              merge_mib, merged_mib);
  return 0;
}
