/*
 * strata device ABI, version 1.
 *
 * The one boundary between the backend-agnostic core and a device backend. A backend
 * is a shared library (libstrata-backend-NAME.so) that exports
 *
 *     const strata_plugin_info* strata_backend_init(void);     (required)
 *     int32_t                   strata_backend_score(void);    (optional, 0 = cannot run)
 *
 * Rules that keep this ABI stable:
 *   - Plain C: fixed-width integers, enums passed as int32_t, opaque handles, structs of
 *     function pointers. No C++ types, exceptions or ownership of host allocations cross it.
 *   - Every struct that may grow starts with `struct_size`, so a newer core can tell which
 *     fields an older plugin knows and vice versa. New fields are only ever appended. For
 *     structs the core passes in, it sets struct_size to the size it filled; for structs the
 *     plugin fills (strata_device_info), the core sets struct_size to the capacity of its
 *     struct and the plugin writes at most that much, then stores the size it filled.
 *   - A change that breaks existing plugins bumps STRATA_DEVICE_ABI_MAJOR; the loader refuses
 *     plugins whose major version differs from its own. Appending fields or functions bumps
 *     the minor version only.
 *   - A plugin never aborts the process on bad input: every call returns a strata_status and
 *     the backend's last_error() gives a human-readable message for the calling thread.
 *   - Extensions beyond the table are looked up by name with get_proc_address().
 *
 * Data model: backend -> devices -> buffers (device memory), weights (backend-owned,
 * prepared copies of model weights), KV caches (paged), and ops that the core enqueues.
 * Ops run in issue order on the device's single queue; synchronize() waits for them.
 *
 * Batches are ragged: a step holds `num_tokens` tokens from `num_seqs` sequences, the
 * tokens of each sequence contiguous (prefill chunks and single decode tokens mixed), each
 * sequence with its own positions and its own block table into the paged KV cache.
 */
#ifndef STRATA_DEVICE_H_
#define STRATA_DEVICE_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define STRATA_DEVICE_ABI_MAJOR 1
#define STRATA_DEVICE_ABI_MINOR 9
#define STRATA_DEVICE_ABI_VERSION ((STRATA_DEVICE_ABI_MAJOR << 16) | STRATA_DEVICE_ABI_MINOR)
#define STRATA_ABI_MAJOR_OF(v) (((uint32_t)(v)) >> 16)
#define STRATA_ABI_MINOR_OF(v) (((uint32_t)(v)) & 0xffffu)

#if defined(_WIN32)
#define STRATA_PLUGIN_EXPORT __declspec(dllexport)
#else
#define STRATA_PLUGIN_EXPORT __attribute__((visibility("default")))
#endif

/* Names of the exported symbols, for dlsym(). */
#define STRATA_BACKEND_INIT_SYMBOL "strata_backend_init"
#define STRATA_BACKEND_SCORE_SYMBOL "strata_backend_score"

/* ------------------------------------------------------------------------------------ */
/* Status codes                                                                          */

typedef enum strata_status {
  STRATA_OK = 0,
  STRATA_ERROR_INVALID_ARGUMENT = 1, /* bad shapes, null handles, out-of-range indices */
  STRATA_ERROR_UNSUPPORTED = 2,      /* op / dtype / weight format not implemented     */
  STRATA_ERROR_OUT_OF_MEMORY = 3,
  STRATA_ERROR_DEVICE = 4, /* the device or its driver failed                    */
  STRATA_ERROR_NOT_FOUND = 5,
  STRATA_ERROR_INTERNAL = 6
} strata_status;

/* ------------------------------------------------------------------------------------ */
/* Element types and weight formats                                                      */

typedef enum strata_dtype {
  STRATA_DTYPE_F32 = 0,
  STRATA_DTYPE_F16 = 1,
  STRATA_DTYPE_BF16 = 2,
  STRATA_DTYPE_I32 = 3,
  STRATA_DTYPE_I8 = 4,
  STRATA_DTYPE_U8 = 5, /* raw bytes, also packed INT4 pairs (low nibble first)           */
  STRATA_DTYPE_FP8_E4M3 = 6,
  STRATA_DTYPE_I64 = 7,
  STRATA_DTYPE_COUNT
} strata_dtype;

/* Bytes per element (0 for an unknown type; packed INT4 is stored as U8) and a name for
 * messages. Inline, so backends and the core share one table without linking each other. */
static inline size_t strata_dtype_size(int32_t dtype) {
  switch (dtype) {
    case STRATA_DTYPE_F32: case STRATA_DTYPE_I32: return 4;
    case STRATA_DTYPE_F16: case STRATA_DTYPE_BF16: return 2;
    case STRATA_DTYPE_I8: case STRATA_DTYPE_U8: case STRATA_DTYPE_FP8_E4M3: return 1;
    case STRATA_DTYPE_I64: return 8;
    default: return 0;
  }
}

static inline const char* strata_dtype_name(int32_t dtype) {
  switch (dtype) {
    case STRATA_DTYPE_F32: return "F32";
    case STRATA_DTYPE_F16: return "F16";
    case STRATA_DTYPE_BF16: return "BF16";
    case STRATA_DTYPE_I32: return "I32";
    case STRATA_DTYPE_I8: return "I8";
    case STRATA_DTYPE_U8: return "U8";
    case STRATA_DTYPE_FP8_E4M3: return "FP8_E4M3";
    case STRATA_DTYPE_I64: return "I64";
    default: return "unknown dtype";
  }
}

/*
 * How the values of a weight matrix W [rows = out_features, cols = in_features] are stored.
 * y = x * W^T (+ bias) for every format.
 */
