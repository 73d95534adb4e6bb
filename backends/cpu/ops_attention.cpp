// RoPE + KV-cache write, and paged attention over a ragged batch (prefill chunks and
// decode tokens mixed; causal, GQA, sliding window, logit soft-capping). Softmax is the
// online (streaming) form in F32, one key block at a time.

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backends/cpu/cpu_ops.h"
#include "backends/cpu/half_convert.h"
#include "backends/cpu/kv_quant.h"
#include "backends/cpu/scratch_arena.h"
#include "backends/cpu/simd_kernels.h"
#include "backends/cpu/tensor_view.h"
#include "backends/cpu/thread_pool.h"

namespace strata::cpu {
namespace {

#define STRATA_ASSIGN_VIEW(var, expr)           \
  auto var##_or = (expr);                       \
  if (!var##_or.ok()) return var##_or.status(); \
  const View var = *var##_or

absl::Status CheckAttnParams(const strata_attention_params* attn, const strata_kv_cache_s* kv,
                             int32_t layer, const char* op) {
  if (attn == nullptr) return absl::InvalidArgumentError(absl::StrCat(op, ": null attention params"));
  if (attn->struct_size < sizeof(strata_attention_params)) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": attention params struct_size too small"));
  }
  if (attn->num_heads <= 0 || attn->num_kv_heads <= 0 || attn->num_heads % attn->num_kv_heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": num_heads ", attn->num_heads,
                                                   " must be a positive multiple of num_kv_heads ",
                                                   attn->num_kv_heads));
  }
  if (attn->num_kv_heads != kv->desc.num_kv_heads || attn->head_dim != kv->desc.head_dim) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": num_kv_heads/head_dim ", attn->num_kv_heads, "/", attn->head_dim,
        " differ from the KV cache's ", kv->desc.num_kv_heads, "/", kv->desc.head_dim));
  }
  if (layer < 0 || layer >= kv->desc.num_layers) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": layer ", layer, " outside the cache's ",
                                                   kv->desc.num_layers, " layers"));
  }
  if (attn->sliding_window < 0) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": sliding_window < 0"));
  }
  return absl::OkStatus();
}

absl::Status CheckBatchHeader(const strata_batch_desc* batch, const char* op) {
  if (batch == nullptr) return absl::InvalidArgumentError(absl::StrCat(op, ": null batch"));
  if (batch->struct_size < offsetof(strata_batch_desc, host_query_start_loc)) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": batch struct_size too small"));
  }
  if (batch->num_tokens < 0 || batch->num_seqs < 0) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": negative num_tokens or num_seqs"));
  }
  return absl::OkStatus();
}

// An I32 vector with at least `n` packed elements.
absl::StatusOr<const int32_t*> I32Array(const strata_tensor* t, int64_t n, const char* what) {
  auto v = CheckTensor(t, what, {STRATA_DTYPE_I32});
  if (!v.ok()) return v.status();
  if (!v->packed() || v->numel() < n) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", v->numel(), " elements, need ", n));
  }
  return v->Row<const int32_t>(0);
}

void StoreRow(const float* src, void* dst, int32_t dtype, int64_t n) {
  switch (dtype) {
    case STRATA_DTYPE_F16: {
      auto* d = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) d[i] = F32ToF16(src[i]);
      break;
    }
    case STRATA_DTYPE_BF16: {
      auto* d = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) d[i] = F32ToBf16(src[i]);
      break;
    }
    default:
      std::copy(src, src + n, static_cast<float*>(dst));
  }
}

void Rotate(float* x, const float* cs, const float* sn, int32_t half, int32_t style) {
  if (style == STRATA_ROPE_INTERLEAVED) {
    for (int32_t f = 0; f < half; ++f) {
      const float a = x[2 * f], b = x[2 * f + 1];
      x[2 * f] = a * cs[f] - b * sn[f];
      x[2 * f + 1] = a * sn[f] + b * cs[f];
    }
  } else {
    for (int32_t f = 0; f < half; ++f) {
      const float a = x[f], b = x[f + half];
      x[f] = a * cs[f] - b * sn[f];
      x[f + half] = b * cs[f] + a * sn[f];
    }
  }
}

}  // namespace

