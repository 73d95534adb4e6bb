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

Status QuantLtGemm::Run(int32_t values, const void* qw, int64_t ldw, const void* qx, int64_t ldx, int64_t m, int64_t n,
                        int64_t k, void* acc, int64_t lda) {
  if (m == 0 || n == 0) return Ok();
  const bool fp8 = values == kQuantFp8;
  // IMMA and FP8 kernels want 16-byte aligned, multiple-of-16 dimensions; the rest is
  // the fallback kernel's.
  if (k % 16 != 0 || m % 16 != 0 || ldw % 16 != 0 || ldx % 16 != 0 || lda % 4 != 0) {
    return Unsupported("quantized matmul: shape m=", m, " k=", k, " not a multiple of 16");
  }
  const Key key{values, m, n, k, ldw, ldx, lda};
  Descs d;
  const cublasComputeType_t compute = fp8 ? CUBLAS_COMPUTE_32F : CUBLAS_COMPUTE_32I;
  const cudaDataType_t scale_t = fp8 ? CUDA_R_32F : CUDA_R_32I;
  const cudaDataType_t in_t = fp8 ? CUDA_R_8F_E4M3 : CUDA_R_8I;
  const cudaDataType_t acc_t = fp8 ? CUDA_R_32F : CUDA_R_32I;
  QLT_CALL(cublasLtMatmulDescCreate(&d.op, compute, scale_t), "matmul desc");
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  QLT_CALL(cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)), "transa");
  QLT_CALL(cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)), "transb");
  // Column-major: C[m, n] = W^T(as [k, m], ld ldw) x X (as [k, n], ld ldx).
  QLT_CALL(cublasLtMatrixLayoutCreate(&d.a, in_t, k, m, ldw), "layout W");
  QLT_CALL(cublasLtMatrixLayoutCreate(&d.b, in_t, k, n, ldx), "layout x");
  QLT_CALL(cublasLtMatrixLayoutCreate(&d.c, acc_t, m, n, lda), "layout acc");
  auto it = algos_.find(key);
  if (it == algos_.end()) {
    QLT_CALL(cublasLtMatmulPreferenceCreate(&d.pref), "preference");
    QLT_CALL(cublasLtMatmulPreferenceSetAttribute(d.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_bytes_,
                                                  sizeof(workspace_bytes_)),
             "preference workspace");
    cublasLtMatmulHeuristicResult_t r{};
    int found = 0;
    const cublasStatus_t hs =
        cublasLtMatmulAlgoGetHeuristic(handle_, d.op, d.a, d.b, d.c, d.c, d.pref, 1, &r, &found);
    Choice c;
    c.ok = hs == CUBLAS_STATUS_SUCCESS && found > 0 && r.state == CUBLAS_STATUS_SUCCESS;
    c.algo = r.algo;
    it = algos_.emplace(key, c).first;
  }
  if (!it->second.ok) {
    return Unsupported("quantized matmul: cuBLASLt has no ", fp8 ? "FP8" : "INT8", " algorithm for m=", m, " n=", n,
                       " k=", k);
  }
  const int32_t ialpha = 1, ibeta = 0;
  const float falpha = 1.0f, fbeta = 0.0f;
  const void* alpha = fp8 ? static_cast<const void*>(&falpha) : static_cast<const void*>(&ialpha);
  const void* beta = fp8 ? static_cast<const void*>(&fbeta) : static_cast<const void*>(&ibeta);
  return LtStatus(cublasLtMatmul(handle_, d.op, alpha, qw, d.a, qx, d.b, beta, acc, d.c, acc, d.c, &it->second.algo,
                                 workspace_, workspace_bytes_, stream_),
                  "cublasLtMatmul");
}

}  // namespace strata::cuda
