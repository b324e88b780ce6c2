/* tokentrace public C API.
 *
 * Hermetic: this header includes no CUDA, CUPTI or NVTX header. It is what the Python
 * extension and C/C++ users compile against; libtokentrace.so implements it.
 *
 * Two ways to record:
 *  - preload: `tokentrace run -- CMD` (LD_PRELOAD=libtokentrace.so); a session starts in the
 *    library's constructor from the TOKENTRACE_* environment and ends at process exit.
 *  - in-process: tokentrace_start() / tokentrace_stop() around the code to trace.
 * One session per process at a time. Every function is safe to call with no session active
 * (push/pop/escape then do nothing). No function throws or aborts; errors are returned.
 */
#ifndef TOKENTRACE_TOKENTRACE_H_
#define TOKENTRACE_TOKENTRACE_H_

#include <stddef.h>
#include <stdint.h>

#include "tokentrace/kinds.h"      /* site and escape kinds */
#include "tokentrace/shape_hash.h" /* the shape hash of op data flow */

#ifdef __cplusplus
extern "C" {
#endif

/* 2: tokentrace_current lost its `k` argument (always 0 in 1). */
#define TOKENTRACE_API_VERSION 2

#if defined(__GNUC__)
#define TOKENTRACE_EXPORT __attribute__((visibility("default")))
#else
#define TOKENTRACE_EXPORT
#endif

/* NVTX conventions of the producer side (our Python hooks): ranges pushed in the NVTX domain
 * named TOKENTRACE_NVTX_DOMAIN; event attribute `category` TOKENTRACE_NVTX_CATEGORY_ROOT marks
 * the root (token) call, anything else is a module call. */
#define TOKENTRACE_NVTX_DOMAIN "tokentrace"
#define TOKENTRACE_NVTX_CATEGORY_MODULE 1
#define TOKENTRACE_NVTX_CATEGORY_ROOT 2

/* Op records push and pop a call per ATen op (3 ring events with its output, 4 to 5 with its
 * data flow): a decode step can make thousands. With op records on and
 * TOKENTRACE_BUFFER_EVENTS unset, the per-thread ring gets this many events (48 B each,
 * 48 MiB) instead of the default, so a 200 ms flush period holds some 200,000 ops. */
#define TOKENTRACE_OPS_BUFFER_EVENTS (1u << 20)
/* The largest call number k and token number: both are 32 bits in the recorder's events and
 * in the patch table's call selectors (cuda/patch_table.h), numbered from 1. */
#define TOKENTRACE_MAX_CALL_NUMBER 4294967295u

/* The meta key the writer adds when it closes the file (its last write): a file without it was
 * not finished (the job was killed, or the file was copied while it ran). */
#define TOKENTRACE_META_CLOSED "clock_anchor_exit"

typedef struct tokentrace_options {
  uint32_t struct_size;    /* sizeof(tokentrace_options) */
  uint32_t api_version;    /* TOKENTRACE_API_VERSION */
  const char* out_path;    /* NULL: TOKENTRACE_OUT, else "tokentrace-%p.sqlite" */
  const char* kernels;     /* NULL: TOKENTRACE_KERNELS, else "summary" */
  const char* token_range; /* NULL: TOKENTRACE_TOKEN_RANGE, else none */
} tokentrace_options;

/* Starts an in-process session. Returns 0, or non-zero with a one-line message in err
 * (e.g. a bad kernel mode, an unwritable path, a session already active). */
TOKENTRACE_EXPORT int tokentrace_start(const tokentrace_options* options, char* err,
                                       size_t err_len);
/* Stops the session: flushes every buffer and CUPTI, writes the file, closes it. */
TOKENTRACE_EXPORT int tokentrace_stop(char* err, size_t err_len);
/* Forces a drain and commit now (the background thread does this periodically). */
TOKENTRACE_EXPORT int tokentrace_flush(void);
/* 1 while a session records. */
TOKENTRACE_EXPORT int tokentrace_active(void);
/* The expanded output path of the active (or last) session; "" if none. */
TOKENTRACE_EXPORT const char* tokentrace_out_path(void);
/* Why GPU kernels are not recorded ("" when they are): no driver, no libcupti, another
 * subscriber, kernel mode off. */
TOKENTRACE_EXPORT const char* tokentrace_kernels_status(void);

/* Direct producer API (an alternative to NVTX): intern a site, push/pop calls of it. */
TOKENTRACE_EXPORT uint32_t tokentrace_site(const char* name, int kind);
TOKENTRACE_EXPORT void tokentrace_push(uint32_t site_id);
TOKENTRACE_EXPORT void tokentrace_pop(void);

/* The innermost open call on the calling thread and its token (both zero when none). Its call
 * number k is not known here: the background thread numbers calls per site (API version 1
 * had a `k` argument that was always 0). */
TOKENTRACE_EXPORT void tokentrace_current(uint64_t* call_id, uint32_t* token);
/* Records the first output tensor of call `call_id` (from tokentrace_current): where it sat in
 * the output ("" = the output itself, "logits", "[0]"), its dtype name and its shape (`ndim`
 * entries, of which at most the first 10 are read). Stored in call_outputs: up to 5 dims, or
 * up to 10 when each is below 65536; a longer shape keeps its first 5 dims and is counted as
 * the loss "output_dims_truncated". */
TOKENTRACE_EXPORT void tokentrace_output(uint64_t call_id, const char* path, const char* dtype,
                                         int ndim, const int64_t* shape);
/* Interns a text (an output path or a dtype name) and returns its id, stable for the life of
 * the process; for tokentrace_output_current. */
TOKENTRACE_EXPORT uint32_t tokentrace_text(const char* text);
/* tokentrace_output for the innermost open call on the calling thread, with path and dtype
 * given as tokentrace_text ids: no string work per call. Does nothing when no call is open. */
TOKENTRACE_EXPORT void tokentrace_output_current(uint32_t path_id, uint32_t dtype_id, int ndim,
                                                 const int64_t* shape);
/* Records a host read of device state (kind 4: reported by the Python layer or, with op
 * records on a CPU model, by the op observer). */
TOKENTRACE_EXPORT void tokentrace_escape(int kind);
/* Op data flow (op records): the innermost open call on the calling thread read or returned
 * the `n` tensors whose identities (TensorImpl addresses) are tensors[i], in slots[i]: an
 * argument's index (a list's tensors share it), or TOKENTRACE_LINK_OUTPUT (kinds.h) | an
 * output's index (below 2^31 - 1); shapes[i] is a hash of an input's shape (0: not known;
 * `shapes` may be NULL). Stored in op_links (two a ring event); a reader joins each input to
 * the op that last returned the same tensor. Does nothing when no call is open. */
TOKENTRACE_EXPORT void tokentrace_links(int n, const uint32_t* slots, const uint64_t* tensors,
                                        const uint32_t* shapes);
/* tokentrace_pop for an op whose output 0 is the tensor of identity `output` (0: none): its
 * data flow entry TOKENTRACE_LINK_OUTPUT | 0 rides in the pop's ring event. */
TOKENTRACE_EXPORT void tokentrace_pop_linked(uint64_t output);

/* Rows of the Python layer (the tables of TOKENTRACE_ROW_TABLES, kinds.h), meta rows and loss
 * counts, handed to the session's writer: it writes them in the same transaction as the calls
 * recorded before them, at the same cadence, under the same rules (a SIGTERM's or SIGKILL's
 * last commit, a full disk: counted by table as write_failed_*), so no other connection ever
 * writes the file. From any thread; lock-free (a signal stop never waits for an adding thread).
 * Each returns 0, or non-zero with a one-line message in err (no session records; an unknown
 * table, column or loss kind). */
#define TOKENTRACE_VALUE_NULL 0
#define TOKENTRACE_VALUE_INT 1
#define TOKENTRACE_VALUE_REAL 2
#define TOKENTRACE_VALUE_TEXT 3
typedef struct tokentrace_value {
  int type;      /* TOKENTRACE_VALUE_* */
  int64_t i;     /* INT */
  double d;      /* REAL */
  const char* s; /* TEXT: NUL-terminated UTF-8, copied */
} tokentrace_value;
/* `nrows` rows of `ncolumns` values each (row-major), the columns named by `columns` (the
 * table's, schema.sql). */
TOKENTRACE_EXPORT int tokentrace_add_rows(int table, int ncolumns, const char* const* columns,
                                          size_t nrows, const tokentrace_value* values, char* err,
                                          size_t err_len);
/* A meta row (upserted: the last value of a key wins). */
TOKENTRACE_EXPORT int tokentrace_add_meta(const char* key, const char* value, char* err,
                                          size_t err_len);
/* Adds `count` to loss kind `kind` (kinds.h). */
TOKENTRACE_EXPORT int tokentrace_add_loss(int kind, int64_t count, char* err, size_t err_len);

/* Kernel modes: "off" | "summary" | "full" | "sample:N" (N >= 1). The recorder's parser is the
 * one judge of a mode; the Python layer asks it through these. Both strings are static. */
TOKENTRACE_EXPORT const char* tokentrace_default_kernel_mode(void);   /* "summary" */
TOKENTRACE_EXPORT const char* tokentrace_kernel_modes_accepted(void); /* as errors say them */
/* Parses `text` as a kernel mode. Returns 0 and writes its canonical spelling ("sample:4") into
 * out; or non-zero with a one-line message naming `what` (NULL: "kernels") in err. Both buffers
 * are the caller's (either may be NULL) and are truncated to their lengths; 32 bytes hold any
 * mode. */
TOKENTRACE_EXPORT int tokentrace_parse_kernel_mode(const char* text, const char* what, char* out,
                                                   size_t out_len, char* err, size_t err_len);

/* The trace file's schema (src/store/schema.sql, embedded at build time). Static strings. */
TOKENTRACE_EXPORT const char* tokentrace_schema_sql(void);        /* the DDL of a fresh file */
TOKENTRACE_EXPORT const char* tokentrace_tokens_select_sql(void); /* the tokens view's SELECT */
/* the tokens_from_calls view's SELECT: tokens computed from the calls, for files without the
 * writer's summaries (no meta key tokentrace_meta_summaries()) */
TOKENTRACE_EXPORT const char* tokentrace_tokens_scan_sql(void);
TOKENTRACE_EXPORT const char* tokentrace_meta_summaries(void); /* the meta key of summaries */
TOKENTRACE_EXPORT int tokentrace_schema_version(void);         /* what the writer writes */
TOKENTRACE_EXPORT int tokentrace_oldest_readable_schema(void); /* what readers still open */
/* 1 while a writer has the trace file at `path` open (it holds a shared flock on it for its
 * whole life), else 0 (no such file, or no writer). Readers use it to decide whether the
 * -shm file they made may be removed. */
TOKENTRACE_EXPORT int tokentrace_file_being_written(const char* path);

/* The entry points above as one versioned table, for code that reaches libtokentrace.so only
 * by an address (the torch ops library's op observer: it does not link libtokentrace.so, and
 * the Python extension's copy is not in the global symbol scope). A caller checks
 * struct_size >= the end of the last entry it calls, and api_version == TOKENTRACE_API_VERSION.
 * New entries go at the end; a changed signature bumps TOKENTRACE_API_VERSION.
 *
 *   offset  0  struct_size, api_version (uint32_t each)
 *   offset  8  site, push, pop, text, output_current, escape, links, pop_linked, add_rows,
 *              add_meta, add_loss (one pointer each)
 */
typedef struct tokentrace_api {
  uint32_t struct_size; /* sizeof(tokentrace_api) of the library */
  uint32_t api_version; /* TOKENTRACE_API_VERSION of the library */
  uint32_t (*site)(const char* name, int kind);
  void (*push)(uint32_t site_id);
  void (*pop)(void);
  uint32_t (*text)(const char* text);
  void (*output_current)(uint32_t path_id, uint32_t dtype_id, int ndim, const int64_t* shape);
  void (*escape)(int kind);
  void (*links)(int n, const uint32_t* slots, const uint64_t* tensors,
                const uint32_t* shapes); /* after escape */
  void (*pop_linked)(uint64_t output);
  int (*add_rows)(int table, int ncolumns, const char* const* columns, size_t nrows,
                  const tokentrace_value* values, char* err, size_t err_len);
  int (*add_meta)(const char* key, const char* value, char* err, size_t err_len);
  int (*add_loss)(int kind, int64_t count, char* err, size_t err_len);
} tokentrace_api;

/* The library's table: static, never NULL, valid for the life of the process. */
TOKENTRACE_EXPORT const tokentrace_api* tokentrace_get_api(void);

#ifdef __cplusplus
}
#endif

#endif /* TOKENTRACE_TOKENTRACE_H_ */
