// oneDNN matmul for batches too large for the GEMV (prefill): y = x * W^T (+ bias) in F32,
// with one primitive per shape cached, since creating a primitive costs far more than a
// small run.
#ifndef STRATA_BACKENDS_CPU_DNNL_MATMUL_H_
#define STRATA_BACKENDS_CPU_DNNL_MATMUL_H_

#include <cstdint>
#include <map>
#include <mutex>
#include <tuple>

#include "oneapi/dnnl/dnnl.hpp"

namespace strata::cpu {

class DnnlMatmul {
 public:
  DnnlMatmul();
  // x [m, k] (row stride lda), W row-major [n, k], bias [n] or null, y [m, n] (stride ldc).
  // Throws dnnl::error on failure; the caller turns it into a status. Thread-safe.
  void Run(const float* x, int64_t m, int64_t k, int64_t lda, const float* w, int64_t n,
           const float* bias, float* y, int64_t ldc, int32_t num_threads);
  // Int8 x int8 with int32 results (W8A8 prefill): x s8 [m, k] (stride lda), W s8 row-major
  // [n, k], y s32 [m, n] (stride ldc); scales are applied by the caller.
  // The AMX prefill's transposed form (ops_dense.cpp): y^T = W x^T with the activations as the
  // B operand, packed once per matmul into the layout oneDNN's bf16 kernel reads directly.
  // PackedB: the layout for B = x^T ([k, ntok], x bf16 row-major [ntok, k]) of a product with
  // `rows`-row A. PackB: reorders x into it (out: packed.get_size() bytes).
  dnnl::memory::desc PackedB(int64_t rows, int64_t k, int64_t ntok);
  void PackB(const uint16_t* x, int64_t ntok, int64_t k, const dnnl::memory::desc& packed, void* out);
  // a bf16 [rows, k] row-major (stride k) x packed B -> y f32 [rows, ntok] dense. Single-threaded.
  void RunBf16PackedB(const uint16_t* a, int64_t rows, int64_t k, const void* b,
                      const dnnl::memory::desc& packed, int64_t ntok, float* y);
  // Whether oneDNN runs on a CPU with AMX (avx512_core_amx): bf16 matmuls then use the tiles.
  static bool HasAmx();
  void RunS8S8(const int8_t* x, int64_t m, int64_t k, int64_t lda, const int8_t* w, int64_t n,
               int32_t* y, int64_t ldc, int32_t num_threads);

 private:
  // Shape, strides, bias, and the thread count (a primitive is laid out for its team size).
  using Key = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, bool, int32_t>;
  dnnl::engine engine_;
  std::mutex mu_;  // guards cache_ only: Run may be called from several threads at once
  // F32 primitives carry their own scratchpad (user mode): the library-managed one is shared
  // by all primitives of the process unless oneDNN was built for concurrent execution, and
  // pool threads run F32 tiles at once (a race that corrupted results intermittently).
  struct F32Primitive {
    dnnl::matmul prim;
    dnnl::memory::desc scratchpad_md;
  };
  std::map<Key, F32Primitive> cache_;
  std::map<std::tuple<int64_t, int64_t, int64_t>, F32Primitive> cache_packed_;
  std::map<std::tuple<int64_t, int64_t, int64_t>, dnnl::memory::desc> packed_b_;
  std::map<Key, dnnl::matmul> cache_s8_;
};

}  // namespace strata::cpu

#endif  // STRATA_BACKENDS_CPU_DNNL_MATMUL_H_
