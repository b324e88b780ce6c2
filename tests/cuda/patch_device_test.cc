// Device semantics of the patch table: the same scenarios as the host test, run through
// ApplyPatchesDevice, must give the host's bytes exactly; a captured CUDA graph must fire at the
// right replay. Skips cleanly without a device (ctest label `gpu`).
#include "cuda/patch_device.h"

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include "patch_cases.h"
#include "patch_test_util.h"

namespace tokentrace::patch::testing {
namespace {

#define ASSERT_CUDA(expr)                                                      \
  do {                                                                         \
    const cudaError_t err_ = (expr);                                           \
    ASSERT_EQ(err_, cudaSuccess) << #expr << ": " << cudaGetErrorString(err_); \
  } while (0)

bool HaveDevice() {
  int n = 0;
  const bool ok = cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
  cudaGetLastError();
  return ok;
}

// A device copy of a host tensor's whole buffer (padding included).
struct DeviceBuffer {
  void* ptr = nullptr;
  size_t bytes = 0;
  explicit DeviceBuffer(const Tensor& t) : bytes(t.bytes.size()) {
    if (cudaMalloc(&ptr, bytes) == cudaSuccess) {
      cudaMemcpy(ptr, t.bytes.data(), bytes, cudaMemcpyHostToDevice);
      cudaDeviceSynchronize();  // landed before any non-blocking stream reads it
    }
  }
  ~DeviceBuffer() { cudaFree(ptr); }
  DeviceBuffer(const DeviceBuffer&) = delete;
};

struct DeviceRun {
  Outcome outcome;
  PatchCounters counters;
  std::string error;
};

// Runs a scenario on the device; `raw` picks the raw-pointer launcher (grid from the output
// size) instead of the table-handle one (grid from the site's boxes).
DeviceRun RunDevice(const Scenario& sc, bool raw) {
  DeviceRun run;
  std::vector<std::unique_ptr<DeviceBuffer>> operands;
  std::vector<PatchEntry> entries = sc.entries;
  for (size_t i = 0; i < entries.size(); ++i) {
    if (!sc.operand_of[i]) continue;
    operands.push_back(std::make_unique<DeviceBuffer>(*sc.operand_of[i]));
    SetOperand(&entries[i], *sc.operand_of[i]);
    entries[i].operand.data = operands.back()->ptr;
  }
  DevicePatchTable table;
  if (!UploadPatchTable(entries, sc.max_sites, sc.max_masks, sc.max_rows, &table, &run.error))
    return run;
  cudaStream_t stream;
  cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  DeviceBuffer out(sc.initial);
  const Tensor& t = sc.initial;
  for (int c = 1; c <= sc.calls; ++c) {
    if (!sc.tokens.empty()) SetTokenDevice(table.device(), sc.tokens[c - 1], stream);
    if (static_cast<size_t>(c) <= sc.masks.size()) {
      for (size_t k = 0; k < sc.masks[c - 1].size(); ++k) {
        const std::vector<uint8_t>& rows = sc.masks[c - 1][k];
        uint32_t marked = 0;
        for (uint8_t r : rows) marked += r != 0;
        const cudaError_t e =
            SetRowMaskDevice(table.device(), static_cast<uint32_t>(k), rows.data(),
                             static_cast<uint32_t>(rows.size()), marked, stream);
        if (e != cudaSuccess) run.error = cudaGetErrorString(e);
      }
    }
    cudaMemcpyAsync(out.ptr, t.bytes.data(), out.bytes, cudaMemcpyHostToDevice, stream);
    const cudaError_t e =
        raw ? ApplyPatchesDevice(table.device(), sc.site, out.ptr, t.dtype, t.ndim(),
                                 t.shape.data(), t.strides.data(), stream)
            : ApplyPatchesDevice(table, sc.site, out.ptr, t.dtype, t.ndim(), t.shape.data(),
                                 t.strides.data(), stream);
    if (e != cudaSuccess) run.error = cudaGetErrorString(e);
    Tensor got = t;
    cudaMemcpyAsync(got.bytes.data(), out.ptr, out.bytes, cudaMemcpyDeviceToHost, stream);
    cudaStreamSynchronize(stream);
    run.outcome.outputs.push_back(std::move(got));
  }
  if (ReadCountersDevice(table, stream, &run.counters, &run.error))
    run.outcome.fires = run.counters.fires;
  const cudaError_t sticky = cudaStreamSynchronize(stream);
  if (sticky != cudaSuccess) run.error = cudaGetErrorString(sticky);
  cudaStreamDestroy(stream);
  return run;
}

std::vector<std::pair<std::string, Scenario>> DeviceScenarios() {
  auto all = AllScenarios();
  for (auto& s : LargeScenarios()) all.push_back(std::move(s));
  return all;
}

class PatchDeviceScenarioTest : public ::testing::TestWithParam<std::pair<std::string, Scenario>> {
 protected:
  void SetUp() override {
    if (!HaveDevice()) GTEST_SKIP() << "no CUDA device";
  }
};

TEST_P(PatchDeviceScenarioTest, DeviceMatchesHostBitForBit) {
  const Scenario& sc = GetParam().second;
  std::string error;
  const Outcome host = RunHost(sc, &error);
  ASSERT_EQ(error, "");
  for (bool raw : {false, true}) {
    const DeviceRun dev = RunDevice(sc, raw);
    ASSERT_EQ(dev.error, "") << (raw ? "raw" : "handle");
    ASSERT_EQ(dev.outcome.outputs.size(), host.outputs.size());
    for (size_t c = 0; c < host.outputs.size(); ++c)
      EXPECT_TRUE(dev.outcome.outputs[c].bytes == host.outputs[c].bytes)
          << (raw ? "raw" : "handle") << " call " << c + 1;
    EXPECT_EQ(dev.outcome.fires, host.fires);
    EXPECT_EQ(dev.counters.site_calls[sc.site], static_cast<uint32_t>(sc.calls));
    for (uint32_t s = 0; s < sc.max_sites; ++s)
      if (s != sc.site) {
        EXPECT_EQ(dev.counters.site_calls[s], 0u);
      }
  }
}

INSTANTIATE_TEST_SUITE_P(All, PatchDeviceScenarioTest, ::testing::ValuesIn(DeviceScenarios()),
                         [](const auto& info) { return info.param.first; });

class PatchDeviceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!HaveDevice()) GTEST_SKIP() << "no CUDA device";
  }
};

