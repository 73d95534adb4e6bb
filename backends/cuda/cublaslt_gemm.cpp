#include "backends/cuda/cublaslt_gemm.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>

namespace strata::cuda {
namespace {

constexpr size_t kWorkspaceBytes = size_t{32} << 20;  // what cuBLAS suggests for Hopper

Status LtStatus(cublasStatus_t s, const char* what) {
  if (s == CUBLAS_STATUS_SUCCESS) return Ok();
  return Error(s == CUBLAS_STATUS_ALLOC_FAILED ? STRATA_ERROR_OUT_OF_MEMORY : STRATA_ERROR_DEVICE,
               "matmul: ", what, ": cuBLAS status ", static_cast<int>(s));
}

#define LT_CALL(call, what) STRATA_CUDA_RETURN_IF_ERROR(LtStatus((call), (what)))

cudaDataType_t CudaType(int32_t dtype) {
  switch (dtype) {
    case STRATA_DTYPE_F16: return CUDA_R_16F;
    case STRATA_DTYPE_BF16: return CUDA_R_16BF;
    default: return CUDA_R_32F;
  }
}

size_t ElemSize(int32_t dtype) { return dtype == STRATA_DTYPE_F32 ? 4 : 2; }

// Largest power of two <= 16 dividing the address and the byte leading dimension.
int32_t Alignment(const void* p, int64_t ld_bytes) {
  const uint64_t v = reinterpret_cast<uint64_t>(p) | static_cast<uint64_t>(ld_bytes);
  int32_t a = 16;
  while (a > 1 && (v % a) != 0) a >>= 1;
  return a;
}

// RAII for the small descriptor objects of one call.
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

// `algo` with its K split `splits` ways (reduced in the compute type through the
// workspace, or in place), if the algorithm supports split-K and cuBLASLt accepts the
// configuration for these descriptors within `workspace_bytes`.
bool WithSplitK(cublasLtHandle_t h, const Descs& d, int32_t splits, size_t workspace_bytes,
                cublasLtMatmulAlgo_t* algo) {
  int32_t support = 0;
  uint32_t mask = 0;
  size_t written = 0;
  if (cublasLtMatmulAlgoCapGetAttribute(algo, CUBLASLT_ALGO_CAP_SPLITK_SUPPORT, &support, sizeof(support),
                                        &written) != CUBLAS_STATUS_SUCCESS ||
      support == 0) {
    return false;
  }
  cublasLtMatmulAlgoCapGetAttribute(algo, CUBLASLT_ALGO_CAP_REDUCTION_SCHEME_MASK, &mask, sizeof(mask), &written);
  uint32_t scheme = 0;
  if (mask & CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE) {
    scheme = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
  } else if (mask & CUBLASLT_REDUCTION_SCHEME_INPLACE) {
    scheme = CUBLASLT_REDUCTION_SCHEME_INPLACE;
  } else {
    return false;
  }
  cublasLtMatmulAlgo_t cand = *algo;
  if (cublasLtMatmulAlgoConfigSetAttribute(&cand, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splits, sizeof(splits)) !=
          CUBLAS_STATUS_SUCCESS ||
      cublasLtMatmulAlgoConfigSetAttribute(&cand, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &scheme, sizeof(scheme)) !=
          CUBLAS_STATUS_SUCCESS) {
    return false;
  }
  cublasLtMatmulHeuristicResult_t r{};
  if (cublasLtMatmulAlgoCheck(h, d.op, d.a, d.b, d.c, d.c, &cand, &r) != CUBLAS_STATUS_SUCCESS ||
      r.state != CUBLAS_STATUS_SUCCESS || r.workspaceSize > workspace_bytes) {
    return false;
  }
  *algo = cand;
  return true;
}

}  // namespace

Status LtGemm::Create(cudaStream_t stream, LtGemm** out) {
  std::unique_ptr<LtGemm> g(new LtGemm());
  g->stream_ = stream;
  LT_CALL(cublasLtCreate(&g->handle_), "cublasLtCreate");
  STRATA_CUDA_CALL(cudaMalloc(&g->workspace_, kWorkspaceBytes), "matmul: cuBLASLt workspace");
  g->workspace_bytes_ = kWorkspaceBytes;
  *out = g.release();
  return Ok();
}

LtGemm::~LtGemm() {
  if (workspace_ != nullptr) cudaFree(workspace_);
  if (handle_ != nullptr) cublasLtDestroy(handle_);
}

Status LtGemm::Run(const GemmArgs& g, bool may_time) {
  if (g.n == 0 || g.m == 0) return Ok();
  // Column-major view: C[m, n] (ld ldo) = op(A)[m, k] * B[k, n] with A = W as a col-major
  // [k, m] matrix (ld k) transposed, B = x as col-major [k, n] (ld ldx).
  const cudaDataType_t wt = CudaType(g.w_dtype), xt = CudaType(g.x_dtype), ot = CudaType(g.out_dtype);
  // Pure F32 stays F32 (no TF32): the f32 mode exists for exact comparisons.
  const cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  Descs d;
  LT_CALL(cublasLtMatmulDescCreate(&d.op, compute, CUDA_R_32F), "matmul desc");
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  LT_CALL(cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)), "transa");
  LT_CALL(cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)), "transb");
  LT_CALL(cublasLtMatrixLayoutCreate(&d.a, wt, g.k, g.m, g.k), "layout W");
  LT_CALL(cublasLtMatrixLayoutCreate(&d.b, xt, g.k, g.n, g.ldx), "layout x");
  LT_CALL(cublasLtMatrixLayoutCreate(&d.c, ot, g.m, g.n, g.ldo), "layout out");

  const float alpha = 1.0f, beta = g.accumulate ? 1.0f : 0.0f;
  auto launch = [&](const cublasLtMatmulAlgo_t& algo) {
    return LtStatus(cublasLtMatmul(handle_, d.op, &alpha, g.w, d.a, g.x, d.b, &beta, g.out, d.c, g.out, d.c,
                                   &algo, workspace_, workspace_bytes_, stream_),
                    "cublasLtMatmul");
  };

  const int32_t al_a = Alignment(g.w, g.k * static_cast<int64_t>(ElemSize(g.w_dtype)));
  const int32_t al_b = Alignment(g.x, g.ldx * static_cast<int64_t>(ElemSize(g.x_dtype)));
  const int32_t al_c = Alignment(g.out, g.ldo * static_cast<int64_t>(ElemSize(g.out_dtype)));
  const Key key{g.m, g.n, g.k, g.ldx, g.ldo, g.w_dtype * 16 + g.x_dtype, g.out_dtype * 2 + (g.accumulate ? 1 : 0),
                al_a * 32 + al_b, al_c};
  // An accumulating product cannot be timed on its own operands (each run would add into
  // out again): it keeps the heuristic's choice, which the key below does not share with
  // the plain product because beta is part of the key.
  const bool want_timing = tuning_ && may_time && TunesTokenCount(g.n) && !g.accumulate;
  const bool want_split = !want_timing && split_k_ > 1 && g.n <= 256 && g.m <= kSplitKMaxRows;
  const bool want_candidate = !want_timing && !want_split && candidate_ >= 0 && g.n <= 256;
  auto it = algos_.find(key);
  const bool want_table = !want_timing && !want_split && !want_candidate && table_.size() > 0 && g.ldx == g.k &&
                          g.ldo == g.m && al_a == 16 && al_b == 16 && al_c == 16;
  if (it == algos_.end() && want_table) {
    if (const GemmConfig* c = table_.Find(g.m, g.n, g.k, g.w_dtype, g.x_dtype, g.out_dtype, g.accumulate)) {
      cublasLtMatmulAlgo_t algo{};
      cublasLtMatmulHeuristicResult_t r{};
      if (GemmConfigTable::Configure(handle_, *c, wt, xt, ot, &algo) &&
          cublasLtMatmulAlgoCheck(handle_, d.op, d.a, d.b, d.c, d.c, &algo, &r) == CUBLAS_STATUS_SUCCESS &&
          r.state == CUBLAS_STATUS_SUCCESS && r.workspaceSize <= workspace_bytes_) {
        ++table_hits_;
        it = algos_.insert_or_assign(key, Choice{algo, false}).first;
        if (std::getenv("STRATA_CUDA_GEMM_LOG") != nullptr) {
          std::fprintf(stderr, "cuBLASLt m=%lld n=%lld k=%lld: gemm_configs entry (algo %d, tile id %d, stages id %d, "
                       "split-K %d, swizzle %d, cluster shape id %d)\n", static_cast<long long>(g.m),
                       static_cast<long long>(g.n), static_cast<long long>(g.k), c->algo_id, c->tile, c->stages,
                       c->splitk, c->swizzle, c->cluster);
        }
      } else {
        ++table_refused_;
        std::fprintf(stderr, "strata cuda: gemm_configs entry for m=%lld n=%lld k=%lld refused by cuBLASLt; "
                     "the heuristic's choice is used\n", static_cast<long long>(g.m), static_cast<long long>(g.n),
                     static_cast<long long>(g.k));
      }
    }
  }
  if (it == algos_.end() || (want_timing && !it->second.timed)) {
    LT_CALL(cublasLtMatmulPreferenceCreate(&d.pref), "preference");
    LT_CALL(cublasLtMatmulPreferenceSetAttribute(d.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                 &workspace_bytes_, sizeof(workspace_bytes_)),
            "preference workspace");
    const uint32_t ua = al_a, ub = al_b, uc = al_c;
    cublasLtMatmulPreferenceSetAttribute(d.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &ua, sizeof(ua));
    cublasLtMatmulPreferenceSetAttribute(d.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &ub, sizeof(ub));
    cublasLtMatmulPreferenceSetAttribute(d.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &uc, sizeof(uc));
    cublasLtMatmulPreferenceSetAttribute(d.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &uc, sizeof(uc));
    cublasLtMatmulHeuristicResult_t results[kLtCandidates] = {};
    int found = 0;
    LT_CALL(cublasLtMatmulAlgoGetHeuristic(handle_, d.op, d.a, d.b, d.c, d.c, d.pref,
                                           want_timing || want_split || want_candidate ? kLtCandidates : 1, results,
                                           &found),
            "algorithm heuristic");
    if (found == 0) {
      return Unsupported("matmul: cuBLASLt has no algorithm for m=", g.m, " n=", g.n, " k=", g.k,
                         " (W ", g.w_dtype, ", x ", g.x_dtype, ", out ", g.out_dtype, ")");
    }
    Choice choice{results[0].algo, want_timing};
    if (want_candidate) {
      int i = std::min(candidate_, found - 1);
      while (i > 0 && results[i].state != CUBLAS_STATUS_SUCCESS) --i;
      choice.algo = results[i].algo;
      if (std::getenv("STRATA_CUDA_GEMM_LOG") != nullptr) {
        const GemmConfig c = GemmConfigTable::Read(choice.algo);
        std::fprintf(stderr,
                     "cuBLASLt m=%lld n=%lld k=%lld: candidate %d of %d (tile id %d, stages id %d, split-K %d, "
                     "cluster shape id %d, workspace %zu)\n",
                     static_cast<long long>(g.m), static_cast<long long>(g.n), static_cast<long long>(g.k), i, found,
                     c.tile, c.stages, c.splitk, c.cluster, results[i].workspaceSize);
      }
    }
    if (want_split) {
      int taken = -1;
      for (int i = 0; i < found && taken < 0; ++i) {
        cublasLtMatmulAlgo_t a = results[i].algo;
        if (results[i].state == CUBLAS_STATUS_SUCCESS && WithSplitK(handle_, d, split_k_, workspace_bytes_, &a)) {
          choice.algo = a;
          taken = i;
        }
      }
      if (std::getenv("STRATA_CUDA_GEMM_LOG") != nullptr) {
        std::fprintf(stderr, "cuBLASLt m=%lld n=%lld k=%lld: split-K %d %s (candidate %d of %d)\n",
                     static_cast<long long>(g.m), static_cast<long long>(g.n), static_cast<long long>(g.k), split_k_,
                     taken >= 0 ? "applied" : "not supported", taken, found);
      }
    }
    if (want_timing && found > 1) {
      // Every candidate writes the same product into g.out (beta = 0), so timing on the
      // call's own operands is harmless; the chosen one runs again below. A candidate
      // that fails to launch is skipped. Each one is timed from a cold L2 (stream_timer.h).
      float best_us = 0.0f;
      bool have = false;
      for (int i = 0; i < found; ++i) {
        if (results[i].state != CUBLAS_STATUS_SUCCESS) continue;
        float us = 0.0f;
        if (!TimeLaunchUs(stream_, flusher_, [&] { return launch(results[i].algo); }, &us).ok()) continue;
        if (!have || us < best_us) {
          best_us = us;
          choice.algo = results[i].algo;
          have = true;
        }
      }
      // cuBLAS reports a failed candidate through its status; clear the runtime's last
      // error too, so that the next kernel's launch check does not report it.
      cudaGetLastError();
    }
    it = algos_.insert_or_assign(key, choice).first;
  }
  return launch(it->second.algo);
}

}  // namespace strata::cuda