typedef enum strata_weight_format {
  /* Dense, in `dtype` (F32, F16 or BF16). */
  STRATA_WEIGHT_DENSE = 0,
  /* INT8 values (dtype I8), one scale per output row: W[r][c] = q[r][c] * scales[r]. Since
   * ABI 1.9, group_size > 0 means one scale per (row, group of group_size columns) instead
   * (GGUF Q8_0: groups of 32, F16 scales), [rows, ceil(cols / group_size)]. W8A8 with
   * group_size > 0 is optional: a backend without it refuses it with UNSUPPORTED. */
  STRATA_WEIGHT_INT8_PER_CHANNEL = 1,
  /* SmoothQuant W8A8: INT8 weights per output channel, activations quantized per token to
   * INT8 at run time after dividing by `smooth` (per input column, may be absent). */
  STRATA_WEIGHT_W8A8 = 2,
  /* INT4 groups along cols: packed U8 (two values per byte, low nibble = even column),
   * `group_size` columns share one scale (and zero point, if `zeros` is set; else
   * symmetric, value - 8). */
  STRATA_WEIGHT_INT4_GROUP = 3,
  /* LLM.int8(): INT8 per-channel for most columns plus a dense (F16/BF16) matrix of the
   * `num_outlier_cols` outlier columns listed in `outlier_cols` (I32). */
  STRATA_WEIGHT_INT8_OUTLIER_SPLIT = 4,
  /* Since ABI 1.9. FP8 W8A8: FP8_E4M3 values, one F32 scale per output row (a per-tensor
   * scale is given repeated for every row): W[r][c] = q[r][c] * scales[r]; activations are
   * quantized to FP8 per token (dynamic) or with `act_scale` (static) at run time. */
  STRATA_WEIGHT_FP8 = 5,
  STRATA_WEIGHT_FORMAT_COUNT
} strata_weight_format;

/* ------------------------------------------------------------------------------------ */
/* Handles                                                                               */

typedef struct strata_device_s* strata_device;     /* an opened device                  */
typedef struct strata_buffer_s* strata_buffer;     /* a range of device memory          */
typedef struct strata_weight_s* strata_weight;     /* a prepared weight matrix / table  */
typedef struct strata_kv_cache_s* strata_kv_cache; /* the paged KV cache of all layers  */
typedef struct strata_graph_s* strata_graph;       /* a recorded sequence of ops (1.1)   */
typedef struct strata_readback_s* strata_readback; /* a download under way (1.4)          */

/*
 * A view of device memory: `ndim` dims, row-major. The last dim is contiguous; `row_stride`
 * is the distance in elements between consecutive rows of a 2-D view (0 = packed), so the
 * core can address a column slice of a fused output (e.g. Q, K and V of a QKV matmul).
 * Views of more than 2 dims are always packed.
 */
typedef struct strata_tensor {
  strata_buffer buffer;
  uint64_t offset; /* in bytes from the start of the buffer */
  int32_t dtype;   /* strata_dtype */
  int32_t ndim;    /* 1..4 */
  int64_t shape[4];
  int64_t row_stride;
} strata_tensor;

/* Describes a weight handed to weight_create(). Host pointers are read during the call only. */
typedef struct strata_weight_desc {
  uint32_t struct_size;
  int32_t format; /* strata_weight_format */
  int32_t dtype;  /* element type of `data` */
  int32_t reserved0;
  int64_t rows; /* out_features (vocab size for an embedding table) */
  int64_t cols; /* in_features (hidden size for an embedding table) */
  const void* data;
  /* Quantized formats. */
  const void* scales; /* per row (INT8 formats) or per (row, group) (INT4), F32 or F16 */
  int32_t scales_dtype;
  int32_t group_size; /* INT4_GROUP */
  const void* zeros;  /* INT4_GROUP asymmetric: U8 per (row, group); NULL = symmetric */
  const void* smooth; /* W8A8: F32 per column; NULL = none */
  const int32_t* outlier_cols;  /* OUTLIER_SPLIT */
  int32_t num_outlier_cols;
  int32_t outlier_dtype;        /* OUTLIER_SPLIT: F16 or BF16 */
  const void* outlier_weights;  /* OUTLIER_SPLIT: [rows, num_outlier_cols] */
  const char* name;             /* for messages; may be NULL */

  /* ---- Since ABI 1.9 (read only when struct_size covers them; a plugin of 1.8 or older
   * sees a 1.9 desc as its own shorter struct, so new fields must keep their zero meaning). */
  /* INT4_GROUP act-order (GPTQ desc_act): the group of each input column, I32 [cols];
   * NULL = column / group_size. A backend may permute columns once at weight_create. */
  const int32_t* g_idx;
  /* W8A8, FP8 and OUTLIER_SPLIT activations: STRATA_ACT_SCALE_DYNAMIC (0, per token) or
   * STRATA_ACT_SCALE_STATIC (1, the per-tensor `act_scale`, from calibration). */
  int32_t act_scale_mode;
  float act_scale;
  /* OUTLIER_SPLIT: activation magnitude above which a column counts as an outlier at run
   * time (LLM.int8 default 6.0); columns beyond it that are not in outlier_cols are still
   * computed exactly and counted (quant_counters). 0 = no run-time detection. */
  float outlier_threshold;
  /* Slot of this weight in the device's quantization counters (quant_counters), usually the
   * layer index; -1 (or a slot >= STRATA_MAX_QUANT_COUNTER_SLOTS) = not counted. */
  int32_t counter_slot;
} strata_weight_desc;