TEST_F(PatchDeviceTest, SkippedEntryIsCountedWithItsError) {
  Scenario sc;
  sc.initial = MakeTensor(DType::kBF16, {1, 1, 4});
  Add(&sc, Entry(0, PatchOp::kZero, Every(), {S(), I(1)}));
  Add(&sc, Entry(0, PatchOp::kFill, Every(), {S(), I(0)}, 3.0f));
  const DeviceRun dev = RunDevice(sc, false);
  ASSERT_EQ(dev.error, "");
  EXPECT_EQ(dev.counters.fires, (std::vector<uint64_t>{0, 1}));
  EXPECT_EQ(dev.counters.skips, (std::vector<uint32_t>{1, 0}));
  EXPECT_EQ(FormatPatchError(dev.counters.last_errors[0], sc.entries[0]),
            "tokentrace: index 1 is out of range for dimension 1 of size 1");
  for (int64_t f = 0; f < 4; ++f) EXPECT_EQ(dev.outcome.outputs[0].Get({0, 0, f}), 3.0f);
}

TEST_F(PatchDeviceTest, UploadRejectsHostOperandsAndLaunchRejectsUnknownSites) {
  const Tensor host = MakeTensor(DType::kF32, {4});
  PatchEntry e = Entry(0, PatchOp::kReplace, Every(), {});
  SetOperand(&e, host);
  DevicePatchTable table;
  std::string error;
  EXPECT_FALSE(UploadPatchTable({e}, 1, &table, &error));
  EXPECT_EQ(error,
            "tokentrace: the operand of patch entry 0 is not device memory; pass a CUDA "
            "tensor (or copy the operand to the device)");
  ASSERT_TRUE(UploadPatchTable({Entry(0, PatchOp::kZero, Every(), {})}, 1, &table, &error))
      << error;
  DeviceBuffer buf(host);
  const int64_t shape[] = {4}, strides[] = {1};
  EXPECT_EQ(ApplyPatchesDevice(table, 1, buf.ptr, DType::kF32, 1, shape, strides, nullptr),
            cudaErrorInvalidValue);
}

