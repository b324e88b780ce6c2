// Recorded traces (src/import): the replay of a hand-built process through the joiner and the
// store (nesting at shared boundaries, a range that outlives the one below it, launches
// outside every range, a graph launch fanning out, a record whose launch is not in the trace,
// tokens), and the two readers on small files made here, with their one-line errors.
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <zlib.h>

#include <fstream>
#include <string>
#include <tuple>

#include "../store/test_db.h"
#include "import/readers.h"
#include "import/replay.h"
#include "store/store.h"

namespace tokentrace::import {
namespace {

using testing::QueryInt;
using testing::QueryText;
using testing::Rows;
using testing::TempPath;

RecordedRange Range(uint64_t thread, int64_t begin, int64_t end, const char* name,
                    SiteKind kind = SiteKind::kModule) {
  return RecordedRange{thread, begin, end, name, kind};
}
RecordedGpu Kernel(uint64_t correlation, int64_t begin, const char* name = "gemm") {
  RecordedGpu r;
  r.name = name;
  GpuActivity& g = r.activity;
  g.correlation_id = correlation;
  g.begin_ns = begin;
  g.end_ns = begin + 10;
  g.stream = 7;
  return r;
}

// Each kernel's launch, and the site of the call it was attributed to ("-": none).
constexpr char kAttribution[] =
    "SELECT k.correlation_id, s.name FROM kernels k LEFT JOIN calls c ON c.id = k.call_id "
    "LEFT JOIN sites s ON s.id = c.site_id ORDER BY k.correlation_id, k.gpu_begin_ns";

ImportOptions Full(size_t drain_items = 1 << 16) {
  ImportOptions options;
  options.mode.kind = KernelMode::kFull;
  options.source = "test";
  options.format = "test";
  options.drain_items = drain_items;
  return options;
}

std::string Import(const RecordedProcess& p, ImportCounts* counts,
                   const ImportOptions& options = Full()) {
  const std::string path = TempPath("import.sqlite");
  std::string error;
  auto store = Store::Open(path, &error);
  EXPECT_NE(store, nullptr) << error;
  EXPECT_TRUE(ImportProcess(p, options, store.get(), counts, &error)) << error;
  store->Close();
  return path;
}

RecordedProcess Hand() {
  RecordedProcess p;
  p.pid = 42;
  p.ranges = {Range(1, 100, 1000, "Model_0"),  Range(1, 200, 400, "Linear_0"),
              Range(1, 400, 600, "Linear_1"),  // begins as its sibling ends
              Range(1, 620, 900, "Attn_0"),    Range(1, 800, 950, "Proj_0"),  // Proj outlives Attn
              Range(1, 2000, 3000, "Model_0"), Range(2, 0, 5000, "loader", SiteKind::kRange)};
  // (thread, begin, correlation, graph); 10: a launch whose records never came
  for (auto [thread, begin, correlation, graph] : {std::tuple{1, 150, 1, false},
                                                   {1, 200, 2, false},
                                                   {1, 400, 3, false},
                                                   {1, 1000, 4, false},
                                                   {1, 1100, 5, false},
                                                   {1, 700, 6, true},
                                                   {1, 850, 7, false},
                                                   {1, 2500, 8, false},
                                                   {2, 300, 9, false},
                                                   {1, 2600, 10, false}}) {
    RecordedLaunch l;
    l.thread = static_cast<uint64_t>(thread);
    l.begin_ns = begin;
    l.correlation = static_cast<uint64_t>(correlation);
    l.graph = graph;
    l.api = graph ? "cudaGraphLaunch" : "cudaLaunchKernel";
    p.launches.push_back(l);
  }
  for (uint64_t c = 1; c <= 9; ++c) p.gpu.push_back(Kernel(c, 5000 + 10 * c));
  p.gpu.push_back(Kernel(6, 5200));  // the graph's other two records
  p.gpu.push_back(Kernel(6, 5300));
  p.gpu.push_back(Kernel(99, 10));  // launched before the trace began
  return p;
}

TEST(ImportTest, EachRecordGoesToTheInnermostRangeOpenAtItsLaunch) {
  ImportCounts counts;
  const std::string path = Import(Hand(), &counts);
  EXPECT_EQ(Rows(path, kAttribution, "-"),
            "1|Model_0\n2|Linear_0\n3|Linear_1\n4|Model_0\n5|-\n6|Attn_0\n6|Attn_0\n6|Attn_0\n"
            "7|Proj_0\n8|Model_0\n9|loader\n99|-\n");
  EXPECT_EQ(QueryInt(path, "SELECT count FROM losses WHERE kind = 'unknown_correlation'"), 1);
  EXPECT_EQ(QueryInt(path, "SELECT count FROM losses WHERE kind = 'import_outside_ranges'"), 1);
  EXPECT_EQ(counts.no_launch, 1u);
  EXPECT_EQ(counts.outside_ranges, 1u);
  EXPECT_EQ(counts.records, 12u);
  EXPECT_EQ(counts.calls, 7u);
  EXPECT_EQ(counts.launches, 9u);  // the launch without records is not one
}

TEST(ImportTest, CallsNestAsTheirRangesAndTheRootsCallsAreTokens) {
  ImportCounts counts;
  const std::string path = Import(Hand(), &counts);
  EXPECT_EQ(counts.root, "Model_0");
  EXPECT_EQ(counts.tokens, 2u);
  EXPECT_EQ(Rows(path,
                 "SELECT s.name, s.kind, c.k, c.token, coalesce(p.name, '-'), c.thread, "
                 "c.cpu_begin_ns, c.cpu_end_ns FROM calls c JOIN sites s ON s.id = c.site_id "
                 "LEFT JOIN calls pc ON pc.id = c.parent_id LEFT JOIN sites p ON p.id = pc.site_id "
                 "ORDER BY c.cpu_begin_ns"),
            "loader|range|1|0|-|2|0|5000\n"
            "Model_0|root|1|1|-|1|100|1000\n"
            "Linear_0|module|1|1|Model_0|1|200|400\n"
            "Linear_1|module|1|1|Model_0|1|400|600\n"
            "Attn_0|module|1|1|Model_0|1|620|900\n"
            "Proj_0|module|1|1|Model_0|1|800|950\n"
            "Model_0|root|2|2|-|1|2000|3000\n");
  EXPECT_EQ(QueryText(path, "SELECT value FROM meta WHERE key = 'pid'"), "42");
  EXPECT_EQ(QueryText(path, "SELECT value FROM meta WHERE key = 'mode'"), "import");
  // The summaries agree with the rows (the writer's, as for a live run).
  // Token 1: all but token 2's and the loader's (its call began before token 1).
  EXPECT_EQ(QueryInt(path, "SELECT kernels FROM token_stats WHERE token = 1"), 9);
  EXPECT_EQ(QueryInt(path,
                     "SELECT sum(kernels) FROM site_stats s JOIN sites n ON n.id = "
                     "s.site_id WHERE n.name = 'Model_0'"),
            3);
}

// --root names the ranges whose calls are tokens: here the loader's annotation, so every call
// on either thread is in its one token.
TEST(ImportTest, TheRootCanBeNamed) {
  ImportOptions options = Full();
  options.root = "loader";
  ImportCounts counts;
  const std::string path = Import(Hand(), &counts, options);
  EXPECT_EQ(counts.root, "loader");
  EXPECT_EQ(counts.tokens, 1u);
  EXPECT_EQ(Rows(path, "SELECT DISTINCT token FROM calls"), "1\n");
  EXPECT_EQ(QueryText(path, "SELECT kind FROM sites WHERE name = 'Model_0'"), "module");
  EXPECT_EQ(QueryText(path, "SELECT value FROM meta WHERE key = 'root'"), "loader (--root)");
}

TEST(ImportTest, SmallDrainsJoinTheSameAsOne) {
  ImportCounts one, many;
  const std::string whole = Import(Hand(), &one);
  const std::string drained = Import(Hand(), &many, Full(/*drain_items=*/2));
  EXPECT_EQ(Rows(whole, kAttribution), Rows(drained, kAttribution));
  EXPECT_EQ(Rows(whole, "SELECT token, kernels, calls FROM token_stats ORDER BY 1"),
            Rows(drained, "SELECT token, kernels, calls FROM token_stats ORDER BY 1"));
}

std::string Write(const std::string& name, const std::string& text, bool gzip = false) {
  const std::string path = TempPath(name);
  if (gzip) {
    gzFile f = gzopen(path.c_str(), "wb");
    gzwrite(f, text.data(), static_cast<unsigned>(text.size()));
    gzclose(f);
  } else {
    std::ofstream(path) << text;
  }
  return path;
}

constexpr char kKineto[] = R"json({"traceEvents": [
  {"ph": "X", "cat": "python_function", "name": "nn.Module: Net_0", "pid": 5, "tid": 5,
   "ts": 10.5, "dur": 100},
  {"ph": "X", "cat": "python_function", "name": "torch/nn/functional.py(1): relu", "pid": 5,
   "tid": 5, "ts": 11, "dur": 1},
  {"ph": "X", "cat": "user_annotation", "name": "step", "pid": 5, "tid": 5, "ts": 10, "dur": 200},
  {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 5, "tid": 5, "ts": 12, "dur": 3},
  {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 5, "tid": 5,
   "ts": 12.0015, "dur": 2, "args": {"correlation": 77}},
  {"ph": "X", "cat": "cuda_driver", "name": "cuGraphLaunch", "pid": 5, "tid": 5,
   "ts": 20, "dur": 2, "args": {"correlation": 78}},
  {"ph": "X", "cat": "kernel", "name": "mm_kernel", "pid": 0, "tid": 7, "ts": 30, "dur": 5,
   "args": {"correlation": 77, "device": 0, "stream": 7}},
  {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoH (Device -> Pageable)", "pid": 0,
   "tid": 7, "ts": 40, "dur": 5, "args": {"correlation": 78, "device": 0, "stream": 7,
   "bytes": 64}},
  {"ph": "i", "cat": "kernel", "name": "not a complete event", "pid": 0, "tid": 7, "ts": 1}
]})json";

