// Highway per-target code: this file is re-included once per target by foreach_target.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "core/sampling/log_sum_exp.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "hwy/contrib/math/math-inl.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/sampling/log_sum_exp.h"
#include "core/sampling/sanitized_logit.h"

HWY_BEFORE_NAMESPACE();
namespace strata {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

double LogSumExpRow(const float* x, size_t n) {
  const hn::ScalableTag<float> d;
  using V = hn::Vec<decltype(d)>;
  const size_t L = hn::Lanes(d);
  const V neg_inf = hn::Set(d, -std::numeric_limits<float>::infinity());
  const V big = hn::Set(d, std::numeric_limits<float>::max());
  auto sane = [&](V v) { return hn::Min(hn::IfThenElse(hn::IsNaN(v), neg_inf, v), big); };
  float m = -std::numeric_limits<float>::infinity();
  size_t i = 0;
  if (n >= L) {
    V vm = neg_inf;
    for (; i + L <= n; i += L) vm = hn::Max(vm, sane(hn::LoadU(d, x + i)));
    m = hn::GetLane(hn::MaxOfLanes(d, vm));
  }
  for (; i < n; ++i) m = std::max(m, SanitizedLogit(x[i]));
  if (m == -std::numeric_limits<float>::infinity()) return m;
  // exp(v - m) with v - m <= 0; below -100 it is 0 in float (and -inf - m is -inf).
  const V vmax = hn::Set(d, m), floor = hn::Set(d, -100.0f);
  double total = 0.0;
  constexpr size_t kBlock = 1024;
  i = 0;
  for (; i + L <= n;) {
    const size_t end = std::min(n - n % L, i + kBlock);
    V acc = hn::Zero(d);
    for (; i < end; i += L) {
      const V t = hn::Sub(sane(hn::LoadU(d, x + i)), vmax);
      acc = hn::Add(acc, hn::IfThenZeroElse(hn::Lt(t, floor), hn::Exp(d, hn::Max(t, floor))));
    }
    total += static_cast<double>(hn::GetLane(hn::SumOfLanes(d, acc)));
  }
  for (; i < n; ++i) total += std::exp(SanitizedLogit(x[i]) - m);
  return static_cast<double>(m) + std::log(total);
}

}  // namespace HWY_NAMESPACE
}  // namespace strata
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace strata {
HWY_EXPORT(LogSumExpRow);

double LogSumExp(const float* x, size_t n) { return HWY_DYNAMIC_DISPATCH(LogSumExpRow)(x, n); }

}  // namespace strata
#endif
