#include "core/records.h"

namespace tokentrace {

const char* SiteKindName(SiteKind kind) {
  switch (kind) {
    case SiteKind::kRoot: return "root";
    case SiteKind::kModule: return "module";
    case SiteKind::kRange: return "range";
    case SiteKind::kText: return "text";
    case SiteKind::kOp: return "op";
  }
  return "range";
}

const char* GpuOpKindName(GpuOpKind kind) {
  switch (kind) {
    case GpuOpKind::kKernel: return "kernel";
    case GpuOpKind::kMemcpy: return "memcpy";
    case GpuOpKind::kMemset: return "memset";
  }
  return "kernel";
}

const char* EscapeKindName(EscapeKind kind) {
  switch (kind) {
    case EscapeKind::kMemcpyDtoHSync: return "memcpy_dtoh_sync";
    case EscapeKind::kStreamSync: return "stream_sync";
    case EscapeKind::kDeviceSync: return "device_sync";
    case EscapeKind::kEventSync: return "event_sync";
    case EscapeKind::kHostRead: return "host_read";
  }
  return "stream_sync";
}

}  // namespace tokentrace