#define STRATA_ACT_SCALE_DYNAMIC 0
#define STRATA_ACT_SCALE_STATIC 1
#define STRATA_MAX_QUANT_COUNTER_SLOTS 1024

/* True when `desc` (a strata_weight_desc of desc->struct_size bytes) carries `field`. */
#define STRATA_WEIGHT_DESC_HAS(desc, field)                                              \
  ((desc)->struct_size >= offsetof(strata_weight_desc, field) + sizeof((desc)->field))

/* ------------------------------------------------------------------------------------ */
/* Devices and capabilities                                                              */

typedef enum strata_device_kind {
  STRATA_DEVICE_CPU = 0,
  STRATA_DEVICE_GPU = 1,
  STRATA_DEVICE_ACCELERATOR = 2
} strata_device_kind;

/* Capability bits in strata_device_info.capabilities. */
#define STRATA_CAP_HOST_VISIBLE_MEMORY (1u << 0) /* buffer_host_ptr() works            */
#define STRATA_CAP_FUSED_ROPE_KV_WRITE (1u << 1)
#define STRATA_CAP_PAGED_ATTENTION (1u << 2)
#define STRATA_CAP_DEVICE_SAMPLING (1u << 3)
#define STRATA_CAP_GRAPHS (1u << 4) /* records and replays decode steps                 */
#define STRATA_CAP_INT8_MATMUL (1u << 5)
#define STRATA_CAP_BF16_MATH (1u << 6)
/* Ops are queued and run after the call returns (a GPU stream): the host is free while
 * they run, which is when overlapped steps (ABI 1.4) pay off. */
#define STRATA_CAP_ASYNC_OPS (1u << 7)

typedef struct strata_device_info {
  uint32_t struct_size;
  int32_t kind; /* strata_device_kind */
  char name[128];
  uint64_t memory_total; /* bytes */
  uint64_t memory_free;  /* bytes, at the time of the query */
  uint32_t capabilities; /* STRATA_CAP_* */
  int32_t compute_units; /* cores / SMs */
  int32_t preferred_activation_dtype; /* strata_dtype the backend computes fastest in */
  char features[256];                 /* free text, e.g. "avx2 avx512f avx512_vnni" */
} strata_device_info;

typedef struct strata_device_options {
  uint32_t struct_size;
  int32_t num_threads; /* CPU backends: 0 = all cores */
  const char* options; /* backend-specific "key=value;key=value", may be NULL */
} strata_device_options;

/* Ops, for supports(). */
typedef enum strata_op {
  STRATA_OP_EMBEDDING = 0,
  STRATA_OP_RMS_NORM = 1,
  STRATA_OP_MATMUL = 2,
  STRATA_OP_ROPE_KV_WRITE = 3,
  STRATA_OP_ATTENTION = 4,
  STRATA_OP_SILU_MUL = 5,
  STRATA_OP_ADD = 6,
  STRATA_OP_GATHER_ROWS = 7,
  STRATA_OP_ARGMAX = 8,
  STRATA_OP_SAMPLE = 9,
  STRATA_OP_COPY_BLOCKS = 10,
  STRATA_OP_SWAP_BLOCKS = 11,
  STRATA_OP_COUNT
} strata_op;

/* ------------------------------------------------------------------------------------ */
/* KV cache and batch descriptors                                                        */

typedef struct strata_kv_cache_desc {
  uint32_t struct_size;
  int32_t num_layers;
  int32_t num_blocks;
  int32_t block_size; /* tokens per block */
  int32_t num_kv_heads;
  int32_t head_dim;
  int32_t dtype; /* F32, F16 or BF16; since ABI 1.9 also FP8_E4M3 and I8 */

  /* ---- Since ABI 1.9: 8-bit caches (read only when struct_size covers them). ----
   * FP8_E4M3: K and V are stored as value / k_scale (v_scale), per tensor (scale_mode
   * STRATA_KV_SCALE_PER_TENSOR, scales given here; 0 = 1.0). I8: STRATA_KV_SCALE_PER_BLOCK_HEAD,
   * one scale per (block, kv head, K/V) chosen by the backend when it writes a block; the
   * scales live inside the block (kv_block_bytes() counts them), so copy_blocks and
   * swap_blocks move them with the values. */
  int32_t scale_mode;
  float k_scale;
  float v_scale;
} strata_kv_cache_desc;

#define STRATA_KV_SCALE_PER_TENSOR 0
#define STRATA_KV_SCALE_PER_BLOCK_HEAD 1

/*
 * Rotary embedding. The core computes the inverse frequencies (all scaling variants:
 * linear, llama3, yarn, ...) so that backends only rotate.
 *   angle(pos, i) = pos * inv_freq[i], i < rotary_dim / 2
 *   cos/sin are multiplied by `attention_factor` (yarn's mscale; 1 otherwise).
 * style NEOX pairs element i with i + rotary_dim/2 (Hugging Face "rotate_half");
 * style INTERLEAVED pairs 2i with 2i+1 (llama2.c, GGUF "llama").
 */
typedef enum strata_rope_style {
  STRATA_ROPE_NONE = 0,
  STRATA_ROPE_INTERLEAVED = 1,
  STRATA_ROPE_NEOX = 2
} strata_rope_style;

typedef struct strata_rope_params {
  uint32_t struct_size;
  int32_t style; /* strata_rope_style */
  int32_t rotary_dim;
  float attention_factor;
  const strata_tensor* inv_freq; /* F32 [rotary_dim / 2] on the device */
} strata_rope_params;

