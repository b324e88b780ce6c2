/* Kinds shared by the C++ recorder, the trace file and the Python layer: the one copy.
 *
 * Site kinds are sites.kind in the trace file; escape kinds name escapes.kind; loss kinds are
 * the keys of the losses table; row tables are the tables the Python layer fills through the
 * writer. The Python extension exports them all (tokentrace._native: SITE_KINDS, ESCAPE_KINDS,
 * LOSS_KINDS, ROW_TABLES); README.md says what each loss means. C-compatible (the C API takes a
 * site kind, an escape kind and a row table): no header beyond this one. */
#ifndef TOKENTRACE_KINDS_H_
#define TOKENTRACE_KINDS_H_

/* X(ENUMERATOR, value, "name"): the list macros let C++ and the extension build their tables
 * from the one list. */
#define TOKENTRACE_SITE_KINDS(X)                                \
  X(TOKENTRACE_SITE_ROOT, 0, "root") /* one call = one token */ \
  X(TOKENTRACE_SITE_MODULE, 1, "module")                        \
  X(TOKENTRACE_SITE_RANGE, 2, "range")                          \
  X(TOKENTRACE_SITE_OP, 3, "op") /* an ATen op (op records), nested in a module call */

/* Where the host waited for, or read, device state. */
#define TOKENTRACE_ESCAPE_KINDS(X)                                                            \
  X(TOKENTRACE_ESCAPE_MEMCPY_DTOH_SYNC, 0, "memcpy_dtoh_sync") /* cudaMemcpy, cuMemcpyDtoH */ \
  X(TOKENTRACE_ESCAPE_STREAM_SYNC, 1, "stream_sync")           /* cudaStreamSynchronize */    \
  X(TOKENTRACE_ESCAPE_DEVICE_SYNC, 2, "device_sync")           /* cudaDeviceSynchronize */    \
  X(TOKENTRACE_ESCAPE_EVENT_SYNC, 3, "event_sync")             /* cudaEventSynchronize */     \
  X(TOKENTRACE_ESCAPE_HOST_READ, 4, "host_read")               /* reported by the Python layer */

/* What could not be recorded, or not fully (never silent: counted in the losses table). */
#define TOKENTRACE_LOSS_KINDS(X)                                                           \
  X(TOKENTRACE_LOSS_BUFFER_FULL, 0, "buffer_full")                                         \
  X(TOKENTRACE_LOSS_CUPTI_DROPPED, 1, "cupti_dropped")                                     \
  X(TOKENTRACE_LOSS_GPU_WAIT_TIMEOUT, 2, "gpu_wait_timeout")                               \
  X(TOKENTRACE_LOSS_UNKNOWN_CORRELATION, 3, "unknown_correlation")                         \
  X(TOKENTRACE_LOSS_UNKNOWN_GRAPH_NODE, 4, "unknown_graph_node")                           \
  X(TOKENTRACE_LOSS_GPU_TIME_MISSING, 5, "gpu_time_missing")                               \
  X(TOKENTRACE_LOSS_UNBALANCED_POP, 6, "unbalanced_pop")                                   \
  X(TOKENTRACE_LOSS_UNCLOSED_RANGE, 7, "unclosed_range")                                   \
  X(TOKENTRACE_LOSS_DEPTH_OVERFLOW, 8, "depth_overflow")                                   \
  X(TOKENTRACE_LOSS_SITE_OVERFLOW, 9, "site_overflow")                                     \
  X(TOKENTRACE_LOSS_AFTER_THREAD_EXIT, 10, "after_thread_exit")                            \
  X(TOKENTRACE_LOSS_OUTPUT_DIMS_TRUNCATED, 11, "output_dims_truncated")                    \
  X(TOKENTRACE_LOSS_WRITE_FAILED_CALLS, 12, "write_failed_calls")                          \
  X(TOKENTRACE_LOSS_WRITE_FAILED_KERNELS, 13, "write_failed_kernels")                      \
  X(TOKENTRACE_LOSS_WRITE_FAILED_ESCAPES, 14, "write_failed_escapes")                      \
  X(TOKENTRACE_LOSS_WRITE_FAILED_OUTPUTS, 15, "write_failed_outputs")                      \
  X(TOKENTRACE_LOSS_SAVE_FAILED, 16, "save_failed")     /* counted by the Python layer */  \
  X(TOKENTRACE_LOSS_INPUTS_FAILED, 17, "inputs_failed") /* counted by the Python layer */  \
  X(TOKENTRACE_LOSS_SIGNAL_DEADLINE, 18, "signal_deadline")                                \
  X(TOKENTRACE_LOSS_COMPILED_UNATTRIBUTED, 19, "compiled_unattributed") /* Python layer */ \
  X(TOKENTRACE_LOSS_NO_MEMORY, 20, "no_memory")                                            \
  X(TOKENTRACE_LOSS_WRITE_FAILED_LINKS, 21, "write_failed_links")                          \
  X(TOKENTRACE_LOSS_WRITE_FAILED_INPUTS, 22, "write_failed_inputs")                        \
  X(TOKENTRACE_LOSS_WRITE_FAILED_SAVED, 23, "write_failed_saved")                          \
  X(TOKENTRACE_LOSS_WRITE_FAILED_ESCAPE_SITES, 24, "write_failed_escape_sites")            \
  X(TOKENTRACE_LOSS_WRITE_FAILED_STEPS, 25, "write_failed_steps")                          \
  X(TOKENTRACE_LOSS_WRITE_FAILED_REQUESTS, 26, "write_failed_requests")

