/* clusterjit C API: load an ONNX model once, run it many times, from any number of threads.
 *
 * In the style of ONNX Runtime's C API: opaque handles, every fallible function returns a cjit_status*
 * (NULL on success; otherwise an error with a code and a message naming what is at fault, which the
 * caller frees with cjit_status_free). Nothing here throws, aborts, or exits the process; no C++ type
 * crosses it. This header includes only the C standard library and compiles as C99 and as C++.
 *
 *   cjit_options* opt;  cjit_options_create(&opt);
 *   cjit_options_set(opt, "intra_op_threads", "2");                 // any CJIT_FLAGS flag, validated
 *   cjit_session* s;    cjit_session_create("model.onnx", opt, &s);
 *   int64_t dims[4] = {1, 3, 48, 192};
 *   cjit_value* x;      cjit_value_wrap(CJIT_FLOAT32, dims, 4, host_pixels, sizeof host_pixels, &x);  // no copy
 *   cjit_value* y = NULL;                                           // NULL: the library allocates it
 *   const char* in_names[] = {"x"};
 *   cjit_session_run(s, in_names, (const cjit_value* const*)&x, 1, NULL, &y, 1);
 *   const float* probs = (const float*)cjit_value_data(y);
 *   cjit_value_free(y); cjit_value_free(x); cjit_session_free(s); cjit_options_free(opt);
 *
 * Tensors are dense and row-major. Element types use the ONNX TensorProto.DataType numbering
 * (onnx/onnx.proto). Dims are int64_t; a rank-0 tensor (scalar) has one element; a dim of 0 makes an empty
 * tensor.
 *
 * Threading: cjit_session_run may be called concurrently on one session from any number of threads; each
 * call's results are those the same inputs give alone. cjit_session_free waits for runs in progress on that
 * session, then frees it; calling any function with a handle after it was freed is the caller's error.
 * Options and values are not synchronized: do not modify one from two threads at once (reading a value —
 * using it as an input of concurrent runs — is fine). The log callback may be called from any thread.
 *
 * Process state: clusterjit never changes state it does not own. It reads the CJIT_FLAGS environment
 * variable only for options that opted in (cjit_options_use_environment); it restores the OpenMP thread
 * count of the calling thread after each run; its log messages go to its own sink (stderr by default, or
 * cjit_set_log_callback), never to a logging library the host uses.
 */
#ifndef CLUSTERJIT_CLUSTERJIT_H_
#define CLUSTERJIT_CLUSTERJIT_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define CJIT_API __attribute__((visibility("default")))
#else
#define CJIT_API
#endif

#define CJIT_VERSION_MAJOR 0
#define CJIT_VERSION_MINOR 2
#define CJIT_VERSION_PATCH 0

/* ---- Status ---------------------------------------------------------------------------------------- */

/* The codes of absl::Status / gRPC, which the messages follow. */
typedef enum cjit_code {
  CJIT_OK = 0,
  CJIT_CANCELLED = 1,
  CJIT_UNKNOWN = 2,
  CJIT_INVALID_ARGUMENT = 3,   /* bad model, option, input, shape, dtype, buffer size, null handle */
  CJIT_DEADLINE_EXCEEDED = 4,
  CJIT_NOT_FOUND = 5,          /* a missing file, an unknown input/output/option name */
  CJIT_ALREADY_EXISTS = 6,
  CJIT_PERMISSION_DENIED = 7,
  CJIT_RESOURCE_EXHAUSTED = 8, /* out of memory, a tensor too large to allocate */
  CJIT_FAILED_PRECONDITION = 9,
  CJIT_ABORTED = 10,
  CJIT_OUT_OF_RANGE = 11,      /* an index out of range in the data (Gather, ScatterND...) */
  CJIT_UNIMPLEMENTED = 12,     /* an operator, attribute or dtype clusterjit does not support */
  CJIT_INTERNAL = 13,
  CJIT_UNAVAILABLE = 14,       /* a device or library that is not there (no GPU driver) */
  CJIT_DATA_LOSS = 15          /* a corrupt model or cache file */
} cjit_code;

typedef struct cjit_status cjit_status;

/* The code of `status` (CJIT_OK for NULL). */
CJIT_API cjit_code cjit_status_code(const cjit_status* status);
/* The message of `status` ("" for NULL); valid until the status is freed. */
CJIT_API const char* cjit_status_message(const cjit_status* status);
/* Frees a status; NULL is allowed. */
CJIT_API void cjit_status_free(cjit_status* status);