/* Since ABI 1.2: what matmul_ex() does around the product (see there). */
typedef enum strata_matmul_prologue {
  STRATA_PROLOGUE_NONE = 0,     /* the product's input is x */
  STRATA_PROLOGUE_RMS_NORM = 1, /* rmsnorm(x) * norm_weight (no residual), as rms_norm() */
  STRATA_PROLOGUE_SILU_MUL = 2, /* silu(x) * up, as silu_mul() with gate = x */
} strata_matmul_prologue;

typedef struct strata_matmul_params {
  uint32_t struct_size;
  int32_t prologue;                  /* strata_matmul_prologue */
  const strata_tensor* norm_weight;  /* RMS_NORM: F32 [cols] */
  float eps;                         /* RMS_NORM */
  const strata_tensor* up;           /* SILU_MUL: [n, cols], like x */
  const strata_tensor* bias;         /* F32 [rows] or NULL */
  int32_t accumulate;                /* != 0: out += product (+ bias) instead of out = */
  /* Room for the intermediates of a backend that runs the parts as separate ops (it may
   * leave them unused): prologue_scratch [n, cols] in x's dtype for the prologue's output,
   * product_scratch [n, rows] in out's dtype for the product before it is added to out.
   * Required when the prologue / accumulate needs them; never overlapping x, up, out or
   * each other. */
  const strata_tensor* prologue_scratch;
  const strata_tensor* product_scratch;
} strata_matmul_params;

/*
 * The ragged batch of one step, resident on the device (the core uploads it once per step
 * and every layer reuses it). Sequence s owns tokens [query_start_loc[s],
 * query_start_loc[s+1]); its context after this step is seq_lens[s] tokens, so its j-th
 * new token sits at position seq_lens[s] - q_len + j and attends causally to positions
 * 0..that position. Positions come from `positions` for RoPE.
 */
typedef struct strata_batch_desc {
  uint32_t struct_size;
  int32_t num_tokens;
  int32_t num_seqs;
  int32_t max_query_len; /* host-side maxima, for launch configuration */
  int32_t max_seq_len;
  int32_t max_blocks_per_seq;   /* columns of block_tables */
  const strata_tensor* positions;       /* I32 [num_tokens] */
  const strata_tensor* slot_mapping;    /* I32 [num_tokens]: block * block_size + offset; <0 = skip */
  const strata_tensor* query_start_loc; /* I32 [num_seqs + 1] */
  const strata_tensor* seq_lens;        /* I32 [num_seqs] */
  const strata_tensor* block_tables;    /* I32 [num_seqs, max_blocks_per_seq] */
  /* Host copies of the same arrays (may be NULL); host-visible backends may use them. */
  const int32_t* host_query_start_loc;
  const int32_t* host_seq_lens;
} strata_batch_desc;

typedef struct strata_attention_params {
  uint32_t struct_size;
  int32_t num_heads;
  int32_t num_kv_heads; /* GQA: heads share KV head h * num_kv_heads / num_heads */
  int32_t head_dim;
  float scale;          /* usually 1/sqrt(head_dim) */
  int32_t sliding_window; /* 0 = full attention; else query at pos sees keys in (pos-N, pos] */
  float logit_softcap;    /* 0 = none */
} strata_attention_params;

/* The random number of one sampling draw: uniform in [0, 1) from (seed, step), two rounds
 * of splitmix64 keeping 53 bits. Shared by every backend's sample() and the core's host
 * sampler, so that a seeded request draws the same numbers wherever it is sampled. */
static inline uint64_t strata_splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
static inline double strata_uniform_from_seed_step(uint64_t seed, uint64_t step) {
  const uint64_t h = strata_splitmix64(seed ^ strata_splitmix64(step ^ 0x5851f42d4c957f2dull));
  return (double)(h >> 11) * (1.0 / 9007199254740992.0);
}

/* Per-row sampling parameters for the device sampler (all arrays have num_rows entries).
 * A row keeps the tokens that survive top-k, then top-p (over the kept mass), then min-p
 * (relative to the most likely token), on softmax(logits / temperature); the draw u =
 * strata_uniform_from_seed_step(seed, step) picks the first candidate whose cumulative
 * probability exceeds u, candidates ordered by descending probability (ties: lower id)
 * when top-k or top-p is on, else by id. */
typedef struct strata_sample_params {
  uint32_t struct_size;
  const float* temperature; /* host arrays; temperature <= 0 means greedy */
  const int32_t* top_k;     /* <= 0: off */
  const float* top_p;       /* >= 1: off */
  const float* min_p;       /* <= 0: off */
  const uint64_t* seed;     /* per row */
  const uint64_t* step;     /* per row; (seed, step) fixes the random draw */
  /* Every array holds one entry per row of the logits tensor passed with it. */
} strata_sample_params;

/* Per-row penalties on F32 logits, applied in place before sampling (apply_penalties, ABI
 * 1.5), as Hugging Face (repetition) and the OpenAI API (frequency, presence) define them.
 * Row r's tokens are token_ids[row_start[r] .. row_start[r + 1]), each at most once per
 * row, with counts[i] = how often it occurs in the row's generated tokens (0: only in the
 * prompt). A listed token's logit l becomes l / repetition_penalty if l > 0, else
 * l * repetition_penalty; then, where counts[i] > 0, it loses
 * counts[i] * frequency_penalty + presence_penalty. Unlisted tokens keep their logits. */
typedef struct strata_penalty_params {
  uint32_t struct_size;
  const float* repetition_penalty; /* host arrays of one entry per row; 1: off */
  const float* frequency_penalty;  /* 0: off */
  const float* presence_penalty;   /* 0: off */
  const int32_t* row_start;        /* rows + 1 entries, row_start[0] = 0, non-decreasing */
  const int32_t* token_ids;        /* row_start[rows] entries, each in [0, vocab) */
  const int32_t* counts;           /* row_start[rows] entries, >= 0 */
} strata_penalty_params;

