// The product of a quantized weight (backends/cuda/quant_weight.h), by format and size:
//   INT4_GROUP, INT8_PER_CHANNEL (weight-only, "A16"): up to kQuantGemvMaxTokens tokens the
//     quantized GEMV (one pass over the packed weight, dequantized in registers); more tokens
//     expand the weight into scratch once per product and multiply it with cuBLASLt, where the
//     product is compute bound and the expansion a small extra pass;
//   W8A8, INT8_OUTLIER_SPLIT, FP8: the activations are quantized per token (a kernel that also
//     counts saturation, non-finite values and run-time outliers; for W8A8 / FP8 behind
//     matmul_ex's RMSNorm / SiLU*mul prologue, that prologue's own kernel:
//     kernels/cuda/quant_prologue.cu), then multiplied on the 8-bit tensor cores:
//     - W8A8 / FP8 on sm_90 (quant_gemm=auto: W8A8 always, FP8 up to 128 tokens,
//       WgmmaIsAutoChoice below): the wgmma GEMM
//       of kernels/cuda/gemm_wgmma.cu, which applies the weight-row x token scales, bias and
//       residual add in its epilogue, so the product is one kernel after the quantizer;
//     - otherwise cuBLASLt (IMMA into an I32 product / FP8 with its outer-vector scales
//       straight into out; kernels/cuda/quant_dot.cu where cuBLASLt has no algorithm),
//       dequantized by the epilogue kernel with the outlier columns, bias and residual add.
//   Why our kernel for decode sizes: cuBLASLt's IMMA at 128 tokens reads the weights at
//   ~1.25 TB/s and needs the I32 round trip and a second kernel (docs/benchmarks.md, issue 28).
// Act-order weights read x through their column permutation (a gather into scratch first).
#include <algorithm>
#include <cstdint>
#include <cstdlib>

#include "backends/cuda/cublaslt_gemm.h"
#include "backends/cuda/op_profiler.h"
#include "backends/cuda/quant_lt_gemm.h"
#include "backends/cuda/quant_weight.h"
#include "kernels/cuda/gemm_wgmma.h"
#include "kernels/cuda/kernels.h"
#include "kernels/cuda/quant.h"

