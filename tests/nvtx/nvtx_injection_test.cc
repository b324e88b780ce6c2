// InitializeInjectionNvtx2 as NVTX calls it: NVTX loads the injection library, asks it to
// fill the function tables it hands over through its export table (NVTX_ETID_CALLBACKS, then
// GetModuleFunctionTable per module), and from then on every nvtx* call of that instance goes
// to what was put in the table. Here the export table is ours, so the test sees what was
// installed and calls the handlers exactly as an NVTX instance would.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <string>

#include "core/buffer_registry.h"
#include "core/joiner.h"
#include "core/recorder.h"
#include "core/site_registry.h"
#include "nvtx3/nvToolsExt.h"
#include "tokentrace/tokentrace.h"

extern "C" int InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get_export_table);

namespace tokentrace {
namespace {

// One NVTX instance's function tables and export table.
struct FakeNvtx {
  NvtxFunctionPointer core_slots[NVTX_CBID_CORE_SIZE] = {};
  NvtxFunctionPointer* core[NVTX_CBID_CORE_SIZE] = {};
  NvtxFunctionPointer core2_slots[NVTX_CBID_CORE2_SIZE] = {};
  NvtxFunctionPointer* core2[NVTX_CBID_CORE2_SIZE] = {};
  bool has_core2 = true;
  size_t callbacks_size = sizeof(NvtxExportTableCallbacks);
  NvtxExportTableCallbacks callbacks{};

  FakeNvtx() {
    for (int i = 0; i < NVTX_CBID_CORE_SIZE; ++i) core[i] = &core_slots[i];
    for (int i = 0; i < NVTX_CBID_CORE2_SIZE; ++i) core2[i] = &core2_slots[i];
  }
  int Initialize() {
    callbacks.struct_size = callbacks_size;
    callbacks.GetModuleFunctionTable = &GetTable;
    current = this;
    return InitializeInjectionNvtx2(&GetExport);
  }
  template <typename Fn>
  Fn Core(int id) const {
    return reinterpret_cast<Fn>(core_slots[id]);
  }
  template <typename Fn>
  Fn Core2(int id) const {
    return reinterpret_cast<Fn>(core2_slots[id]);
  }

  static inline FakeNvtx* current = nullptr;
  static const void* NVTX_API GetExport(uint32_t id) {
    return id == NVTX_ETID_CALLBACKS ? &current->callbacks : nullptr;
  }
  static int NVTX_API GetTable(NvtxCallbackModule module, NvtxFunctionTable* table,
                               unsigned int* size) {
    if (module == NVTX_CB_MODULE_CORE) {
      *table = current->core;
      *size = NVTX_CBID_CORE_SIZE;
      return 1;
    }
    if (module == NVTX_CB_MODULE_CORE2 && current->has_core2) {
      *table = current->core2;
      *size = NVTX_CBID_CORE2_SIZE;
      return 1;
    }
    return 0;
  }
};

using PushA = int(NVTX_API*)(const char*);
using PushEx = int(NVTX_API*)(const nvtxEventAttributes_t*);
using Pop = int(NVTX_API*)();
using MarkA = void(NVTX_API*)(const char*);
using DomainCreate = nvtxDomainHandle_t(NVTX_API*)(const char*);
using RegisterString = nvtxStringHandle_t(NVTX_API*)(nvtxDomainHandle_t, const char*);
using DomainPush = int(NVTX_API*)(nvtxDomainHandle_t, const nvtxEventAttributes_t*);
using DomainPop = int(NVTX_API*)(nvtxDomainHandle_t);

nvtxEventAttributes_t Registered(nvtxStringHandle_t text, uint32_t category) {
  nvtxEventAttributes_t attr{};
  attr.version = NVTX_VERSION;
  attr.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  attr.category = category;
  attr.messageType = NVTX_MESSAGE_TYPE_REGISTERED;
  attr.message.registered = text;
  return attr;
}

// A call as the file would hold it: its site's name and kind, and its parent's site name.
struct Seen {
  std::string name;
  SiteKind kind;
  std::string parent;
  uint32_t token;
};

class NvtxInjectionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(nvtx.Initialize(), 1);
    recorder::BeginSession(1 << 12);
  }
  void TearDown() override {
    recorder::EndSession();
    Calls();
  }
  // The calls recorded since the last call, in call order.
  std::vector<Seen> Calls() {
    KernelMode off;
    off.kind = KernelMode::kOff;
    Joiner joiner(off);
    Batch batch;
    const uint8_t gen = recorder::Generation();
    buffers::ForEach([&](ThreadBuffer& ring) {
      ring.Drain([&](const Event& e) {
        if (e.generation == gen) joiner.OnEvent(ring.thread_index(), e, &batch);
      });
    });
    std::map<uint64_t, CallRow> by_id;
    for (const CallRow& c : batch.calls) by_id[c.id] = c;
    std::vector<Seen> seen;
    for (const auto& [id, c] : by_id) {
      const SiteRow site = sites::Row(c.site_id);
      const std::string parent =
          by_id.count(c.parent_id) ? sites::Row(by_id[c.parent_id].site_id).name : "";
      seen.push_back({site.name, site.kind, parent, c.token});
    }
    return seen;
  }
  // The domain handlers NVTX would call, as installed.
  struct Handlers {
    DomainCreate create;
    RegisterString reg;
    DomainPush push;
    DomainPop pop;
  };
  Handlers Installed() const {
    return {nvtx.Core2<DomainCreate>(NVTX_CBID_CORE2_DomainCreateA),
            nvtx.Core2<RegisterString>(NVTX_CBID_CORE2_DomainRegisterStringA),
            nvtx.Core2<DomainPush>(NVTX_CBID_CORE2_DomainRangePushEx),
            nvtx.Core2<DomainPop>(NVTX_CBID_CORE2_DomainRangePop)};
  }
  FakeNvtx nvtx;
};

