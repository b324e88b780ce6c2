#include "cupti/activity_convert.h"

namespace tokentrace::cupti {

uint8_t CopyKindCode(uint8_t cupti_copy_kind) {
  switch (cupti_copy_kind) {
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD:
      return 1;
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH:
      return 2;
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD:
      return 8;
    default:
      return 0;
  }
}

namespace {

// The fields every GPU record kind shares, under the same names in each CUPTI struct.
template <typename Record>
void CopyCommon(const Record* r, GpuOpKind kind, int64_t clock_offset_ns, GpuActivity* out) {
  out->kind = kind;
  out->correlation_id = r->correlationId;
  // CUPTI writes 0 for both when it could not collect the times.
  out->timed = r->start != 0 && r->end >= r->start;
  out->begin_ns = out->timed ? static_cast<int64_t>(r->start) + clock_offset_ns : 0;
  out->end_ns = out->timed ? static_cast<int64_t>(r->end) + clock_offset_ns : 0;
  out->device = r->deviceId;
  out->stream = r->streamId;
  out->graph_id = r->graphId;
  out->graph_node_id = r->graphNodeId;
}

}  // namespace

bool ConvertActivity(const CUpti_Activity* record, int64_t clock_offset_ns, GpuActivity* out) {
  if (record == nullptr) return false;
  *out = GpuActivity{};
  switch (record->kind) {
    case CUPTI_ACTIVITY_KIND_KERNEL:
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
      const auto* k = reinterpret_cast<const KernelRecord*>(record);
      CopyCommon(k, GpuOpKind::kKernel, clock_offset_ns, out);
      out->name = k->name;
      return true;
    }
    case CUPTI_ACTIVITY_KIND_MEMCPY: {
      const auto* m = reinterpret_cast<const MemcpyRecord*>(record);
      CopyCommon(m, GpuOpKind::kMemcpy, clock_offset_ns, out);
      out->bytes = m->bytes;
      out->copy_kind = CopyKindCode(m->copyKind);
      return true;
    }
    case CUPTI_ACTIVITY_KIND_MEMSET: {
      const auto* m = reinterpret_cast<const MemsetRecord*>(record);
      CopyCommon(m, GpuOpKind::kMemset, clock_offset_ns, out);
      out->bytes = m->bytes;
      return true;
    }
    default:
      return false;
  }
}

}  // namespace tokentrace::cupti