absl::Status RopeKvWrite(strata_device_s* dev, const strata_rope_params* rope,
                         const strata_attention_params* attn, const strata_batch_desc* batch,
                         const strata_tensor* q, const strata_tensor* k, const strata_tensor* v,
                         strata_kv_cache_s* kv, int32_t layer) {
  const char* op = "rope_kv_write";
  if (absl::Status s = CheckAttnParams(attn, kv, layer, op); !s.ok()) return s;
  if (absl::Status s = CheckBatchHeader(batch, op); !s.ok()) return s;
  const int64_t n = batch->num_tokens;
  const int32_t H = attn->num_heads, KVH = attn->num_kv_heads, D = attn->head_dim;
  STRATA_ASSIGN_VIEW(qv, CheckTensor(q, "rope_kv_write: q", {STRATA_DTYPE_F32}));
  STRATA_ASSIGN_VIEW(kview, CheckTensor(k, "rope_kv_write: k", {STRATA_DTYPE_F32}));
  STRATA_ASSIGN_VIEW(vv, CheckTensor(v, "rope_kv_write: v", {STRATA_DTYPE_F32}));
  if (qv.rows != n || qv.cols != int64_t{H} * D || kview.rows != n || kview.cols != int64_t{KVH} * D ||
      vv.rows != n || vv.cols != int64_t{KVH} * D) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": q/k/v are [", qv.rows, ", ", qv.cols, "]/[", kview.rows, ", ", kview.cols, "]/[", vv.rows,
        ", ", vv.cols, "], expected [", n, ", ", int64_t{H} * D, "] and [", n, ", ",
        int64_t{KVH} * D, "]"));
  }
  int32_t style = STRATA_ROPE_NONE, half = 0;
  float factor = 1.0f;
  const float* inv_freq = nullptr;
  if (rope != nullptr && rope->style != STRATA_ROPE_NONE) {
    if (rope->struct_size < sizeof(strata_rope_params)) {
      return absl::InvalidArgumentError("rope_kv_write: rope params struct_size too small");
    }
    if (rope->style != STRATA_ROPE_INTERLEAVED && rope->style != STRATA_ROPE_NEOX) {
      return absl::InvalidArgumentError(absl::StrCat(op, ": unknown rope style ", rope->style));
    }
    if (rope->rotary_dim <= 0 || rope->rotary_dim % 2 != 0 || rope->rotary_dim > D) {
      return absl::InvalidArgumentError(absl::StrCat(op, ": rotary_dim ", rope->rotary_dim,
                                                     " must be even and in 2..head_dim (", D, ")"));
    }
    style = rope->style;
    half = rope->rotary_dim / 2;
    factor = rope->attention_factor;
    STRATA_ASSIGN_VIEW(fv, CheckTensor(rope->inv_freq, "rope_kv_write: inv_freq", {STRATA_DTYPE_F32}));
    if (!fv.packed() || fv.numel() < half) {
      return absl::InvalidArgumentError(absl::StrCat(op, ": inv_freq has ", fv.numel(),
                                                     " elements, need rotary_dim/2 = ", half));
    }
    inv_freq = fv.Row<float>(0);
  }
  const int32_t* positions = nullptr;
  if (style != STRATA_ROPE_NONE) {
    auto p = I32Array(batch->positions, n, "rope_kv_write: positions");
    if (!p.ok()) return p.status();
    positions = *p;
  }
  auto slots_or = I32Array(batch->slot_mapping, n, "rope_kv_write: slot_mapping");
  if (!slots_or.ok()) return slots_or.status();
  const int32_t* slots = *slots_or;
  const int64_t num_slots = int64_t{kv->desc.num_blocks} * kv->desc.block_size;
  for (int64_t i = 0; i < n; ++i) {
    if (slots[i] >= num_slots) {
      return absl::InvalidArgumentError(absl::StrCat(op, ": slot_mapping[", i, "] = ", slots[i],
                                                     " beyond the cache's ", num_slots, " slots"));
    }
  }
  const int32_t bs = kv->desc.block_size;
  const int32_t kv_dtype = kv->desc.dtype;
  const bool kv8 = IsKv8Bit(kv_dtype);
  const int64_t token_bytes = (int64_t{H} + 2 * KVH) * D * 4 + 2 * int64_t{KVH} * D * kv->elem_size;
  std::atomic<bool> no_scratch{false};
  dev->pool->ParallelFor(n, token_bytes, [&](int64_t i0, int64_t i1) {
    ScratchArena& arena = ScratchArena::ForThisThread();
    ScratchArena::Scope scope(arena);
    float* cs = arena.AllocateArray<float>(half);
    float* sn = arena.AllocateArray<float>(half);
    if (cs == nullptr || sn == nullptr) {
      no_scratch.store(true);
      return;
    }
    for (int64_t i = i0; i < i1; ++i) {
      float* kr = kview.Row<float>(i);
      if (style != STRATA_ROPE_NONE) {
        // Angles in double: pos * inv_freq loses precision in F32 at long positions.
        for (int32_t f = 0; f < half; ++f) {
          const double a = static_cast<double>(positions[i]) * inv_freq[f];
          cs[f] = static_cast<float>(std::cos(a) * factor);
          sn[f] = static_cast<float>(std::sin(a) * factor);
        }
        float* qr = qv.Row<float>(i);
        for (int32_t h = 0; h < H; ++h) Rotate(qr + int64_t{h} * D, cs, sn, half, style);
        for (int32_t h = 0; h < KVH; ++h) Rotate(kr + int64_t{h} * D, cs, sn, half, style);
      }
      if (slots[i] < 0 || kv8) continue;  // 8-bit caches are written below
      const int64_t blk = slots[i] / bs, off = slots[i] % bs;
      const int64_t row_elems = int64_t{KVH} * D;
      StoreRow(kr, kv->BlockPtr(layer, 0, blk) + off * row_elems * kv->elem_size, kv_dtype, row_elems);
      StoreRow(vv.Row<float>(i), kv->BlockPtr(layer, 1, blk) + off * row_elems * kv->elem_size,
               kv_dtype, row_elems);
    }
  });
  if (no_scratch.load()) return absl::ResourceExhaustedError(absl::StrCat(op, ": no scratch for the rope angles"));
  if (kv8) {
    // One item per (kv head, K/V) walks the tokens in order: I8 scales belong to a (block,
    // head, K/V) and may grow (requantizing the block) as its rows arrive.
    dev->pool->ParallelFor(int64_t{KVH} * 2, n * D * 5, [&](int64_t it0, int64_t it1) {
      for (int64_t it = it0; it < it1; ++it) {
        const int32_t h = static_cast<int32_t>(it / 2);
        const int which = static_cast<int>(it % 2);
        const View& src = which == 0 ? kview : vv;
        for (int64_t i = 0; i < n; ++i) {
          if (slots[i] < 0) continue;
          StoreKvRow8(kv, layer, which, slots[i] / bs, static_cast<int32_t>(slots[i] % bs), h,
                      src.Row<float>(i) + int64_t{h} * D);
        }
      }
    });
  }
  return absl::OkStatus();
}