TEST(NvtxInjectionTableTest, InstallsItsHandlersAndLeavesTheRest) {
  FakeNvtx nvtx;
  ASSERT_EQ(nvtx.Initialize(), 1);
  for (int id : {NVTX_CBID_CORE_RangePushA, NVTX_CBID_CORE_RangePushEx, NVTX_CBID_CORE_RangePop,
                 NVTX_CBID_CORE_MarkA, NVTX_CBID_CORE_MarkEx}) {
    EXPECT_NE(nvtx.core_slots[id], nullptr) << "core " << id;
  }
  for (int id : {NVTX_CBID_CORE2_DomainCreateA, NVTX_CBID_CORE2_DomainDestroy,
                 NVTX_CBID_CORE2_DomainRegisterStringA, NVTX_CBID_CORE2_DomainRangePushEx,
                 NVTX_CBID_CORE2_DomainRangePop, NVTX_CBID_CORE2_DomainMarkEx}) {
    EXPECT_NE(nvtx.core2_slots[id], nullptr) << "core2 " << id;
  }
  // Wide-character variants and start/end ranges are not recorded: NVTX keeps its no-ops.
  for (int id : {NVTX_CBID_CORE_RangePushW, NVTX_CBID_CORE_MarkW, NVTX_CBID_CORE_RangeStartA,
                 NVTX_CBID_CORE_RangeEnd}) {
    EXPECT_EQ(nvtx.core_slots[id], nullptr) << "core " << id;
  }
}

TEST(NvtxInjectionTableTest, AnExportTableTooOldIsRefusedAndNothingInstalled) {
  FakeNvtx nvtx;
  nvtx.callbacks_size = sizeof(size_t);  // an NVTX without GetModuleFunctionTable
  EXPECT_EQ(nvtx.Initialize(), 0);
  for (auto* slot : nvtx.core_slots) EXPECT_EQ(slot, nullptr);
  EXPECT_EQ(InitializeInjectionNvtx2(nullptr), 0);
}

TEST(NvtxInjectionTableTest, WithoutTheDomainModuleTheCoreIsStillInstalled) {
  FakeNvtx nvtx;
  nvtx.has_core2 = false;
  ASSERT_EQ(nvtx.Initialize(), 1);
  EXPECT_NE(nvtx.core_slots[NVTX_CBID_CORE_RangePushA], nullptr);
  for (auto* slot : nvtx.core2_slots) EXPECT_EQ(slot, nullptr);
}

