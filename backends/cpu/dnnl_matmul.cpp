#include "backends/cpu/dnnl_matmul.h"

#include <omp.h>

#include <cstdlib>
#include <new>
#include <unordered_map>

#include "backends/cpu/scratch_arena.h"

namespace strata::cpu {
namespace {
// Prefill chunk lengths vary; bound the cache so a long-running server does not grow it
// without limit (oneDNN keeps its own primitive cache behind this one, too).
constexpr size_t kMaxCachedPrimitives = 256;
}  // namespace

DnnlMatmul::DnnlMatmul() : engine_(dnnl::engine::kind::cpu, 0) {}

void DnnlMatmul::Run(const float* x, int64_t m, int64_t k, int64_t lda, const float* w,
                     int64_t n, const float* bias, float* y, int64_t ldc, int32_t num_threads) {
  using dt = dnnl::memory::data_type;
  const dnnl::memory::desc src_md({m, k}, dt::f32, {lda, 1});
  // W is [n, k] row-major, i.e. the [k, n] weights matrix in column-major ("ba") order.
  const dnnl::memory::desc wei_md({k, n}, dt::f32, {1, k});
  const dnnl::memory::desc bias_md({1, n}, dt::f32, {n, 1});
  const dnnl::memory::desc dst_md({m, n}, dt::f32, {ldc, 1});

  // oneDNN's OpenMP runtime uses the calling thread's max-threads setting, also when it
  // lays out a new primitive.
  omp_set_num_threads(num_threads);
  const Key key{m, k, n, lda, ldc, bias != nullptr, num_threads};
  F32Primitive prim;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = cache_.find(key);
    if (it == cache_.end()) {
      if (cache_.size() >= kMaxCachedPrimitives) cache_.clear();
      const dnnl::matmul::desc desc = bias ? dnnl::matmul::desc(src_md, wei_md, bias_md, dst_md)
                                           : dnnl::matmul::desc(src_md, wei_md, dst_md);
      dnnl::primitive_attr attr;
      attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
      const dnnl::matmul::primitive_desc pd(desc, attr, engine_);
      it = cache_.emplace(key, F32Primitive{dnnl::matmul(pd), pd.scratchpad_desc()}).first;
    }
    prim = it->second;  // handles: the primitive stays alive if the cache is cleared
  }
  // This thread's scratchpad: from its scratch arena (scratch_arena.h), above whatever the
  // caller holds there (a converted weight tile), released on return.
  ScratchArena& arena = ScratchArena::ForThisThread();
  ScratchArena::Scope scope(arena);
  const size_t pad_bytes = prim.scratchpad_md.get_size();
  void* pad = pad_bytes > 0 ? arena.Allocate(pad_bytes) : nullptr;
  if (pad_bytes > 0 && pad == nullptr) throw std::bad_alloc();
  dnnl::memory src(src_md, engine_, const_cast<float*>(x));
  dnnl::memory wei(wei_md, engine_, const_cast<float*>(w));
  dnnl::memory dst(dst_md, engine_, y);
  std::unordered_map<int, dnnl::memory> args{
      {DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, wei}, {DNNL_ARG_DST, dst}};
  if (bias) args.emplace(DNNL_ARG_BIAS, dnnl::memory(bias_md, engine_, const_cast<float*>(bias)));
  if (pad_bytes > 0) args.emplace(DNNL_ARG_SCRATCHPAD, dnnl::memory(prim.scratchpad_md, engine_, pad));
  // Several pool threads run tiles at once: each with its own stream (a CPU stream is a
  // small object; a primitive may be executed concurrently) and its own scratchpad.
  dnnl::stream stream(engine_);
  prim.prim.execute(stream, args);
  stream.wait();
}

bool DnnlMatmul::HasAmx() {
  static const bool amx = [] {
    // oneDNN asks Linux for the AMX tile state (arch_prctl ARCH_REQ_XCOMP_PERM) when it detects
    // the ISA; "avx512_core_amx" here means it got it.
    const auto isa = dnnl::get_effective_cpu_isa();
    return isa == dnnl::cpu_isa::avx512_core_amx;
  }();
  return amx;
}

dnnl::memory::desc DnnlMatmul::PackedB(int64_t rows, int64_t k, int64_t ntok) {
  using dt = dnnl::memory::data_type;
  const dnnl::memory::desc a_md({rows, k}, dt::bf16, {k, 1});
  const dnnl::memory::desc b_md({k, ntok}, dt::bf16, dnnl::memory::format_tag::any);
  const dnnl::memory::desc y_md({rows, ntok}, dt::f32, {ntok, 1});
  omp_set_num_threads(1);
  std::lock_guard<std::mutex> lock(mu_);
  const std::tuple<int64_t, int64_t, int64_t> key{rows, k, ntok};
  auto it = packed_b_.find(key);
  if (it == packed_b_.end()) {
    if (packed_b_.size() >= kMaxCachedPrimitives) packed_b_.clear();
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_md, y_md), engine_);
    it = packed_b_.emplace(key, pd.weights_desc()).first;
  }
  return it->second;
}

