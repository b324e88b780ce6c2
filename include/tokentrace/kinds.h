/* Kinds shared by the C++ recorder, the trace file and the Python layer: the one copy.
 *
 * Site kinds are sites.kind in the trace file; escape kinds name escapes.kind; loss kinds are
 * the keys of the losses table; row tables are the tables the Python layer fills through the
 * writer, and the meta keys. The Python extension exports them all (tokentrace._native:
 * SITE_KINDS, ESCAPE_KINDS, LOSS_KINDS, ROW_TABLES, META_KEYS); README.md says what each loss
 * means. C-compatible (the C API takes a site kind, an escape kind and a row table): no header
 * beyond this one. */
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
#define TOKENTRACE_LOSS_KINDS(X)                                                                \
  X(TOKENTRACE_LOSS_BUFFER_FULL, 0, "buffer_full")                                              \
  X(TOKENTRACE_LOSS_CUPTI_DROPPED, 1, "cupti_dropped")                                          \
  X(TOKENTRACE_LOSS_GPU_WAIT_TIMEOUT, 2, "gpu_wait_timeout")                                    \
  X(TOKENTRACE_LOSS_UNKNOWN_CORRELATION, 3, "unknown_correlation")                              \
  X(TOKENTRACE_LOSS_UNKNOWN_GRAPH_NODE, 4, "unknown_graph_node")                                \
  X(TOKENTRACE_LOSS_GPU_TIME_MISSING, 5, "gpu_time_missing")                                    \
  X(TOKENTRACE_LOSS_UNBALANCED_POP, 6, "unbalanced_pop")                                        \
  X(TOKENTRACE_LOSS_UNCLOSED_RANGE, 7, "unclosed_range")                                        \
  X(TOKENTRACE_LOSS_DEPTH_OVERFLOW, 8, "depth_overflow")                                        \
  X(TOKENTRACE_LOSS_SITE_OVERFLOW, 9, "site_overflow")                                          \
  X(TOKENTRACE_LOSS_AFTER_THREAD_EXIT, 10, "after_thread_exit")                                 \
  X(TOKENTRACE_LOSS_OUTPUT_DIMS_TRUNCATED, 11, "output_dims_truncated")                         \
  X(TOKENTRACE_LOSS_WRITE_FAILED_CALLS, 12, "write_failed_calls")                               \
  X(TOKENTRACE_LOSS_WRITE_FAILED_KERNELS, 13, "write_failed_kernels")                           \
  X(TOKENTRACE_LOSS_WRITE_FAILED_ESCAPES, 14, "write_failed_escapes")                           \
  X(TOKENTRACE_LOSS_WRITE_FAILED_OUTPUTS, 15, "write_failed_outputs")                           \
  X(TOKENTRACE_LOSS_SAVE_FAILED, 16, "save_failed")     /* counted by the Python layer */       \
  X(TOKENTRACE_LOSS_INPUTS_FAILED, 17, "inputs_failed") /* counted by the Python layer */       \
  X(TOKENTRACE_LOSS_SIGNAL_DEADLINE, 18, "signal_deadline")                                     \
  X(TOKENTRACE_LOSS_COMPILED_UNATTRIBUTED, 19, "compiled_unattributed") /* Python layer */      \
  X(TOKENTRACE_LOSS_NO_MEMORY, 20, "no_memory")                                                 \
  X(TOKENTRACE_LOSS_WRITE_FAILED_LINKS, 21, "write_failed_links")                               \
  X(TOKENTRACE_LOSS_WRITE_FAILED_INPUTS, 22, "write_failed_inputs")                             \
  X(TOKENTRACE_LOSS_WRITE_FAILED_SAVED, 23, "write_failed_saved")                               \
  X(TOKENTRACE_LOSS_WRITE_FAILED_ESCAPE_SITES, 24, "write_failed_escape_sites")                 \
  X(TOKENTRACE_LOSS_WRITE_FAILED_STEPS, 25, "write_failed_steps")                               \
  X(TOKENTRACE_LOSS_WRITE_FAILED_REQUESTS, 26, "write_failed_requests")                         \
  X(TOKENTRACE_LOSS_WRITE_FAILED_TOKEN_TEXT, 27, "write_failed_token_text")                     \
  X(TOKENTRACE_LOSS_TOKEN_IDS_UNREAD, 28, "token_ids_unread") /* counted by the Python layer */ \
  X(TOKENTRACE_LOSS_IMPORT_OUTSIDE_RANGES, 29, "import_outside_ranges") /* tokentrace import */

/* The tables the Python layer fills (tokentrace_add_rows): the session's writer writes their
 * rows in the transactions of the calls they belong to, and counts the rows of a write that
 * failed (a full disk) under the loss kind given here. X(ENUMERATOR, value, "table", loss). */
#define TOKENTRACE_ROW_TABLES(X)                                                                \
  X(TOKENTRACE_ROWS_CALL_INPUTS, 0, "call_inputs", TOKENTRACE_LOSS_WRITE_FAILED_INPUTS)         \
  X(TOKENTRACE_ROWS_SAVED_OUTPUTS, 1, "saved_outputs", TOKENTRACE_LOSS_WRITE_FAILED_SAVED)      \
  X(TOKENTRACE_ROWS_ESCAPE_SITES, 2, "escape_sites", TOKENTRACE_LOSS_WRITE_FAILED_ESCAPE_SITES) \
  X(TOKENTRACE_ROWS_STEP_REQUESTS, 3, "step_requests", TOKENTRACE_LOSS_WRITE_FAILED_STEPS)      \
  X(TOKENTRACE_ROWS_REQUEST_EVENTS, 4, "request_events", TOKENTRACE_LOSS_WRITE_FAILED_REQUESTS) \
  X(TOKENTRACE_ROWS_TOKEN_TEXT, 5, "token_text", TOKENTRACE_LOSS_WRITE_FAILED_TOKEN_TEXT)

