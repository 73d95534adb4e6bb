#include "backends/cuda/quant_lt_gemm.h"

#include <memory>

#include "kernels/cuda/quant.h"

namespace strata::cuda {
namespace {

constexpr size_t kWorkspaceBytes = size_t{32} << 20;

Status LtStatus(cublasStatus_t s, const char* what) {
  if (s == CUBLAS_STATUS_SUCCESS) return Ok();
  return Error(s == CUBLAS_STATUS_ALLOC_FAILED ? STRATA_ERROR_OUT_OF_MEMORY
               : s == CUBLAS_STATUS_NOT_SUPPORTED ? STRATA_ERROR_UNSUPPORTED
                                                  : STRATA_ERROR_DEVICE,
               "quantized matmul: ", what, ": cuBLAS status ", static_cast<int>(s));
}
#define QLT_CALL(call, what) STRATA_CUDA_RETURN_IF_ERROR(LtStatus((call), (what)))

struct Descs {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  ~Descs() {
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

}  // namespace

Status QuantLtGemm::Create(cudaStream_t stream, QuantLtGemm** out) {
  std::unique_ptr<QuantLtGemm> g(new QuantLtGemm());
  g->stream_ = stream;
  QLT_CALL(cublasLtCreate(&g->handle_), "cublasLtCreate");
  STRATA_CUDA_CALL(cudaMalloc(&g->workspace_, kWorkspaceBytes), "quantized matmul: cuBLASLt workspace");
  g->workspace_bytes_ = kWorkspaceBytes;
  *out = g.release();
  return Ok();
}

QuantLtGemm::~QuantLtGemm() {
  if (workspace_ != nullptr) cudaFree(workspace_);
  if (handle_ != nullptr) cublasLtDestroy(handle_);
}

// One product: the descriptors and operands of Run / RunFp8Scaled.
struct QuantLtGemm::Problem {
  int32_t kind = 0;  // 0 INT8 -> I32, 1 FP8 -> F32, 2 FP8 scaled -> out_dtype
  const void* qw = nullptr;
  int64_t ldw = 0;
  const void* qx = nullptr;
  int64_t ldx = 0;
  int64_t m = 0, n = 0, k = 0;
  void* out = nullptr;
  int64_t ldo = 0;
  int32_t out_dtype = STRATA_DTYPE_F32;
  bool accumulate = false;
  const float* w_scale = nullptr;
  const float* a_scale = nullptr;
};

Status QuantLtGemm::Run(int32_t values, const void* qw, int64_t ldw, const void* qx, int64_t ldx, int64_t m, int64_t n,
                        int64_t k, void* acc, int64_t lda, bool may_time) {
  Problem p;
  p.kind = values == kQuantFp8 ? 1 : 0;
  p.qw = qw;
  p.ldw = ldw;
  p.qx = qx;
  p.ldx = ldx;
  p.m = m;
  p.n = n;
  p.k = k;
  p.out = acc;
  p.ldo = lda;
  p.out_dtype = values == kQuantFp8 ? STRATA_DTYPE_F32 : STRATA_DTYPE_I32;
  return RunProblem(p, may_time);
}

Status QuantLtGemm::RunFp8Scaled(const void* qw, int64_t ldw, const void* qx, int64_t ldx, int64_t m, int64_t n,
                                 int64_t k, const float* w_scale, const float* a_scale, void* out, int32_t out_dtype,
                                 int64_t ldo, bool accumulate, bool may_time) {
  Problem p;
  p.kind = 2;
  p.qw = qw;
  p.ldw = ldw;
  p.qx = qx;
  p.ldx = ldx;
  p.m = m;
  p.n = n;
  p.k = k;
  p.out = out;
  p.ldo = ldo;
  p.out_dtype = out_dtype;
  p.accumulate = accumulate;
  p.w_scale = w_scale;
  p.a_scale = a_scale;
  return RunProblem(p, may_time);
}

Status QuantLtGemm::RunProblem(const Problem& p, bool may_time) {
  if (p.m == 0 || p.n == 0) return Ok();
  const bool fp8 = p.kind != 0;
  const size_t out_es = p.out_dtype == STRATA_DTYPE_BF16 ? 2 : 4;
  // IMMA and FP8 kernels want 16-byte aligned, multiple-of-16 dimensions; the rest is
  // the fallback kernel's.
  if (p.k % 16 != 0 || p.m % 16 != 0 || p.ldw % 16 != 0 || p.ldx % 16 != 0 || (p.ldo * out_es) % 16 != 0 ||
      (reinterpret_cast<uintptr_t>(p.out) & 15) != 0) {
    return Unsupported("quantized matmul: shape m=", p.m, " k=", p.k, " not a multiple of 16");
  }
  const Key key{p.kind, p.out_dtype * 2 + (p.accumulate ? 1 : 0), p.m, p.n, p.k, p.ldw, p.ldx, p.ldo};
  Descs d;
  const cublasComputeType_t compute = fp8 ? CUBLAS_COMPUTE_32F : CUBLAS_COMPUTE_32I;
  const cudaDataType_t scale_t = fp8 ? CUDA_R_32F : CUDA_R_32I;
  const cudaDataType_t in_t = fp8 ? CUDA_R_8F_E4M3 : CUDA_R_8I;
  const cudaDataType_t out_t = p.out_dtype == STRATA_DTYPE_BF16 ? CUDA_R_16BF
                               : p.out_dtype == STRATA_DTYPE_I32 ? CUDA_R_32I
                                                                 : CUDA_R_32F;
  QLT_CALL(cublasLtMatmulDescCreate(&d.op, compute, scale_t), "matmul desc");
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  QLT_CALL(cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)), "transa");
  QLT_CALL(cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)), "transb");
  if (p.kind == 2) {
    // Outer-vector scaling: element (i, j) of the product times a_scale_vec[i] (the weight's
    // rows: cuBLASLt's A) and b_scale_vec[j] (the tokens: B).
    const int32_t mode = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
    QLT_CALL(cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &mode, sizeof(mode)), "A scale mode");
    QLT_CALL(cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mode, sizeof(mode)), "B scale mode");
    QLT_CALL(cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &p.w_scale, sizeof(p.w_scale)),
             "A scale");
    QLT_CALL(cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &p.a_scale, sizeof(p.a_scale)),
             "B scale");
  }
  // Column-major: C[m, n] = W^T(as [k, m], ld ldw) x X (as [k, n], ld ldx).
  QLT_CALL(cublasLtMatrixLayoutCreate(&d.a, in_t, p.k, p.m, p.ldw), "layout W");
  QLT_CALL(cublasLtMatrixLayoutCreate(&d.b, in_t, p.k, p.n, p.ldx), "layout x");
  QLT_CALL(cublasLtMatrixLayoutCreate(&d.c, out_t, p.m, p.n, p.ldo), "layout out");
  const int32_t ialpha = 1, ibeta = 0;
  const float falpha = 1.0f, fbeta = p.accumulate ? 1.0f : 0.0f;
  const void* alpha = fp8 ? static_cast<const void*>(&falpha) : static_cast<const void*>(&ialpha);
  const void* beta = fp8 ? static_cast<const void*>(&fbeta) : static_cast<const void*>(&ibeta);
  auto launch = [&](const cublasLtMatmulAlgo_t& algo) {
    return LtStatus(cublasLtMatmul(handle_, d.op, alpha, p.qw, d.a, p.qx, d.b, beta, p.out, d.c, p.out, d.c, &algo,
                                   workspace_, workspace_bytes_, stream_),
                    "cublasLtMatmul");
  };
  auto it = algos_.find(key);
  if (it == algos_.end()) {
    QLT_CALL(cublasLtMatmulPreferenceCreate(&d.pref), "preference");
    QLT_CALL(cublasLtMatmulPreferenceSetAttribute(d.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_bytes_,
                                                  sizeof(workspace_bytes_)),
             "preference workspace");
    cublasLtMatmulHeuristicResult_t r[kCandidates] = {};
    int found = 0;
    // An accumulating product cannot be timed on its own output (each run adds into it).
    // FP8 -> F32 (the fallback of the scaled FP8 product) keeps the heuristic's first choice:
    // timing its candidates ended the test process on the H200 (run 2 of issue 28; not
    // investigated further, that path is the fallback only).
    const bool timing = may_time && !p.accumulate && p.kind != 1;
    const cublasStatus_t hs = cublasLtMatmulAlgoGetHeuristic(handle_, d.op, d.a, d.b, d.c, d.c, d.pref,
                                                             timing ? kCandidates : 1, r, &found);
    Choice c;
    c.ok = hs == CUBLAS_STATUS_SUCCESS && found > 0 && r[0].state == CUBLAS_STATUS_SUCCESS;
    c.algo = r[0].algo;
    if (c.ok && timing && found > 1) {
      float best = 0.0f;
      bool have = false;
      for (int i = 0; i < found; ++i) {
        if (r[i].state != CUBLAS_STATUS_SUCCESS) continue;
        float us = 0.0f;
        if (!TimeLaunchUs(stream_, flusher_, [&] { return launch(r[i].algo); }, &us).ok()) continue;
        if (!have || us < best) {
          best = us;
          c.algo = r[i].algo;
          have = true;
        }
      }
      cudaGetLastError();  // a refused candidate's launch error is not the next kernel's
    }
    it = algos_.emplace(key, c).first;
  }
  if (!it->second.ok) {
    return Unsupported("quantized matmul: cuBLASLt has no ", fp8 ? "FP8" : "INT8", " algorithm for m=", p.m,
                       " n=", p.n, " k=", p.k);
  }
  return launch(it->second.algo);
}

}  // namespace strata::cuda