/* NULL when p describes `rows` rows of a `vocab`-entry vocabulary as strata_penalty_params
 * says, else what is wrong: for backends, which must refuse bad params before they touch
 * any logit. (That a token is listed at most once per row is not checked: the core builds
 * the lists.) */
static inline const char* strata_penalty_params_error(const strata_penalty_params* p, int64_t rows,
                                                      int64_t vocab) {
  int64_t r;
  int32_t i, n;
  if (p == NULL) return "params is null";
  if (p->struct_size < sizeof(strata_penalty_params)) return "params->struct_size is too small";
  if (p->repetition_penalty == NULL || p->frequency_penalty == NULL || p->presence_penalty == NULL ||
      p->row_start == NULL)
    return "a per-row array (penalties, row_start) is null";
  if (p->row_start[0] != 0) return "row_start[0] is not 0";
  for (r = 0; r < rows; ++r) {
    if (p->row_start[r + 1] < p->row_start[r]) return "row_start decreases";
  }
  n = p->row_start[rows];
  if (n > 0 && (p->token_ids == NULL || p->counts == NULL)) return "token_ids or counts is null";
  for (i = 0; i < n; ++i) {
    if (p->token_ids[i] < 0 || p->token_ids[i] >= vocab) return "a token id is outside the vocabulary";
    if (p->counts[i] < 0) return "a count is negative";
  }
  return NULL;
}

/* NULL when feedback_rows (rows entries) are each -1 or in [0, m), else what is wrong
 * (apply_penalties_feedback). */
static inline const char* strata_penalty_feedback_error(const int32_t* feedback_rows, int64_t rows, int64_t m) {
  int64_t r;
  if (feedback_rows == NULL) return "feedback_rows is null";
  for (r = 0; r < rows; ++r) {
    if (feedback_rows[r] < -1) return "a feedback row is below -1";
    if (feedback_rows[r] >= m) return "a feedback row is outside the feedback tensor";
  }
  return NULL;
}

/* The most alternatives logprobs() returns per row (the OpenAI API's top_logprobs limit). */
#define STRATA_MAX_TOP_LOGPROBS 20

/* NULL when logprobs() may read rows row_ids (num_rows entries) of a [rows, vocab] logits
 * tensor with top_n alternatives, else what is wrong. */
static inline const char* strata_logprobs_args_error(const int32_t* row_ids, int32_t num_rows, int64_t rows,
                                                     int32_t top_n, int64_t vocab) {
  int32_t i;
  if (num_rows < 0) return "num_rows is negative";
  if (num_rows > 0 && row_ids == NULL) return "row_ids is null";
  if (top_n < 0 || top_n > STRATA_MAX_TOP_LOGPROBS) return "top_n is outside [0, STRATA_MAX_TOP_LOGPROBS]";
  if (top_n > vocab) return "top_n is larger than the vocabulary";
  for (i = 0; i < num_rows; ++i) {
    if (row_ids[i] < 0 || row_ids[i] >= rows) return "a row id is outside the logits";
  }
  return NULL;
}

typedef struct strata_block_pair {
  int32_t src;
  int32_t dst;
} strata_block_pair;

/* ------------------------------------------------------------------------------------ */
/* The function table                                                                    */