/* The keys of a trace file's meta table: every key the session's writer writes or the Python
 * layer hands over (tokentrace_add_meta refuses any other, so a new key is added here first).
 * The extension exports them (tokentrace._native.META_KEYS); docs/trace-file.md says what
 * each holds. X(ENUMERATOR, "key"). */
#define TOKENTRACE_META_KEYS(X)                                                         \
  /* the writer: the file, the session, the process */                                  \
  X(TOKENTRACE_META_SCHEMA_VERSION, "schema_version")                                   \
  X(TOKENTRACE_META_SUMMARIES, "summaries")                                             \
  X(TOKENTRACE_META_TOKEN_BLOCK, "token_block")                                         \
  X(TOKENTRACE_META_TOOL_VERSION, "tool_version")                                       \
  X(TOKENTRACE_META_PID, "pid")                                                         \
  X(TOKENTRACE_META_KERNEL_MODE, "kernel_mode")                                         \
  X(TOKENTRACE_META_KERNELS_STATUS, "kernels_status")                                   \
  X(TOKENTRACE_META_KERNELS_OFF, "kernels_off")                                         \
  X(TOKENTRACE_META_CUPTI, "cupti")                                                     \
  X(TOKENTRACE_META_TOKEN_RANGE, "token_range")                                         \
  X(TOKENTRACE_META_MODE, "mode")                                                       \
  X(TOKENTRACE_META_OUT_PATH, "out_path")                                               \
  X(TOKENTRACE_META_EVENTS, "events")                                                   \
  X(TOKENTRACE_META_RUN_ID, "run_id")                                                   \
  X(TOKENTRACE_META_EXIT_SIGNAL, "exit_signal")                                         \
  X(TOKENTRACE_META_EXIT_EXEC, "exit_exec")                                             \
  X(TOKENTRACE_META_CLOCK_ANCHOR_START, "clock_anchor_start")                           \
  X(TOKENTRACE_META_CLOCK_ANCHOR_LAST, "clock_anchor_last")                             \
  X(TOKENTRACE_META_CLOCK_ANCHOR_EXIT, "clock_anchor_exit")                             \
  X(TOKENTRACE_META_IMPORTED_FROM, "imported_from")                                     \
  X(TOKENTRACE_META_IMPORT_FORMAT, "import_format")                                     \
  /* the launch: ranks and hosts */                                                     \
  X(TOKENTRACE_META_RANK, "rank")                                                       \
  X(TOKENTRACE_META_LOCAL_RANK, "local_rank")                                           \
  X(TOKENTRACE_META_WORLD_SIZE, "world_size")                                           \
  X(TOKENTRACE_META_GROUP_RANK, "group_rank")                                           \
  X(TOKENTRACE_META_HOST, "host")                                                       \
  X(TOKENTRACE_META_LAUNCH_ID, "launch_id")                                             \
  X(TOKENTRACE_META_LAUNCH_ID_FROM, "launch_id_from")                                   \
  /* the Python layer: the recording */                                                 \
  X(TOKENTRACE_META_MODEL, "model")                                                     \
  X(TOKENTRACE_META_ROOT, "root")                                                       \
  X(TOKENTRACE_META_ASSISTANT, "assistant")                                             \
  X(TOKENTRACE_META_INPUTS_OF, "inputs_of")                                             \
  X(TOKENTRACE_META_PYTHON_SAVE_ERRORS, "python_save_errors")                           \
  X(TOKENTRACE_META_OP_PARAMS, "op_params")                                             \
  X(TOKENTRACE_META_PATCH_FIRES, "patch_fires")                                         \
  X(TOKENTRACE_META_TOKENIZER, "tokenizer")                                             \
  X(TOKENTRACE_META_COMPILED_KERNELS, "compiled_kernels")                               \
  X(TOKENTRACE_META_COMPILED_GRAPH_REGIONS, "compiled_graph_regions")                   \
  X(TOKENTRACE_META_COMPILED_UNRECORDED, "compiled_unrecorded")                         \
  X(TOKENTRACE_META_COMPILED_UNRECORDED_REGIONS, "compiled_unrecorded_regions")         \
  X(TOKENTRACE_META_COMPILED_UNMAPPED, "compiled_unmapped")                             \
  /* the Python layer: a serving engine's processes */                                  \
  X(TOKENTRACE_META_ENGINE, "engine")                                                   \
  X(TOKENTRACE_META_ROLE, "role")                                                       \
  X(TOKENTRACE_META_ENGINE_STEPS, "engine_steps")                                       \
  X(TOKENTRACE_META_ENGINE_STEP_ROWS_UNREAD, "engine_step_rows_unread")                 \
  X(TOKENTRACE_META_ENGINE_STEP_EDIT_ROWS_UNREAD, "engine_step_edit_rows_unread")       \
  X(TOKENTRACE_META_ENGINE_CORE_STEPS, "engine_core_steps")                             \
  X(TOKENTRACE_META_ENGINE_CORE_EMPTY_STEPS, "engine_core_empty_steps")                 \
  X(TOKENTRACE_META_ENGINE_CORE_REQUESTS_UNFINISHED, "engine_core_requests_unfinished") \
  X(TOKENTRACE_META_ENGINE_CORE_REQUESTS_SALTED, "engine_core_requests_salted")         \
  X(TOKENTRACE_META_ENGINE_FRONT_STEPS, "engine_front_steps")                           \
  X(TOKENTRACE_META_ENGINE_FRONT_REQUESTS_UNFINISHED, "engine_front_requests_unfinished")

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
