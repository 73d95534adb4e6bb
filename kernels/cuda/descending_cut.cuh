// Where a running sum over one row's probabilities, taken in descending order (equal
// probabilities: lower index first), first reaches a limit: top-k's k-th token (the sum of
// ones), top-p's nucleus and the draw (the sum of probabilities). One block of kCutThreads
// threads per row; nothing of the row is sorted but the few tokens around the crossing.
//
// Why: the kernel this replaced found each cut by bisection over the probability's 32 bits,
// ~30 passes over the row per cut, each with an expf per token: on the H200, top-p over a
// 128,256-entry row took 864 us for 1 row and 1,421 us for 128 (run 115, 2026-12-01).
//
// How: a probability in [0, 1] orders like its float bits (its "key"). One pass counts the
// keys into bins of 2^20 keys (an eighth of an octave; 1,017 bins). Each bin's mass lies
// between its count times its smallest and its largest value, so suffix sums of those bounds
// bracket the bins where the running sum can cross. The next pass adds up exactly (in
// double) everything above the bracket and gathers the bracket's tokens into shared memory,
// where they are sorted by (key, -index) and summed in order. A bracket with more than
// kGatherCap tokens is counted into finer bins instead (2^10 keys, then single keys), and a
// single key held by more tokens than that is resolved by index order. If rounding ever
// puts the crossing outside the bracket (the bounds are exact in real numbers; the sums are
// doubles), the cut is found again by bisection over keys, exactly as before. So a cut
// costs one or two passes after the shared counting pass, instead of ~30.
//
// The sums are doubles added in a different order from a sequential sum over the sorted
// tokens (the CPU backend's), so a cut can differ from it only where the limit lies within
// rounding of a running sum (~1e-16 relative).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/block_reduce.cuh"

