#include "export/chrome_exporter.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "store/store.h"
#include "store/test_db.h"

namespace tokentrace::exporters {
namespace {

// One token: the root call (thread 0) with a module call in it (thread 1) that launched one
// kernel; a memcpy of no call; a range call never closed.
std::string WriteTinyTrace(const std::string& name) {
  const std::string path = testing::TempPath(name);
  std::string error;
  auto store = Store::Open(path, &error);
  EXPECT_NE(store, nullptr) << error;
  Batch b;
  b.sites = {{1, "self", SiteKind::kRoot, true},
             {2, "mlp", SiteKind::kModule, false},
             {3, "range \"q\"", SiteKind::kRange, false}};
  b.strings = {{1, "gemm"}};
  b.calls = {
      {1, 1, 1, 1, 0, 0, 1000, 9000}, {2, 2, 1, 1, 1, 1, 2000, 5000}, {3, 3, 1, 1, 1, 0, 6000, -1}};
  b.kernels = {{2, 1, 1, GpuOpKind::kKernel, 0, 7, 3000, 4500, 11, 0, 0},
               {0, 1, 0, GpuOpKind::kMemcpy, 1, 4, 9000, 12000, 12, 0, 0}};
  EXPECT_TRUE(store->Write(b, &error)) << error;
  store->Close();
  return path;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Exports tokens [first, last] of `trace` onto each of `tracks` in turn, into a new JSON
// file, and returns its text.
std::string Export(const std::string& trace, int64_t origin_ns, const std::vector<Tracks>& tracks,
                   uint32_t first, uint32_t last, EventCounts* counts) {
  const std::string json = testing::TempPath("out.json");
  std::string error;
  auto reader = Reader::Open(trace, &error);
  EXPECT_NE(reader, nullptr) << error;
  auto exporter = MakeChromeExporter();
  EXPECT_TRUE(exporter->Open(json, origin_ns, &error)) << error;
  for (const Tracks& t : tracks) {
    EXPECT_TRUE(exporter->WriteFile(*reader, first, last, t, counts, &error)) << error;
  }
  EXPECT_TRUE(exporter->Finish(&error)) << error;
  return ReadAll(json);
}

TEST(ChromeExporterTest, WritesCallsGpuWorkAndTrackNames) {
  Tracks tracks;
  tracks.pid = 42;
  tracks.gpu_pid_base = 100;
  tracks.process_name = "tokentrace pid 42";
  EventCounts n;
  const std::string text = Export(WriteTinyTrace("tiny.sqlite"), 1000, {tracks}, 0, UINT32_MAX, &n);
  EXPECT_EQ(n.calls, 3);
  EXPECT_EQ(n.gpu, 2);
  EXPECT_EQ(text,
            R"({"displayTimeUnit":"ns","traceEvents":[
{"ph":"X","cat":"call","name":"self","pid":42,"tid":0,"ts":0.000,"dur":8.000,"args":{"site":"self:1","token":1,"call_id":1}},
{"ph":"X","cat":"call","name":"mlp","pid":42,"tid":1,"ts":1.000,"dur":3.000,"args":{"site":"mlp:1","token":1,"call_id":2}},
{"ph":"X","cat":"kernel","name":"gemm","pid":100,"tid":7,"ts":2.000,"dur":1.500,"args":{"site":"mlp:1","token":1,"correlation_id":11}},
{"ph":"X","cat":"memcpy","name":"memcpy","pid":101,"tid":4,"ts":8.000,"dur":3.000,"args":{"site":"","token":1,"correlation_id":12}},
{"ph":"X","cat":"call","name":"range \"q\"","pid":42,"tid":0,"ts":5.000,"dur":6.000,"args":{"site":"range \"q\":1","token":1,"open":true}},
{"ph":"M","name":"process_name","pid":42,"tid":0,"args":{"name":"tokentrace pid 42"}},
{"ph":"M","name":"thread_name","pid":42,"tid":0,"args":{"name":"thread 0"}},
{"ph":"M","name":"thread_name","pid":42,"tid":1,"args":{"name":"thread 1"}},
{"ph":"M","name":"process_name","pid":100,"tid":0,"args":{"name":"GPU 0"}},
{"ph":"M","name":"thread_name","pid":100,"tid":7,"args":{"name":"stream 7"}},
{"ph":"M","name":"process_name","pid":101,"tid":0,"args":{"name":"GPU 1"}},
{"ph":"M","name":"thread_name","pid":101,"tid":4,"args":{"name":"stream 4"}}
]}
)");
}

TEST(ChromeExporterTest, SeveralFilesGoOnTheirOwnTracksOnOneAxis) {
  std::vector<Tracks> ranks(2);
  for (int rank = 0; rank < 2; ++rank) {
    Tracks& tracks = ranks[rank];
    tracks.pid = rank + 1;
    tracks.gpu_pid_base = 1000 + rank * 10;
    tracks.process_name = "rank " + std::to_string(rank);
    tracks.gpu_prefix = "rank " + std::to_string(rank) + " ";
    tracks.shift_ns = rank * 500;  // rank 1's clock read 0.5 us behind
  }
  EventCounts n;
  const std::string text = Export(WriteTinyTrace("rank.sqlite"), 1000, ranks, 1, 1, &n);
  EXPECT_EQ(n.calls, 6);
  EXPECT_EQ(n.gpu, 4);
  EXPECT_NE(text.find(R"("name":"self","pid":1,"tid":0,"ts":0.000,)"), std::string::npos);
  EXPECT_NE(text.find(R"("name":"self","pid":2,"tid":0,"ts":0.500,)"), std::string::npos);
  EXPECT_NE(text.find(R"("pid":1011,"tid":0,"args":{"name":"rank 1 GPU 1"})"), std::string::npos);
  EXPECT_EQ(text.substr(text.size() - 4), "\n]}\n");
}

TEST(ChromeExporterTest, TheTokenRangeIsTheReadersFilter) {
  Tracks tracks;
  tracks.process_name = "p";
  EventCounts n;
  EXPECT_EQ(Export(WriteTinyTrace("none.sqlite"), 0, {tracks}, 2, 5, &n),
            R"({"displayTimeUnit":"ns","traceEvents":[
{"ph":"M","name":"process_name","pid":1,"tid":0,"args":{"name":"p"}}
]}
)");
  EXPECT_EQ(n.calls, 0);
  EXPECT_EQ(n.gpu, 0);
}

TEST(ChromeExporterTest, OutputErrorsAreOneLine) {
  std::string error;
  auto exporter = MakeChromeExporter();
  const std::string missing = testing::TempPath("gone") + "/no/such/dir/t.json";
  EXPECT_FALSE(exporter->Open(missing, 0, &error));
  EXPECT_EQ(error, "tokentrace: cannot write '" + missing + "': No such file or directory");
  // A full disk shows when the buffered output is written out, at Finish.
  auto full = MakeChromeExporter();
  ASSERT_TRUE(full->Open("/dev/full", 0, &error)) << error;
  error.clear();
  EXPECT_FALSE(full->Finish(&error));
  EXPECT_EQ(error, "tokentrace: cannot write '/dev/full': No space left on device");
}

}  // namespace
}  // namespace tokentrace::exporters