typedef struct strata_backend_v1 {
  uint32_t struct_size;

  /* Message for the last non-OK status returned on the calling thread. */
  const char* (*last_error)(void);

  /* Devices. */
  strata_status (*device_count)(int32_t* count);
  strata_status (*device_info)(int32_t index, strata_device_info* info);
  strata_status (*device_open)(int32_t index, const strata_device_options* options,
                               strata_device* out);
  void (*device_close)(strata_device dev);
  /* 1 if the op is implemented for activations of `act_dtype` and weights of
   * (`weight_format`, `weight_dtype`); both ignored where the op has no weight. */
  int32_t (*supports)(strata_device dev, int32_t op, int32_t act_dtype, int32_t weight_format,
                      int32_t weight_dtype);
  strata_status (*synchronize)(strata_device dev);

  /* Memory. */
  strata_status (*buffer_alloc)(strata_device dev, uint64_t bytes, strata_buffer* out);
  void (*buffer_free)(strata_device dev, strata_buffer buf);
  /* Host address of a buffer on host-visible devices, NULL elsewhere. */
  void* (*buffer_host_ptr)(strata_device dev, strata_buffer buf);
  strata_status (*upload)(strata_device dev, strata_buffer dst, uint64_t dst_offset,
                          const void* src, uint64_t bytes);
  strata_status (*download)(strata_device dev, void* dst, strata_buffer src,
                            uint64_t src_offset, uint64_t bytes);

  /* Weights: the backend makes its own copy, in whatever layout it computes fastest. */
  strata_status (*weight_create)(strata_device dev, const strata_weight_desc* desc,
                                 strata_weight* out);
  void (*weight_free)(strata_device dev, strata_weight w);

  /* Paged KV cache. */
  strata_status (*kv_cache_create)(strata_device dev, const strata_kv_cache_desc* desc,
                                   strata_kv_cache* out);
  void (*kv_cache_free)(strata_device dev, strata_kv_cache kv);

  /* ---- Ops. Shapes: n = tokens in the batch, d = hidden size. ---- */

  /* out[n, d] = table[ids[n]] (ids I32). */
  strata_status (*embedding)(strata_device dev, strata_weight table, const strata_tensor* ids,
                             const strata_tensor* out);

  /* With residual: residual += x (in place); out = rmsnorm(residual) * weight.
   * Without (residual == NULL): out = rmsnorm(x) * weight.  weight F32 [d]. */
  strata_status (*rms_norm)(strata_device dev, const strata_tensor* x,
                            const strata_tensor* residual, const strata_tensor* weight,
                            float eps, const strata_tensor* out);

  /* out[n, rows] = x[n, cols] * W^T + bias (bias F32 [rows] or NULL). */
  strata_status (*matmul)(strata_device dev, const strata_tensor* x, strata_weight w,
                          const strata_tensor* bias, const strata_tensor* out);

  /* Rotates q [n, num_heads*head_dim] and k [n, num_kv_heads*head_dim] in place at
   * `positions`, then writes k and v into layer `layer` of the cache at `slot_mapping`. */
  strata_status (*rope_kv_write)(strata_device dev, const strata_rope_params* rope,
                                 const strata_attention_params* attn,
                                 const strata_batch_desc* batch, const strata_tensor* q,
                                 const strata_tensor* k, const strata_tensor* v,
                                 strata_kv_cache kv, int32_t layer);

  /* out[n, num_heads*head_dim] = causal softmax(q K^T * scale) V over the paged cache. */
  strata_status (*attention)(strata_device dev, const strata_attention_params* attn,
                             const strata_batch_desc* batch, const strata_tensor* q,
                             strata_kv_cache kv, int32_t layer, const strata_tensor* out);

  /* out[n, f] = silu(gate[n, f]) * up[n, f]. */
  strata_status (*silu_mul)(strata_device dev, const strata_tensor* gate,
                            const strata_tensor* up, const strata_tensor* out);

  /* out = a + b (same shapes). */
  strata_status (*add)(strata_device dev, const strata_tensor* a, const strata_tensor* b,
                       const strata_tensor* out);

  /* out[i, :] = x[indices[i], :]; e.g. the last token of each sequence before the logits. */
  strata_status (*gather_rows)(strata_device dev, const strata_tensor* x,
                               const strata_tensor* indices, const strata_tensor* out);

  /* out_ids[r] = argmax_j logits[r, j] (first maximum); logits F32 [rows, vocab]. */
  strata_status (*argmax)(strata_device dev, const strata_tensor* logits,
                          const strata_tensor* out_ids);

  /* Temperature / top-k / top-p / min-p sampling of each row; out_ids I32 [rows]. */
  strata_status (*sample)(strata_device dev, const strata_tensor* logits,
                          const strata_sample_params* params, const strata_tensor* out_ids);

  /* Copies whole blocks (all layers, K and V) inside the cache: copy-on-write, compaction. */
  strata_status (*copy_blocks)(strata_device dev, strata_kv_cache kv,
                               const strata_block_pair* pairs, int32_t num_pairs);

  /* Moves whole blocks between the cache and host memory (`host`, `host_bytes` long, holds
   * blocks packed in the backend's layout, kv_block_bytes() each). to_host != 0: cache ->
   * host. pair.src / pair.dst index the cache on one side and the host slots on the other. */
  strata_status (*swap_blocks)(strata_device dev, strata_kv_cache kv, void* host,
                               uint64_t host_bytes, const strata_block_pair* pairs,
                               int32_t num_pairs, int32_t to_host);
  uint64_t (*kv_block_bytes)(strata_device dev, strata_kv_cache kv);

  /* Extensions by name; NULL when unknown. */
  void* (*get_proc_address)(const char* name);

  /* ---- Since ABI 1.1: recorded op sequences (STRATA_CAP_GRAPHS; NULL when absent). ----
   * Between graph_begin() and graph_end() the ops called on `dev` (from the calling thread)
   * are recorded instead of run. Replaying the graph runs them again in the same order
   * with the same arguments: the same buffers, offsets, shapes, weights, KV cache and
   * host-side scalars (num_tokens, maxima, eps, ...), while the CONTENTS of device memory
   * (token ids, positions, slot mapping, seq_lens, block tables, activations) are read
   * at replay time. That is what makes a decode step replayable: the core uploads the
   * step's arrays into the same buffers and launches the graph, instead of issuing every
   * op again. Host copies in a strata_batch_desc are not looked at while recording
   * (pass NULL), so max_seq_len must then bound every seq_len the graph will see.
   * Only device-side ops can be recorded: upload, download, synchronize, sample (host
   * parameters), copy_blocks and swap_blocks fail with INVALID_ARGUMENT while recording,
   * and so does an op that would first have to grow a backend workspace (run the same
   * step once unrecorded first). After a failed op graph_end() still ends the recording
   * and fails; the device is then usable as before. */
  strata_status (*graph_begin)(strata_device dev);
  strata_status (*graph_end)(strata_device dev, strata_graph* out);
  strata_status (*graph_launch)(strata_device dev, strata_graph graph);
  void (*graph_free)(strata_device dev, strata_graph graph);

  /* ---- Since ABI 1.2 (NULL when absent; the core then issues the separate ops). ----
   * out[n, rows] (+)= prologue(x)[n, cols] * W^T + bias: a matmul with the op before it
   * (rms_norm without residual, or silu_mul) and the residual add after it fused in, as
   * params says. It exists for decode, where each kernel launch costs about as much as a
   * small kernel and a bandwidth-bound product can apply the prologue while it streams
   * the weights. The result equals the separate ops up to the rounding of the
   * intermediates, which a fusing backend may keep in F32. */
  strata_status (*matmul_ex)(strata_device dev, const strata_tensor* x, strata_weight w,
                             const strata_matmul_params* params, const strata_tensor* out);

  /* ---- Since ABI 1.3 (NULL when absent; the core then issues the two ops). ----
   * rope_kv_write(rope, attn, batch, q, k, v, kv, layer) then
   * attention(attn, batch, q, kv, layer, out), as one call: at a decode step the attention
   * kernel can rotate the query and write the new key and value itself, so no kernel runs
   * between the qkv projection and the attention. The result equals the two ops'; q and k
   * may or may not be left rotated. For a fused decode step the batch's slot_mapping must
   * give each token the slot of its sequence's last position (seq_len - 1), as a decode
   * step's arrays do. */
  strata_status (*rope_attention)(strata_device dev, const strata_rope_params* rope,
                                  const strata_attention_params* attn, const strata_batch_desc* batch,
                                  const strata_tensor* q, const strata_tensor* k, const strata_tensor* v,
                                  strata_kv_cache kv, int32_t layer, const strata_tensor* out);

  /* ---- Since ABI 1.4 (NULL when absent; the core then finishes each step before it ----
   * schedules the next). Overlapped steps: the core schedules, builds and enqueues step
   * N + 1 while step N still runs, so the device does not idle while the host decides what
   * comes next. Two pieces make that possible:
   *
   * embedding_feedback() is embedding() where an id < 0 stands for a token the previous
   * step sampled on the device and the host has not seen yet: ids[i] = -(r + 1) reads
   * feedback[r] (feedback I32 [m], usually the previous step's sampled ids). An r >= m is
   * an out-of-range device index (reported like an embedding id outside the table).
   *
   * readback_start() enqueues a copy of `bytes` of `src` (at most
   * STRATA_READBACK_MAX_BYTES) behind every op queued so far and returns at once;
   * readback_finish() waits for that copy, reports errors of the ops before it as
   * synchronize() does, copies the bytes to `dst` (NULL: drop them) and releases the
   * ticket, also when it fails. At most STRATA_MAX_PENDING_READBACKS tickets per device
   * may be pending; readback_start fails with INVALID_ARGUMENT beyond that, and while
   * recording a graph. */
  strata_status (*embedding_feedback)(strata_device dev, strata_weight table, const strata_tensor* ids,
                                      const strata_tensor* feedback, const strata_tensor* out);
  strata_status (*readback_start)(strata_device dev, strata_buffer src, uint64_t src_offset, uint64_t bytes,
                                  strata_readback* out);
  strata_status (*readback_finish)(strata_device dev, strata_readback readback, void* dst);

  /* ---- Since ABI 1.5 (NULL when absent; the core then samples penalized rows on the ----
   * host). Applies strata_penalty_params to logits F32 [rows, vocab] in place, so that rows
   * with repetition, frequency or presence penalties can be sampled by sample() too. Needs
   * host data, so it cannot be recorded into a graph. */
  strata_status (*apply_penalties)(strata_device dev, const strata_tensor* logits,
                                   const strata_penalty_params* params);

  /* ---- Since ABI 1.6 (NULL when absent; the core then does not overlap a step that has ----
   * penalized rows). apply_penalties() where a row also counts one generated token that the
   * host has not seen yet, named as embedding_feedback() names it: where feedback_rows[r] >= 0
   * (a host array of one entry per row; -1: none), the token t = feedback[feedback_rows[r]]
   * (feedback I32 [m], usually the previous step's sampled ids, read on the device) is one
   * more occurrence in row r's generated tokens: listed, it is penalized with its count + 1;
   * unlisted, as if listed with count 1. A t outside the vocabulary is not counted. So a
   * penalized request's step can be launched while the step that samples its previous token
   * still runs. feedback_rows[r] >= m is refused (INVALID_ARGUMENT) before any logit is
   * touched. */
  strata_status (*apply_penalties_feedback)(strata_device dev, const strata_tensor* logits,
                                            const strata_penalty_params* params, const int32_t* feedback_rows,
                                            const strata_tensor* feedback);

  /* ---- Since ABI 1.7 (NULL when absent; the core then downloads the rows' logits and ----
   * computes their logprobs on the host). The log-probabilities, log_softmax of the row,
   * of some rows of logits F32 [rows, vocab], each logit read as the host sampler reads it
   * (NaN as -inf, +inf as the largest float), so that a request that wants logprobs needs
   * a few bytes back instead of its vocabulary of floats. For i < num_rows, with
   * r = row_ids[i] (a host array; each in [0, rows)):
   *   values[i, 0]     = the logprob of token ids[r] (ids I32 [rows] read on the device,
   *                      usually what sample() just drew; -inf for an id outside the
   *                      vocabulary);
   *   top_ids[i, j], values[i, 1 + j] = the j-th most likely token of row r (ties: lower id
   *                      first) and its logprob, for j < top_n.
   * values F32 [num_rows, 1 + top_n]; top_ids I32 [num_rows, top_n] (may be NULL when
   * top_n is 0); 0 <= top_n <= min(vocab, STRATA_MAX_TOP_LOGPROBS). A row whose every logit
   * is -inf or NaN gives NaN values. Reads the logits as they are: call it before anything
   * that changes them in place (apply_penalties). Needs host data (row_ids), so it cannot
   * be recorded into a graph. */
  strata_status (*logprobs)(strata_device dev, const strata_tensor* logits, const int32_t* row_ids,
                            int32_t num_rows, const strata_tensor* ids, int32_t top_n, const strata_tensor* values,
                            const strata_tensor* top_ids);

  /* ---- Since ABI 1.8 (NULL when absent; the core then calls rms_norm() once per head). ----
   * RMSNorm of each head of each row, in place, as Qwen3 normalizes its queries and keys
   * before RoPE: x [n, num_heads * head_dim] (row_stride allowed, so q and k may be column
   * slices of a fused QKV output), for every row r and head h the head_dim elements
   * x[r, h*head_dim .. (h+1)*head_dim) become rmsnorm(those elements) * weight[h, :], where
   * weight is F32 [num_heads, head_dim] (one weight row per head; the core repeats q_norm
   * for the query heads and k_norm for the key heads, so both are one call). */
  strata_status (*rms_norm_heads)(strata_device dev, const strata_tensor* x, const strata_tensor* weight,
                                  float eps);

  /* ---- Since ABI 1.9 (NULL when absent: the core reports no counts). ----
   * Quantization health counters, cumulative since device_open, per counter slot (a weight's
   * desc.counter_slot): saturated[s] = activation values that had to be clamped to the 8-bit
   * range in matmuls of slot s (0 with dynamic per-token scales unless a value is non-finite);
   * nonfinite[s] = NaN/Inf activations seen there; outliers[s] = run-time outlier columns
   * (OUTLIER_SPLIT) beyond the stored ones. Writes min(num_slots, STRATA_MAX_QUANT_COUNTER_SLOTS)
   * entries of each array (any may be NULL). Synchronizes with the device's queued work. */
  strata_status (*quant_counters)(strata_device dev, int32_t num_slots, uint64_t* saturated,
                                  uint64_t* nonfinite, uint64_t* outliers);
} strata_backend_v1;

