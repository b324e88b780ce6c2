#include "core/records.h"

namespace tokentrace {

#define TT_KIND_CASE_(name, value, text) \
  case name:                             \
    return text;

const char* SiteKindName(SiteKind kind) {
  if (kind == SiteKind::kText) return "text";
  switch (static_cast<int>(kind)) { TOKENTRACE_SITE_KINDS(TT_KIND_CASE_) }
  return "range";
}

const char* GpuOpKindName(GpuOpKind kind) {
  switch (kind) {
    case GpuOpKind::kKernel:
      return "kernel";
    case GpuOpKind::kMemcpy:
      return "memcpy";
    case GpuOpKind::kMemset:
      return "memset";
  }
  return "kernel";
}

const char* EscapeKindName(EscapeKind kind) {
  switch (static_cast<int>(kind)) { TOKENTRACE_ESCAPE_KINDS(TT_KIND_CASE_) }
  return "stream_sync";
}

const char* LossKindName(LossKind kind) {
  switch (kind) { TOKENTRACE_LOSS_KINDS(TT_KIND_CASE_) }
  return "unknown";
}

#undef TT_KIND_CASE_

const char* RowTableName(RowTable table) {
#define TT_TABLE_NAME_(name, value, text, loss) \
  case name:                                    \
    return text;
  switch (table) { TOKENTRACE_ROW_TABLES(TT_TABLE_NAME_) }
#undef TT_TABLE_NAME_
  return "unknown";
}

LossKind RowTableLoss(RowTable table) {
#define TT_TABLE_LOSS_(name, value, text, loss) \
  case name:                                    \
    return loss;
  switch (table) { TOKENTRACE_ROW_TABLES(TT_TABLE_LOSS_) }
#undef TT_TABLE_LOSS_
  return TOKENTRACE_LOSS_WRITE_FAILED_INPUTS;
}

}  // namespace tokentrace
