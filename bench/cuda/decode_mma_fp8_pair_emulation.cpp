// Host emulation of the tensor-core decode kernel's FP8 arithmetic (kernels/cuda/decode_attention_mma.cu,
// direct form) over cuda_kv8_test's FP8 split-K data (the same generators and seeds as Kv8Ops and
// DecodeSplitKTensorCoreKernel's batches, 32 / 8 heads), against the tests' float64 reference
// over the modelled cache and their 1e-2 x (|ref| + rms) tolerance: the online softmax with a
// running maximum per 16-key chunk (the kernel) and per 32 keys (the pair form, kept on branch
// cuda-attn3-forms, not merged), at the split counts the kernel plans for 8 warps an SM
// (22 / 4 / 1: the direct form) and for 12 (33 / 6 / 1: the lean form, now FP8's default). The
// lean and lite forms change no arithmetic of a split (the same products and sums in the same
// order), only the split counts. Emulated: the query rounded to F16, S per 16-dim k-step
// summed exactly then rounded into the F32 accumulator, exp2 in float, P rounded to F16 for
// P V (the row sum takes the F32 P), the split partials and the combine in F32, the output
// rounded to BF16. Result (2026-12-03): every case within 3.3e-3, the same worst errors for
// both maxima and all split counts (the H200 measured 2.2e-3 to 3.3e-3 with lean + lite).
// Not a test, not built:
//   g++ -O2 -I. -o /tmp/emu8 bench/cuda/decode_mma_fp8_pair_emulation.cpp && /tmp/emu8
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "core/quant/fp8_e4m3.h"

constexpr int kD = 128, kBs = 16, kH = 32, kKvh = 8;
constexpr int64_t kKvRow = int64_t{kKvh} * kD, kQRow = int64_t{kH} * kD;
uint16_t ToBf16(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  b += 0x7fffu + ((b >> 16) & 1u);
  return static_cast<uint16_t>(b >> 16);
}
float FromBf16(uint16_t h) {
  const uint32_t b = uint32_t{h} << 16;
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}
float Bf(float x) { return FromBf16(ToBf16(x)); }
float F16(float x) { return static_cast<float>(static_cast<_Float16>(x)); }

struct Kind {
  const char* name;
  float k_scale, v_scale;
};

// One split's partial of one query head: unnormalised o (with v_scale), max (log2 units), sum.
struct Partial {
  std::vector<float> o;
  float m = -INFINITY, l = 0.0f;
};

// The kernel's loop over keys [k0, k1) with a running maximum per `block` keys (16: default;
// 32: kFormPair). sf: raw scores (q . stored k) in F32.
Partial Split(const std::vector<float>& sf, const std::vector<float>& v16, int k0, int k1, int block, float mult,
              float v_scale) {
  Partial r;
  r.o.assign(kD, 0.0f);
  if (k1 <= k0) return r;
  float m = -INFINITY, l = 0.0f;
  std::vector<float>& o = r.o;
  for (int c0 = k0; c0 < k1; c0 += block) {
    const int c1 = std::min(k1, c0 + block);
    float mx = -INFINITY;
    for (int j = c0; j < c1; ++j) mx = std::max(mx, sf[j]);
    const float m_new = std::max(m, mx);
    const float m_use = m_new * mult;
    const float alpha = m_new == m ? 1.0f : std::exp2(std::fma(m, mult, -m_use));
    float sum = 0.0f;
    std::vector<float> p(c1 - c0);
    for (int j = c0; j < c1; ++j) {
      p[j - c0] = std::exp2(std::fma(sf[j], mult, -m_use));
      sum += p[j - c0];
    }
    l = l * alpha + sum;
    m = m_new;
    if (alpha != 1.0f) {
      for (float& x : o) x *= alpha;
    }
    // P V per 16-key mma k-step: exact products of F16 values, summed, rounded into F32.
    for (int s0 = c0; s0 < c1; s0 += 16) {
      for (int d = 0; d < kD; ++d) {
        double acc = 0.0;
        for (int j = s0; j < std::min(c1, s0 + 16); ++j) acc += double(F16(p[j - c0])) * v16[int64_t{j} * kD + d];
        o[d] = static_cast<float>(o[d] + acc);
      }
    }
  }
  for (float& x : o) x *= v_scale;
  r.m = m * mult;
  r.l = l;
  return r;
}

