// rope_kv_write and paged attention over a ragged batch (a whole prompt, a prefill chunk
// after earlier context, a decode token), GQA, both RoPE styles, sliding window, logit
// soft-capping and every KV cache type a backend offers; then copy_blocks and
// swap_blocks, which must leave attention unchanged. References in float64.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/common/half.h"
#include "core/quant/fp8_e4m3.h"
#include "tests/backends/conformance/conformance_backend.h"

namespace strata::conformance {
namespace {

constexpr int32_t kHeads = 4, kKvHeads = 2, kDim = 16, kBlock = 4, kBlocks = 24;

struct Case {
  int32_t kv_dtype;
  int32_t rope_style;
  int32_t rotary_dim;
  int32_t window;
  float softcap;
  float k_scale = 0.0f, v_scale = 0.0f;  // FP8 per-tensor scales (0 = 1)
};

// One sequence of the test batch: its context length before and after the step.
struct Seq {
  int32_t before, after;
  std::vector<int32_t> blocks;  // its block table
};

double KvTolerance(int32_t dtype) {
  switch (dtype) {
    case STRATA_DTYPE_F16: return 3e-3;
    case STRATA_DTYPE_BF16: return 2e-2;
    case STRATA_DTYPE_I8: return 4e-2;  // against the unquantized values (scales per block+head)
    case STRATA_DTYPE_FP8_E4M3: return 1e-4;  // against the E4M3-rounded values
    default: return 2e-5;
  }
}

// FP8: e4m3(v / scale) * scale, the division as backends do it (times the F32 reciprocal).
float StoredAs(float v, int32_t dtype, float fp8_scale = 0.0f) {
  if (dtype == STRATA_DTYPE_F16) return F16ToF32(F32ToF16(v));
  if (dtype == STRATA_DTYPE_BF16) return Bf16ToF32(F32ToBf16(v));
  if (dtype == STRATA_DTYPE_FP8_E4M3) {
    const float s = fp8_scale == 0.0f ? 1.0f : fp8_scale;
    return Fp8E4M3ToF32(F32ToFp8E4M3(v * (1.0f / s))) * s;
  }
  return v;
}

void RopeRef(std::vector<double>& x, int32_t pos, const Case& c, const std::vector<float>& inv_freq) {
  const int32_t half = c.rotary_dim / 2;
  for (int32_t f = 0; f < half; ++f) {
    const double a = double(pos) * inv_freq[f];
    const double cs = std::cos(a), sn = std::sin(a);
    const int32_t i0 = c.rope_style == STRATA_ROPE_INTERLEAVED ? 2 * f : f;
    const int32_t i1 = c.rope_style == STRATA_ROPE_INTERLEAVED ? 2 * f + 1 : f + half;
    const double x0 = x[i0], x1 = x[i1];
    x[i0] = x0 * cs - x1 * sn;
    x[i1] = x1 * cs + x0 * sn;
  }
}

class Attention : public ConformanceTest {
 protected:
  // Builds the cache, writes `seqs`' earlier context in one step, then runs the step that
  // appends each sequence's new tokens and attends; checks q's rotation and the output.
  void RunCase(const Case& c);
};

void Attention::RunCase(const Case& c) {
  strata_kv_cache_desc kd{};
  kd.struct_size = sizeof(kd);
  kd.num_layers = 2;
  kd.num_blocks = kBlocks;
  kd.block_size = kBlock;
  kd.num_kv_heads = kKvHeads;
  kd.head_dim = kDim;
  kd.dtype = c.kv_dtype;
  kd.scale_mode = c.kv_dtype == STRATA_DTYPE_I8 ? STRATA_KV_SCALE_PER_BLOCK_HEAD : STRATA_KV_SCALE_PER_TENSOR;
  kd.k_scale = c.k_scale;
  kd.v_scale = c.v_scale;
  strata_kv_cache kv = nullptr;
  const strata_status created = api().kv_cache_create(dev(), &kd, &kv);
  // The CPU backend offers every cache type; another backend may refuse the 8-bit ones.
  if (created == STRATA_ERROR_UNSUPPORTED && c.kv_dtype != STRATA_DTYPE_F32 && name() != "cpu") {
    std::printf("[ note     ] %s has no %s KV cache\n", name().c_str(), strata_dtype_name(c.kv_dtype));
    return;
  }
  ASSERT_EQ(created, STRATA_OK) << api().last_error();
  const int32_t layer = 1;

  // A whole prompt (7 tokens), a chunk of 3 after 7 earlier tokens, a decode token after 18
  // (its blocks out of order).
  std::vector<Seq> seqs = {{0, 7, {3, 9}}, {7, 10, {0, 5, 11}}, {18, 19, {23, 1, 7, 2, 14}}};
  const int32_t mb = 5;
  const int32_t S = static_cast<int32_t>(seqs.size());
  const int64_t row = int64_t{kKvHeads} * kDim, qrow = int64_t{kHeads} * kDim;
  std::vector<float> inv_freq(c.rotary_dim / 2);
  for (size_t f = 0; f < inv_freq.size(); ++f) inv_freq[f] = std::pow(10000.0f, -2.0f * f / c.rotary_dim);
  const strata_tensor* inv_freq_t = F32(1, inv_freq.size(), inv_freq);
  strata_rope_params rope{};
  rope.struct_size = sizeof(rope);
  rope.style = c.rope_style;
  rope.rotary_dim = c.rotary_dim;
  rope.attention_factor = 1.0f;
  rope.inv_freq = inv_freq_t;
  strata_attention_params ap{};
  ap.struct_size = sizeof(ap);
  ap.num_heads = kHeads;
  ap.num_kv_heads = kKvHeads;
  ap.head_dim = kDim;
  ap.scale = c.softcap > 0 ? 1.0f : 1.0f / std::sqrt(float(kDim));
  ap.sliding_window = c.window;
  ap.logit_softcap = c.softcap;
  std::vector<int32_t> tables(S * mb, 0);
  for (int32_t s = 0; s < S; ++s) std::copy(seqs[s].blocks.begin(), seqs[s].blocks.end(), tables.begin() + s * mb);

  // Keys and values of every position of every sequence (before RoPE), and queries.
  std::vector<std::vector<float>> keys(S), values(S);
  for (int32_t s = 0; s < S; ++s) {
    keys[s] = RandomFloats(seqs[s].after * row, 100 + s, 1.5f);
    values[s] = RandomFloats(seqs[s].after * row, 200 + s);
  }

  // Runs rope_kv_write (+ attention) for positions [from[s], to[s]) of each sequence.
  auto step = [&](const std::vector<int32_t>& from, const std::vector<int32_t>& to, bool attend,
                  std::vector<float>* q_input, std::vector<float>* q_rotated, std::vector<float>* out) {
    std::vector<int32_t> positions, slots, qsl = {0}, lens;
    std::vector<float> q, k, v;
    for (int32_t s = 0; s < S; ++s) {
      for (int32_t p = from[s]; p < to[s]; ++p) {
        positions.push_back(p);
        slots.push_back(seqs[s].blocks[p / kBlock] * kBlock + p % kBlock);
        k.insert(k.end(), keys[s].begin() + p * row, keys[s].begin() + (p + 1) * row);
        v.insert(v.end(), values[s].begin() + p * row, values[s].begin() + (p + 1) * row);
      }
      qsl.push_back(static_cast<int32_t>(positions.size()));
      lens.push_back(to[s]);
    }
    const int64_t n = static_cast<int64_t>(positions.size());
    q = RandomFloats(n * qrow, 300 + static_cast<uint32_t>(n));
    if (q_input != nullptr) *q_input = q;
    const strata_tensor* qt = F32(n, qrow, q);
    const strata_tensor* kt = F32(n, row, k);
    const strata_tensor* vt = F32(n, row, v);
    strata_batch_desc b{};
    b.struct_size = sizeof(b);
    b.num_tokens = static_cast<int32_t>(n);
    b.num_seqs = S;
    b.max_query_len = 7;
    b.max_seq_len = 19;
    b.max_blocks_per_seq = mb;
    b.positions = I32(positions);
    b.slot_mapping = I32(slots);
    b.query_start_loc = I32(qsl);
    b.seq_lens = I32(lens);
    const strata_tensor* bt = Tensor(STRATA_DTYPE_I32, S, mb, tables.data());
    b.block_tables = bt;
    b.host_query_start_loc = qsl.data();
    b.host_seq_lens = lens.data();
    ExpectOk(api().rope_kv_write(dev(), &rope, &ap, &b, qt, kt, vt, kv, layer), "rope_kv_write");
    if (!attend) return;
    const strata_tensor* ot = Poisoned(STRATA_DTYPE_F32, n, qrow);
    ExpectOk(api().attention(dev(), &ap, &b, qt, kv, layer, ot), "attention");
    *q_rotated = ReadF32(qt);
    *out = ReadF32(ot);
  };

  std::vector<int32_t> zero(S, 0), before(S), after(S);
  for (int32_t s = 0; s < S; ++s) {
    before[s] = seqs[s].before;
    after[s] = seqs[s].after;
  }
  step(zero, before, false, nullptr, nullptr, nullptr);
  std::vector<float> q_in, q_rot_got, out_got;
  step(before, after, true, &q_in, &q_rot_got, &out_got);
  ASSERT_FALSE(out_got.empty());
  int64_t i = 0;
  const double tol = KvTolerance(c.kv_dtype);
  for (int32_t s = 0; s < S; ++s) {
    // Rotated, stored keys and values of the sequence.
    std::vector<std::vector<double>> K(after[s]), V(after[s]);
    for (int32_t p = 0; p < after[s]; ++p) {
      for (int32_t h = 0; h < kKvHeads; ++h) {
        std::vector<double> kh(keys[s].begin() + p * row + h * kDim, keys[s].begin() + p * row + (h + 1) * kDim);
        RopeRef(kh, p, c, inv_freq);
        for (double& x : kh) K[p].push_back(StoredAs(static_cast<float>(x), c.kv_dtype, c.k_scale));
        for (int32_t d = 0; d < kDim; ++d) {
          V[p].push_back(StoredAs(values[s][p * row + h * kDim + d], c.kv_dtype, c.v_scale));
        }
      }
    }
    for (int32_t p = before[s]; p < after[s]; ++p, ++i) {
      for (int32_t h = 0; h < kHeads; ++h) {
        std::vector<double> qh(q_in.begin() + i * qrow + h * kDim, q_in.begin() + i * qrow + (h + 1) * kDim);
        RopeRef(qh, p, c, inv_freq);
        for (int32_t d = 0; d < kDim; ++d) {
          ASSERT_NEAR(q_rot_got[i * qrow + h * kDim + d], qh[d], 1e-5) << "rotated q, pos " << p << " dim " << d;
        }
        const int32_t kvh = h / (kHeads / kKvHeads);
        const int32_t start = c.window > 0 ? std::max(0, p - c.window + 1) : 0;
        std::vector<double> score;
        double m = -INFINITY;
        for (int32_t j = start; j <= p; ++j) {
          double sc = 0;
          for (int32_t d = 0; d < kDim; ++d) sc += qh[d] * K[j][kvh * kDim + d];
          sc *= ap.scale;
          if (c.softcap > 0) sc = c.softcap * std::tanh(sc / c.softcap);
          score.push_back(sc);
          m = std::max(m, sc);
        }
        double l = 0;
        std::vector<double> o(kDim, 0.0);
        for (int32_t j = start; j <= p; ++j) {
          const double w = std::exp(score[j - start] - m);
          l += w;
          for (int32_t d = 0; d < kDim; ++d) o[d] += w * V[j][kvh * kDim + d];
        }
        for (int32_t d = 0; d < kDim; ++d) {
          ASSERT_NEAR(out_got[i * qrow + h * kDim + d], o[d] / l, tol)
              << "seq " << s << " pos " << p << " head " << h << " dim " << d;
        }
      }
    }
  }

  // copy_blocks: sequence 2's blocks copied to free blocks and its table pointed there, and
  // swap_blocks out to the host, the blocks clobbered, and back: attention is unchanged.
  const uint64_t block_bytes = api().kv_block_bytes(dev(), kv);
  ASSERT_GT(block_bytes, 0u);
  std::vector<strata_block_pair> copies;
  const std::vector<int32_t> spare = {4, 6, 8, 10, 12};
  for (size_t j = 0; j < seqs[2].blocks.size(); ++j) copies.push_back({seqs[2].blocks[j], spare[j]});
  ExpectOk(api().copy_blocks(dev(), kv, copies.data(), static_cast<int32_t>(copies.size())), "copy_blocks");
  std::vector<uint8_t> host(block_bytes * copies.size());
  std::vector<strata_block_pair> out_pairs, in_pairs, clobber;
  for (size_t j = 0; j < copies.size(); ++j) {
    out_pairs.push_back({spare[j], static_cast<int32_t>(j)});
    in_pairs.push_back({static_cast<int32_t>(j), spare[j]});
    clobber.push_back({seqs[0].blocks[0], spare[j]});
  }
  ExpectOk(api().swap_blocks(dev(), kv, host.data(), host.size(), out_pairs.data(), 5, 1), "swap out");
  ExpectOk(api().copy_blocks(dev(), kv, clobber.data(), 5), "clobber");
  ExpectOk(api().swap_blocks(dev(), kv, host.data(), host.size(), in_pairs.data(), 5, 0), "swap in");
  EXPECT_EQ(api().swap_blocks(dev(), kv, host.data(), host.size() - 1, out_pairs.data(), 5, 1),
            STRATA_ERROR_INVALID_ARGUMENT)
      << "a host area one byte short";
  // Decode step of sequence 2 alone, over the copies.
  {
    const int32_t p = 18;
    const int64_t n = 1;
    std::vector<int32_t> table(mb);
    std::copy(spare.begin(), spare.end(), table.begin());
    std::vector<int32_t> qsl = {0, 1}, lens = {19};
    const std::vector<float> q(q_in.begin() + 10 * qrow, q_in.begin() + 11 * qrow);
    strata_batch_desc b{};
    b.struct_size = sizeof(b);
    b.num_tokens = 1;
    b.num_seqs = 1;
    b.max_query_len = 1;
    b.max_seq_len = 19;
    b.max_blocks_per_seq = mb;
    b.positions = I32({p});
    b.slot_mapping = I32({-1});  // nothing written
    b.query_start_loc = I32(qsl);
    b.seq_lens = I32(lens);
    b.block_tables = Tensor(STRATA_DTYPE_I32, 1, mb, table.data());
    const strata_tensor* qt = F32(n, qrow, q);
    const strata_tensor* kt = F32(n, row, std::vector<float>(row, 0.0f));
    const strata_tensor* vt = F32(n, row, std::vector<float>(row, 0.0f));
    ExpectOk(api().rope_kv_write(dev(), &rope, &ap, &b, qt, kt, vt, kv, layer), "rope (no write)");
    const strata_tensor* ot = Poisoned(STRATA_DTYPE_F32, n, qrow);
    ExpectOk(api().attention(dev(), &ap, &b, qt, kv, layer, ot), "attention over copied blocks");
    const std::vector<float> again = ReadF32(ot);
    for (int64_t d = 0; d < qrow; ++d) {
      ASSERT_NEAR(again[d], out_got[10 * qrow + d], 1e-6) << "element " << d;
    }
  }
  // A block table entry outside the cache is refused (at the call or at synchronize).
  {
    std::vector<int32_t> table = {0, kBlocks + 3, 0, 0, 0};
    std::vector<int32_t> qsl = {0, 1}, lens = {6};
    strata_batch_desc b{};
    b.struct_size = sizeof(b);
    b.num_tokens = 1;
    b.num_seqs = 1;
    b.max_query_len = 1;
    b.max_seq_len = 6;
    b.max_blocks_per_seq = mb;
    b.query_start_loc = I32(qsl);
    b.seq_lens = I32(lens);
    b.block_tables = Tensor(STRATA_DTYPE_I32, 1, mb, table.data());
    const strata_tensor* qt = F32(1, qrow, RandomFloats(qrow, 400));
    ExpectErrorNowOrAtSync(api().attention(dev(), &ap, &b, qt, kv, layer, Poisoned(STRATA_DTYPE_F32, 1, qrow)),
                           "block table entry beyond the cache");
    b.slot_mapping = I32({kBlocks * kBlock});
    b.positions = I32({5});
    ExpectErrorNowOrAtSync(api().rope_kv_write(dev(), &rope, &ap, &b, qt, F32(1, row, std::vector<float>(row)),
                                               F32(1, row, std::vector<float>(row)), kv, layer),
                           "slot beyond the cache");
  }
  api().kv_cache_free(dev(), kv);
}

// Prefill chunks longer than the GPU kernel's 32-token query blocks and 32-key tiles
// (attention_prefill.cl, opencl_gpu_kernels): a 70-token prompt beside a 4-token chunk
// after 37 cached tokens, with and without a sliding window. RoPE at angle 0 (inv_freq 0)
// stores keys as given, so the float64 reference needs no rotation.
TEST_P(Attention, LongPrefillChunksAcrossQueryBlocksAndKeyTiles) {
  constexpr int32_t kNumBlocks = 32;
  for (int32_t window : {0, 40}) {
    SCOPED_TRACE(testing::Message() << "window " << window);
    strata_kv_cache_desc kd{};
    kd.struct_size = sizeof(kd);
    kd.num_layers = 1;
    kd.num_blocks = kNumBlocks;
    kd.block_size = kBlock;
    kd.num_kv_heads = kKvHeads;
    kd.head_dim = kDim;
    kd.dtype = STRATA_DTYPE_F32;
    strata_kv_cache kv = nullptr;
    ASSERT_EQ(api().kv_cache_create(dev(), &kd, &kv), STRATA_OK) << api().last_error();
    const std::vector<float> zeros(kDim / 2, 0.0f);
    strata_rope_params rope{};
    rope.struct_size = sizeof(rope);
    rope.style = STRATA_ROPE_NEOX;
    rope.rotary_dim = kDim;
    rope.attention_factor = 1.0f;
    rope.inv_freq = F32(1, kDim / 2, zeros);
    strata_attention_params ap{};
    ap.struct_size = sizeof(ap);
    ap.num_heads = kHeads;
    ap.num_kv_heads = kKvHeads;
    ap.head_dim = kDim;
    ap.scale = 1.0f / std::sqrt(float(kDim));
    ap.sliding_window = window;
    // Sequence 0: a 70-token prompt (blocks 0..17); sequence 1: tokens 37..40 after 37
    // cached ones (blocks 31 down to 21, out of order).
    const int32_t before[2] = {0, 37}, after[2] = {70, 41}, mb = 18;
    std::vector<int32_t> tables(2 * mb, 0);
    for (int32_t b = 0; b < 18; ++b) tables[b] = b;
    for (int32_t b = 0; b < 11; ++b) tables[mb + b] = kNumBlocks - 1 - b;
    const int64_t row = int64_t{kKvHeads} * kDim, qrow = int64_t{kHeads} * kDim;
    std::vector<std::vector<float>> keys(2), values(2);
    for (int32_t s = 0; s < 2; ++s) {
      keys[s] = RandomFloats(after[s] * row, 400 + s, 1.5f);
      values[s] = RandomFloats(after[s] * row, 500 + s);
    }
    auto step = [&](const int32_t* from, const int32_t* to, bool attend, std::vector<float>* q_out,
                    std::vector<float>* out) {
      std::vector<int32_t> positions, slots, qsl = {0}, lens;
      std::vector<float> k, v;
      for (int32_t s = 0; s < 2; ++s) {
        for (int32_t p = from[s]; p < to[s]; ++p) {
          positions.push_back(p);
          slots.push_back(tables[s * mb + p / kBlock] * kBlock + p % kBlock);
          k.insert(k.end(), keys[s].begin() + p * row, keys[s].begin() + (p + 1) * row);
          v.insert(v.end(), values[s].begin() + p * row, values[s].begin() + (p + 1) * row);
        }
        qsl.push_back(static_cast<int32_t>(positions.size()));
        lens.push_back(to[s]);
      }
      const int64_t n = static_cast<int64_t>(positions.size());
      const std::vector<float> q = RandomFloats(n * qrow, 600 + static_cast<uint32_t>(n), 2.0f);
      if (q_out != nullptr) *q_out = q;
      strata_batch_desc b{};
      b.struct_size = sizeof(b);
      b.num_tokens = static_cast<int32_t>(n);
      b.num_seqs = 2;
      b.max_query_len = 70;
      b.max_seq_len = 70;
      b.max_blocks_per_seq = mb;
      b.positions = I32(positions);
      b.slot_mapping = I32(slots);
      b.query_start_loc = I32(qsl);
      b.seq_lens = I32(lens);
      b.block_tables = Tensor(STRATA_DTYPE_I32, 2, mb, tables.data());
      b.host_query_start_loc = qsl.data();
      b.host_seq_lens = lens.data();
      const strata_tensor* qt = F32(n, qrow, q);
      ExpectOk(api().rope_kv_write(dev(), &rope, &ap, &b, qt, F32(n, row, k), F32(n, row, v), kv, 0), "rope_kv_write");
      if (!attend) return;
      const strata_tensor* ot = Poisoned(STRATA_DTYPE_F32, n, qrow);
      ExpectOk(api().attention(dev(), &ap, &b, qt, kv, 0, ot), "attention");
      *out = ReadF32(ot);
    };
    const int32_t none[2] = {0, 0}, cached[2] = {0, 37};
    step(none, cached, false, nullptr, nullptr);
    std::vector<float> q, got;
    step(before, after, true, &q, &got);
    ASSERT_FALSE(got.empty());
    int64_t i = 0;
    for (int32_t s = 0; s < 2; ++s) {
      for (int32_t p = before[s]; p < after[s]; ++p, ++i) {
        for (int32_t h = 0; h < kHeads; ++h) {
          const int32_t kvh = h / (kHeads / kKvHeads);
          const int32_t start = window > 0 ? std::max(0, p - window + 1) : 0;
          std::vector<double> score;
          double m = -INFINITY;
          for (int32_t j = start; j <= p; ++j) {
            double sc = 0;
            for (int32_t d = 0; d < kDim; ++d) sc += double(q[i * qrow + h * kDim + d]) * keys[s][j * row + kvh * kDim + d];
            score.push_back(sc * ap.scale);
            m = std::max(m, score.back());
          }
          double l = 0;
          std::vector<double> o(kDim, 0.0);
          for (int32_t j = start; j <= p; ++j) {
            const double w = std::exp(score[j - start] - m);
            l += w;
            for (int32_t d = 0; d < kDim; ++d) o[d] += w * values[s][j * row + kvh * kDim + d];
          }
          for (int32_t d = 0; d < kDim; ++d) {
            ASSERT_NEAR(got[i * qrow + h * kDim + d], o[d] / l, 2e-5)
                << "seq " << s << " pos " << p << " head " << h << " dim " << d;
          }
        }
      }
    }
    api().kv_cache_free(dev(), kv);
  }
}

// Decode-shaped batches at a real head size (GPU backends take a decode kernel for them,
// paged_attention_decode in the OpenCL backend): head_dim 128, a GQA group of 4 query heads
// per KV head, blocks of 16, contexts that end inside, at and past the 128-key tiles of that
// kernel (1, 128, 130, 300), one sequence with 3 query tokens, no host copies of the batch;
// with and without a sliding window, in F32 and I8 caches; then one sequence alone (a single
// query token: fewer heads per work-group there, and on a device of few compute units the
// 300 keys split over work-groups and combined; with the window the first split is empty).
TEST_P(Attention, DecodeBatchLongContextsHeadDim128Gqa4) {
  constexpr int32_t H = 8, KVH = 2, D = 128, BS = 16, kNumBlocks = 48;
  for (int32_t dtype : {STRATA_DTYPE_F32, STRATA_DTYPE_I8}) {
    for (int32_t window : {0, 100}) {
      SCOPED_TRACE(testing::Message() << "cache " << strata_dtype_name(dtype) << " window " << window);
      strata_kv_cache_desc kd{};
      kd.struct_size = sizeof(kd);
      kd.num_layers = 1;
      kd.num_blocks = kNumBlocks;
      kd.block_size = BS;
      kd.num_kv_heads = KVH;
      kd.head_dim = D;
      kd.dtype = dtype;
      kd.scale_mode = dtype == STRATA_DTYPE_I8 ? STRATA_KV_SCALE_PER_BLOCK_HEAD : STRATA_KV_SCALE_PER_TENSOR;
      strata_kv_cache kv = nullptr;
      const strata_status created = api().kv_cache_create(dev(), &kd, &kv);
      if (created == STRATA_ERROR_UNSUPPORTED && dtype != STRATA_DTYPE_F32 && name() != "cpu") {
        std::printf("[ note     ] %s has no %s KV cache\n", name().c_str(), strata_dtype_name(dtype));
        continue;
      }
      ASSERT_EQ(created, STRATA_OK) << api().last_error();
      const std::vector<float> zeros(D / 2, 0.0f);
      strata_rope_params rope{};
      rope.struct_size = sizeof(rope);
      rope.style = STRATA_ROPE_NEOX;
      rope.rotary_dim = D;
      rope.attention_factor = 1.0f;
      rope.inv_freq = F32(1, D / 2, zeros);  // angle 0: keys stored as given
      strata_attention_params ap{};
      ap.struct_size = sizeof(ap);
      ap.num_heads = H;
      ap.num_kv_heads = KVH;
      ap.head_dim = D;
      ap.scale = 1.0f / std::sqrt(float(D));
      ap.sliding_window = window;
      const int64_t row = int64_t{KVH} * D, qrow = int64_t{H} * D;
      // Sequence lengths after the step and their query tokens; blocks handed out backwards
      // and interleaved so that no table is contiguous.
      const std::vector<int32_t> after = {1, 128, 130, 300}, qlen = {1, 1, 3, 1};
      const int32_t S = static_cast<int32_t>(after.size()), mb = (300 + BS - 1) / BS;
      std::vector<int32_t> tables(S * mb, 0);
      int32_t next = kNumBlocks - 1;
      for (int32_t b = 0; b < mb; ++b) {
        for (int32_t s = 0; s < S; ++s) {
          if (b * BS < after[s]) tables[s * mb + b] = next--;
        }
      }
      ASSERT_GE(next, -1);
      std::vector<std::vector<float>> keys(S), values(S);
      for (int32_t s = 0; s < S; ++s) {
        keys[s] = RandomFloats(after[s] * row, 700 + s, 1.5f);
        values[s] = RandomFloats(after[s] * row, 800 + s);
      }
      // Writes positions [from[s], to[s]) of each sequence; attends when asked (seqs: which).
      auto step = [&](const std::vector<int32_t>& seqs, const std::vector<int32_t>& from,
                      const std::vector<int32_t>& to, bool attend, std::vector<float>* q_out, std::vector<float>* out) {
        std::vector<int32_t> positions, slots, qsl = {0}, lens, table;
        std::vector<float> k, v;
        for (size_t j = 0; j < seqs.size(); ++j) {
          const int32_t s = seqs[j];
          for (int32_t p = from[j]; p < to[j]; ++p) {
            positions.push_back(p);
            slots.push_back(tables[s * mb + p / BS] * BS + p % BS);
            k.insert(k.end(), keys[s].begin() + p * row, keys[s].begin() + (p + 1) * row);
            v.insert(v.end(), values[s].begin() + p * row, values[s].begin() + (p + 1) * row);
          }
          qsl.push_back(static_cast<int32_t>(positions.size()));
          lens.push_back(to[j]);
          table.insert(table.end(), tables.begin() + s * mb, tables.begin() + (s + 1) * mb);
        }
        const int64_t n = static_cast<int64_t>(positions.size());
        const int32_t ns = static_cast<int32_t>(seqs.size());
        const std::vector<float> q = RandomFloats(n * qrow, 900 + static_cast<uint32_t>(n), 2.0f);
        if (q_out != nullptr) *q_out = q;
        strata_batch_desc b{};
        b.struct_size = sizeof(b);
        b.num_tokens = static_cast<int32_t>(n);
        b.num_seqs = ns;
        b.max_query_len = 300;
        b.max_seq_len = 300;
        b.max_blocks_per_seq = mb;
        b.positions = I32(positions);
        b.slot_mapping = I32(slots);
        b.query_start_loc = I32(qsl);
        b.seq_lens = I32(lens);
        b.block_tables = Tensor(STRATA_DTYPE_I32, ns, mb, table.data());
        const strata_tensor* qt = F32(n, qrow, q);
        ExpectOk(api().rope_kv_write(dev(), &rope, &ap, &b, qt, F32(n, row, k), F32(n, row, v), kv, 0),
                 "rope_kv_write");
        if (!attend) return;
        const strata_tensor* ot = Poisoned(STRATA_DTYPE_F32, n, qrow);
        ExpectOk(api().attention(dev(), &ap, &b, qt, kv, 0, ot), "attention");
        *out = ReadF32(ot);
      };
      std::vector<int32_t> all(S), none(S, 0), before(S);
      for (int32_t s = 0; s < S; ++s) {
        all[s] = s;
        before[s] = after[s] - qlen[s];
      }
      step(all, none, before, false, nullptr, nullptr);
      const double tol = dtype == STRATA_DTYPE_I8 ? 4e-2 : 5e-5;
      // The expected output of sequence s's query at position p (q: its H x D floats).
      auto check = [&](int32_t s, int32_t p, const float* q, const float* got) {
        for (int32_t h = 0; h < H; ++h) {
          const int32_t kvh = h / (H / KVH);
          const int32_t start = window > 0 ? std::max(0, p - window + 1) : 0;
          std::vector<double> score;
          double m = -INFINITY;
          for (int32_t j = start; j <= p; ++j) {
            double sc = 0;
            for (int32_t d = 0; d < D; ++d) sc += double(q[h * D + d]) * keys[s][j * row + kvh * D + d];
            score.push_back(sc * ap.scale);
            m = std::max(m, score.back());
          }
          double l = 0;
          std::vector<double> o(D, 0.0);
          for (int32_t j = start; j <= p; ++j) {
            const double w = std::exp(score[j - start] - m);
            l += w;
            for (int32_t d = 0; d < D; ++d) o[d] += w * values[s][j * row + kvh * D + d];
          }
          for (int32_t d = 0; d < D; ++d) {
            ASSERT_NEAR(got[h * D + d], o[d] / l, tol) << "seq " << s << " pos " << p << " head " << h << " dim " << d;
          }
        }
      };
      std::vector<float> q, got;
      step(all, before, after, true, &q, &got);
      ASSERT_EQ(got.size(), static_cast<size_t>(6 * qrow));
      int64_t i = 0;
      for (int32_t s = 0; s < S; ++s) {
        for (int32_t p = before[s]; p < after[s]; ++p, ++i) check(s, p, q.data() + i * qrow, got.data() + i * qrow);
      }
      // Sequence 3 alone: its last token again (rewritten with the same values).
      step({3}, {299}, {300}, true, &q, &got);
      ASSERT_EQ(got.size(), static_cast<size_t>(qrow));
      check(3, 299, q.data(), got.data());
      api().kv_cache_free(dev(), kv);
    }
  }
}

TEST_P(Attention, RaggedBatchF32CacheNeox) { RunCase({STRATA_DTYPE_F32, STRATA_ROPE_NEOX, kDim, 0, 0}); }
TEST_P(Attention, RaggedBatchF32CacheInterleavedPartialRotation) {
  RunCase({STRATA_DTYPE_F32, STRATA_ROPE_INTERLEAVED, 8, 0, 0});
}
TEST_P(Attention, SlidingWindow) { RunCase({STRATA_DTYPE_F32, STRATA_ROPE_NEOX, kDim, 5, 0}); }
TEST_P(Attention, LogitSoftcap) { RunCase({STRATA_DTYPE_F32, STRATA_ROPE_NEOX, kDim, 0, 2.0f}); }
TEST_P(Attention, F16Cache) { RunCase({STRATA_DTYPE_F16, STRATA_ROPE_NEOX, kDim, 0, 0}); }
TEST_P(Attention, Bf16Cache) { RunCase({STRATA_DTYPE_BF16, STRATA_ROPE_NEOX, kDim, 0, 0}); }
TEST_P(Attention, I8CacheWithPerBlockHeadScales) { RunCase({STRATA_DTYPE_I8, STRATA_ROPE_NEOX, kDim, 0, 0}); }
TEST_P(Attention, Fp8E4M3CachePerTensorScale) { RunCase({STRATA_DTYPE_FP8_E4M3, STRATA_ROPE_NEOX, kDim, 0, 0}); }
TEST_P(Attention, Fp8E4M3CacheWithOtherScales) {
  RunCase({STRATA_DTYPE_FP8_E4M3, STRATA_ROPE_NEOX, kDim, 0, 0, 0.5f, 2.0f});
}

INSTANTIATE_TEST_SUITE_P(Backends, Attention, ::testing::ValuesIn(kBackendParams), ParamName);

}  // namespace
}  // namespace strata::conformance