absl::Status Attention(strata_device_s* dev, const strata_attention_params* attn,
                       const strata_batch_desc* batch, const strata_tensor* q,
                       strata_kv_cache_s* kv, int32_t layer, const strata_tensor* out) {
  const char* op = "attention";
  if (absl::Status s = CheckAttnParams(attn, kv, layer, op); !s.ok()) return s;
  if (absl::Status s = CheckBatchHeader(batch, op); !s.ok()) return s;
  const int64_t n = batch->num_tokens;
  const int32_t S = batch->num_seqs;
  const int32_t H = attn->num_heads, KVH = attn->num_kv_heads, D = attn->head_dim;
  STRATA_ASSIGN_VIEW(qv, CheckTensor(q, "attention: q", {STRATA_DTYPE_F32}));
  STRATA_ASSIGN_VIEW(ov, CheckTensor(out, "attention: out", {STRATA_DTYPE_F32}));
  if (qv.rows != n || qv.cols != int64_t{H} * D || ov.rows != n || ov.cols != int64_t{H} * D) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": q/out are [", qv.rows, ", ", qv.cols, "]/[",
                                                   ov.rows, ", ", ov.cols, "], expected [", n, ", ",
                                                   int64_t{H} * D, "]"));
  }
  auto qsl_or = I32Array(batch->query_start_loc, int64_t{S} + 1, "attention: query_start_loc");
  if (!qsl_or.ok()) return qsl_or.status();
  auto lens_or = I32Array(batch->seq_lens, S, "attention: seq_lens");
  if (!lens_or.ok()) return lens_or.status();
  const int32_t* qsl = *qsl_or;
  const int32_t* lens = *lens_or;
  const int32_t bs = kv->desc.block_size;
  const int32_t mb = batch->max_blocks_per_seq;
  STRATA_ASSIGN_VIEW(btv, CheckTensor(batch->block_tables, "attention: block_tables", {STRATA_DTYPE_I32}));
  if (S > 0 && (mb <= 0 || btv.rows < S || btv.cols != mb)) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": block_tables is [", btv.rows, ", ", btv.cols,
                                                   "], expected [", S, ", max_blocks_per_seq = ", mb, "]"));
  }
  if (qsl[0] != 0 || qsl[S] != n) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": query_start_loc must run from 0 to num_tokens (",
                                                   n, "), got ", qsl[0], " .. ", qsl[S]));
  }
  const int32_t window = attn->sliding_window;
  ScratchArena& arena = ScratchArena::ForThisThread();
  ScratchArena::Scope scope(arena);
  int32_t* token_seq = arena.AllocateArray<int32_t>(static_cast<uint64_t>(n));
  if (token_seq == nullptr) return absl::ResourceExhaustedError(absl::StrCat(op, ": no scratch for ", n, " tokens"));
  for (int32_t s = 0; s < S; ++s) {
    const int32_t q_len = qsl[s + 1] - qsl[s];
    if (q_len < 0 || qsl[s + 1] > n || q_len > lens[s] || int64_t{lens[s]} > int64_t{mb} * bs) {
      return absl::InvalidArgumentError(absl::StrCat(
          op, ": sequence ", s, " has ", q_len, " query tokens and seq_len ", lens[s],
          " (need 0 <= q_len <= seq_len <= max_blocks_per_seq * block_size = ", int64_t{mb} * bs, ")"));
    }
    if (q_len == 0) continue;
    const int32_t first_pos = lens[s] - q_len;
    const int32_t first_key = window > 0 ? std::max(0, first_pos - window + 1) : 0;
    const int32_t* bt = btv.Row<int32_t>(s);
    for (int32_t b = first_key / bs; b <= (lens[s] - 1) / bs; ++b) {
      if (bt[b] < 0 || bt[b] >= kv->desc.num_blocks) {
        return absl::InvalidArgumentError(absl::StrCat(op, ": block_tables[", s, "][", b, "] = ", bt[b],
                                                       " outside the cache's ", kv->desc.num_blocks, " blocks"));
      }
    }
    std::fill(token_seq + qsl[s], token_seq + qsl[s + 1], s);
  }
  const int32_t group = H / KVH;
  const float scale = attn->scale;
  const float cap = attn->logit_softcap;
  const int32_t kv_dtype = kv->desc.dtype;
  const size_t es = kv->elem_size;
  const int64_t items = n * H;
  // An item reads its sequence's keys and values once: cost it by the longest sequence.
  int32_t max_len = 0;
  for (int32_t s = 0; s < S; ++s) max_len = std::max(max_len, lens[s]);
  const int64_t item_bytes = 2 * int64_t{max_len} * D * static_cast<int64_t>(es) + int64_t{D} * 8;
  const bool kv8 = IsKv8Bit(kv_dtype);
  std::atomic<bool> no_scratch{false};
  dev->pool->ParallelFor(items, item_bytes, [&](int64_t item0, int64_t item1) {
    // This thread's rows: the caller's arena already holds token_seq below them.
    ScratchArena& mine = ScratchArena::ForThisThread();
    ScratchArena::Scope rows_scope(mine);
    float* acc = mine.AllocateArray<float>(D);
    float* score = mine.AllocateArray<float>(bs);
    float* row8 = mine.AllocateArray<float>(kv8 ? D : 1);
    if (acc == nullptr || score == nullptr || row8 == nullptr) {
      no_scratch.store(true);
      return;
    }
    for (int64_t item = item0; item < item1; ++item) {
      const int64_t i = item / H;
      const int32_t h = static_cast<int32_t>(item % H);
      const int32_t kvh = h / group;
      const int32_t s = token_seq[i];
      const int32_t q_len = qsl[s + 1] - qsl[s];
      const int32_t pos = lens[s] - q_len + static_cast<int32_t>(i - qsl[s]);
      const int32_t start = window > 0 ? std::max(0, pos - window + 1) : 0;
      const int32_t* bt = btv.Row<int32_t>(s);
      const float* qh = qv.Row<float>(i) + int64_t{h} * D;
      std::fill(acc, acc + D, 0.0f);
      float m = -std::numeric_limits<float>::infinity();
      float l = 0.0f;
      for (int32_t p0 = start; p0 <= pos;) {
        const int32_t blk = bt[p0 / bs];
        const int32_t off0 = p0 % bs;
        const int32_t cnt = std::min(bs - off0, pos - p0 + 1);
        const char* kbase = kv->BlockPtr(layer, 0, blk);
        const char* vbase = kv->BlockPtr(layer, 1, blk);
        // The block's keys (and below its values) of this kv head: rows KVH * D apart.
        const int64_t e0 = (int64_t{off0} * KVH + kvh) * D;
        const int64_t row_stride = int64_t{KVH} * D;
        if (!kv8) {
          // Decode reads each head's rows one at a time, row_stride apart: ask for this
          // block's values (used after the scores) and the next block's keys now, so that
          // they arrive while the keys below are multiplied (at 512 tokens of context the
          // attention read its KV at about half the machine's read bandwidth without this).
          PrefetchRows(vbase + e0 * es, row_stride * static_cast<int64_t>(es), cnt, int64_t{D} * es);
          const int32_t next = p0 + cnt;
          if (next <= pos) {
            const int32_t ncnt = std::min(bs, pos - next + 1);
            PrefetchRows(kv->BlockPtr(layer, 0, bt[next / bs]) + int64_t{kvh} * D * es,
                         row_stride * static_cast<int64_t>(es), ncnt, int64_t{D} * es);
          }
        }
        if (kv8) {
          for (int32_t t = 0; t < cnt; ++t) {
            LoadKvRow8(kv, layer, 0, blk, off0 + t, kvh, row8);
            score[t] = DotF32(qh, row8, STRATA_DTYPE_F32, D);
          }
        } else {
          DotRowsF32(qh, kbase + e0 * es, kv_dtype, row_stride, cnt, D, score);
        }
        float cm = -std::numeric_limits<float>::infinity();
        for (int32_t t = 0; t < cnt; ++t) {
          float sc = score[t] * scale;
          if (cap > 0.0f) sc = cap * std::tanh(sc / cap);
          score[t] = sc;
          cm = std::max(cm, sc);
        }
        if (cm > m) {
          const float r = std::exp(m - cm);
          ScaleF32(acc, r, D);
          l *= r;
          m = cm;
        }
        for (int32_t t = 0; t < cnt; ++t) {
          score[t] = std::exp(score[t] - m);  // now the value weights
          l += score[t];
        }
        if (kv8) {
          for (int32_t t = 0; t < cnt; ++t) {
            LoadKvRow8(kv, layer, 1, blk, off0 + t, kvh, row8);
            MulAccF32(acc, score[t], row8, STRATA_DTYPE_F32, D);
          }
        } else {
          MulAccRowsF32(acc, score, vbase + e0 * es, kv_dtype, row_stride, cnt, D);
        }
        p0 += cnt;
      }
      float* o = ov.Row<float>(i) + int64_t{h} * D;
      const float inv = l > 0.0f ? 1.0f / l : 0.0f;
      for (int32_t d = 0; d < D; ++d) o[d] = acc[d] * inv;
    }
  });
  if (no_scratch.load()) return absl::ResourceExhaustedError(absl::StrCat(op, ": no scratch for the attention rows"));
  return absl::OkStatus();
}

}  // namespace strata::cpu
