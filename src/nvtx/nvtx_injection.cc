// NVTX injection: the handlers NVTX calls once our library is its injection.
//
// Every NVTX instance in the process (torch's, a C++ library's, our Python extension's)
// loads the library named by NVTX_INJECTION64_PATH on its first call and calls the exported
// InitializeInjectionNvtx2, which fills that instance's function table with these handlers.
// The preload constructor points NVTX_INJECTION64_PATH at libtokentrace.so.
#include <atomic>
#include <cstring>
#include <mutex>

#include "core/recorder.h"
#include "core/site_registry.h"
#include "nvtx3/nvToolsExt.h"
#include "tokentrace/tokentrace.h"

// Handler map (NVTX callback id -> what we do):
//   RangePushA / RangePushEx (ASCII or registered message)   -> push a call of a "range" site
//   RangePop                                                 -> pop
//   MarkA / MarkEx                                           -> zero-length call
//   DomainCreateA                                            -> our Domain handle
//   DomainRegisterStringA                                    -> our RegisteredString handle
//   DomainRangePushEx / DomainRangePop / DomainMarkEx        -> as above; in the "tokentrace"
//       domain the category picks the kind: ROOT (token) or MODULE
// Wide-character variants and start/end ranges (not stack-shaped) are not recorded.
//
// None of these handlers calls into CUDA or NVTX, so they cannot re-enter themselves.

namespace tokentrace::nvtx {
namespace {

struct Domain {
  bool ours;
};

// A registered string caches its site id per kind, so a push with a registered message does
// no string work after the first one.
struct RegisteredString {
  const char* text;  // owned (never freed: NVTX handles live as long as the process)
  std::atomic<uint32_t> site[3];
};

Domain g_default_domain{false};

SiteKind KindFor(const Domain* d, const nvtxEventAttributes_t* attr) {
  if (d == nullptr || !d->ours) return SiteKind::kRange;
  return attr->category == TOKENTRACE_NVTX_CATEGORY_ROOT ? SiteKind::kRoot : SiteKind::kModule;
}

uint32_t SiteOf(const Domain* d, const nvtxEventAttributes_t* attr) {
  if (attr == nullptr) return sites::Intern("(no attributes)", SiteKind::kRange);
  const SiteKind kind = KindFor(d, attr);
  switch (attr->messageType) {
    case NVTX_MESSAGE_TYPE_REGISTERED: {
      auto* reg = reinterpret_cast<RegisteredString*>(attr->message.registered);
      if (reg == nullptr) break;
      auto& slot = reg->site[static_cast<int>(kind)];
      uint32_t id = slot.load(std::memory_order_relaxed);
      if (id == 0) {
        id = sites::Intern(reg->text, kind);
        slot.store(id, std::memory_order_relaxed);
      }
      return id;
    }
    case NVTX_MESSAGE_TYPE_ASCII:
      if (attr->message.ascii != nullptr) return sites::Intern(attr->message.ascii, kind);
      break;
    default:
      break;
  }
  return sites::Intern("(unnamed range)", kind);
}

int NVTX_API RangePushA(const char* message) {
  if (!recorder::Active()) return 0;
  recorder::Push(sites::Intern(message != nullptr ? message : "(null)", SiteKind::kRange));
  return 0;
}

int NVTX_API RangePushEx(const nvtxEventAttributes_t* attr) {
  if (!recorder::Active()) return 0;
  recorder::Push(SiteOf(&g_default_domain, attr));
  return 0;
}

int NVTX_API RangePop() {
  recorder::Pop();
  return 0;
}

void NVTX_API MarkA(const char* message) {
  if (!recorder::Active()) return;
  recorder::Mark(sites::Intern(message != nullptr ? message : "(null)", SiteKind::kRange));
}

void NVTX_API MarkEx(const nvtxEventAttributes_t* attr) {
  if (!recorder::Active()) return;
  recorder::Mark(SiteOf(&g_default_domain, attr));
}

nvtxDomainHandle_t NVTX_API DomainCreateA(const char* name) {
  auto* d = new Domain{name != nullptr && strcmp(name, TOKENTRACE_NVTX_DOMAIN) == 0};
  return reinterpret_cast<nvtxDomainHandle_t>(d);
}

void NVTX_API DomainDestroy(nvtxDomainHandle_t) {
  // Kept alive on purpose: registered strings and late pushes may still refer to it.
}

nvtxStringHandle_t NVTX_API DomainRegisterStringA(nvtxDomainHandle_t, const char* text) {
  auto* reg = new RegisteredString();
  const char* src = text != nullptr ? text : "(null)";
  char* copy = new char[strlen(src) + 1];
  strcpy(copy, src);
  reg->text = copy;
  for (auto& s : reg->site) s.store(0, std::memory_order_relaxed);
  return reinterpret_cast<nvtxStringHandle_t>(reg);
}

int NVTX_API DomainRangePushEx(nvtxDomainHandle_t domain, const nvtxEventAttributes_t* attr) {
  if (!recorder::Active()) return 0;
  recorder::Push(SiteOf(reinterpret_cast<const Domain*>(domain), attr));
  return 0;
}

int NVTX_API DomainRangePop(nvtxDomainHandle_t) {
  recorder::Pop();
  return 0;
}

void NVTX_API DomainMarkEx(nvtxDomainHandle_t domain, const nvtxEventAttributes_t* attr) {
  if (!recorder::Active()) return;
  recorder::Mark(SiteOf(reinterpret_cast<const Domain*>(domain), attr));
}

void Set(NvtxFunctionTable table, unsigned int size, unsigned int id, NvtxFunctionPointer fn) {
  if (table != nullptr && id < size && table[id] != nullptr) *table[id] = fn;
}

}  // namespace

}  // namespace tokentrace::nvtx

