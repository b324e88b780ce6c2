// The public C API (include/tokentrace/tokentrace.h). Errors never cross this boundary as
// exceptions: every entry point catches and reports through its return value.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/recorder.h"
#include "core/site_registry.h"
#include "preload/shim.h"
#include "session/added_rows.h"
#include "store/added_rows_sql.h"
#include "store/schema.h"
#include "store/store.h"
#include "tokentrace/tokentrace.h"

namespace {

int Fail(const std::string& message, char* err, size_t err_len) {
  if (err != nullptr && err_len > 0) snprintf(err, err_len, "%s", message.c_str());
  return 1;
}

thread_local std::string t_string_result;

}  // namespace

using namespace tokentrace;

extern "C" {

int tokentrace_start(const tokentrace_options* options, char* err, size_t err_len) {
  try {
    if (options != nullptr && (options->struct_size < sizeof(tokentrace_options) ||
                               options->api_version != TOKENTRACE_API_VERSION)) {
      return Fail(
          "tokentrace: tokentrace_start: options struct_size/api_version mismatch (built against "
          "API " +
              std::to_string(TOKENTRACE_API_VERSION) + ")",
          err, err_len);
    }
    std::string error;
    auto config = ConfigFromEnvironment(&error);
    if (!config) return Fail("tokentrace: " + error, err, err_len);
    if (options != nullptr) {
      if (options->out_path != nullptr && *options->out_path != '\0')
        config->out_path = options->out_path;
      if (options->kernels != nullptr && *options->kernels != '\0') {
        auto mode = ParseKernelMode(options->kernels, "kernels", &error);
        if (!mode) return Fail("tokentrace: " + error, err, err_len);
        config->kernels = *mode;
      }
      if (options->token_range != nullptr && *options->token_range != '\0') {
        if (!ValidateTokenRange(options->token_range, "token_range", &error)) {
          return Fail("tokentrace: " + error, err, err_len);
        }
        config->token_range = options->token_range;
      }
    }
    if (!shim::StartSession(*config, false, &error)) return Fail(error, err, err_len);
    return 0;
  } catch (const std::exception& e) {
    return Fail(std::string("tokentrace: tokentrace_start failed: ") + e.what(), err, err_len);
  }
}

int tokentrace_stop(char* err, size_t err_len) {
  try {
    std::string error;
    if (!shim::StopSession(&error)) return Fail(error, err, err_len);
    return 0;
  } catch (const std::exception& e) {
    return Fail(std::string("tokentrace: tokentrace_stop failed: ") + e.what(), err, err_len);
  }
}

int tokentrace_flush(void) {
  try {
    std::string error;
    return shim::FlushSession(&error) ? 0 : 1;
  } catch (...) {
    return 1;
  }
}

int tokentrace_active(void) { return recorder::Active() ? 1 : 0; }

const char* tokentrace_out_path(void) {
  t_string_result = shim::OutPath();
  return t_string_result.c_str();
}

const char* tokentrace_kernels_status(void) {
  t_string_result = shim::KernelsStatus();
  return t_string_result.c_str();
}

uint32_t tokentrace_site(const char* name, int kind) {
  if (name == nullptr) name = "(null)";
  SiteKind k = kind == TOKENTRACE_SITE_ROOT     ? SiteKind::kRoot
               : kind == TOKENTRACE_SITE_MODULE ? SiteKind::kModule
               : kind == TOKENTRACE_SITE_OP     ? SiteKind::kOp
                                                : SiteKind::kRange;
  return sites::Intern(name, k);
}

void tokentrace_push(uint32_t site_id) {
  if (site_id < sites::kMaxSites) recorder::Push(site_id);
}

void tokentrace_pop(void) { recorder::Pop(); }

void tokentrace_current(uint64_t* call_id, uint32_t* token) {
  recorder::CurrentCall c = recorder::Current();
  if (call_id != nullptr) *call_id = c.call_id;
  if (token != nullptr) *token = c.token;
}

void tokentrace_output(uint64_t call_id, const char* path, const char* dtype, int ndim,
                       const int64_t* shape) {
  if (shape == nullptr) ndim = 0;
  recorder::Output(call_id, path, dtype, ndim, shape);
}

uint32_t tokentrace_text(const char* text) {
  return sites::Intern(text != nullptr ? text : "", SiteKind::kText);
}

void tokentrace_output_current(uint32_t path_id, uint32_t dtype_id, int ndim,
                               const int64_t* shape) {
  if (shape == nullptr) ndim = 0;
  recorder::OutputOfCurrent(path_id, dtype_id, ndim, shape);
}

void tokentrace_links(int n, const uint32_t* slots, const uint64_t* tensors,
                      const uint32_t* shapes) {
  recorder::LinksOfCurrent(n, slots, tensors, shapes);
}

void tokentrace_pop_linked(uint64_t output) { recorder::PopWithOutput(output); }

void tokentrace_escape(int kind) {
  // Any other value is one of the four device escapes (the low bits), never out of range.
  recorder::Escape(0, kind == TOKENTRACE_ESCAPE_HOST_READ ? EscapeKind::kHostRead
                                                          : static_cast<EscapeKind>(kind & 3));
}

// The Python layer's rows, meta and losses go to the session's writer (session/added_rows.h).
namespace {

constexpr char kNoSession[] = "tokentrace: no session is recording, so the writer cannot take ";

int Added(std::unique_ptr<AddedItem> item, char* err, size_t err_len) {
  if (!recorder::Active()) {
    return Fail(std::string(kNoSession) + "them (start one first; they were not kept)", err,
                err_len);
  }
  ProcessAddedQueue().Push(std::move(item));
  return 0;
}

}  // namespace

int tokentrace_add_rows(int table, int ncolumns, const char* const* columns, size_t nrows,
                        const tokentrace_value* values, char* err, size_t err_len) {
  try {
    bool known = false;
#define TT_TABLE_KNOWN_(name, value, text, loss) known = known || table == name;
    TOKENTRACE_ROW_TABLES(TT_TABLE_KNOWN_)
#undef TT_TABLE_KNOWN_
    if (!known) {
      return Fail("tokentrace: tokentrace_add_rows: " + std::to_string(table) +
                      " is not a row table (kinds.h TOKENTRACE_ROW_TABLES)",
                  err, err_len);
    }
    if (ncolumns <= 0 || columns == nullptr || (nrows > 0 && values == nullptr)) {
      return Fail("tokentrace: tokentrace_add_rows: no columns, or rows without values", err,
                  err_len);
    }
    if (nrows == 0) return 0;
    auto item = std::make_unique<AddedItem>();
    item->what = AddedItem::What::kRows;
    item->rows.table = static_cast<RowTable>(table);
    for (int c = 0; c < ncolumns; ++c) {
      item->rows.columns.emplace_back(columns[c] != nullptr ? columns[c] : "");
    }
    // The same table and columns as this thread's last hand-over (the walk of a call's inputs
    // hands every call's rows so): checked already, by content, without the schema's lock.
    thread_local int t_checked_table = -1;
    thread_local std::vector<std::string> t_checked_columns;
    if (table != t_checked_table || item->rows.columns != t_checked_columns) {
      std::string error;
      if (!CheckAddedColumns(item->rows.table, item->rows.columns, &error)) {
        return Fail(error, err, err_len);
      }
      t_checked_table = table;
      t_checked_columns = item->rows.columns;
    }
    const size_t n = nrows * static_cast<size_t>(ncolumns);
    item->rows.values.resize(n);
    for (size_t i = 0; i < n; ++i) {
      const tokentrace_value& v = values[i];
      RowValue& out = item->rows.values[i];
      switch (v.type) {
        case TOKENTRACE_VALUE_INT:
          out.type = RowValue::Type::kInt;
          out.i = v.i;
          break;
        case TOKENTRACE_VALUE_REAL:
          out.type = RowValue::Type::kReal;
          out.d = v.d;
          break;
        case TOKENTRACE_VALUE_TEXT:
          if (v.s == nullptr) break;  // NULL
          out.type = RowValue::Type::kText;
          out.s = v.s;
          break;
        default:
          break;  // NULL
      }
    }
    return Added(std::move(item), err, err_len);
  } catch (const std::bad_alloc&) {
    recorder::CountNoMemory(nrows);
    return Fail("tokentrace: out of memory: rows not kept (counted as no_memory)", err, err_len);
  } catch (const std::exception& e) {
    return Fail(std::string("tokentrace: tokentrace_add_rows failed: ") + e.what(), err, err_len);
  }
}

int tokentrace_add_meta(const char* key, const char* value, char* err, size_t err_len) {
  try {
    if (key == nullptr || *key == '\0') {
      return Fail("tokentrace: tokentrace_add_meta: no key", err, err_len);
    }
    bool known = false;
#define TT_META_KNOWN_(name, text) known = known || std::strcmp(key, text) == 0;
    TOKENTRACE_META_KEYS(TT_META_KNOWN_)
#undef TT_META_KNOWN_
    if (!known) {
      return Fail(std::string("tokentrace: tokentrace_add_meta: '") + key +
                      "' is not a meta key (kinds.h TOKENTRACE_META_KEYS lists them)",
                  err, err_len);
    }
    auto item = std::make_unique<AddedItem>();
    item->what = AddedItem::What::kMeta;
    item->key = key;
    item->value = value != nullptr ? value : "";
    return Added(std::move(item), err, err_len);
  } catch (const std::exception& e) {
    return Fail(std::string("tokentrace: tokentrace_add_meta failed: ") + e.what(), err, err_len);
  }
}

int tokentrace_add_loss(int kind, int64_t count, char* err, size_t err_len) {
  try {
    bool known = false;
#define TT_LOSS_KNOWN_(name, value, text) known = known || kind == name;
    TOKENTRACE_LOSS_KINDS(TT_LOSS_KNOWN_)
#undef TT_LOSS_KNOWN_
    if (!known) {
      return Fail("tokentrace: tokentrace_add_loss: " + std::to_string(kind) +
                      " is not a loss kind (kinds.h TOKENTRACE_LOSS_KINDS)",
                  err, err_len);
    }
    if (count == 0) return 0;
    auto item = std::make_unique<AddedItem>();
    item->what = AddedItem::What::kLoss;
    item->loss = static_cast<LossKind>(kind);
    item->count = count;
    return Added(std::move(item), err, err_len);
  } catch (const std::exception& e) {
    return Fail(std::string("tokentrace: tokentrace_add_loss failed: ") + e.what(), err, err_len);
  }
}

const char* tokentrace_default_kernel_mode(void) {
  static const std::string mode = Config().kernels.ToString();
  return mode.c_str();
}

const char* tokentrace_kernel_modes_accepted(void) { return kAcceptedKernelModes; }

int tokentrace_parse_kernel_mode(const char* text, const char* what, char* out, size_t out_len,
                                 char* err, size_t err_len) {
  try {
    std::string error;
    const auto mode =
        ParseKernelMode(text != nullptr ? text : "", what != nullptr ? what : "kernels", &error);
    if (!mode) return Fail(error, err, err_len);
    if (out != nullptr && out_len > 0) snprintf(out, out_len, "%s", mode->ToString().c_str());
    return 0;
  } catch (const std::exception& e) {
    return Fail(std::string("tokentrace: tokentrace_parse_kernel_mode failed: ") + e.what(), err,
                err_len);
  }
}

const char* tokentrace_schema_sql(void) { return kSchemaSql; }

const char* tokentrace_tokens_select_sql(void) { return kTokensSelectSql; }

const char* tokentrace_tokens_scan_sql(void) { return kTokensScanSql; }

const char* tokentrace_meta_summaries(void) { return kMetaSummaries; }

int tokentrace_schema_version(void) { return std::atoi(kSchemaVersion); }

int tokentrace_oldest_readable_schema(void) { return kOldestReadableSchema; }

int tokentrace_file_being_written(const char* path) {
  try {
    return path != nullptr && Store::BeingWritten(path) ? 1 : 0;
  } catch (const std::exception&) {
    return 0;  // a std::string that cannot be made: no file we could say anything of
  }
}

const tokentrace_api* tokentrace_get_api(void) {
  static const tokentrace_api api = {
      sizeof(tokentrace_api),     TOKENTRACE_API_VERSION, &tokentrace_site,
      &tokentrace_push,           &tokentrace_pop,        &tokentrace_text,
      &tokentrace_output_current, &tokentrace_escape,     &tokentrace_links,
      &tokentrace_pop_linked,     &tokentrace_add_rows,   &tokentrace_add_meta,
      &tokentrace_add_loss,
  };
  return &api;
}

}  // extern "C"