/* ---- Version and logging --------------------------------------------------------------------------- */

/* "0.2.0": the version of the library actually loaded (compare with CJIT_VERSION_* of the header). */
CJIT_API const char* cjit_version(void);

typedef enum cjit_log_severity { CJIT_LOG_INFO = 0, CJIT_LOG_WARNING = 1, CJIT_LOG_ERROR = 2 } cjit_log_severity;

/* Receives clusterjit's log messages (one line each, no trailing newline; `file` is the source file's base
 * name). Messages are those at or above the session's --stderrthreshold, plus VLOG lines asked for with
 * --v / --vmodule. The callback may run on any thread, one message at a time; it must not call back into
 * clusterjit. */
typedef void (*cjit_log_callback)(void* user_data, cjit_log_severity severity, const char* file, int line,
                                  const char* message);
/* Routes every log message to `callback` instead of stderr (process-wide); NULL restores stderr. After it
 * returns, the previous callback is no longer called. */
CJIT_API void cjit_set_log_callback(cjit_log_callback callback, void* user_data);

/* ---- Options --------------------------------------------------------------------------------------- */

typedef struct cjit_options cjit_options;

/* Options with every flag at its default (`cjit flags` lists them); the environment is not read. */
CJIT_API cjit_status* cjit_options_create(cjit_options** out);
CJIT_API void cjit_options_free(cjit_options* options);
/* Sets one flag by name (without "--"; aliases and the "tf_xla_" prefix accepted) from its text value,
 * with the rules of CJIT_FLAGS: CJIT_INVALID_ARGUMENT names an unknown flag (and the nearest known one) or
 * a bad value. Booleans take "true"/"false"/"1"/"0". */
CJIT_API cjit_status* cjit_options_set(cjit_options* options, const char* name, const char* value);
/* Copies the current value of a flag as text into `buffer` (NUL-terminated) and its length without the
 * NUL into *length (when not NULL). CJIT_NOT_FOUND for an unknown flag; CJIT_INVALID_ARGUMENT when the
 * buffer is too small (*length still tells the size needed). */
CJIT_API cjit_status* cjit_options_get(const cjit_options* options, const char* name, char* buffer, size_t size,
                                       size_t* length);
/* Parses flags in the CJIT_FLAGS grammar ("--a=1 --b"), on top of the current values. */
CJIT_API cjit_status* cjit_options_set_flags(cjit_options* options, const char* text);
/* With enable != 0, a session created with these options starts from the CJIT_FLAGS environment variable
 * (a bad CJIT_FLAGS is then that session's error) and the values set here apply on top. Off by default. */
CJIT_API cjit_status* cjit_options_use_environment(cjit_options* options, int enable);

/* A host's automatic-mixed-precision rule (TVM's AMP interface; used when the auto_mixed_precision flag is
 * on, docs/mixed-precision.md): called for every node with float32 data edges, with its ONNX op type and
 * node name, before the op lists. Return one of CJIT_AMP_* to decide the node's class, or
 * CJIT_AMP_NO_DECISION to leave it to the lists. *output_float32 (initially 0) may be set to 1 to give the
 * node's readers a float32 copy of its result when it runs in 16 bits. Called while a new input signature
 * is specialized, possibly from several threads at once: it must be thread-safe. Accumulation is float32
 * in every kernel. */
typedef enum cjit_amp_class {
  CJIT_AMP_NO_DECISION = -1,
  CJIT_AMP_ALLOW = 0,
  CJIT_AMP_INFER = 1,
  CJIT_AMP_DENY = 2,
  CJIT_AMP_CLEAR = 3,
} cjit_amp_class;
typedef cjit_amp_class (*cjit_amp_rule)(const char* op_type, const char* node_name, int* output_float32,
                                        void* user_data);
/* Sets (or, with rule NULL, removes) the rule for sessions created with these options. */
CJIT_API cjit_status* cjit_options_set_amp_rule(cjit_options* options, cjit_amp_rule rule, void* user_data);

/* ---- Values ---------------------------------------------------------------------------------------- */