// The reason the decision lives on the device: a graph captured once applies the edit at the
// selected step on every replay.
void GraphFiresOnlyAtReplay3(const CallSelector& sel) {
  const Tensor init = MakeTensor(DType::kBF16, {1, 5, 64}, Layout::kContiguous, 31);
  DevicePatchTable table;
  std::string error;
  ASSERT_TRUE(
      UploadPatchTable({Entry(0, PatchOp::kScale, sel, {S(), I(2)}, -2.0f)}, 1, &table, &error))
      << error;
  DeviceBuffer src(init), buf(init);
  cudaStream_t stream;
  ASSERT_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  ASSERT_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  AdvanceTokenDevice(table.device(), stream);  // one decoding step = one token
  cudaMemcpyAsync(buf.ptr, src.ptr, buf.bytes, cudaMemcpyDeviceToDevice, stream);
  ApplyPatchesDevice(table, 0, buf.ptr, init.dtype, init.ndim(), init.shape.data(),
                     init.strides.data(), stream);
  ASSERT_CUDA(cudaStreamEndCapture(stream, &graph));
  ASSERT_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  Scenario once;  // the host's answer for the firing step
  once.initial = init;
  Add(&once, Entry(0, PatchOp::kScale, Every(), {S(), I(2)}, -2.0f));
  const Tensor edited = RunHost(once, &error).outputs[0];
  for (int replay = 1; replay <= 5; ++replay) {
    ASSERT_CUDA(cudaGraphLaunch(exec, stream));
    Tensor got = init;
    ASSERT_CUDA(
        cudaMemcpyAsync(got.bytes.data(), buf.ptr, buf.bytes, cudaMemcpyDeviceToHost, stream));
    ASSERT_CUDA(cudaStreamSynchronize(stream));
    EXPECT_TRUE(got.bytes == (replay == 3 ? edited.bytes : init.bytes)) << "replay " << replay;
  }
  PatchCounters c;
  ASSERT_TRUE(ReadCountersDevice(table, stream, &c, &error)) << error;
  EXPECT_EQ(c.fires[0], 1u);
  EXPECT_EQ(c.site_calls[0], 5u);
  EXPECT_EQ(c.token, 5u);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

TEST_F(PatchDeviceTest, GraphReplayFiresAtToken3Only) { GraphFiresOnlyAtReplay3(Token(3)); }
TEST_F(PatchDeviceTest, GraphReplayFiresAtCall3Only) { GraphFiresOnlyAtReplay3(Call(3)); }

// edits.py re-uploads when the model changes device: the old table is released while a
// graph captured with it lives on. It is kept, so replays read valid memory.
TEST_F(PatchDeviceTest, ATableACapturedGraphReadsOutlivesItsRelease) {
  const Tensor init = MakeTensor(DType::kF32, {1, 4, 8}, Layout::kContiguous, 7);
  DevicePatchTable table;
  std::string error;
  ASSERT_TRUE(UploadPatchTable({Entry(0, PatchOp::kZero, Every(), {})}, 1, &table, &error))
      << error;
  DeviceBuffer buf(init);
  cudaStream_t stream;
  ASSERT_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  const size_t kept_before = PatchTablesKeptForGraphs();
  ASSERT_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  ApplyPatchesDevice(table, 0, buf.ptr, init.dtype, init.ndim(), init.shape.data(),
                     init.strides.data(), stream);
  ASSERT_CUDA(cudaStreamEndCapture(stream, &graph));
  ASSERT_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  DevicePatchTable other;  // the next upload frees the released tables no graph reads
  table.Release();
  ASSERT_TRUE(UploadPatchTable({Entry(0, PatchOp::kZero, Every(), {})}, 1, &other, &error))
      << error;
  EXPECT_EQ(PatchTablesKeptForGraphs(), kept_before + 1);
  ASSERT_CUDA(cudaGraphLaunch(exec, stream));
  ASSERT_CUDA(cudaStreamSynchronize(stream));
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

TEST_F(PatchDeviceTest, ResetClearsCountersOnTheStream) {
  DevicePatchTable table;
  std::string error;
  ASSERT_TRUE(UploadPatchTable({Entry(0, PatchOp::kZero, Every(), {})}, 2, &table, &error))
      << error;
  const Tensor t = MakeTensor(DType::kF32, {8});
  DeviceBuffer buf(t);
  for (int i = 0; i < 3; ++i)
    ASSERT_CUDA(ApplyPatchesDevice(table, 0, buf.ptr, t.dtype, 1, t.shape.data(), t.strides.data(),
                                   nullptr));
  ASSERT_CUDA(AdvanceTokenDevice(table.device(), nullptr));
  PatchCounters c;
  ASSERT_TRUE(ReadCountersDevice(table, nullptr, &c, &error)) << error;
  EXPECT_EQ(c.fires[0], 3u);
  EXPECT_EQ(c.site_calls, (std::vector<uint32_t>{3, 0}));
  EXPECT_EQ(c.token, 1u);
  ASSERT_CUDA(ResetCountersDevice(table.device(), nullptr));
  ASSERT_TRUE(ReadCountersDevice(table, nullptr, &c, &error)) << error;
  EXPECT_EQ(c.fires[0], 0u);
  EXPECT_EQ(c.site_calls, (std::vector<uint32_t>{0, 0}));
  EXPECT_EQ(c.token, 0u);
}

// ---- Row masks -------------------------------------------------------------------------------

TEST_F(PatchDeviceTest, RowMaskWritesAreCheckedAndRefusedWhileCapturing) {
  DevicePatchTable table;
  std::string error;
  ASSERT_TRUE(UploadPatchTable({Entry(0, PatchOp::kZero, Rows(1), {})}, 1, 2, 4, &table, &error))
      << error;
  EXPECT_EQ(table.max_masks(), 2u);
  EXPECT_EQ(table.max_rows(), 4u);
  const uint8_t rows[5] = {1, 0, 1, 0, 1};
  EXPECT_EQ(SetRowMaskDevice(table.device(), 2, rows, 4, 2, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(SetRowMaskDevice(table.device(), 0, rows, 5, 3, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(SetRowMaskDevice(nullptr, 0, rows, 4, 2, nullptr), cudaErrorInvalidValue);
  ASSERT_CUDA(SetRowMaskDevice(table.device(), 1, rows, 4, 2, nullptr));
  cudaStream_t stream;
  ASSERT_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  ASSERT_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  EXPECT_EQ(SetRowMaskDevice(table.device(), 1, rows, 4, 2, stream),
            cudaErrorStreamCaptureUnsupported);
  cudaGraph_t graph;
  ASSERT_CUDA(cudaStreamEndCapture(stream, &graph));
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
  DevicePatchTable none;  // no rows entry fits a table without masks
  EXPECT_FALSE(UploadPatchTable({Entry(0, PatchOp::kZero, Rows(0), {})}, 1, &none, &error));
  EXPECT_NE(error.find("is not below the table's max_masks 0"), std::string::npos) << error;
  const PatchTable* released = table.device();
  table.Release();
  EXPECT_EQ(SetRowMaskDevice(const_cast<PatchTable*>(released), 1, rows, 4, 2, nullptr),
            cudaErrorInvalidValue);
}

TEST_F(PatchDeviceTest, ResetEmptiesTheMasks) {
  DevicePatchTable table;
  std::string error;
  ASSERT_TRUE(UploadPatchTable({Entry(0, PatchOp::kZero, Rows(0), {})}, 1, 1, 4, &table, &error))
      << error;
  const Tensor t = MakeTensor(DType::kF32, {4, 2});
  DeviceBuffer buf(t);
  const uint8_t rows[2] = {1, 1};
  ASSERT_CUDA(SetRowMaskDevice(table.device(), 0, rows, 2, 2, nullptr));
  ASSERT_CUDA(ResetCountersDevice(table.device(), nullptr));
  ASSERT_CUDA(
      ApplyPatchesDevice(table, 0, buf.ptr, t.dtype, 2, t.shape.data(), t.strides.data(), nullptr));
  PatchCounters c;
  ASSERT_TRUE(ReadCountersDevice(table, nullptr, &c, &error)) << error;
  EXPECT_EQ(c.fires[0], 0u);
  Tensor got = t;
  ASSERT_CUDA(cudaMemcpy(got.bytes.data(), buf.ptr, buf.bytes, cudaMemcpyDeviceToHost));
  EXPECT_TRUE(got.bytes == t.bytes);
}

// The serving case: a graph captured once, replayed each engine step with the host writing that
// step's rows in between; every replay edits exactly the rows written before it.
TEST_F(PatchDeviceTest, GraphReplayEditsTheRowsWrittenBeforeEachReplay) {
  const Tensor init = MakeTensor(DType::kBF16, {8, 64}, Layout::kContiguous, 11);
  const PatchEntry e = Entry(0, PatchOp::kScale, Rows(0), {S(), S(4, 40)}, -3.0f);
  DevicePatchTable table;
  std::string error;
  ASSERT_TRUE(UploadPatchTable({e}, 1, 1, 8, &table, &error)) << error;
  DeviceBuffer src(init), buf(init);
  cudaStream_t stream;
  ASSERT_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  ASSERT_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  cudaMemcpyAsync(buf.ptr, src.ptr, buf.bytes, cudaMemcpyDeviceToDevice, stream);
  ApplyPatchesDevice(table, 0, buf.ptr, init.dtype, init.ndim(), init.shape.data(),
                     init.strides.data(), stream);
  ASSERT_CUDA(cudaStreamEndCapture(stream, &graph));
  ASSERT_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  const std::vector<std::vector<uint8_t>> steps = {
      {0, 1, 0, 0, 1}, {0, 0, 0}, {1, 1, 1, 1, 1, 1, 1, 1}, {}, {0, 0, 0, 0, 0, 0, 0, 1}};
  uint64_t want_fires = 0;
  for (size_t i = 0; i < steps.size(); ++i) {
    uint32_t marked = 0;
    for (uint8_t r : steps[i]) marked += r;
    ASSERT_CUDA(SetRowMaskDevice(table.device(), 0, steps[i].data(),
                                 static_cast<uint32_t>(steps[i].size()), marked, stream));
    ASSERT_CUDA(cudaGraphLaunch(exec, stream));
    Tensor got = init;
    ASSERT_CUDA(
        cudaMemcpyAsync(got.bytes.data(), buf.ptr, buf.bytes, cudaMemcpyDeviceToHost, stream));
    ASSERT_CUDA(cudaStreamSynchronize(stream));
    Scenario once;  // the host's answer for this step
    once.initial = init;
    once.max_masks = 1;
    once.max_rows = 8;
    once.masks = {{steps[i]}};
    Add(&once, e);
    const Tensor want = RunHost(once, &error).outputs.at(0);
    EXPECT_TRUE(got.bytes == want.bytes) << "step " << i;
    want_fires += marked != 0;
  }
  PatchCounters c;
  ASSERT_TRUE(ReadCountersDevice(table, stream, &c, &error)) << error;
  EXPECT_EQ(c.fires[0], want_fires);
  EXPECT_EQ(c.site_calls[0], steps.size());
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

TEST_F(PatchDeviceTest, RowsEntryOnAScalarOutputIsSkippedWithItsError) {
  DevicePatchTable table;
  std::string error;
  const PatchEntry e = Entry(0, PatchOp::kFill, Rows(0), {}, 1.0f);
  ASSERT_TRUE(UploadPatchTable({e}, 1, 1, 4, &table, &error)) << error;
  const Tensor t = MakeTensor(DType::kF32, {});
  DeviceBuffer buf(t);
  const uint8_t rows[1] = {1};
  ASSERT_CUDA(SetRowMaskDevice(table.device(), 0, rows, 1, 1, nullptr));
  ASSERT_CUDA(ApplyPatchesDevice(table, 0, buf.ptr, t.dtype, 0, nullptr, nullptr, nullptr));
  PatchCounters c;
  ASSERT_TRUE(ReadCountersDevice(table, nullptr, &c, &error)) << error;
  EXPECT_EQ(c.fires[0], 0u);
  EXPECT_EQ(c.skips[0], 1u);
  EXPECT_EQ(c.last_errors[0].code, static_cast<uint32_t>(PatchError::kRowsScalarOutput));
  EXPECT_NE(FormatPatchError(c.last_errors[0], e).find("the output is 0-d"), std::string::npos);
}

}  // namespace
}  // namespace tokentrace::patch::testing