namespace strata::cuda {
namespace {

uint64_t Align256(uint64_t v) { return (v + 255) / 256 * 256; }

// The device's quantization scratch, at least `bytes` long. Growing is refused while a graph
// is being recorded (the graph would keep a buffer that may be replaced); the caller runs the
// same step once unrecorded first, as for every backend workspace (device.h).
Status QuantScratch(Device* dev, uint64_t bytes, char** out) {
  if (bytes > dev->quant_ws_bytes) {
    if (dev->recording) {
      return InvalidArgument("matmul: the quantized product needs ", bytes,
                             " bytes of scratch, more than the device has yet; run the step once unrecorded before "
                             "recording it");
    }
    const uint64_t want = std::max<uint64_t>(bytes, dev->quant_ws_bytes * 2);
    void* p = nullptr;
    STRATA_CUDA_CALL(cudaMalloc(&p, want), "matmul: quantized product scratch");
    if (dev->quant_ws != nullptr) dev->retired_quant_ws.push_back(dev->quant_ws);
    dev->quant_ws = p;
    dev->quant_ws_bytes = want;
  }
  *out = static_cast<char*>(dev->quant_ws);
  return Ok();
}

Status Launched(cudaError_t e, const char* what) { return CudaStatus(e, what); }

// W8A8 / FP8 without LLM.int8's outlier columns: what the fused prologue and the wgmma GEMM take.
bool PlainAct8(const QuantWeight& q) {
  return (q.format == STRATA_WEIGHT_W8A8 || q.format == STRATA_WEIGHT_FP8) && q.num_outliers == 0 &&
         q.perm == nullptr && q.view.layout == kQuantRowMajor;
}

// quant_gemm=auto's choice on sm_90. INT8: the wgmma GEMM at every size: cuBLASLt's IMMA
// writes an I32 product that a second kernel reads back (at 4,096 tokens 8 n m bytes, 940 MB
// for gate_up), so a step's products at 4,096 tokens took 77.2 ms with it against 63.5 with
// wgmma (2026-12-03, `quant_matmul_bench --ops layer`, quantization included). FP8: cuBLASLt
// applies both scales itself and writes out directly, and at 4,096 tokens it was the faster
// (57.9 ms) of the two; also at 256 tokens: a step's products took 4.86 ms with cuBLASLt against
// 6.00 with wgmma (2026-12-03, `quant_matmul_bench --ops layer --formats fp8 --tokens 256`,
// run_gpu.sh serve256_diag), so the wgmma GEMM runs FP8 only up to kFp8WgmmaAutoMaxTokens
// (128), where it streams the weights better (docs/benchmarks.md, issue 28).
// STRATA_CUDA_FP8_WGMMA_MAX_TOKENS=N moves that bound (1..kWgmmaMaxTokens; read once).
constexpr int64_t kFp8WgmmaAutoMaxTokens = 128;
int64_t Fp8WgmmaAutoMaxTokens() {
  static const int64_t v = [] {
    const char* e = std::getenv("STRATA_CUDA_FP8_WGMMA_MAX_TOKENS");
    const long long x = e != nullptr ? std::atoll(e) : 0;
    return x >= 1 ? std::min<int64_t>(x, kWgmmaMaxTokens) : kFp8WgmmaAutoMaxTokens;
  }();
  return v;
}
bool WgmmaIsAutoChoice(int32_t values, int64_t n) { return values == kQuantInt8 || n <= Fp8WgmmaAutoMaxTokens(); }

}  // namespace

Status RunQuantGemvWithPrologue(Device* dev, const View& xv, Weight* w, const float* bias, const View& ov,
                                bool accumulate, int32_t prologue, const float* norm_weight, float eps, const void* up,
                                bool* taken) {
  *taken = false;
  static const bool fuse = [] {
    const char* e = std::getenv("STRATA_CUDA_QGEMV_FUSE");
    return e == nullptr || std::atoi(e) != 0;
  }();
  if (!fuse || w->quant == nullptr || w->quant->perm != nullptr ||
      (w->quant->view.layout != kQuantTiledStream && w->quant->view.layout != kQuantTiled)) {
    return Ok();
  }
  QuantGemvArgs a;
  a.w = w->quant->view;
  a.x = xv.base;
  a.ldx = xv.stride;
  a.x_dtype = xv.dtype;
  a.bias = bias;
  a.out = ov.base;
  a.ldo = ov.stride;
  a.out_dtype = ov.dtype;
  a.n = xv.rows;
  a.accumulate = accumulate;
  a.overlap_previous = dev->use_pdl;
  a.prologue = prologue;
  a.norm_weight = norm_weight;
  a.eps = eps;
  a.up = up;
  if (a.w.layout == kQuantTiled) {  // the tensor-core GEMV computes it into its staged x
    if (!QuantGemvTiledTakesPrologue(a)) return Ok();
    *taken = true;
    return Launched(LaunchQuantGemvTiled(a, dev->stream), "matmul_ex: quantized gemv with its prologue");
  }
  if (!QuantGemvStreamSupports(a) || !QuantGemvStreamTakesPrologue(a)) return Ok();
  *taken = true;
  return Launched(LaunchQuantGemvStream(a, DefaultQuantGemvStreamConfig(a.w, a.n), dev->stream),
                  "matmul_ex: quantized gemv with its prologue");
}

bool QuantTakesPrologue(const Device* dev, const Weight* w, int64_t cols) {
  return dev->quant_fuse && w->quant != nullptr && PlainAct8(*w->quant) && QuantPrologueSupports(cols);
}

Status RunQuantProduct(Device* dev, const View& xv, Weight* w, const float* bias, const View& ov, bool accumulate,
                       const QuantProductPrologue* prologue) {
  const int64_t n = xv.rows;
  if (n == 0) return Ok();
  const QuantWeight& q = *w->quant;
  const QuantWeightView& wv = q.view;
  const int64_t rows = wv.rows, cols = wv.cols;
  const bool weight_only = q.format == STRATA_WEIGHT_INT4_GROUP || q.format == STRATA_WEIGHT_INT8_PER_CHANNEL;
  const size_t xs = xv.elem_size;

  // Scratch layout: [permuted x][the rest], each part 256-byte aligned.
  const uint64_t perm_bytes = q.perm != nullptr ? Align256(static_cast<uint64_t>(n * cols) * xs) : 0;
  uint64_t rest = 0;
  // A tiled weight's GEMV reads x in 4-byte BF16 pairs (kQuantTiled) or 16-byte vectors
  // (kQuantTiledStream); anything else (never the model's own activations) takes the
  // dequantize + GEMM path. Act-order x is gathered into aligned scratch first.
  const uintptr_t x_align = wv.layout == kQuantTiledStream ? 15u : 3u;
  const int64_t stride_unit = wv.layout == kQuantTiledStream ? 8 : 2;
  const bool tiled_x_ok = wv.layout == kQuantRowMajor ||
                          (xv.dtype == STRATA_DTYPE_BF16 &&
                           (q.perm != nullptr ||
                            ((reinterpret_cast<uintptr_t>(xv.base) & x_align) == 0 && xv.stride % stride_unit == 0)));
  const bool gemv = weight_only && n <= kQuantGemvMaxTokens && tiled_x_ok;
  const int64_t ldq = (cols + 15) / 16 * 16;
  uint64_t off_scale = 0, off_rt = 0, off_acc = 0;
  const bool runtime_outliers = q.format == STRATA_WEIGHT_INT8_OUTLIER_SPLIT && q.outlier_threshold > 0.0f;
  if (prologue != nullptr && !QuantTakesPrologue(dev, w, cols)) {
    return Error(STRATA_ERROR_INTERNAL, "matmul_ex: a prologue passed to a quantized product that does not take it");
  }
  // The 8-bit wgmma GEMM (its epilogue dequantizes: no I32 / F32 product in scratch). x is
  // the quantized activations in scratch (256-byte aligned), filled in below.
  WgmmaGemmArgs wa;
  wa.w = wv.data;
  wa.w_dtype = wv.values == kQuantFp8 ? STRATA_DTYPE_FP8_E4M3 : STRATA_DTYPE_I8;
  wa.ldw = wv.ld;
  wa.x_dtype = wa.w_dtype;
  wa.ldx = ldq;
  wa.w_scale = wv.scales;
  wa.a_scale = wv.scales;  // placeholder for the check; the token scales below
  wa.bias = bias;
  wa.out = ov.base;
  wa.ldo = ov.stride;
  wa.out_dtype = ov.dtype;
  wa.m = rows;
  wa.n = n;
  wa.k = cols;
  wa.accumulate = accumulate;
  wa.overlap_previous = dev->use_pdl;
  wa.splits = dev->wgmma_splits;
  wa.multicast = dev->wgmma_multicast;
  wa.token_tile = dev->wgmma_token_tile;
  wa.persistent = dev->wgmma_persistent;
  wa.wide = dev->wgmma_wide;
  wa.promote = dev->fp8_promote;
  wa.mgroup = dev->wgmma_mgroup;
  wa.hold = dev->wgmma_hold;
  wa.trigger = dev->wgmma_trigger;
  wa.epilogue_preload = dev->wgmma_epilogue_preload;
  const bool wgmma = PlainAct8(q) && wv.scales != nullptr &&
                     (dev->quant_gemm_mode == Device::kQuantGemmWgmma ||
                      (dev->quant_gemm_mode == Device::kQuantGemmAuto && WgmmaIsAutoChoice(wv.values, n))) &&
                     WgmmaGemmSupports(wa);
  if (weight_only && !gemv) {
    rest = Align256(static_cast<uint64_t>(rows * cols) * xs);  // the expanded weight
  } else if (!weight_only) {
    off_scale = Align256(static_cast<uint64_t>(n * ldq));
    off_rt = off_scale + Align256(static_cast<uint64_t>(n) * 4);
    off_acc = off_rt + (runtime_outliers ? Align256(static_cast<uint64_t>(n) * 4 * (1 + 2 * kMaxRuntimeOutliers)) : 0);
    rest = off_acc + (wgmma ? 0 : Align256(static_cast<uint64_t>(n * rows) * 4));
  }
  char* ws = nullptr;
  if (perm_bytes + rest > 0) STRATA_CUDA_RETURN_IF_ERROR(QuantScratch(dev, perm_bytes + rest, &ws));

  const void* x = xv.base;
  int64_t ldx = xv.stride;
  if (q.perm != nullptr) {
    STRATA_CUDA_RETURN_IF_ERROR(Launched(
        LaunchQuantPermuteCols(xv.base, xv.stride, q.perm, ws, cols, n, cols, xv.dtype, dev->stream), "matmul: act-order x"));
    x = ws;
    ldx = cols;
  }
  char* part = ws + perm_bytes;

  if (gemv) {
    QuantGemvArgs a;
    a.w = wv;
    a.x = x;
    a.ldx = ldx;
    a.x_dtype = xv.dtype;
    a.bias = bias;
    a.out = ov.base;
    a.ldo = ov.stride;
    a.out_dtype = ov.dtype;
    a.n = n;
    a.accumulate = accumulate;
    a.overlap_previous = dev->use_pdl && q.perm == nullptr;
    return Launched(LaunchQuantGemv(a, dev->stream), "matmul: quantized gemv");
  }
  if (weight_only) {
    STRATA_CUDA_RETURN_IF_ERROR(
        Launched(LaunchQuantDequant(wv, /*integer_only=*/false, part, xv.dtype, cols, dev->stream), "matmul: dequantize"));
    GemmArgs g{};
    g.w = part;
    g.w_dtype = xv.dtype;
    g.x = x;
    g.ldx = ldx;
    g.x_dtype = xv.dtype;
    g.out = ov.base;
    g.ldo = ov.stride;
    g.out_dtype = ov.dtype;
    g.m = rows;
    g.n = n;
    g.k = cols;
    g.accumulate = accumulate;
    STRATA_CUDA_RETURN_IF_ERROR(dev->gemm->Run(g, !dev->recording));
    if (bias == nullptr) return Ok();
    return Launched(LaunchBiasAdd(ov.base, ov.stride, bias, n, rows, ov.dtype, dev->stream), "matmul: bias");
  }

  // 8-bit activations.
  QuantActArgs qa;
  qa.x = x;
  qa.ldx = ldx;
  qa.x_dtype = xv.dtype;
  qa.n = n;
  qa.cols = cols;
  qa.smooth = q.smooth;
  qa.skip = q.outlier_mask;
  qa.values = wv.values;
  qa.static_scale = q.static_act_scale;
  qa.act_scale = q.act_scale;
  qa.outlier_threshold = runtime_outliers ? q.outlier_threshold : 0.0f;
  int32_t* rt = reinterpret_cast<int32_t*>(part + off_rt);
  if (runtime_outliers) {
    qa.rt_count = rt;
    qa.rt_cols = rt + n;
    qa.rt_vals = reinterpret_cast<float*>(rt + n + n * kMaxRuntimeOutliers);
  }
  qa.q = part;
  qa.ldq = ldq;
  qa.scale = reinterpret_cast<float*>(part + off_scale);
  qa.counters = dev->quant_counters;
  qa.slot = q.counter_slot;
  qa.overlap_previous = dev->use_pdl && dev->wgmma_trigger;  // (wgmma_trigger=on; LaunchQuantPrologue only)
  if (prologue != nullptr) {
    qa.prologue = prologue->kind;
    qa.norm_weight = prologue->norm_weight;
    qa.eps = prologue->eps;
    qa.up = prologue->up;
    qa.ldup = prologue->ldup;
    STRATA_CUDA_RETURN_IF_ERROR(
        Launched(LaunchQuantPrologue(qa, dev->stream), "matmul_ex: prologue with activation quantization"));
  } else if (QuantTakesPrologue(dev, w, cols)) {
    // No prologue (the o projection): the same kernel, for its 16-byte loads.
    STRATA_CUDA_RETURN_IF_ERROR(Launched(LaunchQuantPrologue(qa, dev->stream), "matmul: quantize activations"));
  } else {
    STRATA_CUDA_RETURN_IF_ERROR(Launched(LaunchQuantActivations(qa, dev->stream), "matmul: quantize activations"));
  }
  // profile=on (op_profiler.h): the activation quantization, with its prologue, is a sample of
  // its own, so the op's key times the 8-bit product (and its epilogue) alone.
  if (dev->profiler != nullptr && !dev->recording) {
    const char* what = prologue == nullptr                          ? ""
                       : prologue->kind == kQuantPrologueRmsNorm ? "[rms_norm]"
                                                                 : "[silu_mul]";
    dev->profiler->End(dev->stream, StrCat("quantize activations", what, " cols=", cols, " n=", n), 0.0);
    dev->profiler->Begin(dev->stream);
  }

  if (wgmma) {
    wa.x = part;
    wa.a_scale = qa.scale;
    return Launched(LaunchWgmmaGemm(wa, dev->stream), "matmul: 8-bit wgmma gemm");
  }

  void* acc = part + off_acc;
  if (dev->quant_gemm == nullptr) {
    QuantLtGemm* g = nullptr;
    STRATA_CUDA_RETURN_IF_ERROR(QuantLtGemm::Create(dev->stream, &g));
    dev->quant_gemm.reset(g);
  }
  const bool may_time = !dev->recording;
  if (wv.values == kQuantFp8 && bias == nullptr) {
    // Hopper's FP8 GEMM with the weight and token scales applied by cuBLASLt (outer-vector
    // scaling) writes out directly; where this cuBLASLt has no such kernel, the F32
    // product and the epilogue below.
    const Status direct = dev->quant_gemm->RunFp8Scaled(wv.data, wv.ld, part, ldq, rows, n, cols, wv.scales, qa.scale,
                                                        ov.base, ov.dtype, ov.stride, accumulate, may_time);
    if (direct.ok()) return Ok();
    cudaGetLastError();
  }
  Status st = dev->quant_gemm->Run(wv.values, wv.data, wv.ld, part, ldq, rows, n, cols, acc, rows, may_time);
  if (st.code == STRATA_ERROR_UNSUPPORTED) {
    st = Launched(LaunchQuantDot(wv.values, reinterpret_cast<const uint8_t*>(part), ldq, wv.data, wv.ld, n, rows, cols,
                                 acc, rows, dev->stream),
                  "matmul: 8-bit product");
  }
  STRATA_CUDA_RETURN_IF_ERROR(st);

  QuantEpilogueArgs e;
  e.acc = acc;
  e.lda = rows;
  e.acc_is_int = wv.values == kQuantInt8;
  e.w_scale = wv.scales;
  e.a_scale = qa.scale;
  e.n = n;
  e.rows = rows;
  e.x = x;
  e.ldx = ldx;
  e.x_dtype = xv.dtype;
  e.outlier_cols = q.outlier_cols;
  e.outlier_w = q.outlier_w;
  e.outlier_dtype = q.outlier_dtype;
  e.num_outliers = q.num_outliers;
  if (runtime_outliers) {
    e.rt_count = qa.rt_count;
    e.rt_cols = qa.rt_cols;
    e.rt_vals = qa.rt_vals;
    e.wq = reinterpret_cast<const int8_t*>(wv.data);
    e.ldw = wv.ld;
  }
  e.bias = bias;
  e.out = ov.base;
  e.ldo = ov.stride;
  e.out_dtype = ov.dtype;
  e.accumulate = accumulate;
  return Launched(LaunchQuantEpilogue(e, dev->stream), "matmul: dequantize products");
}

}  // namespace strata::cuda
