// Host model of the FP8 wgmma GEMM's accumulation (kernels/cuda/gemm_wgmma.cu) over the data of
// cuda_quant_test's Fp8LongKPromotedAccumulation (same distributions, not the same generator
// stream): FP8 E4M3 weights with |w| <= 3.75, activations E4M3 x 2^-6 with each token's max
// 448 x 2^-6 (exact quantization), 384 rows x K = 14,336, 8 tokens. A MODEL, not Hopper's
// documented behaviour: each k32 instruction's 32 exact products are summed exactly, added to
// the accumulator, and the result truncated toward zero to B significant bits (DeepSeek-V3's
// report: ~14 bits). Promotion off: a split's whole K range in that accumulator, the splits'
// parts added in f32 (the cluster reduction); on (fp8_promote=on): the accumulator restarts
// every 128 of K (4 instructions; argument 2: 8 for every 256) and is added into an f32
// accumulator (a split's last, shorter period too). Prints worst
// |err| / max |ref| and the worst error over the existing FP8 test tolerance 2e-2 (|ref| + rms).
// Result (2026-12-03): B = 14: off 1.2e-2 at 1 split (0.91 of the tolerance), 1.2e-3 at 8; on
// 1.2e-4 at both; B = 13: off 2.4e-2 (1.77 of it) and 2.6e-3, on 2.4e-4; B = 22: off 4.6e-5.
// Every 256 of K: on 2.1e-4 (B = 14), 4.1e-4 (B = 13).
// Not a test, not built:
//   g++ -O2 -o /tmp/fp8acc bench/cuda/fp8_wgmma_accumulation_model.cpp && /tmp/fp8acc 14 [8]
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

namespace {

double Fp8(int b) {
  const int s = b >> 7, e = (b >> 3) & 15, m = b & 7;
  const double v = e == 0 ? std::ldexp(m / 8.0, -6) : std::ldexp(1 + m / 8.0, e - 7);
  return s ? -v : v;
}

// a truncated toward zero to `bits` significant bits.
double Truncate(double a, int bits) {
  if (a == 0) return 0;
  int e;
  const double m = std::frexp(a, &e);
  return std::ldexp(std::trunc(std::ldexp(m, bits)), e - bits);
}

}  // namespace

int main(int argc, char** argv) {
  constexpr int K = 14336, R = 384, N = 8;
  const int bits = argc > 1 ? std::atoi(argv[1]) : 14;
  const int per = argc > 2 ? std::atoi(argv[2]) : 4;  // instructions per promotion
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> code(0, 0xfd), byte(0, 255);
  std::vector<double> w(static_cast<size_t>(R) * K), x(static_cast<size_t>(N) * K);
  for (double& v : w) {
    int b;
    do b = byte(rng); while ((b & 0x7f) == 0x7f || ((b >> 3) & 15) > 8);
    v = Fp8(b);
  }
  for (int t = 0; t < N; ++t) {
    for (int c = 0; c < K; ++c) {
      int b = code(rng);
      if ((b & 0x7f) == 0x7f) b = 0;
      x[t * K + c] = std::ldexp(Fp8(b), -6);
    }
    x[t * K + (t * 131) % K] = t % 2 ? -7.0 : 7.0;
  }
  std::vector<double> ref(N * R);
  for (int t = 0; t < N; ++t) {
    for (int r = 0; r < R; ++r) {
      long double s = 0;
      for (int c = 0; c < K; ++c) s += static_cast<long double>(x[t * K + c]) * w[static_cast<size_t>(r) * K + c];
      ref[t * R + r] = static_cast<double>(s);
    }
  }
  double max_ref = 0, ss = 0;
  for (double v : ref) {
    max_ref = std::max(max_ref, std::fabs(v));
    ss += v * v;
  }
  const double rms = std::sqrt(ss / ref.size());
  for (int splits : {1, 8}) {
    for (int promote = 0; promote < 2; ++promote) {
      double worst = 0, worst_tol = 0;
      for (int t = 0; t < N; ++t) {
        for (int r = 0; r < R; ++r) {
          float out = 0;
          constexpr int kb = K / 128;  // stages of 128
          for (int s = 0; s < splits; ++s) {
            const int i0 = (s * kb / splits) * 4, i1 = ((s + 1) * kb / splits) * 4;  // k32 instructions
            float part = 0;
            double acc = 0;
            for (int i = i0; i < i1; ++i) {
              if (promote && (i - i0) % per == 0) acc = 0;
              double sum = 0;  // 32 exact products, summed exactly (|sum| << 2^53)
              for (int j = 0; j < 32; ++j) sum += x[t * K + i * 32 + j] * w[static_cast<size_t>(r) * K + i * 32 + j];
              acc = Truncate(acc + sum, bits);
              if (promote && ((i - i0) % per == per - 1 || i == i1 - 1)) part += static_cast<float>(acc);
            }
            if (!promote) part = static_cast<float>(acc);
            out += part;
          }
          const double e = std::fabs(out - ref[t * R + r]);
          worst = std::max(worst, e);
          worst_tol = std::max(worst_tol, e / (2e-2 * (std::fabs(ref[t * R + r]) + rms)));
        }
      }
      std::printf("bits %d, %d instructions per promotion, splits %d promote %s: worst |err| / max |ref| %.2e, worst err / (2e-2 tolerance) %.3f\n",
                  bits, per, splits, promote ? "on " : "off", worst / max_ref, worst_tol);
    }
  }
  return 0;
}