TEST(KinetoTest, ReadsRangesLaunchesAndRecordsPlainOrGzipped) {
  for (bool gzip : {false, true}) {
    RecordedTrace t;
    std::string error;
    ASSERT_TRUE(ReadRecorded(Write("t.json", kKineto, gzip), &t, &error)) << error;
    EXPECT_EQ(t.format, "torch.profiler");
    ASSERT_EQ(t.processes.size(), 1u);
    const RecordedProcess& p = t.processes.at(5);
    EXPECT_EQ(p.pid, 5);
    ASSERT_EQ(p.ranges.size(), 2u);  // the module and the annotation; not relu, not aten::mm
    EXPECT_EQ(p.ranges[0].name, "Net_0");
    EXPECT_EQ(p.ranges[0].kind, SiteKind::kModule);
    EXPECT_EQ(p.ranges[0].begin_ns, 10500);
    EXPECT_EQ(p.ranges[0].end_ns, 110500);
    EXPECT_EQ(p.ranges[1].kind, SiteKind::kRange);
    ASSERT_EQ(p.launches.size(), 2u);
    EXPECT_EQ(p.launches[0].begin_ns, 12002);  // to the nearest ns
    EXPECT_FALSE(p.launches[0].graph);
    EXPECT_TRUE(p.launches[1].graph);
    ASSERT_EQ(p.gpu.size(), 2u);
    EXPECT_EQ(p.gpu[0].name, "mm_kernel");
    EXPECT_EQ(p.gpu[0].activity.stream, 7u);
    EXPECT_EQ(p.gpu[1].activity.kind, GpuOpKind::kMemcpy);
    EXPECT_EQ(p.gpu[1].activity.copy_kind, 2);
    EXPECT_EQ(p.gpu[1].activity.bytes, 64u);
  }
}

