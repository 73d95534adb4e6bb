#include "backends/cpu/dnnl_matmul.h"

#include <omp.h>

#include <unordered_map>

namespace strata::cpu {
namespace {
// Prefill chunk lengths vary; bound the cache so a long-running server does not grow it
// without limit (oneDNN keeps its own primitive cache behind this one, too).
constexpr size_t kMaxCachedPrimitives = 256;
}  // namespace

DnnlMatmul::DnnlMatmul() : engine_(dnnl::engine::kind::cpu, 0), stream_(engine_) {}

void DnnlMatmul::Run(const float* x, int64_t m, int64_t k, int64_t lda, const float* w,
                     int64_t n, const float* bias, float* y, int64_t ldc, int32_t num_threads) {
  using dt = dnnl::memory::data_type;
  const dnnl::memory::desc src_md({m, k}, dt::f32, {lda, 1});
  // W is [n, k] row-major, i.e. the [k, n] weights matrix in column-major ("ba") order.
  const dnnl::memory::desc wei_md({k, n}, dt::f32, {1, k});
  const dnnl::memory::desc bias_md({1, n}, dt::f32, {n, 1});
  const dnnl::memory::desc dst_md({m, n}, dt::f32, {ldc, 1});

  std::lock_guard<std::mutex> lock(mu_);
  const Key key{m, k, n, lda, ldc, bias != nullptr};
  auto it = cache_.find(key);
  if (it == cache_.end()) {
    if (cache_.size() >= kMaxCachedPrimitives) cache_.clear();
    const dnnl::matmul::desc desc = bias ? dnnl::matmul::desc(src_md, wei_md, bias_md, dst_md)
                                         : dnnl::matmul::desc(src_md, wei_md, dst_md);
    const dnnl::matmul::primitive_desc pd(desc, engine_);
    it = cache_.emplace(key, dnnl::matmul(pd)).first;
  }
  dnnl::memory src(src_md, engine_, const_cast<float*>(x));
  dnnl::memory wei(wei_md, engine_, const_cast<float*>(w));
  dnnl::memory dst(dst_md, engine_, y);
  std::unordered_map<int, dnnl::memory> args{
      {DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, wei}, {DNNL_ARG_DST, dst}};
  if (bias) args.emplace(DNNL_ARG_BIAS, dnnl::memory(bias_md, engine_, const_cast<float*>(bias)));
  // oneDNN's OpenMP runtime uses the calling thread's max-threads setting.
  omp_set_num_threads(num_threads);
  it->second.execute(stream_, args);
  stream_.wait();
}

}  // namespace strata::cpu