// Our domain's categories make tokens (ROOT) and modules (MODULE); anything else, including
// torch's plain ranges and another domain using the same category numbers, is a range.
TEST_F(NvtxInjectionTest, TheTokentraceDomainsCategoriesPickTheKind) {
  const auto [create, reg, push, pop] = Installed();
  auto push_a = nvtx.Core<PushA>(NVTX_CBID_CORE_RangePushA);
  auto pop_plain = nvtx.Core<Pop>(NVTX_CBID_CORE_RangePop);
  nvtxDomainHandle_t ours = create(TOKENTRACE_NVTX_DOMAIN);
  nvtxDomainHandle_t other = create("someone.else");
  const auto root = Registered(reg(ours, "nv.self"), TOKENTRACE_NVTX_CATEGORY_ROOT);
  const auto block = Registered(reg(ours, "nv.h.0"), TOKENTRACE_NVTX_CATEGORY_MODULE);
  const auto foreign = Registered(reg(other, "nv.step"), TOKENTRACE_NVTX_CATEGORY_ROOT);
  for (int t = 0; t < 2; ++t) {
    push(ours, &root);
    push(ours, &block);
    push_a("nv.aten::mm");
    pop_plain();
    pop(ours);
    pop(ours);
  }
  push(other, &foreign);
  pop(other);
  const std::vector<Seen> calls = Calls();
  ASSERT_EQ(calls.size(), 7u);
  EXPECT_EQ(calls[0].name, "nv.self");
  EXPECT_EQ(calls[0].kind, SiteKind::kRoot);
  EXPECT_EQ(calls[1].name, "nv.h.0");
  EXPECT_EQ(calls[1].kind, SiteKind::kModule);
  EXPECT_EQ(calls[1].parent, "nv.self");
  EXPECT_EQ(calls[2].name, "nv.aten::mm");
  EXPECT_EQ(calls[2].kind, SiteKind::kRange);
  EXPECT_EQ(calls[2].parent, "nv.h.0");
  EXPECT_EQ(calls[5].token, 2u);  // the second root call is token 2
  EXPECT_EQ(calls[6].name, "nv.step");
  EXPECT_EQ(calls[6].kind, SiteKind::kRange);
}

// One registered string pushed in two kinds is two sites; pushed again, the same site.
TEST_F(NvtxInjectionTest, ARegisteredStringIsOneSitePerKind) {
  const auto [create, reg, push, pop] = Installed();
  auto push_ex = nvtx.Core<PushEx>(NVTX_CBID_CORE_RangePushEx);
  auto pop_plain = nvtx.Core<Pop>(NVTX_CBID_CORE_RangePop);
  nvtxDomainHandle_t ours = create(TOKENTRACE_NVTX_DOMAIN);
  const auto as_module = Registered(reg(ours, "nv.shared"), TOKENTRACE_NVTX_CATEGORY_MODULE);
  for (int i = 0; i < 2; ++i) {
    push(ours, &as_module);
    pop(ours);
    push_ex(&as_module);  // the default domain: a range of the same text
    pop_plain();
  }
  const std::vector<Seen> calls = Calls();
  ASSERT_EQ(calls.size(), 4u);
  EXPECT_EQ(calls[0].kind, SiteKind::kModule);
  EXPECT_EQ(calls[1].kind, SiteKind::kRange);
  EXPECT_EQ(calls[0].name, "nv.shared");
  EXPECT_EQ(calls[1].name, "nv.shared");
  EXPECT_EQ(sites::Intern("nv.shared", SiteKind::kModule),
            sites::Intern("nv.shared", SiteKind::kModule));
}

// Null and attribute-less messages are named, never dereferenced; marks are calls of no length.
TEST_F(NvtxInjectionTest, NullMessagesAreNamedAndMarksAreCalls) {
  auto push_a = nvtx.Core<PushA>(NVTX_CBID_CORE_RangePushA);
  auto push_ex = nvtx.Core<PushEx>(NVTX_CBID_CORE_RangePushEx);
  auto pop = nvtx.Core<Pop>(NVTX_CBID_CORE_RangePop);
  auto mark = nvtx.Core<MarkA>(NVTX_CBID_CORE_MarkA);
  push_a(nullptr);
  pop();
  push_ex(nullptr);
  pop();
  nvtxEventAttributes_t unnamed{};
  unnamed.messageType = NVTX_MESSAGE_TYPE_ASCII;
  push_ex(&unnamed);
  pop();
  mark("nv.tick");
  const std::vector<Seen> calls = Calls();
  ASSERT_EQ(calls.size(), 4u);
  EXPECT_EQ(calls[0].name, "(null)");
  EXPECT_EQ(calls[1].name, "(no attributes)");
  EXPECT_EQ(calls[2].name, "(unnamed range)");
  EXPECT_EQ(calls[3].name, "nv.tick");
}

// Outside a session the handlers record nothing (and intern nothing).
TEST_F(NvtxInjectionTest, NothingIsRecordedOutsideASession) {
  recorder::EndSession();
  const uint32_t before = sites::Count();
  nvtx.Core<PushA>(NVTX_CBID_CORE_RangePushA)("nv.idle");
  nvtx.Core<Pop>(NVTX_CBID_CORE_RangePop)();
  EXPECT_EQ(sites::Count(), before);
  EXPECT_TRUE(Calls().empty());
}

}  // namespace
}  // namespace tokentrace