// Bad input: one line naming the file and what was expected.
void ExpectRefused(const std::string& path, const std::string& says) {
  RecordedTrace t;
  std::string error;
  EXPECT_FALSE(ReadRecorded(path, &t, &error));
  EXPECT_NE(error.find(path), std::string::npos) << error;
  EXPECT_NE(error.find(says), std::string::npos) << error;
  EXPECT_EQ(error.find('\n'), std::string::npos) << error;
}

TEST(KinetoTest, BadFilesAreOneLineErrors) {
  ExpectRefused(TempPath("missing.json"), "cannot open");
  ExpectRefused(Write("text.json", "ph,cat,name\n1,2,3\n"), "not JSON");
  ExpectRefused(Write("half.json", std::string(kKineto).substr(0, 300)), "not JSON");
  ExpectRefused(Write("other.json", R"({"nodes": []})"), "no traceEvents");
  ExpectRefused(Write("cpu.json", R"({"traceEvents": [{"ph": "X", "cat": "cpu_op",
    "name": "aten::mm", "pid": 1, "tid": 1, "ts": 1, "dur": 1}]})"),
                "has no GPU records");
  // A gzip cut short.
  std::string whole;
  {
    const std::string path = Write("whole.json.gz", std::string(kKineto) + std::string(20000, ' '),
                                   /*gzip=*/true);
    std::ifstream in(path, std::ios::binary);
    whole.assign(std::istreambuf_iterator<char>(in), {});
  }
  ExpectRefused(Write("cut.json.gz", whole.substr(0, whole.size() / 2)), "truncated");
}

void Exec(sqlite3* db, const std::string& sql) {
  char* msg = nullptr;
  ASSERT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &msg), SQLITE_OK) << msg;
}