#define STRATA_READBACK_MAX_BYTES (64u * 1024u)
#define STRATA_MAX_PENDING_READBACKS 4

/* True when `api` has the ABI 1.9 quantization counters. */
#define STRATA_BACKEND_HAS_QUANT_COUNTERS(api)                                             \
  ((api)->struct_size >= offsetof(strata_backend_v1, quant_counters) + sizeof(void*) &&   \
   (api)->quant_counters != NULL)

/* True when `api` has the ABI 1.8 per-head RMSNorm. */
#define STRATA_BACKEND_HAS_RMS_NORM_HEADS(api)                                             \
  ((api)->struct_size >= offsetof(strata_backend_v1, rms_norm_heads) + sizeof(void*) &&   \
   (api)->rms_norm_heads != NULL)

/* True when `api` has the ABI 1.7 logprobs on the device. */
#define STRATA_BACKEND_HAS_LOGPROBS(api)                                                  \
  ((api)->struct_size >= offsetof(strata_backend_v1, logprobs) + sizeof(void*) &&         \
   (api)->logprobs != NULL)

/* True when `api` has the ABI 1.6 penalties that count a token sampled on the device. */
#define STRATA_BACKEND_HAS_PENALTY_FEEDBACK(api)                                                \
  ((api)->struct_size >= offsetof(strata_backend_v1, apply_penalties_feedback) + sizeof(void*) && \
   (api)->apply_penalties_feedback != NULL)

