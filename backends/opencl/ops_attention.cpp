// rope_kv_write and paged attention over a ragged batch. Arguments the host can see are
// checked before anything runs (with the batch's host copies where given); indices read
// from device memory are checked by the kernels (error word, see SyncAndCheck).
#include <algorithm>
#include <vector>

#include "backends/opencl/launch.h"
#include "backends/opencl/ops.h"
#include "backends/opencl/tensor_view.h"

namespace strata::opencl {
namespace {

Status CheckAttnParams(const strata_attention_params* attn, const strata_kv_cache_s* kv, int32_t layer,
                       const char* op) {
  if (attn == nullptr) return InvalidArgument(op, ": null attention params");
  if (attn->struct_size < sizeof(strata_attention_params)) {
    return InvalidArgument(op, ": attention params struct_size too small");
  }
  if (attn->num_heads <= 0 || attn->num_kv_heads <= 0 || attn->num_heads % attn->num_kv_heads != 0) {
    return InvalidArgument(op, ": num_heads ", attn->num_heads, " must be a positive multiple of num_kv_heads ",
                           attn->num_kv_heads);
  }
  if (attn->num_kv_heads != kv->desc.num_kv_heads || attn->head_dim != kv->desc.head_dim) {
    return InvalidArgument(op, ": num_kv_heads/head_dim ", attn->num_kv_heads, "/", attn->head_dim,
                           " differ from the KV cache's ", kv->desc.num_kv_heads, "/", kv->desc.head_dim);
  }
  if (layer < 0 || layer >= kv->desc.num_layers) {
    return InvalidArgument(op, ": layer ", layer, " outside the cache's ", kv->desc.num_layers, " layers");
  }
  if (attn->sliding_window < 0) return InvalidArgument(op, ": sliding_window < 0");
  return Ok();
}

Status CheckBatchHeader(const strata_batch_desc* batch, const char* op) {
  if (batch == nullptr) return InvalidArgument(op, ": null batch");
  if (batch->struct_size < offsetof(strata_batch_desc, host_query_start_loc)) {
    return InvalidArgument(op, ": batch struct_size too small");
  }
  if (batch->num_tokens < 0 || batch->num_seqs < 0) return InvalidArgument(op, ": negative num_tokens or num_seqs");
  return Ok();
}

bool HasHostCopies(const strata_batch_desc* b) {
  return b->struct_size >= offsetof(strata_batch_desc, host_seq_lens) + sizeof(void*) &&
         b->host_query_start_loc != nullptr && b->host_seq_lens != nullptr;
}

}  // namespace

Status RopeKvWrite(strata_device_s* dev, const strata_rope_params* rope, const strata_attention_params* attn,
                   const strata_batch_desc* batch, const strata_tensor* q, const strata_tensor* k,
                   const strata_tensor* v, strata_kv_cache_s* kv, int32_t layer) {
  const char* op = "rope_kv_write";
  STRATA_RETURN_IF_ERROR(CheckAttnParams(attn, kv, layer, op));
  STRATA_RETURN_IF_ERROR(CheckBatchHeader(batch, op));
  const int64_t n = batch->num_tokens;
  const int32_t H = attn->num_heads, KVH = attn->num_kv_heads, D = attn->head_dim;
  View qv, kview, vv;
  STRATA_RETURN_IF_ERROR(CheckTensor(dev, q, "rope_kv_write: q", {STRATA_DTYPE_F32}, &qv));
  STRATA_RETURN_IF_ERROR(CheckTensor(dev, k, "rope_kv_write: k", {STRATA_DTYPE_F32}, &kview));
  STRATA_RETURN_IF_ERROR(CheckTensor(dev, v, "rope_kv_write: v", {STRATA_DTYPE_F32}, &vv));
  if (qv.rows != n || qv.cols != int64_t{H} * D || kview.rows != n || kview.cols != int64_t{KVH} * D ||
      vv.rows != n || vv.cols != int64_t{KVH} * D) {
    return InvalidArgument(op, ": q/k/v are [", qv.rows, ", ", qv.cols, "]/[", kview.rows, ", ", kview.cols, "]/[",
                           vv.rows, ", ", vv.cols, "], expected [", n, ", ", int64_t{H} * D, "] and [", n, ", ",
                           int64_t{KVH} * D, "]");
  }
  int32_t style = STRATA_ROPE_NONE, half = 0;
  float factor = 1.0f;
  View fv, pv, sv;
  if (rope != nullptr && rope->style != STRATA_ROPE_NONE) {
    if (rope->struct_size < sizeof(strata_rope_params)) {
      return InvalidArgument("rope_kv_write: rope params struct_size too small");
    }
    if (rope->style != STRATA_ROPE_INTERLEAVED && rope->style != STRATA_ROPE_NEOX) {
      return InvalidArgument(op, ": unknown rope style ", rope->style);
    }
    if (rope->rotary_dim <= 0 || rope->rotary_dim % 2 != 0 || rope->rotary_dim > D) {
      return InvalidArgument(op, ": rotary_dim ", rope->rotary_dim, " must be even and in 2..head_dim (", D, ")");
    }
    style = rope->style;
    half = rope->rotary_dim / 2;
    factor = rope->attention_factor;
    STRATA_RETURN_IF_ERROR(CheckTensor(dev, rope->inv_freq, "rope_kv_write: inv_freq", {STRATA_DTYPE_F32}, &fv));
    if (!fv.packed() || fv.numel() < half) {
      return InvalidArgument(op, ": inv_freq has ", fv.numel(), " elements, need rotary_dim/2 = ", half);
    }
    STRATA_RETURN_IF_ERROR(CheckI32Array(dev, batch->positions, n, "rope_kv_write: positions", &pv));
  }
  STRATA_RETURN_IF_ERROR(CheckI32Array(dev, batch->slot_mapping, n, "rope_kv_write: slot_mapping", &sv));
  if (n == 0) return Ok();
  const int32_t row_elems = KVH * D;
  const int64_t num_slots = int64_t{kv->desc.num_blocks} * kv->desc.block_size;
  const bool i8_cache = kv->desc.dtype == STRATA_DTYPE_I8;
  // CPU devices: rope and the cache write in one launch, one work-item per token
  // (kernels/opencl/rope_kv_write.cl); an I8 cache still takes kv_write_i8 below.
  const bool cpu_fused = dev->is_cpu && half <= 256;
  if (cpu_fused) {
    size_t global = 0, local = 0;
    CpuLaunchShape(dev, static_cast<size_t>(n), &global, &local);
    STRATA_RETURN_IF_ERROR(Launch(dev, "rope_kv_write_cpu")
                               .Mem(qv.mem).U64(qv.off).I64(qv.stride)
                               .Mem(kview.mem).U64(kview.off).I64(kview.stride)
                               .Mem(vv.mem).U64(vv.off).I64(vv.stride)
                               .I32(H).I32(KVH).I32(D).I32(half).I32(style).F32(factor)
                               .Mem(style != STRATA_ROPE_NONE ? fv.mem : qv.mem).U64(fv.off)
                               .Mem(style != STRATA_ROPE_NONE ? pv.mem : qv.mem).U64(pv.off)
                               .I32(i8_cache ? 0 : 1).Mem(kv->layers[layer]).I32(kv->desc.dtype)
                               .U64(kv->desc.num_blocks * kv->block_elems).U64(kv->block_elems)
                               .I32(kv->desc.block_size).I64(num_slots)
                               .Mem(sv.mem).U64(sv.off).Mem(dev->err_word).I64(n)
                               .Run(1, &global, &local));
    if (!i8_cache) return Ok();
  }
  // GPUs, head_dim up to the work-group size: rope and the F32 / F16 / BF16 cache write in one
  // launch (rope_kv_write_gpu, kernels/opencl/rope_kv_write.cl); an I8 cache still takes
  // kv_write_i8 below. Option rope_fused=off: the two launches below.
  const bool gpu_fused = !dev->is_cpu && dev->rope_fused && static_cast<size_t>(D) <= dev->max_work_group &&
                         (style != STRATA_ROPE_NONE || !i8_cache);
  if (gpu_fused) {
    const int32_t h_begin = style != STRATA_ROPE_NONE ? 0 : H;
    const size_t global[3] = {static_cast<size_t>(D), static_cast<size_t>(H + KVH - h_begin), static_cast<size_t>(n)};
    const size_t local[3] = {static_cast<size_t>(D), 1, 1};
    STRATA_RETURN_IF_ERROR(Launch(dev, "rope_kv_write_gpu")
                               .Mem(qv.mem).U64(qv.off).I64(qv.stride)
                               .Mem(kview.mem).U64(kview.off).I64(kview.stride)
                               .Mem(vv.mem).U64(vv.off).I64(vv.stride)
                               .I32(H).I32(KVH).I32(D).I32(half).I32(style).F32(factor)
                               .Mem(style != STRATA_ROPE_NONE ? fv.mem : qv.mem).U64(fv.off)
                               .Mem(style != STRATA_ROPE_NONE ? pv.mem : qv.mem).U64(pv.off)
                               .I32(h_begin)
                               .I32(i8_cache ? 0 : 1).Mem(kv->layers[layer]).I32(kv->desc.dtype)
                               .U64(kv->desc.num_blocks * kv->block_elems).U64(kv->block_elems)
                               .I32(kv->desc.block_size).I64(num_slots)
                               .Mem(sv.mem).U64(sv.off).Mem(dev->err_word)
                               .Run(3, global, local));
    if (!i8_cache) return Ok();
  }
  if (style != STRATA_ROPE_NONE && !cpu_fused && !gpu_fused) {
    const size_t global[3] = {static_cast<size_t>(half), static_cast<size_t>(H + KVH), static_cast<size_t>(n)};
    STRATA_RETURN_IF_ERROR(Launch(dev, "rope")
                               .Mem(qv.mem).U64(qv.off).I64(qv.stride)
                               .Mem(kview.mem).U64(kview.off).I64(kview.stride)
                               .I32(H).I32(D).I32(half).I32(style).F32(factor)
                               .Mem(fv.mem).U64(fv.off)
                               .Mem(pv.mem).U64(pv.off)
                               .Run(3, global, nullptr));
  }
  if (i8_cache) {
    // One work-group per (kv head, K/V): the tokens of a block share its scale, so they are
    // written in order (see kv_write_i8 in kernels/opencl/kv_write_i8.cl).
    size_t ls = 1;
    while (ls * 2 <= std::min<size_t>(dev->is_cpu ? 16 : 128, dev->max_work_group)) ls *= 2;
    const size_t global = static_cast<size_t>(KVH) * 2 * ls;
    return Launch(dev, "kv_write_i8")
        .Mem(kview.mem).U64(kview.off).I64(kview.stride)
        .Mem(vv.mem).U64(vv.off).I64(vv.stride)
        .Mem(kv->layers[layer]).U64(kv->desc.num_blocks * kv->block_elems).U64(kv->block_elems)
        .Mem(kv->scales[layer]).U64(static_cast<uint64_t>(kv->desc.num_blocks) * KVH)
        .I32(kv->desc.block_size).I64(num_slots).I32(KVH).I32(D)
        .Mem(sv.mem).U64(sv.off).I64(n)
        .Mem(dev->err_word)
        .Local(ls * sizeof(float))
        .Run(1, &global, &ls);
  }
  const size_t global[2] = {static_cast<size_t>(row_elems), static_cast<size_t>(n)};
  return Launch(dev, "kv_write")
      .Mem(kview.mem).U64(kview.off).I64(kview.stride)
      .Mem(vv.mem).U64(vv.off).I64(vv.stride)
      .Mem(kv->layers[layer]).I32(kv->desc.dtype).U64(kv->desc.num_blocks * kv->block_elems).U64(kv->block_elems)
      .I32(kv->desc.block_size).I64(num_slots).I32(row_elems)
      .Mem(sv.mem).U64(sv.off)
      .Mem(dev->err_word)
      .Run(2, global, nullptr);
}

Status Attention(strata_device_s* dev, const strata_attention_params* attn, const strata_batch_desc* batch,
                 const strata_tensor* q, strata_kv_cache_s* kv, int32_t layer, const strata_tensor* out) {
  const char* op = "attention";
  STRATA_RETURN_IF_ERROR(CheckAttnParams(attn, kv, layer, op));
  STRATA_RETURN_IF_ERROR(CheckBatchHeader(batch, op));
  const int64_t n = batch->num_tokens;
  const int32_t S = batch->num_seqs;
  const int32_t H = attn->num_heads, KVH = attn->num_kv_heads, D = attn->head_dim;
  View qv, ov, qslv, lensv, btv;
  STRATA_RETURN_IF_ERROR(CheckTensor(dev, q, "attention: q", {STRATA_DTYPE_F32}, &qv));
  STRATA_RETURN_IF_ERROR(CheckTensor(dev, out, "attention: out", {STRATA_DTYPE_F32}, &ov));
  if (qv.rows != n || qv.cols != int64_t{H} * D || ov.rows != n || ov.cols != int64_t{H} * D) {
    return InvalidArgument(op, ": q/out are [", qv.rows, ", ", qv.cols, "]/[", ov.rows, ", ", ov.cols,
                           "], expected [", n, ", ", int64_t{H} * D, "]");
  }
  if (qv.mem == ov.mem && ov.byte_begin < qv.byte_end && qv.byte_begin < ov.byte_end) {
    return InvalidArgument(op, ": out overlaps q");
  }
  STRATA_RETURN_IF_ERROR(CheckI32Array(dev, batch->query_start_loc, int64_t{S} + 1, "attention: query_start_loc", &qslv));
  STRATA_RETURN_IF_ERROR(CheckI32Array(dev, batch->seq_lens, S, "attention: seq_lens", &lensv));
  STRATA_RETURN_IF_ERROR(CheckTensor(dev, batch->block_tables, "attention: block_tables", {STRATA_DTYPE_I32}, &btv));
  const int32_t bs = kv->desc.block_size;
  const int32_t mb = batch->max_blocks_per_seq;
  if (S > 0 && (mb <= 0 || btv.rows < S || btv.cols != mb || !btv.packed())) {
    return InvalidArgument(op, ": block_tables is [", btv.rows, ", ", btv.cols, "], expected [", S,
                           ", max_blocks_per_seq = ", mb, "]");
  }
  if (n > 0 && S == 0) return InvalidArgument(op, ": ", n, " tokens but no sequence");
  if (HasHostCopies(batch)) {
    const int32_t* qsl = batch->host_query_start_loc;
    const int32_t* lens = batch->host_seq_lens;
    if (qsl[0] != 0 || qsl[S] != n) {
      return InvalidArgument(op, ": query_start_loc must run from 0 to num_tokens (", n, "), got ", qsl[0], " .. ",
                             qsl[S]);
    }
    for (int32_t s = 0; s < S; ++s) {
      const int32_t q_len = qsl[s + 1] - qsl[s];
      if (q_len < 0 || qsl[s + 1] > n || q_len > lens[s] || int64_t{lens[s]} > int64_t{mb} * bs) {
        return InvalidArgument(op, ": sequence ", s, " has ", q_len, " query tokens and seq_len ", lens[s],
                               " (need 0 <= q_len <= seq_len <= max_blocks_per_seq * block_size = ",
                               int64_t{mb} * bs, ")");
      }
    }
  }
  if (n == 0) return Ok();
  const bool i8 = kv->desc.dtype == STRATA_DTYPE_I8;
  // GPUs, batches with prefill chunks (known from the host copies), head_dim a multiple of
  // 4 up to 128: blocks of 32 query tokens share each staged key / value tile
  // (kernels/opencl/attention_prefill.cl).
  if (!dev->is_cpu && HasHostCopies(batch) && D % 4 == 0 && D <= 128) {
    const int32_t* qsl = batch->host_query_start_loc;
    int32_t longest = 0;
    for (int32_t s = 0; s < S; ++s) longest = std::max(longest, qsl[s + 1] - qsl[s]);
    if (longest > 1) {
      std::vector<cl_int> blocks;
      for (int32_t s = 0; s < S; ++s) {
        for (int32_t i = qsl[s]; i < qsl[s + 1]; i += 32) {
          blocks.push_back(s);
          blocks.push_back(i);
        }
      }
      const uint64_t bytes = blocks.size() * sizeof(cl_int);
      // Every layer of a step has the same list: uploaded once, when it changes.
      if (blocks != dev->att_blocks_host) {
        dev->att_blocks_host.clear();
        if (dev->att_blocks == nullptr || dev->att_blocks_bytes < bytes) {
          if (dev->att_blocks != nullptr) clReleaseMemObject(dev->att_blocks);
          dev->att_blocks = nullptr;
          dev->att_blocks_bytes = 0;
          STRATA_RETURN_IF_ERROR(AllocMem(dev, bytes, "attention: query block list", &dev->att_blocks));
          dev->att_blocks_bytes = bytes;
        }
        // Blocking: `blocks` is gone when this returns.
        const cl_int e = clEnqueueWriteBuffer(dev->queue, dev->att_blocks, CL_TRUE, 0, bytes, blocks.data(), 0,
                                              nullptr, nullptr);
        if (e != CL_SUCCESS) return ClFailure(dev, e, "attention: uploading the query block list");
        dev->att_blocks_host = std::move(blocks);
      }
      const size_t global[2] = {dev->att_blocks_host.size() / 2 * 128, static_cast<size_t>(H)};
      const size_t local[2] = {128, 1};
      return Launch(dev, "paged_attention_prefill")
          .Mem(qv.mem).U64(qv.off).I64(qv.stride)
          .Mem(kv->layers[layer]).I32(kv->desc.dtype).U64(kv->desc.num_blocks * kv->block_elems).U64(kv->block_elems)
          .Mem(i8 ? kv->scales[layer] : kv->layers[layer]).U64(static_cast<uint64_t>(kv->desc.num_blocks) * KVH)
          .I32(bs).I32(KVH).I32(D).I32(H)
          .Mem(dev->att_blocks)
          .Mem(qslv.mem).U64(qslv.off)
          .Mem(lensv.mem).U64(lensv.off)
          .Mem(btv.mem).U64(btv.off).I32(mb).I32(kv->desc.num_blocks)
          .F32(attn->scale).I32(attn->sliding_window).F32(attn->logit_softcap)
          .Mem(ov.mem).U64(ov.off).I64(ov.stride)
          .Mem(dev->err_word)
          .Run(2, global, local);
    }
  }
  // CPU devices: one work-item per (head, token), no barriers (kernels/opencl/attention.cl).
  if (dev->is_cpu && D <= 512) {
    size_t global = 0, local = 0;
    CpuLaunchShape(dev, static_cast<size_t>(n) * H, &global, &local);
    const char* kernel = kv->desc.dtype == STRATA_DTYPE_F16    ? "paged_attention_cpu_f16"
                         : kv->desc.dtype == STRATA_DTYPE_BF16 ? "paged_attention_cpu_bf16"
                         : i8                                  ? "paged_attention_cpu_i8"
                                                               : "paged_attention_cpu_f32";
    return Launch(dev, kernel)
        .Mem(qv.mem).U64(qv.off).I64(qv.stride)
        .Mem(kv->layers[layer]).U64(kv->desc.num_blocks * kv->block_elems).U64(kv->block_elems)
        .Mem(i8 ? kv->scales[layer] : kv->layers[layer]).U64(static_cast<uint64_t>(kv->desc.num_blocks) * KVH)
        .I32(bs).I32(KVH).I32(D).I32(H)
        .Mem(qslv.mem).U64(qslv.off)
        .Mem(lensv.mem).U64(lensv.off)
        .Mem(btv.mem).U64(btv.off).I32(mb).I32(S).I32(kv->desc.num_blocks)
        .F32(attn->scale).I32(attn->sliding_window).F32(attn->logit_softcap)
        .Mem(ov.mem).U64(ov.off).I64(ov.stride)
        .Mem(dev->err_word).I64(n)
        .Run(1, &global, &local);
  }
  // What the two GPU paged-attention kernels take first, in their order: q, the layer's cache
  // (dtype, extents, int8 scales), the shape, the batch's arrays, the attention's parameters,
  // the output and the error word.
  const auto paged_args = [&](Launch&& l) -> Launch& {
    return l.Mem(qv.mem).U64(qv.off).I64(qv.stride)
        .Mem(kv->layers[layer]).I32(kv->desc.dtype).U64(kv->desc.num_blocks * kv->block_elems).U64(kv->block_elems)
        .Mem(i8 ? kv->scales[layer] : kv->layers[layer]).U64(static_cast<uint64_t>(kv->desc.num_blocks) * KVH)
        .I32(bs).I32(KVH).I32(D).I32(H)
        .Mem(qslv.mem).U64(qslv.off)
        .Mem(lensv.mem).U64(lensv.off)
        .Mem(btv.mem).U64(btv.off).I32(mb).I32(S).I32(kv->desc.num_blocks)
        .F32(attn->scale).I32(attn->sliding_window).F32(attn->logit_softcap)
        .Mem(ov.mem).U64(ov.off).I64(ov.stride)
        .Mem(dev->err_word);
  };
  // GPUs, head_dim a multiple of 4 up to 512: the decode-shaped kernel
  // (paged_attention_decode in kernels/opencl/attention.cl), one work-group of 128 per
  // (token, group of hg query heads of one KV head). hg: the whole GQA group (up to 8) when
  // that still gives two work-groups per compute unit, else halved until it does (one sequence:
  // one work-group per query head), so that a short batch still fills the device.
  const int32_t gqa = KVH > 0 ? H / KVH : 0;
  if (!dev->is_cpu && dev->att_decode && D % 4 == 0 && D / 4 <= 128 && gqa > 0 && H % KVH == 0) {
    constexpr int32_t kWg = 128, kMaxHg = 8;  // ATT_DEC_WG, ATT_DEC_MAX_HG
    int32_t hg = gqa;
    while (hg > kMaxHg || gqa % hg != 0) --hg;
    while (hg > 1 && hg % 2 == 0 && n * (H / hg) < 2 * static_cast<int64_t>(dev->compute_units)) hg /= 2;
    const int32_t subsets = kWg / (D / 4);
    // Local memory: the static tiles (3 x 8 x 128 floats, 128 longs and ints) plus q and the
    // subsets' partial sums; fewer heads per group where the device has less.
    auto local_bytes = [&](int32_t g) {
      return uint64_t{3} * kMaxHg * kWg * 4 + kWg * 12 + uint64_t{4} * g * D + uint64_t{4} * subsets * g * D;
    };
    while (hg > 1 && local_bytes(hg) > dev->local_mem) {
      --hg;
      while (hg > 1 && gqa % hg != 0) --hg;
    }
    if (local_bytes(hg) <= dev->local_mem) {
      // Few work-groups and long contexts (a short batch decoding far into its context):
      // the keys split over `nsplit` work-groups of split_keys (a multiple of the 128-key
      // tile) each, their partial sums put together by paged_attention_combine. The batch's
      // max_seq_len sizes the splits; the last split runs to each token's own end.
      const int64_t groups = n * (H / hg), want = 4 * static_cast<int64_t>(dev->compute_units);
      int32_t nsplit = 1, split_keys = 0;
      if (dev->att_split && batch->max_seq_len > 2 * kWg && groups < want) {
        const int64_t tiles = (batch->max_seq_len + kWg - 1) / kWg;
        const int64_t s = std::min<int64_t>((want + groups - 1) / groups, tiles);
        split_keys = static_cast<int32_t>((tiles + s - 1) / s) * kWg;
        nsplit = static_cast<int32_t>((batch->max_seq_len + split_keys - 1) / split_keys);
        if (nsplit < 2) nsplit = 1, split_keys = 0;
      }
      if (nsplit > 1) {
        const uint64_t bytes = static_cast<uint64_t>(n) * H * nsplit * (D + 2) * sizeof(float);
        if (dev->att_split_buf == nullptr || dev->att_split_bytes < bytes) {
          if (dev->att_split_buf != nullptr) clReleaseMemObject(dev->att_split_buf);
          dev->att_split_buf = nullptr;
          dev->att_split_bytes = 0;
          STRATA_RETURN_IF_ERROR(AllocMem(dev, bytes, "attention: split-K partial sums", &dev->att_split_buf));
          dev->att_split_bytes = bytes;
        }
      }
      const size_t global[3] = {static_cast<size_t>(H / hg) * kWg, static_cast<size_t>(n),
                                static_cast<size_t>(nsplit)};
      const size_t local[3] = {static_cast<size_t>(kWg), 1, 1};
      STRATA_RETURN_IF_ERROR(paged_args(Launch(dev, "paged_attention_decode")).I32(hg)
          .I32(split_keys).Mem(nsplit > 1 ? dev->att_split_buf : ov.mem)
          .Local(static_cast<size_t>(hg) * D * sizeof(float))
          .Local(static_cast<size_t>(subsets) * hg * D * sizeof(float))
          .Run(3, global, local));
      if (nsplit == 1) return Ok();
      const size_t cglobal[3] = {static_cast<size_t>(D), static_cast<size_t>(H), static_cast<size_t>(n)};
      return Launch(dev, "paged_attention_combine")
          .Mem(dev->att_split_buf).I32(nsplit).I32(D).I32(H)
          .Mem(ov.mem).U64(ov.off).I64(ov.stride)
          .Run(3, cglobal, nullptr);
    }
  }
  // A power-of-two group with head_dim <= 8 * group size (ATT_MAX_DIMS_PER_ITEM).
  size_t ls = dev->is_cpu ? 16 : 64;
  while (ls * 8 < static_cast<size_t>(D)) ls *= 2;
  if (ls > dev->max_work_group) {
    return Unsupported(op, ": head_dim ", D, " needs work-groups of ", ls, " on OpenCL device ", dev->name,
                       " (at most ", dev->max_work_group, ")");
  }
  const size_t global[2] = {static_cast<size_t>(H) * ls, static_cast<size_t>(n)};
  const size_t local[2] = {ls, 1};
  return paged_args(Launch(dev, "paged_attention"))
      .Local(D * sizeof(float)).Local(ls * sizeof(float)).Local(ls * sizeof(float))
      .Run(2, global, local);
}

}  // namespace strata::opencl
