// Host check of kFormTrans's lane mappings (kernels/cuda/decode_attention_mma.cu): one warp's
// 32 lanes emulated over one 16-key FP8 chunk, with mma.m16n8k16 (row.col) and
// movmatrix.m8n8.trans as PTX defines their fragments, the kernel's index expressions for the
// query's B operand, the swizzled K / V rows (the copies' swizzles), the S^T, P^T and V^T
// fragments and the epilogue's dims; S and O = P V against direct sums (exact: small values,
// double). Also the default direct form's S, as a control of the emulation itself. Not a test,
// not built:
//   g++ -O2 -I. -o /tmp/trans_check bench/cuda/decode_mma_trans_layout_check.cpp && /tmp/trans_check
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "core/quant/fp8_e4m3.h"

constexpr int kD = 128, kKeys = 16, kGroup = 4;
struct H2 {
  double lo, hi;
};
// mma.m16n8k16 (A row-major 16x16, B "col" 16x8, C 16x8), fragments per lane (g, tig).
void Mma(double (&c)[32][4], const H2 (&a)[32][4], const H2 (&b)[32][2]) {
  double A[16][16], B[16][8];
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane >> 2, t = lane & 3;
    A[g][2 * t] = a[lane][0].lo, A[g][2 * t + 1] = a[lane][0].hi;
    A[g + 8][2 * t] = a[lane][1].lo, A[g + 8][2 * t + 1] = a[lane][1].hi;
    A[g][2 * t + 8] = a[lane][2].lo, A[g][2 * t + 9] = a[lane][2].hi;
    A[g + 8][2 * t + 8] = a[lane][3].lo, A[g + 8][2 * t + 9] = a[lane][3].hi;
    B[2 * t][g] = b[lane][0].lo, B[2 * t + 1][g] = b[lane][0].hi;
    B[2 * t + 8][g] = b[lane][1].lo, B[2 * t + 9][g] = b[lane][1].hi;
  }
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane >> 2, t = lane & 3;
    const int rows[4] = {g, g, g + 8, g + 8}, cols[4] = {2 * t, 2 * t + 1, 2 * t, 2 * t + 1};
    for (int e = 0; e < 4; ++e) {
      double s = 0.0;
      for (int k = 0; k < 16; ++k) s += A[rows[e]][k] * B[k][cols[e]];
      c[lane][e] += s;
    }
  }
}
// movmatrix.m8n8.trans.b16: lane holds row lane/4, cols 2(lane%4), +1, before and after.
void MovTrans(const H2 (&x)[32], H2 (&y)[32]) {
  double M[8][8];
  for (int lane = 0; lane < 32; ++lane) M[lane >> 2][2 * (lane & 3)] = x[lane].lo, M[lane >> 2][2 * (lane & 3) + 1] = x[lane].hi;
  for (int lane = 0; lane < 32; ++lane) y[lane] = {M[2 * (lane & 3)][lane >> 2], M[2 * (lane & 3) + 1][lane >> 2]};
}
int VSwizzle(int row, int col) { return col ^ (((row >> 1) & 3) << 1); }
int KSwizzle(int row, int col) { return col ^ ((row & 1) << 2); }