/* True when `api` has the ABI 1.5 penalties on the device. */
#define STRATA_BACKEND_HAS_PENALTIES(api)                                                 \
  ((api)->struct_size >= offsetof(strata_backend_v1, apply_penalties) + sizeof(void*) &&  \
   (api)->apply_penalties != NULL)

/* True when `api` has the ABI 1.4 overlapped-step entries. */
#define STRATA_BACKEND_HAS_OVERLAPPED_STEPS(api)                                          \
  ((api)->struct_size >= offsetof(strata_backend_v1, readback_finish) + sizeof(void*) &&  \
   (api)->embedding_feedback != NULL && (api)->readback_start != NULL &&                 \
   (api)->readback_finish != NULL)

/* True when `api` has the ABI 1.3 fused rope + attention. */
#define STRATA_BACKEND_HAS_ROPE_ATTENTION(api)                                           \
  ((api)->struct_size >= offsetof(strata_backend_v1, rope_attention) + sizeof(void*) &&  \
   (api)->rope_attention != NULL)

/* True when `api` has the ABI 1.2 fused matmul. */
#define STRATA_BACKEND_HAS_MATMUL_EX(api)                                              \
  ((api)->struct_size >= offsetof(strata_backend_v1, matmul_ex) + sizeof(void*) &&     \
   (api)->matmul_ex != NULL)

/* True when `api` (a table of struct_size bytes) has the ABI 1.1 graph entry points. */
#define STRATA_BACKEND_HAS_GRAPHS(api)                                                  \
  ((api)->struct_size >= offsetof(strata_backend_v1, graph_free) + sizeof(void*) &&      \
   (api)->graph_begin != NULL && (api)->graph_end != NULL && (api)->graph_launch != NULL && \
   (api)->graph_free != NULL)

/* What strata_backend_init() returns; owned by the plugin, valid until it is unloaded. */
typedef struct strata_plugin_info {
  uint32_t struct_size;
  uint32_t abi_version; /* STRATA_DEVICE_ABI_VERSION the plugin was built against */
  const char* name;     /* "cpu", "cuda", "opencl", or a vendor's name */
  const char* version;  /* the plugin's own version string */
  const strata_backend_v1* backend;
  /* Why the backend reports no device, when it reports none (e.g. "no CUDA driver");
   * may be NULL. */
  const char* (*unavailable_reason)(void);
} strata_plugin_info;

typedef const strata_plugin_info* (*strata_backend_init_fn)(void);
typedef int32_t (*strata_backend_score_fn)(void);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* STRATA_DEVICE_H_ */