void Run(const char* what, const Kind& kind, const std::vector<int32_t>& after, int splits, int block) {
  const int S = static_cast<int>(after.size());
  int mb = 1;
  for (int a : after) mb = std::max(mb, (a + kBs - 1) / kBs);
  const int nb = mb * S + 3;
  std::vector<int32_t> all(nb);
  std::iota(all.begin(), all.end(), 0);
  std::mt19937 rng(7);
  std::shuffle(all.begin(), all.end(), rng);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f), mag(0.3f, 2.0f);
  std::vector<std::vector<float>> keys(S), values(S);
  for (int s = 0; s < S; ++s) {
    for (auto* kvs : {&keys[s], &values[s]}) {
      kvs->resize(static_cast<size_t>(after[s]) * kKvRow);
      for (int p = 0; p < after[s]; ++p) {
        const float m = mag(rng);
        for (int64_t e = 0; e < kKvRow; ++e) (*kvs)[p * kKvRow + e] = Bf(u(rng) * m);
      }
    }
  }
  std::mt19937 qr(11 + S);
  std::vector<float> q(static_cast<size_t>(S) * kQRow);
  for (float& x : q) x = Bf(u(qr));
  const float scale = 1.0f / std::sqrt(static_cast<float>(kD));
  const float mult = scale * kind.k_scale * 1.4426950408889634f;
  const float inv_k = 1.0f / kind.k_scale, inv_v = 1.0f / kind.v_scale;
  std::vector<double> ref(q.size());
  std::vector<float> got(q.size());
  for (int s = 0; s < S; ++s) {
    const int L = after[s];
    for (int kvh = 0; kvh < kKvh; ++kvh) {
      // The cache: FP8 codes; the kernel's F16 values (exact) and the reference's (with scale).
      std::vector<float> k16(static_cast<size_t>(L) * kD), v16(k16.size());
      std::vector<double> kd(k16.size()), vd(k16.size());
      for (int j = 0; j < L; ++j) {
        for (int d = 0; d < kD; ++d) {
          const int64_t e = j * kKvRow + kvh * kD + d;
          const uint8_t ck = strata::F32ToFp8E4M3(keys[s][e] * inv_k), cv = strata::F32ToFp8E4M3(values[s][e] * inv_v);
          k16[int64_t{j} * kD + d] = strata::Fp8E4M3ToF32(ck);
          v16[int64_t{j} * kD + d] = strata::Fp8E4M3ToF32(cv);
          kd[int64_t{j} * kD + d] = double(k16[int64_t{j} * kD + d]) * kind.k_scale;
          vd[int64_t{j} * kD + d] = double(v16[int64_t{j} * kD + d]) * kind.v_scale;
        }
      }
      for (int h = kvh * (kH / kKvh); h < (kvh + 1) * (kH / kKvh); ++h) {
        const float* qh = q.data() + int64_t{s} * kQRow + int64_t{h} * kD;
        // float64 reference (the test's).
        std::vector<double> sc(L);
        double m = -INFINITY;
        for (int j = 0; j < L; ++j) {
          double dot = 0.0;
          for (int d = 0; d < kD; ++d) dot += double(qh[d]) * kd[int64_t{j} * kD + d];
          sc[j] = dot * scale;
          m = std::max(m, sc[j]);
        }
        double l = 0.0;
        std::vector<double> o(kD, 0.0);
        for (int j = 0; j < L; ++j) {
          const double w = std::exp(sc[j] - m);
          l += w;
          for (int d = 0; d < kD; ++d) o[d] += w * vd[int64_t{j} * kD + d];
        }
        for (int d = 0; d < kD; ++d) ref[int64_t{s} * kQRow + int64_t{h} * kD + d] = o[d] / l;
        // The kernel: raw scores with the query in F16, per 16-dim k-step.
        std::vector<float> sf(L);
        for (int j = 0; j < L; ++j) {
          float acc = 0.0f;
          for (int d0 = 0; d0 < kD; d0 += 16) {
            double part = 0.0;
            for (int d = d0; d < d0 + 16; ++d) part += double(F16(qh[d])) * k16[int64_t{j} * kD + d];
            acc = static_cast<float>(acc + part);
          }
          sf[j] = acc;
        }
        // Split-K slices as the kernel cuts them, then the combine.
        const int slice = ((L + splits - 1) / splits + 15) / 16 * 16;
        std::vector<Partial> parts;
        for (int sp = 0; sp < splits; ++sp) {
          const int k0 = std::min(L, sp * slice), k1 = std::min(L, k0 + slice);
          parts.push_back(Split(sf, v16, k0, k1, block, mult, kind.v_scale));
        }
        float M = -INFINITY;
        for (const Partial& p : parts) {
          if (p.l > 0.0f) M = std::max(M, p.m);
        }
        float Lsum = 0.0f;
        std::vector<float> acc(kD, 0.0f);
        for (const Partial& p : parts) {
          const float w = p.l > 0.0f ? std::exp2(p.m - M) : 0.0f;
          Lsum += w * p.l;
          for (int d = 0; d < kD; ++d) acc[d] = std::fma(p.o[d], w, acc[d]);
        }
        for (int d = 0; d < kD; ++d) got[int64_t{s} * kQRow + int64_t{h} * kD + d] = Bf(acc[d] * (1.0f / Lsum));
      }
    }
  }
  double rms = 0.0;
  for (double r : ref) rms += r * r;
  rms = std::sqrt(rms / static_cast<double>(ref.size()));
  int64_t bad = 0;
  double worst = 0.0;
  for (size_t e = 0; e < ref.size(); ++e) {
    const double err = std::fabs(got[e] - ref[e]) / (std::fabs(ref[e]) + rms);
    if (!(err <= 1e-2)) ++bad;
    worst = std::max(worst, err);
  }
  std::printf("%-28s %-26s splits %2d, max per %2d keys: %lld of %zu outside, worst %.3e (rms %.3f)\n", what, kind.name,
              splits, block, static_cast<long long>(bad), ref.size(), worst, rms);
}

int main() {
  std::mt19937 rng(5);
  std::vector<int32_t> b33 = {4113, 4096, 1, 17, 128, 2049};
  while (b33.size() < 33) b33.push_back(1 + static_cast<int32_t>(rng() % 300));
  std::vector<int32_t> b130;
  while (b130.size() < 130) b130.push_back(1 + static_cast<int32_t>(rng() % 200));
  const std::vector<int32_t> b6 = {1, 17, 128, 4100, 4113, 2049};
  const Kind kinds[] = {{"FP8", 1.0f, 1.0f}, {"FP8 k_scale 0.5 v_scale 2", 0.5f, 2.0f}};
  for (const Kind& k : kinds) {
    for (int block : {16, 32}) {
      // 8 warps an SM (the default, kFormLite, kFormPair) and 12 (kFormLean).
      Run("6 seqs", k, b6, 22, block);
      Run("6 seqs (12 warps an SM)", k, b6, 33, block);
      Run("33 seqs", k, b33, 4, block);
      Run("33 seqs (12 warps an SM)", k, b33, 6, block);
      Run("130 seqs", k, b130, 1, block);
    }
  }
}
