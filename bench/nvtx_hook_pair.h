// The NVTX range our Python hooks push: domain "tokentrace", a registered string, category 1
// (module). Shared by bench_nvtx and nvtx_pair, so both time the same pair.
#pragma once

#include "nvtx3/nvToolsExt.h"

inline nvtxDomainHandle_t HookDomain() {
  static nvtxDomainHandle_t d = nvtxDomainCreateA("tokentrace");
  return d;
}

inline nvtxEventAttributes_t HookAttr(const char* name) {
  nvtxEventAttributes_t attr = {};
  attr.version = NVTX_VERSION;
  attr.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  attr.category = 1;  // TOKENTRACE_NVTX_CATEGORY_MODULE
  attr.messageType = NVTX_MESSAGE_TYPE_REGISTERED;
  attr.message.registered = nvtxDomainRegisterStringA(HookDomain(), name);
  return attr;
}