using namespace tokentrace::nvtx;

extern "C" __attribute__((visibility("default"))) int InitializeInjectionNvtx2(
    NvtxGetExportTableFunc_t get_export_table) {
  if (get_export_table == nullptr) return 0;
  auto* callbacks =
      static_cast<const NvtxExportTableCallbacks*>(get_export_table(NVTX_ETID_CALLBACKS));
  if (callbacks == nullptr || callbacks->struct_size < sizeof(NvtxExportTableCallbacks)) return 0;
  NvtxFunctionTable core = nullptr;
  unsigned int core_size = 0;
  if (callbacks->GetModuleFunctionTable(NVTX_CB_MODULE_CORE, &core, &core_size) == 0) return 0;
  auto fp = [](auto f) { return reinterpret_cast<NvtxFunctionPointer>(f); };
  Set(core, core_size, NVTX_CBID_CORE_RangePushA, fp(&RangePushA));
  Set(core, core_size, NVTX_CBID_CORE_RangePushEx, fp(&RangePushEx));
  Set(core, core_size, NVTX_CBID_CORE_RangePop, fp(&RangePop));
  Set(core, core_size, NVTX_CBID_CORE_MarkA, fp(&MarkA));
  Set(core, core_size, NVTX_CBID_CORE_MarkEx, fp(&MarkEx));
  NvtxFunctionTable core2 = nullptr;
  unsigned int core2_size = 0;
  if (callbacks->GetModuleFunctionTable(NVTX_CB_MODULE_CORE2, &core2, &core2_size) != 0) {
    Set(core2, core2_size, NVTX_CBID_CORE2_DomainCreateA, fp(&DomainCreateA));
    Set(core2, core2_size, NVTX_CBID_CORE2_DomainDestroy, fp(&DomainDestroy));
    Set(core2, core2_size, NVTX_CBID_CORE2_DomainRegisterStringA, fp(&DomainRegisterStringA));
    Set(core2, core2_size, NVTX_CBID_CORE2_DomainRangePushEx, fp(&DomainRangePushEx));
    Set(core2, core2_size, NVTX_CBID_CORE2_DomainRangePop, fp(&DomainRangePop));
    Set(core2, core2_size, NVTX_CBID_CORE2_DomainMarkEx, fp(&DomainMarkEx));
  }
  return 1;
}