TEST(NsysTest, ReadsEachProcessWithItsNamesFromStringIds) {
  const std::string path = TempPath("n.sqlite");
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  const int64_t p1 = (int64_t{111} << 24) | 7, p2 = (int64_t{112} << 24) | 9;
  Exec(db,
       "CREATE TABLE StringIds(id INTEGER PRIMARY KEY, value TEXT);"
       "INSERT INTO StringIds VALUES (1, 'cudaLaunchKernel'), (2, 'gemm<float>'),"
       "  (3, 'aten::mm, seq = 12, op_id = 34, sizes = [[2, 3], [3, 4]]'),"
       "  (4, 'cudaGraphLaunch_v10000');"
       "CREATE TABLE NVTX_EVENTS(start INTEGER, end INTEGER, eventType INTEGER, text TEXT,"
       "  globalTid INTEGER, textId INTEGER);"
       "CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME(start INTEGER, end INTEGER, globalTid INTEGER,"
       "  correlationId INTEGER, nameId INTEGER);"
       "CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL(start INTEGER, end INTEGER, deviceId INTEGER,"
       "  streamId INTEGER, correlationId INTEGER, globalPid INTEGER, demangledName INTEGER,"
       "  graphId INTEGER, graphNodeId INTEGER);"
       "CREATE TABLE CUPTI_ACTIVITY_KIND_MEMSET(start INTEGER, end INTEGER, deviceId INTEGER,"
       "  streamId INTEGER, correlationId INTEGER, globalPid INTEGER, bytes INTEGER);");
  Exec(db, "INSERT INTO NVTX_EVENTS VALUES (10, 90, 59, 'layer', " + std::to_string(p1) +
               ", NULL), (10, 90, 59, NULL, " + std::to_string(p2) + ", 3), (5, NULL, 34, " +
               "'a mark', " + std::to_string(p1) +
               ", NULL);"
               "INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (20, 25, " +
               std::to_string(p1) + ", 1, 1), (20, 25, " + std::to_string(p2) + ", 1, 4);" +
               "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (30, 40, 0, 7, 1, " +
               std::to_string(p1) + ", 2, 0, 0), (30, 40, 1, 7, 1, " + std::to_string(p2) +
               ", 2, 3, 55);" + "INSERT INTO CUPTI_ACTIVITY_KIND_MEMSET VALUES (50, 60, 0, 7, 9, " +
               std::to_string(p1) + ", 16);");
  sqlite3_close(db);
  RecordedTrace t;
  std::string error;
  ASSERT_TRUE(ReadRecorded(path, &t, &error)) << error;
  EXPECT_EQ(t.format, "nsys");
  ASSERT_EQ(t.processes.size(), 2u);
  const RecordedProcess &a = t.processes.at(111), &b = t.processes.at(112);
  ASSERT_EQ(a.ranges.size(), 1u);  // the mark is no range
  EXPECT_EQ(a.ranges[0].name, "layer");
  EXPECT_EQ(a.ranges[0].thread, 7u);
  EXPECT_EQ(b.ranges[0].name, "aten::mm");  // emit_nvtx's annotations cut
  EXPECT_FALSE(a.launches[0].graph);
  EXPECT_TRUE(b.launches[0].graph);
  ASSERT_EQ(a.gpu.size(), 2u);
  EXPECT_EQ(a.gpu[0].name, "gemm<float>");
  EXPECT_EQ(a.gpu[1].activity.kind, GpuOpKind::kMemset);
  EXPECT_EQ(a.gpu[1].activity.bytes, 16u);
  EXPECT_EQ(b.gpu[0].activity.graph_id, 3u);
  EXPECT_EQ(b.gpu[0].activity.graph_node_id, 55u);
  EXPECT_EQ(b.gpu[0].activity.device, 1u);
}

TEST(NsysTest, ASqliteFileThatIsNoExportIsRefused) {
  const std::string path = TempPath("other.sqlite");
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  Exec(db, "CREATE TABLE calls(id INTEGER)");
  sqlite3_close(db);
  ExpectRefused(path, "no Nsight Systems export");
}

// The shared real traces: each reads, and a graph launch's fan-out stays with its launch.
TEST(RealTracesTest, TheV100GraphLaunchesFanOutUnderTheirLaunchesRanges) {
  RecordedTrace t;
  std::string error;
  ASSERT_TRUE(ReadRecorded(std::string(TOKENTRACE_GPU_TRACES) + "/v100-cuda-graph-launches.json.gz",
                           &t, &error))
      << error;
  ASSERT_EQ(t.processes.size(), 1u);
  ImportCounts counts;
  const std::string path = Import(t.processes.begin()->second, &counts);
  // 12 graph launches, each of 339 or 502 records, every record attributed as its launch (the
  // 502-record ones are launched by a thread with no range open: no call).
  EXPECT_EQ(Rows(path,
                 "SELECT n, count(*) FROM (SELECT correlation_id, count(*) n, count(DISTINCT "
                 "coalesce(call_id, 0)) calls FROM kernels GROUP BY correlation_id "
                 "HAVING n > 1 AND calls = 1) "
                 "GROUP BY n ORDER BY n"),
            "339|6\n502|6\n");
  EXPECT_EQ(QueryInt(path, "SELECT count FROM losses WHERE kind = 'unknown_graph_node'"), -1000);
}

}  // namespace
}  // namespace tokentrace::import
