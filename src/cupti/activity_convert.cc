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

bool ConvertActivity(const CUpti_Activity* record, int64_t clock_offset_ns, GpuActivity* out) {
  if (record == nullptr) return false;
  *out = GpuActivity{};
  switch (record->kind) {
    case CUPTI_ACTIVITY_KIND_KERNEL:
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
      const auto* k = reinterpret_cast<const KernelRecord*>(record);
      out->kind = GpuOpKind::kKernel;
      out->correlation_id = k->correlationId;
      out->begin_ns = static_cast<int64_t>(k->start) + clock_offset_ns;
      out->end_ns = static_cast<int64_t>(k->end) + clock_offset_ns;
      out->device = k->deviceId;
      out->stream = k->streamId;
      out->graph_id = k->graphId;
      out->graph_node_id = k->graphNodeId;
      out->name = k->name;
      return true;
    }
    case CUPTI_ACTIVITY_KIND_MEMCPY: {
      const auto* m = reinterpret_cast<const MemcpyRecord*>(record);
      out->kind = GpuOpKind::kMemcpy;
      out->correlation_id = m->correlationId;
      out->begin_ns = static_cast<int64_t>(m->start) + clock_offset_ns;
      out->end_ns = static_cast<int64_t>(m->end) + clock_offset_ns;
      out->device = m->deviceId;
      out->stream = m->streamId;
      out->graph_id = m->graphId;
      out->graph_node_id = m->graphNodeId;
      out->bytes = m->bytes;
      out->copy_kind = CopyKindCode(m->copyKind);
      return true;
    }
    case CUPTI_ACTIVITY_KIND_MEMSET: {
      const auto* m = reinterpret_cast<const MemsetRecord*>(record);
      out->kind = GpuOpKind::kMemset;
      out->correlation_id = m->correlationId;
      out->begin_ns = static_cast<int64_t>(m->start) + clock_offset_ns;
      out->end_ns = static_cast<int64_t>(m->end) + clock_offset_ns;
      out->device = m->deviceId;
      out->stream = m->streamId;
      out->graph_id = m->graphId;
      out->graph_node_id = m->graphNodeId;
      out->bytes = m->bytes;
      return true;
    }
    default:
      return false;
  }
}

}  // namespace tokentrace::cupti