/* The tables the Python layer fills (tokentrace_add_rows): the session's writer writes their
 * rows in the transactions of the calls they belong to, and counts the rows of a write that
 * failed (a full disk) under the loss kind given here. X(ENUMERATOR, value, "table", loss). */
#define TOKENTRACE_ROW_TABLES(X)                                                                \
  X(TOKENTRACE_ROWS_CALL_INPUTS, 0, "call_inputs", TOKENTRACE_LOSS_WRITE_FAILED_INPUTS)         \
  X(TOKENTRACE_ROWS_SAVED_OUTPUTS, 1, "saved_outputs", TOKENTRACE_LOSS_WRITE_FAILED_SAVED)      \
  X(TOKENTRACE_ROWS_ESCAPE_SITES, 2, "escape_sites", TOKENTRACE_LOSS_WRITE_FAILED_ESCAPE_SITES) \
  X(TOKENTRACE_ROWS_STEP_REQUESTS, 3, "step_requests", TOKENTRACE_LOSS_WRITE_FAILED_STEPS)      \
  X(TOKENTRACE_ROWS_REQUEST_EVENTS, 4, "request_events", TOKENTRACE_LOSS_WRITE_FAILED_REQUESTS)

/* Op data flow (tokentrace_links, the op_links table): a slot with this bit is an output's
 * index, without it an argument's; the argument slot TOKENTRACE_LINK_ARGS holds no tensor but
 * a hash of the op's non-tensor arguments. */
#define TOKENTRACE_LINK_OUTPUT 0x80000000u
#define TOKENTRACE_LINK_ARGS 0x7fffffffu

#define TOKENTRACE_KIND_ENUMERATOR_(name, value, text) name = value,
enum tokentrace_site_kind { TOKENTRACE_SITE_KINDS(TOKENTRACE_KIND_ENUMERATOR_) };
enum tokentrace_escape_kind { TOKENTRACE_ESCAPE_KINDS(TOKENTRACE_KIND_ENUMERATOR_) };
enum tokentrace_loss_kind { TOKENTRACE_LOSS_KINDS(TOKENTRACE_KIND_ENUMERATOR_) };
#undef TOKENTRACE_KIND_ENUMERATOR_
#define TOKENTRACE_TABLE_ENUMERATOR_(name, value, text, loss) name = value,
enum tokentrace_row_table { TOKENTRACE_ROW_TABLES(TOKENTRACE_TABLE_ENUMERATOR_) };
#undef TOKENTRACE_TABLE_ENUMERATOR_

#endif /* TOKENTRACE_KINDS_H_ */