void DnnlMatmul::PackB(const uint16_t* x, int64_t ntok, int64_t k, const dnnl::memory::desc& packed,
                       void* out) {
  using dt = dnnl::memory::data_type;
  const dnnl::memory::desc plain({k, ntok}, dt::bf16, {1, k});  // x [ntok, k] is B^T row-major
  omp_set_num_threads(1);
  dnnl::memory src(plain, engine_, const_cast<uint16_t*>(x));
  dnnl::memory dst(packed, engine_, out);
  dnnl::stream stream(engine_);
  dnnl::reorder(src, dst).execute(stream, src, dst);
  stream.wait();
}

void DnnlMatmul::RunBf16PackedB(const uint16_t* a, int64_t rows, int64_t k, const void* b,
                                const dnnl::memory::desc& packed, int64_t ntok, float* y) {
  using dt = dnnl::memory::data_type;
  const dnnl::memory::desc a_md({rows, k}, dt::bf16, {k, 1});
  const dnnl::memory::desc y_md({rows, ntok}, dt::f32, {ntok, 1});
  omp_set_num_threads(1);
  const std::tuple<int64_t, int64_t, int64_t> key{rows, k, ntok};
  F32Primitive prim;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = cache_packed_.find(key);
    if (it == cache_packed_.end()) {
      if (cache_packed_.size() >= kMaxCachedPrimitives) cache_packed_.clear();
      dnnl::primitive_attr attr;
      attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
      const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, packed, y_md), attr, engine_);
      it = cache_packed_.emplace(key, F32Primitive{dnnl::matmul(pd), pd.scratchpad_desc()}).first;
    }
    prim = it->second;
  }
  ScratchArena& arena = ScratchArena::ForThisThread();
  ScratchArena::Scope scope(arena);
  const size_t pad_bytes = prim.scratchpad_md.get_size();
  void* pad = pad_bytes > 0 ? arena.Allocate(pad_bytes) : nullptr;
  if (pad_bytes > 0 && pad == nullptr) throw std::bad_alloc();
  std::unordered_map<int, dnnl::memory> args{
      {DNNL_ARG_SRC, dnnl::memory(a_md, engine_, const_cast<uint16_t*>(a))},
      {DNNL_ARG_WEIGHTS, dnnl::memory(packed, engine_, const_cast<void*>(b))},
      {DNNL_ARG_DST, dnnl::memory(y_md, engine_, y)}};
  if (pad_bytes > 0) args.emplace(DNNL_ARG_SCRATCHPAD, dnnl::memory(prim.scratchpad_md, engine_, pad));
  dnnl::stream stream(engine_);
  prim.prim.execute(stream, args);
  stream.wait();
}

void DnnlMatmul::RunS8S8(const int8_t* x, int64_t m, int64_t k, int64_t lda, const int8_t* w, int64_t n,
                         int32_t* y, int64_t ldc, int32_t num_threads) {
  using dt = dnnl::memory::data_type;
  const dnnl::memory::desc src_md({m, k}, dt::s8, {lda, 1});
  const dnnl::memory::desc wei_md({k, n}, dt::s8, {1, k});
  const dnnl::memory::desc dst_md({m, n}, dt::s32, {ldc, 1});
  std::lock_guard<std::mutex> lock(mu_);
  omp_set_num_threads(num_threads);  // as in Run: also read when a primitive is laid out
  const Key key{m, k, n, lda, ldc, false, num_threads};
  auto it = cache_s8_.find(key);
  if (it == cache_s8_.end()) {
    if (cache_s8_.size() >= kMaxCachedPrimitives) cache_s8_.clear();
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(src_md, wei_md, dst_md), engine_);
    it = cache_s8_.emplace(key, dnnl::matmul(pd)).first;
  }
  dnnl::memory src(src_md, engine_, const_cast<int8_t*>(x));
  dnnl::memory wei(wei_md, engine_, const_cast<int8_t*>(w));
  dnnl::memory dst(dst_md, engine_, y);
  dnnl::stream stream(engine_);  // as in Run: a stream per call
  it->second.execute(stream, {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, wei}, {DNNL_ARG_DST, dst}});
  stream.wait();
}

}  // namespace strata::cpu