typedef enum cjit_dtype {
  CJIT_FLOAT32 = 1,
  CJIT_UINT8 = 2,
  CJIT_INT8 = 3,
  CJIT_UINT16 = 4,
  CJIT_INT16 = 5,
  CJIT_INT32 = 6,
  CJIT_INT64 = 7,
  CJIT_STRING = 8, /* UTF-8 strings: made by cjit_value_create_strings, read by cjit_value_get_string */
  CJIT_BOOL = 9, /* one byte, 0 or 1 */
  CJIT_FLOAT16 = 10,
  CJIT_FLOAT64 = 11,
  CJIT_UINT32 = 12,
  CJIT_UINT64 = 13,
  CJIT_BFLOAT16 = 16,
  /* ONNX int4 / uint4 (opset 21): in a cjit_value one element per byte (int8 -8..7 / uint8 0..15), not packed
   * two per byte as in ONNX files; a run refuses an input byte outside the range (CJIT_INVALID_ARGUMENT). */
  CJIT_UINT4 = 21,
  CJIT_INT4 = 22
} cjit_dtype;

typedef struct cjit_value cjit_value;

/* A tensor whose buffer the library allocates (64-byte aligned, contents unspecified). */
CJIT_API cjit_status* cjit_value_create(cjit_dtype dtype, const int64_t* dims, size_t rank, cjit_value** out);
/* A tensor over the caller's buffer, without copying: `bytes` must be exactly the tensor's size and `data`
 * aligned to its element size. The caller keeps the buffer alive and unchanged while the value is used by
 * a run (as an input), or written (as a bound output), and until cjit_value_free. */
CJIT_API cjit_status* cjit_value_wrap(cjit_dtype dtype, const int64_t* dims, size_t rank, void* data, size_t bytes,
                                      cjit_value** out);
/* Frees a value (not the caller's buffer of a wrapped one); NULL is allowed. */
CJIT_API void cjit_value_free(cjit_value* value);
CJIT_API cjit_dtype cjit_value_dtype(const cjit_value* value);
CJIT_API size_t cjit_value_rank(const cjit_value* value);
/* The dims (rank of them); valid while the value lives. */
CJIT_API const int64_t* cjit_value_dims(const cjit_value* value);
CJIT_API size_t cjit_value_bytes(const cjit_value* value);
/* The first byte of the data (NULL for an empty tensor). */
CJIT_API void* cjit_value_data(cjit_value* value);

/* A tensor(string) of `dims` holding copies of the n = prod(dims) strings (bytes, UTF-8 by convention):
 * strings[i] of lengths[i] bytes, or NUL-terminated when `lengths` is NULL. String values have no raw
 * buffer: cjit_value_data is NULL, cjit_value_bytes 0; cjit_value_wrap refuses CJIT_STRING and string
 * outputs cannot be bound. */
CJIT_API cjit_status* cjit_value_create_strings(const int64_t* dims, size_t rank, const char* const* strings,
                                                const size_t* lengths, cjit_value** out);
/* String `index` (row-major) of a string tensor: *data points at its bytes (valid while the value lives;
 * NUL-terminated), *length is its byte count. CJIT_OUT_OF_RANGE past the end, CJIT_INVALID_ARGUMENT for
 * another dtype. */
CJIT_API cjit_status* cjit_value_get_string(const cjit_value* value, size_t index, const char** data,
                                            size_t* length);

/* Sequences and optionals (ONNX TypeProto sequence_type / optional_type; ONNX Runtime's ONNX_TYPE_SEQUENCE and
 * ONNX_TYPE_OPTIONAL values). A sequence holds an ordered list of tensors of one dtype; an optional holds one
 * tensor or one sequence, or nothing. For them cjit_value_dtype gives the element dtype, cjit_value_rank 0,
 * cjit_value_dims and cjit_value_data NULL, cjit_value_bytes 0. They are immutable once made. */
typedef enum cjit_value_kind {
  CJIT_KIND_TENSOR = 0,
  CJIT_KIND_SEQUENCE = 1,
  CJIT_KIND_OPTIONAL_TENSOR = 2,   /* an optional of a tensor */
  CJIT_KIND_OPTIONAL_SEQUENCE = 3  /* an optional of a sequence */
} cjit_value_kind;

/* The value's kind (CJIT_KIND_TENSOR for NULL). */
CJIT_API cjit_value_kind cjit_value_get_kind(const cjit_value* value);
/* A sequence of `count` tensors (each of dtype `elem`; `items` may be NULL when count is 0). The tensors are
 * shared, not copied: a wrapped tensor's buffer must stay valid and unchanged while the sequence is used.
 * The items may be freed afterwards. CJIT_INVALID_ARGUMENT for a non-tensor item or one of another dtype. */
CJIT_API cjit_status* cjit_value_create_sequence(cjit_dtype elem, const cjit_value* const* items, size_t count,
                                                 cjit_value** out);