namespace strata::cuda::cut {

constexpr int kCutThreads = 1024;
constexpr int kCutWarps = kCutThreads / 32;
constexpr int kBins = 1024;
constexpr int kGatherCap = 2048;  // tokens sorted in shared memory (16 KB)
constexpr int kPerThread = kGatherCap / kCutThreads;
constexpr uint32_t kKeyOfOne = 0x3F800000u;  // the bits of 1.0f, the largest probability

// The unnormalised probabilities of one row: exp((logit - max) / temperature), so the most
// likely token's is exactly 1; NaN logits have probability 0.
struct ProbRow {
  const float* l;
  int64_t vocab;
  float m, inv_t;
  __device__ float Prob(int64_t j) const {
    const float x = l[j];
    return isnan(x) ? 0.0f : expf((x - m) * inv_t);
  }
};

// ---- block-wide helpers (every thread of the block calls them, uniformly) -----------------

template <typename T, typename Op>
__device__ __forceinline__ T BlockReduce(T v, Op op) {
  return ::strata::cuda::BlockReduce<kCutWarps>(v, op);
}
__device__ __forceinline__ double BlockSumD(double v) {
  return BlockReduce(v, [](double a, double b) { return a + b; });
}
__device__ __forceinline__ long long BlockSumI(long long v) {
  return BlockReduce(v, [](long long a, long long b) { return a + b; });
}
__device__ __forceinline__ int BlockMaxI(int v) {
  return BlockReduce(v, [](int a, int b) { return a > b ? a : b; });
}
__device__ __forceinline__ int BlockMinI(int v) {
  return BlockReduce(v, [](int a, int b) { return a < b ? a : b; });
}

// Thread t gets the sum of v over threads t .. kCutThreads-1 (inclusive).
__device__ double BlockSuffixSum(double v) {
  __shared__ double warp_total[kCutWarps];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  for (int o = 1; o < 32; o <<= 1) {
    const double y = __shfl_down_sync(0xffffffffu, v, o);
    if (lane + o < 32) v += y;
  }
  __syncthreads();
  if (lane == 0) warp_total[warp] = v;
  __syncthreads();
  for (int w = warp + 1; w < kCutWarps; ++w) v += warp_total[w];
  return v;
}

// Thread t gets the sum of v over threads 0 .. t-1 (exclusive), for doubles and counts.
template <typename T>
__device__ T BlockExclusivePrefix(T v) {
  __shared__ T warp_total[kCutWarps];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  T x = v;
  for (int o = 1; o < 32; o <<= 1) {
    const T y = __shfl_up_sync(0xffffffffu, x, o);
    if (lane >= o) x += y;
  }
  __syncthreads();
  if (lane == 31) warp_total[warp] = x;
  __syncthreads();
  T before = 0;
  for (int w = 0; w < warp; ++w) before += warp_total[w];
  return before + x - v;
}

// One pass over a row of logits: f(in_row, index, logit) on every thread, kCutThreads
// tokens at a time, so warp intrinsics inside f see full warps. Where the row is 16-byte
// aligned, each thread loads two float4s before it uses either: a pass is bound by how many
// loads are in flight (one scalar load per thread left a 128,256-token pass on one SM at
// ~20 us, ~25 GB/s).
template <typename F>
__device__ __forceinline__ void ForEachLogit(const float* l, int64_t vocab, F f) {
  int64_t done = 0;
  if ((reinterpret_cast<uintptr_t>(l) & 15u) == 0) {
    const float4* l4 = reinterpret_cast<const float4*>(l);
    const int64_t quads = vocab / 4;
    for (int64_t q0 = 0; q0 < quads; q0 += 2 * kCutThreads) {
      const int64_t qa = q0 + threadIdx.x, qb = qa + kCutThreads;
      const bool ina = qa < quads, inb = qb < quads;
      const float4 a = ina ? __ldg(l4 + qa) : float4{0.0f, 0.0f, 0.0f, 0.0f};
      const float4 b = inb ? __ldg(l4 + qb) : float4{0.0f, 0.0f, 0.0f, 0.0f};
      f(ina, 4 * qa, a.x);
      f(ina, 4 * qa + 1, a.y);
      f(ina, 4 * qa + 2, a.z);
      f(ina, 4 * qa + 3, a.w);
      f(inb, 4 * qb, b.x);
      f(inb, 4 * qb + 1, b.y);
      f(inb, 4 * qb + 2, b.z);
      f(inb, 4 * qb + 3, b.w);
    }
    done = quads * 4;
  }
  for (int64_t j0 = done; j0 < vocab; j0 += kCutThreads) {
    const int64_t j = j0 + threadIdx.x;
    const bool in = j < vocab;
    f(in, j, in ? __ldg(l + j) : 0.0f);
  }
}

// The same over probabilities: f(in_row, index, key, probability).
template <typename F>
__device__ __forceinline__ void ForEachKey(const ProbRow& r, F f) {
  ForEachLogit(r.l, r.vocab, [&](bool in, int64_t j, float x) {
    const float p = in && !isnan(x) ? expf((x - r.m) * r.inv_t) : 0.0f;
    f(in, static_cast<int32_t>(j), __float_as_uint(p), p);
  });
}

// ---- the search ---------------------------------------------------------------------------

// Keys [lo, hi] split into `bins` bins of 2^shift keys (the last may be partial).
struct Level {
  uint32_t lo, hi;
  int shift, bins;
  __device__ uint32_t BinLo(int b) const { return lo + (static_cast<uint32_t>(b) << shift); }
  __device__ uint32_t BinHi(int b) const {
    const uint32_t e = lo + (static_cast<uint32_t>(b + 1) << shift) - 1u;
    return e < hi ? e : hi;
  }
  __device__ uint32_t Bin(uint32_t key) const { return (key - lo) >> shift; }
  __device__ bool Holds(uint32_t key) const { return key >= lo && key <= hi; }
};
__device__ __forceinline__ Level LevelOver(uint32_t lo, uint32_t hi) {
  int s = 0;
  while (((hi - lo) >> s) >= static_cast<uint32_t>(kBins)) ++s;
  return {lo, hi, s, static_cast<int>((hi - lo) >> s) + 1};
}
__device__ __forceinline__ Level TopLevel() { return LevelOver(0u, kKeyOfOne); }

// Per bin: how many tokens, and how far their keys lie above the bin's first key, in
// units of 2^(shift - frac_bits) keys (rounded down). Within a binade consecutive keys are
// one ulp apart, and a bin never straddles two (bins are aligned to their size, at most
// 2^20 keys, and subnormals share the first binade's ulp), so a token's probability is
// exactly lo + (key - lo_key) * ulp: a bin's mass lies between count * lo + frac * unit and
// that plus count * unit, all in integers added with 32-bit shared atomics (floats would
// make the bounds depend on the order of the adds). frac_bits = 31 - bits of vocab keeps
// every sum below 2^31; at Llama-3's vocabulary a 1/8-octave bin's mass is then known to
// 2^-14 of its width, ~8e-6 of its value: top-p up to ~0.9999 brackets a bin or two.
struct BinCounts {
  uint32_t count[kBins];
  uint32_t frac[kBins];
};
__device__ __forceinline__ int FracBits(int64_t vocab) {
  int bits = 0;
  while ((int64_t{1} << bits) <= vocab) ++bits;
  return 31 - bits;
}
__device__ __forceinline__ void ClearBins(BinCounts& h) {
  for (int b = threadIdx.x; b < kBins; b += kCutThreads) h.count[b] = h.frac[b] = 0u;
}
// Adds the token (key) to its bin of `level` where `take`.
__device__ __forceinline__ void AddToBins(BinCounts& h, const Level& level, int frac_bits, bool take, uint32_t key) {
  if (!take) return;
  const uint32_t bin = level.Bin(key), off = key - level.BinLo(static_cast<int>(bin));
  atomicAdd(&h.count[bin], 1u);
  const uint32_t q = level.shift >= frac_bits ? off >> (level.shift - frac_bits) : off << (frac_bits - level.shift);
  if (q != 0u) atomicAdd(&h.frac[bin], q);
}
// The distance between consecutive keys from `key` on (subnormals: the first binade's).
__device__ __forceinline__ double Ulp(uint32_t key) {
  const int e = static_cast<int>(key >> 23);
  return ldexp(1.0, (e > 0 ? e : 1) - 150);
}

enum class Sum { kCount, kMass };

// What is summed, and when the running sum has arrived: reaches (>=) or passes (>) `limit`.
struct Goal {
  Sum sum;
  double limit;
  bool strict;
  __device__ bool Hit(double s) const { return strict ? s > limit : s >= limit; }
};

// The token at which the running sum arrives, and the sums through it (inclusive). Not
// `found`: the sum over the whole row never arrives (mass, count: the whole row's).
struct Cut {
  bool found;
  uint32_t key;
  int32_t idx;
  double mass;
  long long count;
};

struct CutShared {
  BinCounts top;   // the row over TopLevel(), counted once and kept for all its cuts
  BinCounts work;  // a bracket, counted into finer bins
  unsigned long long cand[kGatherCap];  // gathered tokens: key << 32 | ~index
  int gathered;
  Cut result;
  // What cand holds, sorted, for a later cut whose bracket lies inside: every token with a
  // key in [kept_lo, kept_hi], and the sums over the keys above kept_hi. Set kept = false
  // before a row's first cut.
  bool kept;
  uint32_t kept_lo, kept_hi;
  int kept_n;
  double kept_mass;
  long long kept_count;
};

// The bins [lo, hi] of `level` where the running sum, starting from `above` (exactly what
// lies above level.hi), can arrive; `tokens`: how many they hold. hi < 0: it cannot arrive
// in this level, even by the upper bounds.
struct Bracket {
  int lo, hi;
  long long tokens;
};
__device__ Bracket ChooseBracket(const BinCounts& h, const Level& level, int frac_bits, double above,
                               const Goal& g) {
  const int t = threadIdx.x;
  const bool in = t < level.bins;
  const uint32_t c = in ? h.count[t] : 0u;
  double low = c, high = c;
  if (g.sum == Sum::kMass && in) {
    const uint32_t lo_key = level.BinLo(t);
    const double unit = ldexp(Ulp(lo_key), level.shift - frac_bits);
    low = c * static_cast<double>(__uint_as_float(lo_key)) + h.frac[t] * unit;
    high = low + (level.shift > frac_bits ? c * unit : 0.0);  // rounded down by < 1 unit each
  }
  const double from_low = above + BlockSuffixSum(low), from_high = above + BlockSuffixSum(high);
  // The sums grow as t falls, so the bins where they have arrived are a prefix from the top.
  const int lo = BlockMaxI(in && g.Hit(from_low) ? t : -1);
  const int hi = BlockMaxI(in && g.Hit(from_high) ? t : -1);
  const int b0 = lo < 0 ? 0 : lo;
  const long long tokens = BlockSumI(t >= b0 && t <= hi ? static_cast<long long>(c) : 0);
  return {b0, hi, tokens};
}

// Sorts s.cand[0, n) descending (largest key first; equal keys: lower index first).
__device__ void SortGathered(CutShared& s, int n) {
  int n2 = 1;
  while (n2 < n) n2 <<= 1;
  for (int i = n + static_cast<int>(threadIdx.x); i < n2; i += kCutThreads) s.cand[i] = 0;  // sorts last
  __syncthreads();
  for (int k = 2; k <= n2; k <<= 1) {
    for (int j = k >> 1; j > 0; j >>= 1) {
      for (int i = threadIdx.x; i < n2; i += kCutThreads) {
        const int p = i ^ j;
        if (p > i) {
          const unsigned long long a = s.cand[i], b = s.cand[p];
          const bool descending = (i & k) == 0;
          if ((a < b) == descending) {
            s.cand[i] = b;
            s.cand[p] = a;
          }
        }
      }
      __syncthreads();
    }
  }
}

__device__ __forceinline__ unsigned long long Packed(uint32_t key, int32_t idx) {
  return (static_cast<unsigned long long>(key) << 32) | static_cast<uint32_t>(~static_cast<uint32_t>(idx));
}
__device__ __forceinline__ uint32_t KeyOf(unsigned long long c) { return static_cast<uint32_t>(c >> 32); }
__device__ __forceinline__ int32_t IndexOf(unsigned long long c) {
  return static_cast<int32_t>(~static_cast<uint32_t>(c));
}

// Walks the sorted s.cand[0, n) from (mass, count) = what lies above them; the first token
// where g arrives, if any (found = false otherwise, with the sums through all n).
__device__ Cut ScanGathered(CutShared& s, int n, double above_mass, long long above_count, const Goal& g) {
  const int t = threadIdx.x;
  double part = 0.0;
  for (int i = 0; i < kPerThread; ++i) {
    const int at = t * kPerThread + i;
    if (at < n) part += __uint_as_float(KeyOf(s.cand[at]));
  }
  double run = above_mass + BlockExclusivePrefix(part);
  int first = INT32_MAX;
  double run_at = 0.0;
  for (int i = 0; i < kPerThread; ++i) {
    const int at = t * kPerThread + i;
    if (at >= n) break;
    run += __uint_as_float(KeyOf(s.cand[at]));
    const bool hit = g.sum == Sum::kCount ? g.Hit(static_cast<double>(above_count + at + 1)) : g.Hit(run);
    if (hit) {
      first = at;
      run_at = run;
      break;
    }
  }
  const int pos = BlockMinI(first);
  if (pos != INT32_MAX && first == pos) {
    s.result = {true, KeyOf(s.cand[pos]), IndexOf(s.cand[pos]), run_at, above_count + pos + 1};
  }
  if (pos == INT32_MAX && t == kCutThreads - 1) {
    // The last thread's run (it holds the last items or none) is the sum through all n.
    s.result = {false, 0u, -1, 0.0, above_count + n};
  }
  __syncthreads();
  Cut r = s.result;
  if (!r.found) r.mass = BlockSumD(part) + above_mass;
  __syncthreads();
  return r;
}

// The n-th token (1-based, by index) among those whose key is `key`. Each warp walks its own
// contiguous part of the row, 128 tokens (4 per lane) at a time, counting matches with
// ballots; a scan of the warps' counts tells which warp holds the n-th, and that warp walks
// its part again to it. Two passes, coalesced.
__device__ int32_t NthWithKey(const ProbRow& r, CutShared& s, uint32_t key, long long n) {
  constexpr int kStep = 128;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t span = (r.vocab + kCutWarps * kStep - 1) / (kCutWarps * kStep) * kStep;
  const int64_t begin = warp * span, end = begin + span < r.vocab ? begin + span : r.vocab;
  // Which of this lane's 4 tokens at `at` match, as bits.
  auto matches = [&](int64_t at) {
    unsigned m = 0;
    for (int c = 0; c < 4; ++c) {
      const int64_t j = at + 4 * lane + c;
      if (j < end && __float_as_uint(r.Prob(j)) == key) m |= 1u << c;
    }
    return m;
  };
  long long mine = 0;  // this warp's matches (every lane holds the sum)
  for (int64_t at = begin; at < end; at += kStep) {
    int c = __popc(matches(at));
    for (int o = 16; o > 0; o >>= 1) c += __shfl_xor_sync(0xffffffffu, c, o);
    mine += c;
  }
  const long long before = BlockExclusivePrefix(lane == 0 ? mine : 0LL);  // sums over lanes 0 only
  if (threadIdx.x == 0) s.result.idx = -1;
  __syncthreads();
  const long long warp_before = __shfl_sync(0xffffffffu, before, 0);
  if (n > warp_before && n <= warp_before + mine) {  // uniform within the warp
    long long seen = warp_before;
    for (int64_t at = begin; at < end; at += kStep) {
      const unsigned m = matches(at);
      int c = __popc(m), incl = c;
      for (int o = 1; o < 32; o <<= 1) {
        const int y = __shfl_up_sync(0xffffffffu, incl, o);
        if (lane >= o) incl += y;
      }
      const int total = __shfl_sync(0xffffffffu, incl, 31);
      if (seen + total >= n) {
        const long long want = n - seen - (incl - c);  // 1-based among this lane's matches
        if (want >= 1 && want <= c) {
          unsigned mm = m;
          for (long long k = 1; k < want; ++k) mm &= mm - 1;
          s.result.idx = static_cast<int32_t>(at + 4 * lane + (__ffs(mm) - 1));
        }
        break;
      }
      seen += total;
    }
  }
  __syncthreads();
  const int32_t idx = s.result.idx;
  __syncthreads();
  return idx;
}

// The cut inside the group of `group` tokens sharing one key, given the sums over the keys
// above it. The running sum over equal probabilities is above + i * p, so the first i where
// it arrives is found in closed form (a sequential sum differs only in rounding).
__device__ Cut CutInKeyGiven(const ProbRow& r, CutShared& s, uint32_t key, long long group, double above_mass,
                             long long above_count, const Goal& g) {
  const double p = __uint_as_float(key);
  long long n = 0;
  if (g.sum == Sum::kCount) {
    const long long need = static_cast<long long>(ceil(g.limit)) - above_count;  // count limits are whole
    n = need >= 1 && need <= group ? need : 0;
  } else if (p > 0.0) {
    const double need = (g.limit - above_mass) / p;
    long long i = need <= 1.0 ? 1 : (need >= static_cast<double>(group) + 1.0 ? group + 1 : static_cast<long long>(ceil(need)));
    while (i > 1 && g.Hit(above_mass + static_cast<double>(i - 1) * p)) --i;
    while (i <= group && !g.Hit(above_mass + static_cast<double>(i) * p)) ++i;
    n = i <= group ? i : 0;
  }
  const long long through = n > 0 ? n : group;
  Cut c{n > 0, key, -1, above_mass + static_cast<double>(through) * p, above_count + through};
  c.idx = NthWithKey(r, s, key, through);
  return c;
}

// The same, summing what lies above the key first (one pass).
__device__ Cut CutInKey(const ProbRow& r, CutShared& s, uint32_t key, const Goal& g) {
  double am = 0.0;
  long long ac = 0, group = 0;
  ForEachKey(r, [&](bool in, int32_t, uint32_t k, float p) {
    if (in && k > key) {
      am += p;
      ++ac;
    }
    group += in && k == key;
  });
  am = BlockSumD(am);
  ac = BlockSumI(ac);
  group = BlockSumI(group);
  return CutInKeyGiven(r, s, key, group, am, ac, g);
}

// The reference: bisection over keys, one exact pass per step (~30 passes), for the rare
// row whose crossing rounding put outside its bracket.
__device__ Cut CutByBisection(const ProbRow& r, CutShared& s, const Goal& g) {
  auto arrives_from = [&](uint32_t key) {  // the sum over keys >= key arrives
    double v = 0.0;
    ForEachKey(r, [&](bool in, int32_t, uint32_t k, float p) {
      if (in && k >= key) v += g.sum == Sum::kCount ? 1.0 : p;
    });
    return g.Hit(BlockSumD(v));
  };
  if (!arrives_from(0u)) {
    double m = 0.0;
    ForEachKey(r, [&](bool in, int32_t, uint32_t, float p) { m += in ? p : 0.0f; });
    return {false, 0u, -1, BlockSumD(m), static_cast<long long>(r.vocab)};
  }
  uint32_t lo = 0u, hi = kKeyOfOne;  // the largest key from which the sum arrives
  while (lo < hi) {
    const uint32_t mid = lo + (hi - lo + 1) / 2;
    if (arrives_from(mid)) lo = mid; else hi = mid - 1;
  }
  return CutInKey(r, s, lo, g);
}

// The cut of goal g in row r; s.top holds the row's counts over TopLevel().
__device__ Cut FindCut(const ProbRow& r, CutShared& s, const Goal& g) {
  const int frac_bits = FracBits(r.vocab);
  Level level = TopLevel();
  const BinCounts* h = &s.top;
  double above = 0.0;  // what lies above level.hi, in g's sum (nothing above 1.0)
  for (;;) {
    const Bracket br = ChooseBracket(*h, level, frac_bits, above, g);
    if (br.hi < 0) break;  // not even the upper bounds arrive: rounding; take the reference
    const uint32_t klo = level.BinLo(br.lo), khi = level.BinHi(br.hi);
    if (s.kept && klo >= s.kept_lo && khi <= s.kept_hi) {
      // An earlier cut gathered these keys already (top-p and the draw usually land in the
      // same few bins): walk its sorted tokens again, no pass. Valid where the sum has not
      // arrived above them and does arrive among them.
      const double above_kept = g.sum == Sum::kCount ? static_cast<double>(s.kept_count) : s.kept_mass;
      if (!g.Hit(above_kept)) {
        const Cut c = ScanGathered(s, s.kept_n, s.kept_mass, s.kept_count, g);
        if (c.found) return c;
      }
    }
    if (klo == khi && br.tokens > kGatherCap) return CutInKey(r, s, klo, g);
    const bool gather = br.tokens <= kGatherCap;
    const Level next = LevelOver(klo, khi);
    // Counting the same keys into the same bins again would not narrow anything (bounds too
    // loose for a limit this close to the whole mass): take the reference.
    if (!gather && next.lo == level.lo && next.hi == level.hi) break;
    if (threadIdx.x == 0) s.gathered = 0;
    if (!gather) ClearBins(s.work);
    __syncthreads();
    double am = 0.0;
    long long ac = 0;
    uint32_t kmin = 0xffffffffu, kmax = 0u;  // the keys the bracket holds
    ForEachKey(r, [&](bool in, int32_t j, uint32_t k, float p) {
      if (in && k > khi) {
        am += p;
        ++ac;
      }
      const bool mine = in && next.Holds(k);
      if (mine) {
        kmin = min(kmin, k);
        kmax = max(kmax, k);
      }
      if (gather) {
        const unsigned want = __ballot_sync(0xffffffffu, mine);
        if (want != 0u) {
          const int lane = threadIdx.x & 31, leader = __ffs(want) - 1;
          int base = 0;
          if (lane == leader) base = atomicAdd(&s.gathered, __popc(want));
          base = __shfl_sync(0xffffffffu, base, leader);
          const int at = base + __popc(want & ((1u << lane) - 1u));
          if (mine && at < kGatherCap) s.cand[at] = Packed(k, j);
        }
      } else {
        AddToBins(s.work, next, frac_bits, mine, k);
      }
    });
    am = BlockSumD(am);
    ac = BlockSumI(ac);
    kmin = BlockReduce(kmin, [](uint32_t a, uint32_t b) { return a < b ? a : b; });
    kmax = BlockReduce(kmax, [](uint32_t a, uint32_t b) { return a > b ? a : b; });
    const double above_next = g.sum == Sum::kCount ? static_cast<double>(ac) : am;
    if (g.Hit(above_next)) break;  // it arrived above the bracket: rounding
    // Too many to gather, all one probability (a tie the size of a vocabulary slice, as
    // where logits repeat): the cut inside it needs no finer counts.
    if (!gather && kmin == kmax) return CutInKeyGiven(r, s, kmin, br.tokens, am, ac, g);
    if (gather) {
      const int n = s.gathered < kGatherCap ? s.gathered : kGatherCap;
      SortGathered(s, n);
      if (threadIdx.x == 0) {
        s.kept = true;
        s.kept_lo = klo;
        s.kept_hi = khi;
        s.kept_n = n;
        s.kept_mass = am;
        s.kept_count = ac;
      }
      const Cut c = ScanGathered(s, n, am, ac, g);
      if (c.found) return c;
      if (klo == 0u) return c;  // everything has been added: the sum never arrives
      break;                    // it arrives below the bracket: rounding
    }
    level = next;
    h = &s.work;
    above = above_next;
  }
  return CutByBisection(r, s, g);
}

}  // namespace strata::cuda::cut
