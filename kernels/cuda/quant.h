// Host-side launchers of the quantized-weight kernels (kernels/cuda/quant_*.cu), in the
// layouts backends/cuda/quant_weight.cpp repacks every quantized format into at
// weight_create (device.h's formats and their shared semantics):
//
//   INT8 values   I8 [rows, ld] row-major, ld = cols rounded up to 16 bytes (zero padded),
//                 so every row starts 16-byte aligned (vector loads, cuBLASLt's IMMA
//                 alignment); FP8_E4M3 values use the same layout.
//   INT4 values   U8 [rows, ld] with ld = ceil(cols / 2) rounded up to 16 bytes; the low
//                 nibble is the even column. Act-order (g_idx) weights have their columns
//                 permuted once at load so that every group is contiguous; the product
//                 then reads x through the same permutation (QuantPermuteCols).
//   scales        F32 [rows, ngroups] (ngroups = 1: one per row), whatever the source type.
//   zeros         U8 [rows, ngroups] (INT4 asymmetric) or none (symmetric: 8).
//
// W = (q - z) * s per element for INT4, q * s for INT8 and FP8.
//
// The weight-only formats (INT4_GROUP, INT8_PER_CHANNEL) on a BF16-activation device are
// instead stored tiled (layout kQuantTiledStream for INT4 where the streaming GEMV takes the
// group size, kQuantTiled for INT8 and otherwise; STRATA_CUDA_QGEMV_KERNEL=stream|mma forces
// either where it fits; row-major with
// STRATA_CUDA_QGEMV=v1; both read at weight_create), in
// the order the tensor-core GEMV (quant_gemv_mma.cu) reads them: 16-row tiles, each cut into
// chunks of kQuantTiledChunkCols(values) columns (64 INT4 or 32 INT8), each chunk 512 bytes:
// 16 per lane, holding exactly that lane's A fragments of mma.m16n8k16 for the chunk's
// 16-column steps (QuantTiledPosition says where each element goes). INT4 values are q
// (0..15), INT8 values q + 128 (the FP16 exponent trick wants them unsigned). Rows are padded
// to a multiple of 16 and columns to a whole chunk, with zero bytes. Scales (F32) and zeros
// (U8) are [tiles][ngroups][16]: a tile's 16 rows of one group side by side.
#ifndef STRATA_KERNELS_CUDA_QUANT_H_
#define STRATA_KERNELS_CUDA_QUANT_H_

#include <cuda_runtime.h>

#include <cstdint>