/* An optional holding `element` (a tensor or a sequence, shared as above), or, with element NULL, an empty
 * optional of `kind` (CJIT_KIND_OPTIONAL_TENSOR / _SEQUENCE) and element dtype `elem`. With an element,
 * `kind` must be CJIT_KIND_OPTIONAL_TENSOR for a tensor and CJIT_KIND_OPTIONAL_SEQUENCE for a sequence. */
CJIT_API cjit_status* cjit_value_create_optional(cjit_value_kind kind, cjit_dtype elem, const cjit_value* element,
                                                 cjit_value** out);
/* The number of tensors in a sequence, 1 or 0 for an optional (whether it holds an element), 0 for a tensor. */
CJIT_API size_t cjit_value_count(const cjit_value* value);
/* Element `index` of a sequence (a tensor) or the element of an optional (a tensor or a sequence) as a new
 * value sharing its data (free it with cjit_value_free). CJIT_OUT_OF_RANGE past the end (or for an empty
 * optional), CJIT_INVALID_ARGUMENT for a tensor. */
CJIT_API cjit_status* cjit_value_get_element(const cjit_value* value, size_t index, cjit_value** out);

/* ---- Sessions -------------------------------------------------------------------------------------- */

typedef struct cjit_session cjit_session;

/* Loads and checks an ONNX model (external data is read relative to its directory). `options` may be
 * NULL (defaults). Errors name the file, node, op or attribute at fault. */
CJIT_API cjit_status* cjit_session_create(const char* model_path, const cjit_options* options, cjit_session** out);
/* The same from a serialized ModelProto in memory; external data, if any, is read relative to
 * `model_dir` (may be NULL: then a model with external data is an error). */
CJIT_API cjit_status* cjit_session_create_from_bytes(const void* data, size_t size, const char* model_dir,
                                                     const cjit_options* options, cjit_session** out);
/* Waits for runs in progress on this session, then frees it; NULL is allowed. */
CJIT_API void cjit_session_free(cjit_session* session);

CJIT_API size_t cjit_session_input_count(const cjit_session* session);
CJIT_API size_t cjit_session_output_count(const cjit_session* session);
/* The name of input/output `index` (NULL when out of range); valid while the session lives. */
CJIT_API const char* cjit_session_input_name(const cjit_session* session, size_t index);
CJIT_API const char* cjit_session_output_name(const cjit_session* session, size_t index);
/* The declared dtype and dims of input/output `index`: *rank receives the rank (-1 when unknown) and up to
 * `capacity` dims are written to `dims` (-1 for a dynamic dim); *dtype is 0 when unknown. */
CJIT_API cjit_status* cjit_session_input_info(const cjit_session* session, size_t index, int32_t* dtype, int64_t* dims,
                                              size_t capacity, int64_t* rank);
CJIT_API cjit_status* cjit_session_output_info(const cjit_session* session, size_t index, int32_t* dtype,
                                               int64_t* dims, size_t capacity, int64_t* rank);
/* The declared kind of input/output `index` (a tensor, a sequence or an optional; *_info then describes its
 * elements). CJIT_INVALID_ARGUMENT when `index` is out of range. */
CJIT_API cjit_status* cjit_session_input_kind(const cjit_session* session, size_t index, cjit_value_kind* kind);
CJIT_API cjit_status* cjit_session_output_kind(const cjit_session* session, size_t index, cjit_value_kind* kind);

/* The symbolic name of dim `axis` of input/output `index` (the model's ONNX dim_param, e.g. "batch"); "" for a
 * fixed or unnamed dim; NULL when `index` or `axis` is out of range. Valid while the session lives. */
CJIT_API const char* cjit_session_input_dim_name(const cjit_session* session, size_t index, size_t axis);
CJIT_API const char* cjit_session_output_dim_name(const cjit_session* session, size_t index, size_t axis);

/* The model's own description as a JSON object (UTF-8), written as cjit_options_get writes: {"producer_name",
 * "producer_version", "domain", "description" (ModelProto.doc_string), "graph_name", "graph_description",
 * "version" (ModelProto.model_version, a number), "custom_metadata_map" (metadata_props: an object of
 * strings)} — the fields of ONNX Runtime's ModelMetadata. */
CJIT_API cjit_status* cjit_session_metadata_json(const cjit_session* session, char* buffer, size_t size,
                                                 size_t* length);