int main() {
  std::mt19937 rng(1);
  // Values: small FP8 codes (exact in F16 and in their products' sums).
  auto code = [&]() { return static_cast<uint8_t>((rng() % 2 ? 0x80 : 0) | (0x30 + rng() % 24)); };
  uint8_t kraw[kKeys][kD], vraw[kKeys][kD];
  for (auto& r : kraw) for (auto& x : r) x = code();
  for (auto& r : vraw) for (auto& x : r) x = code();
  double q[16][kD] = {};  // 16 staging rows; rows past the group zero
  for (int h = 0; h < kGroup; ++h) for (int d = 0; d < kD; ++d) q[h][d] = static_cast<int>(rng() % 9) - 4;
  double P[16][kKeys];  // probabilities (any values) per head, key
  for (auto& r : P) for (auto& x : r) x = static_cast<int>(rng() % 7) - 3;
  // The raw chunk in shared memory as the copies write it: K rows with the trans swizzle
  // (16-byte column c of row r at c ^ (r & 1)), V rows with VSwizzle.
  uint8_t smK[kKeys * kD], smV[kKeys * kD], smKd[kKeys * kD];
  for (int r = 0; r < kKeys; ++r) {
    for (int c = 0; c < 8; ++c) {
      std::memcpy(smK + r * kD + ((c ^ (r & 1)) * 16), kraw[r] + 16 * c, 16);
      std::memcpy(smKd + r * kD + KSwizzle(r, c) * 16, kraw[r] + 16 * c, 16);
      std::memcpy(smV + r * kD + VSwizzle(r, c) * 16, vraw[r] + 16 * c, 16);
    }
  }
  auto f8 = [](uint8_t b) { return static_cast<double>(strata::Fp8E4M3ToF32(b)); };
  auto pair = [&](const uint8_t* p) { return H2{f8(p[0]), f8(p[1])}; };  // bytes (b0, b1) as (lo, hi)
  int bad = 0;

  // ---- kFormTrans: S^T = K Q^T.
  double st[32][4] = {};
  for (int hh = 0; hh < 2; ++hh) {
    for (int t = 0; t < 4; ++t) {
      const int kk = 4 * hh + t;
      H2 a[32][4], b[32][2];
      for (int lane = 0; lane < 32; ++lane) {
        const int g = lane >> 2, tig = lane & 3;
        // qf[kk][0..1]: head g's dims 32tig + 4kk + {0,1} and {2,3} (the staged row's halves).
        b[lane][0] = {q[g][32 * tig + 4 * kk], q[g][32 * tig + 4 * kk + 1]};
        b[lane][1] = {q[g][32 * tig + 4 * kk + 2], q[g][32 * tig + 4 * kk + 3]};
        const int col = (2 * tig + hh) ^ (g & 1);
        const uint8_t* ka = smK + g * kD + col * 16;
        const uint8_t* kb = smK + (g + 8) * kD + col * 16;
        // Kv8ToHalf16: out[2j + p] = bytes (4j + 2p, 4j + 2p + 1); af = {ha[2t], hb[2t], ha[2t+1], hb[2t+1]}.
        a[lane][0] = pair(ka + 4 * t), a[lane][1] = pair(kb + 4 * t);
        a[lane][2] = pair(ka + 4 * t + 2), a[lane][3] = pair(kb + 4 * t + 2);
      }
      Mma(st, a, b);
    }
  }
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane >> 2, tig = lane & 3;
    for (int e = 0; e < 4; ++e) {
      const int key = g + 8 * (e >> 1), head = 2 * tig + (e & 1);
      double ref = 0.0;
      for (int d = 0; d < kD; ++d) ref += q[head][d] * f8(kraw[key][d]);
      if (std::fabs(ref - st[lane][e]) > 1e-9) {
        if (bad++ < 5) std::printf("S^T lane %d e %d: %g vs %g\n", lane, e, st[lane][e], ref);
      }
    }
  }
  // ---- P^T to B by movmatrix; O^T += V^T P^T.
  H2 top[32], bot[32], pb0[32], pb1[32];
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane >> 2, tig = lane & 3;
    // The S^T layout of P: (key g | g + 8, heads 2tig, 2tig + 1).
    top[lane] = {P[2 * tig][g], P[2 * tig + 1][g]};
    bot[lane] = {P[2 * tig][g + 8], P[2 * tig + 1][g + 8]};
  }
  MovTrans(top, pb0);
  MovTrans(bot, pb1);
  double o[8][32][4] = {};
  for (int w = 0; w < 4; ++w) {
    H2 a0[32][4], a1[32][4], b[32][2];
    for (int lane = 0; lane < 32; ++lane) {
      const int g = lane >> 2, tig = lane & 3;
      const uint8_t* rows[4];
      for (int e = 0; e < 4; ++e) {
        const int key = 2 * tig + (e & 1) + 8 * (e >> 1);
        rows[e] = smV + key * kD + VSwizzle(key, g) * 16;
      }
      // __byte_perm(w0, w1, 0x5140) = [w0.b0, w1.b0, w0.b1, w1.b1]; 0x7362: bytes 2, 3.
      auto lohi = [&](const uint8_t* r0, const uint8_t* r1, int byte, H2& lo, H2& hi) {
        lo = {f8(r0[4 * w + byte]), f8(r1[4 * w + byte])};
        hi = {f8(r0[4 * w + byte + 1]), f8(r1[4 * w + byte + 1])};
      };
      H2 x[4], y[4];
      lohi(rows[0], rows[1], 0, x[0], x[1]);
      lohi(rows[0], rows[1], 2, x[2], x[3]);
      lohi(rows[2], rows[3], 0, y[0], y[1]);
      lohi(rows[2], rows[3], 2, y[2], y[3]);
      a0[lane][0] = x[0], a0[lane][1] = x[1], a0[lane][2] = y[0], a0[lane][3] = y[1];
      a1[lane][0] = x[2], a1[lane][1] = x[3], a1[lane][2] = y[2], a1[lane][3] = y[3];
      b[lane][0] = pb0[lane], b[lane][1] = pb1[lane];
    }
    Mma(o[2 * w], a0, b);
    Mma(o[2 * w + 1], a1, b);
  }
  // The epilogue: head 2tig + e, dim 16g + j = o[j / 2][e + 2 (j % 2)].
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane >> 2, tig = lane & 3;
    for (int e = 0; e < 2; ++e) {
      const int head = 2 * tig + e;
      for (int j = 0; j < 16; ++j) {
        const int d = 16 * g + j;
        double ref = 0.0;
        for (int key = 0; key < kKeys; ++key) ref += P[head][key] * f8(vraw[key][d]);
        const double got = o[j / 2][lane][e + 2 * (j % 2)];
        if (std::fabs(ref - got) > 1e-9) {
          if (bad++ < 10) std::printf("O head %d dim %d: %g vs %g\n", head, d, got, ref);
        }
      }
    }
  }
  // ---- Control: the default direct form's S = Q K^T (heads as rows), as in the kernel.
  double s2[2][32][4] = {};
  for (int j = 0; j < 2; ++j) {
    for (int h = 0; h < 2; ++h) {
      for (int t = 0; t < 4; ++t) {
        H2 a[32][4], b[32][2];
        for (int lane = 0; lane < 32; ++lane) {
          const int g = lane >> 2, tig = lane & 3;
          // qf[4h + t][rr] = dims 64h + 16tig + 4t + {0,1} of row g + 8rr; [2 + rr]: + {2,3}.
          for (int rr = 0; rr < 2; ++rr) {
            const int d = 64 * h + 16 * tig + 4 * t;
            a[lane][rr] = {q[g + 8 * rr][d], q[g + 8 * rr][d + 1]};
            a[lane][2 + rr] = {q[g + 8 * rr][d + 2], q[g + 8 * rr][d + 3]};
          }
          const int row = 8 * j + g;
          const uint8_t* kw = smKd + row * kD + KSwizzle(row, 4 * h + tig) * 16;
          b[lane][0] = pair(kw + 4 * t), b[lane][1] = pair(kw + 4 * t + 2);
        }
        Mma(s2[j], a, b);
      }
    }
  }
  for (int j = 0; j < 2; ++j) {
    for (int lane = 0; lane < 32; ++lane) {
      const int g = lane >> 2, tig = lane & 3;
      for (int e = 0; e < 4; ++e) {
        const int head = g + 8 * (e >> 1), key = 8 * j + 2 * tig + (e & 1);
        double ref = 0.0;
        for (int d = 0; d < kD; ++d) ref += q[head][d] * f8(kraw[key][d]);
        if (std::fabs(ref - s2[j][lane][e]) > 1e-9) {
          if (bad++ < 15) std::printf("control S lane %d: %g vs %g\n", lane, s2[j][lane][e], ref);
        }
      }
    }
  }
  std::printf("%s: %d mismatches (S^T, O^T by the epilogue's dims, and the default form's S)\n", bad ? "FAIL" : "OK", bad);
  return bad != 0;
}