namespace strata::cuda {

enum QuantValues : int32_t {
  kQuantInt8 = 0,  // I8
  kQuantInt4 = 1,  // packed U8 pairs
  kQuantFp8 = 2,   // FP8_E4M3
};

enum QuantLayout : int32_t {
  kQuantRowMajor = 0,
  kQuantTiled = 1,  // mma-fragment order (above); INT4 and INT8 only
  // The same fragments with each chunk's columns permuted so that a lane's B fragments (x)
  // for the whole chunk are one contiguous run of 4 * steps columns (the streaming GEMV,
  // quant_gemv_stream.cu, loads them as 16-byte vectors): the step-s k slots of lane
  // threadID t, 2t, 2t + 1, 2t + 8, 2t + 9, hold the chunk's columns
  // (4 * steps) * t + 4 * s + 0, 1, 2, 3. Padding columns hold the value that dequantizes to
  // exactly 0 (INT4: the group's zero point; INT8: q = 0), so that a step past the row's end
  // adds 0 times whatever finite x the lane reads there.
  kQuantTiledStream = 2,
};

// Columns per 512-byte chunk of a tiled weight: 16 bytes per lane hold 32 INT4 or 16 INT8
// values, i.e. 4 or 2 of mma's 16-column steps.
__host__ __device__ constexpr int kQuantTiledChunkCols(int32_t values) { return values == kQuantInt4 ? 64 : 32; }

// Where element (r, c) of a tiled weight with `chunks` chunks per tile lives: the byte offset
// from the start of the data, and the bit shift of its value in that byte (INT4: 0 or 4).
// mma.m16n8k16's A fragment (PTX ISA): lane = 4 * group + t holds, for one 16x16 step, rows
// group and group + 8, columns 2t, 2t + 1, 2t + 8, 2t + 9, as four pairs
//   a0 = (group, 2t..2t+1), a1 = (group + 8, 2t..), a2 = (group, 2t+8..), a3 = (group + 8, 2t+8..).
// INT4: the step's 32-bit word has pair j's first value in nibble j and its second in nibble
// j + 4, so ((word >> 4j) & 0x000F000F) is pair j as two 16-bit lanes. INT8: two words per
// step, word 0 = bytes (a0, a1), word 1 = (a2, a3), each pair two adjacent bytes.
// stream_order: the kQuantTiledStream permutation (column cc of a chunk is lane threadID
// cc / (4 * steps), step (cc / 4) % steps, k slot 2t + (cc & 1) + 8 ((cc >> 1) & 1)).
__host__ __device__ inline int64_t QuantTiledPosition(int32_t values, int64_t chunks, int64_t r, int64_t c,
                                                      int* shift, bool stream_order = false) {
  const int kc = kQuantTiledChunkCols(values);
  const int64_t tile = r >> 4, chunk = c / kc;
  const int rr = static_cast<int>(r & 15), cc = static_cast<int>(c - chunk * kc);
  int step = cc >> 4, kk = cc & 15;
  if (stream_order) {
    const int steps = kc / 16, lt = cc / (4 * steps), j = cc & 3;
    step = (cc >> 2) % steps;
    kk = 2 * lt + (j & 1) + 8 * (j >> 1);
  }
  const int group = rr & 7, high_row = rr >> 3, t = (kk & 7) >> 1, second = kk & 1, high_col = kk >> 3;
  const int lane = 4 * group + t;
  const int pair = high_row + 2 * high_col;
  int byte;
  if (values == kQuantInt4) {
    const int nibble = pair + 4 * second;
    byte = step * 4 + (nibble >> 1);
    *shift = (nibble & 1) * 4;
  } else {
    byte = step * 8 + pair * 2 + second;
    *shift = 0;
  }
  return ((tile * chunks + chunk) * 32 + lane) * 16 + byte;
}

// A quantized weight as the kernels read it (device pointers).
struct QuantWeightView {
  int32_t values = kQuantInt8;
  const uint8_t* data = nullptr;
  int64_t ld = 0;  // bytes per row
  int64_t rows = 0, cols = 0;
  const float* scales = nullptr;  // [rows, ngroups]
  int64_t ngroups = 1;
  int64_t group_size = 0;          // columns per scale; 0 = the whole row
  const uint8_t* zeros = nullptr;  // INT4 asymmetric: [rows, ngroups]; null = 8
  int32_t layout = kQuantRowMajor;
  int64_t chunks = 0;  // kQuantTiled / kQuantTiledStream: chunks per 16-row tile
};

// The most tokens the quantized GEMV takes (more: dequantize + GEMM, or the 8-bit GEMM).
constexpr int64_t kQuantGemvMaxTokens = 8;

struct QuantGemvArgs {
  QuantWeightView w;
  const void* x = nullptr;  // [n, cols], row stride ldx, x_dtype (F32 or BF16)
  int64_t ldx = 0;
  int32_t x_dtype = 0;
  const float* bias = nullptr;  // F32 [rows] or null
  void* out = nullptr;          // [n, rows], row stride ldo, out_dtype (F32 or BF16)
  int64_t ldo = 0;
  int32_t out_dtype = 0;
  int64_t n = 0;
  bool accumulate = false;  // out += product (+ bias)
  bool overlap_previous = false;  // programmatic dependent launch (launch.cuh)
  // matmul_ex's prologue, one token (QuantGemvStreamTakesPrologue, QuantGemvTiledTakesPrologue): the
  // product reads prologue(x) (strata_matmul_prologue: 1 rms_norm(x) * norm_weight, 2
  // silu(x) * up), which every block computes into shared memory, rounded to BF16 as the
  // separate rms_norm / silu_mul kernels round it, instead of a kernel before the product.
  int32_t prologue = 0;
  const float* norm_weight = nullptr;  // rms_norm: F32 [cols], 16-byte aligned
  float eps = 0.0f;
  const void* up = nullptr;  // silu_mul: BF16 [1, cols], 16-byte aligned
  // Set by LaunchQuantGemvTiled (opt-in STRATA_CUDA_QGEMV_PREFETCH=1): the tensor-core GEMV
  // asks a grouped INT4 weight's scales and zeros into L2 ahead of their use.
  bool prefetch_scales = false;
};

// out[t, r] (+)= sum_c x[t, c] * W[r, c] (+ bias[r]) for n <= kQuantGemvMaxTokens, INT8 or
// INT4 weights, dequantized in registers while the packed rows stream once: a
// kQuantTiledStream weight takes the streaming GEMV (LaunchQuantGemvStream), a kQuantTiled
// one the tensor-core GEMV of quant_gemv_mma.cu (LaunchQuantGemvTiled), a row-major one the
// SIMT GEMV.
cudaError_t LaunchQuantGemv(const QuantGemvArgs& a, cudaStream_t stream);

// The same for a kQuantTiled weight and BF16 x (4-byte aligned rows): the tensor-core GEMV.
// With a.prologue, only where QuantGemvTiledTakesPrologue (else cudaErrorInvalidValue).
cudaError_t LaunchQuantGemvTiled(const QuantGemvArgs& a, cudaStream_t stream);

// Whether LaunchQuantGemvTiled computes a.prologue itself: opt-in (STRATA_CUDA_QGEMV_MMA_FUSE=1,
// read at each call; not yet measured on a GPU), one token, BF16 x and out, x staged in shared
// memory (16-byte aligned, <= 20,480 columns; not with STRATA_CUDA_QGEMV_STAGE=0 or
// STRATA_CUDA_QGEMV_ROUND=2), a 16-byte aligned norm_weight / up.
bool QuantGemvTiledTakesPrologue(const QuantGemvArgs& a);

// The streaming tensor-core GEMV (quant_gemv_stream.cu): the same product for a
// kQuantTiledStream weight (group_size 0 or a multiple of the chunk's columns) and BF16 x
// with 16-byte aligned rows, with `depth` chunk loads in flight per lane (4 or 8), blocks of
// `block_warps` warps (4, 8 or 16) and `kw` warps per 16-row tile (split-K; divides
// block_warps).
struct QuantGemvStreamConfig {
  int depth = 8;
  int block_warps = 8;
  int kw = 8;
};
bool QuantGemvStreamSupports(const QuantGemvArgs& a);
// True when the streaming GEMV takes a.prologue itself: one token, BF16 out, the staged row
// within 48 KB of shared memory (24,576 columns), aligned prologue operands.
bool QuantGemvStreamTakesPrologue(const QuantGemvArgs& a);
// The configuration LaunchQuantGemv uses for this weight and token count
// (STRATA_CUDA_QGEMV_STREAM="depth,block_warps,kw" overrides any of them; 0 keeps one).
QuantGemvStreamConfig DefaultQuantGemvStreamConfig(const QuantWeightView& w, int64_t n);
// The one-token default (STRATA_CUDA_QGEMV_ONE_WAVE=0 returns to the cost model): blocks of 16
// warps, and the most warps per 16-row tile (kw: 16, 8, ... 1) whose blocks still fit in one
// wave, `blocks_per_sm` 16-warp blocks on each of `sms` SMs. Host-side and pure, so that the
// choice is tested without a GPU.
int OneWaveStreamKw(int64_t tiles, int sms, int blocks_per_sm);
cudaError_t LaunchQuantGemvStream(const QuantGemvArgs& a, const QuantGemvStreamConfig& c, cudaStream_t stream);

// Whether a weight-only weight of this shape is stored kQuantTiledStream (the streaming
// GEMV takes its group size) rather than kQuantTiled.
__host__ __device__ constexpr bool QuantStreamLayoutFits(int32_t values, int64_t group_size) {
  return group_size % kQuantTiledChunkCols(values) == 0 && (values == kQuantInt8 || group_size > 0);
}

// dst[r, c] = W[r, c] (integer_only: q - z, or the FP8 value, without the scale) in
// dst_dtype (F32 or BF16), row-major [rows, cols] with row stride ld_dst.
cudaError_t LaunchQuantDequant(const QuantWeightView& w, bool integer_only, void* dst, int32_t dst_dtype,
                               int64_t ld_dst, cudaStream_t stream);

// dst[t, j] = src[t, perm[j]] for j < cols (act-order: x in the weight's column order).
cudaError_t LaunchQuantPermuteCols(const void* src, int64_t ld_src, const int32_t* perm, void* dst, int64_t ld_dst,
                                   int64_t n, int64_t cols, int32_t dtype, cudaStream_t stream);

// Per-token activation quantization (W8A8, LLM.int8, FP8).
constexpr int kMaxRuntimeOutliers = 16;  // per token, beyond the stored outlier columns

struct QuantActArgs {
  const void* x = nullptr;  // [n, cols], row stride ldx, x_dtype
  int64_t ldx = 0;
  int32_t x_dtype = 0;
  int64_t n = 0, cols = 0;
  const float* smooth = nullptr;  // F32 [cols] or null: x / smooth before quantizing
  const uint8_t* skip = nullptr;  // [cols]: 1 = a stored outlier column (quantized as 0, not in amax)
  int32_t values = kQuantInt8;    // kQuantInt8 (|q| <= 127) or kQuantFp8 (|q| <= 448)
  bool static_scale = false;      // true: scale = act_scale; false: max|x_row| / qmax
  float act_scale = 1.0f;
  // Run-time outliers (LLM.int8): |x| > threshold in a column that is not stored (threshold
  // > 0): up to kMaxRuntimeOutliers per token are quantized as 0 and listed (column, value)
  // for the exact correction of the epilogue; they count in counters[2].
  float outlier_threshold = 0.0f;
  int32_t* rt_count = nullptr;  // [n]
  int32_t* rt_cols = nullptr;   // [n, kMaxRuntimeOutliers]
  float* rt_vals = nullptr;     // [n, kMaxRuntimeOutliers]
  void* q = nullptr;            // I8 or FP8 [n, ldq]
  int64_t ldq = 0;
  float* scale = nullptr;  // F32 [n]: the token's scale (x ~ q * scale)
  // saturated, nonfinite, outliers of this weight's counter slot (each a separate array of
  // STRATA_MAX_QUANT_COUNTER_SLOTS entries; null or slot < 0: not counted).
  unsigned long long* counters = nullptr;
  int32_t slot = -1;
  // LaunchQuantPrologue only: the activations are the output of the op before the product
  // (matmul_ex's prologue), computed here and never stored: rms_norm(x) * norm_weight
  // (kQuantPrologueRmsNorm) or silu(x) * up (kQuantPrologueSiluMul), each rounded to x_dtype
  // as the unfused op's output would be.
  int32_t prologue = 0;
  const float* norm_weight = nullptr;  // [cols]
  float eps = 0.0f;
  const void* up = nullptr;  // [n, cols], row stride ldup, x_dtype
  int64_t ldup = 0;
  // LaunchQuantPrologue only: launched with programmatic dependent launch (kernels/cuda/
  // launch.cuh); the kernel waits for the previous kernel before anything else. With a
  // previous 8-bit GEMM that lets it start early (WgmmaGemmArgs::trigger), its launch is off
  // the critical path. Off by default (device option wgmma_trigger=on).
  bool overlap_previous = false;
};
cudaError_t LaunchQuantActivations(const QuantActArgs& a, cudaStream_t stream);

// matmul_ex's prologue fused into the per-token quantization (kernels/cuda/quant_prologue.cu):
// one kernel reads x (and up), and writes only the 8-bit activations and their scales. No
// stored or run-time outlier columns (skip, outlier_threshold): LLM.int8 keeps the unfused path.
enum QuantPrologue : int32_t {
  kQuantPrologueNone = 0,
  kQuantPrologueRmsNorm = 1,
  kQuantPrologueSiluMul = 2,
};
// True when LaunchQuantPrologue takes rows of `cols` activations (the row is held in shared
// memory as F32).
bool QuantPrologueSupports(int64_t cols);
cudaError_t LaunchQuantPrologue(const QuantActArgs& a, cudaStream_t stream);

// out[t, r] (+)= acc[t, r] * w_scale[r] * a_scale[t] + outliers + bias[r]: the dequantizing
// epilogue of the 8-bit products.
struct QuantEpilogueArgs {
  const void* acc = nullptr;  // I32 (acc_is_int) or F32 [n, lda]
  int64_t lda = 0;
  bool acc_is_int = true;
  const float* w_scale = nullptr;  // [rows]
  const float* a_scale = nullptr;  // [n]
  int64_t n = 0, rows = 0;
  // LLM.int8's stored outlier columns, in float: + sum_j x[t, cols[j]] * ow[r, j].
  const void* x = nullptr;  // the product's input (x_dtype, row stride ldx)
  int64_t ldx = 0;
  int32_t x_dtype = 0;
  const int32_t* outlier_cols = nullptr;  // [num_outliers]
  const void* outlier_w = nullptr;        // [rows, num_outliers], outlier_dtype (F16 or BF16)
  int32_t outlier_dtype = 0;
  int32_t num_outliers = 0;
  // Run-time outliers (QuantActArgs): + value * q_w[r, col] * w_scale[r].
  const int32_t* rt_count = nullptr;
  const int32_t* rt_cols = nullptr;
  const float* rt_vals = nullptr;
  const int8_t* wq = nullptr;  // the INT8 weight values, [rows, ldw]
  int64_t ldw = 0;
  const float* bias = nullptr;
  void* out = nullptr;  // [n, rows], row stride ldo, out_dtype
  int64_t ldo = 0;
  int32_t out_dtype = 0;
  bool accumulate = false;
};
cudaError_t LaunchQuantEpilogue(const QuantEpilogueArgs& a, cudaStream_t stream);

// acc[t, r] = sum_c qx[t, c] * qw[r, c]: the 8-bit product without tensor cores, for shapes
// cuBLASLt refuses (INT8: exact I32 sums; FP8: F32 sums of the decoded values).
cudaError_t LaunchQuantDot(int32_t values, const uint8_t* qx, int64_t ldq, const uint8_t* qw, int64_t ldw, int64_t n,
                           int64_t rows, int64_t cols, void* acc, int64_t lda, cudaStream_t stream);

}  // namespace strata::cuda

#endif  // STRATA_KERNELS_CUDA_QUANT_H_