/* The session's counters so far as a JSON object (as cjit_options_get writes): "signatures",
 * "signature_evictions", "specializations", "specialization_replays", "dynamic_shape_runs",
 * "compiles_in_flight", "clusters" (totals: "compiles", "compile_ms", "fallback_executions",
 * "compiled_executions", "memory_hits", "disk_hits", "disk_writes", "disk_rejects", "polymorphic_hits",
 * "code_bytes", "fused_kernels"), "autotune" ("ops_tuned", "candidates_timed", "candidates_rejected",
 * "tuning_ms", "memory_hits", "disk_hits", "file_hits", "ignored_entries") and, with --remote_cache,
 * "remote_cache" ("hits", "misses", "rejects", "errors", "skipped", "writes", "write_errors",
 * "dropped_writes", "bytes_read", "bytes_written", "backoffs"). Safe while runs are in progress. */
CJIT_API cjit_status* cjit_session_stats_json(const cjit_session* session, char* buffer, size_t size, size_t* length);
/* Where the session runs: "cpu" or "cuda:N" (--device=auto resolved); valid while the session lives. */
CJIT_API const char* cjit_session_device(const cjit_session* session);

/* Every flag (`cjit flags`) as a JSON array of {"name", "type", "default", "help", "aliases"} (as
 * cjit_options_get writes). */
CJIT_API cjit_status* cjit_flags_json(char* buffer, size_t size, size_t* length);

/* ---- Run options ----------------------------------------------------------------------------------- */

/* Per-run options (ONNX Runtime's RunOptions). A run checks them at every step boundary (each op or
 * cluster, each step of an If/Loop/Scan body or a GPU plan; a step in progress finishes first). A stopped
 * run returns CJIT_CANCELLED and sets no output; the session stays usable. */
typedef struct cjit_run_options cjit_run_options;
CJIT_API cjit_status* cjit_run_options_create(cjit_run_options** out);
/* Frees run options; no run may be using them. NULL is allowed. */
CJIT_API void cjit_run_options_free(cjit_run_options* options);
/* Sets (nonzero) or clears ORT's `terminate` flag: while set, runs using these options stop at their next
 * step boundary, and new runs stop at their first. Thread-safe: meant to be called from another thread
 * while runs use the options. */
CJIT_API void cjit_run_options_set_terminate(cjit_run_options* options, int terminate);
CJIT_API int cjit_run_options_get_terminate(const cjit_run_options* options);
/* A host's interrupt check (e.g. a language runtime's pending signal), called at step boundaries on the
 * thread that called the run; nonzero stops the run. It must be cheap (rate-limit inside it) and must not
 * call into clusterjit. NULL removes it. Not to be changed while runs use the options. */
typedef int (*cjit_interrupt_check)(void* user_data);
CJIT_API cjit_status* cjit_run_options_set_interrupt_check(cjit_run_options* options, cjit_interrupt_check check,
                                                           void* user_data);

/* Runs the model.
 *   inputs:  n_inputs values named by input_names (every model input exactly once, any order).
 *   outputs: n_outputs slots for the outputs named by output_names (NULL = the model's outputs in order, then
 *            n_outputs must be the output count). A NULL slot receives a new value the library allocated
 *            (free it with cjit_value_free); a non-NULL slot is a bound output: its dtype and dims must be
 *            the output's exactly and the result is written into its buffer (wrapped or library-owned).
 * Errors: CJIT_INVALID_ARGUMENT for a null handle or pointer, an unknown or missing name, a wrong dtype,
 * rank or dim (named), a bound output of the wrong dtype, dims or size; run errors as they occur. On error
 * no output slot that was NULL is set. */
CJIT_API cjit_status* cjit_session_run(cjit_session* session, const char* const* input_names,
                                       const cjit_value* const* inputs, size_t n_inputs,
                                       const char* const* output_names, cjit_value** outputs, size_t n_outputs);

/* cjit_session_run with run options (`run_options` may be NULL: none). CJIT_CANCELLED when they stopped
 * the run. */
CJIT_API cjit_status* cjit_session_run_with_options(cjit_session* session, const cjit_run_options* run_options,
                                                    const char* const* input_names, const cjit_value* const* inputs,
                                                    size_t n_inputs, const char* const* output_names,
                                                    cjit_value** outputs, size_t n_outputs);

/* Writes this session's trace file now (--trace_to) and returns its path in `buffer` (as cjit_options_get). */
CJIT_API cjit_status* cjit_session_end_profiling(cjit_session* session, char* buffer, size_t size, size_t* length);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* CLUSTERJIT_CLUSTERJIT_H_ */
