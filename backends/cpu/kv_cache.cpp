// The paged KV cache: one allocation, per layer K then V, each [num_blocks][block_size]
// [num_kv_heads][head_dim] (see cpu_backend.h), plus block copy and host swap.
#include <cmath>
#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"
#include "backends/cpu/cpu_ops.h"
#include "backends/cpu/page_memory.h"
#include "backends/cpu/tensor_view.h"

namespace strata::cpu {
namespace {

absl::Status CheckPairs(const strata_kv_cache_s* kv, const strata_block_pair* pairs,
                        int32_t num_pairs, const char* op, bool src_in_cache, bool dst_in_cache) {
  if (num_pairs < 0) return absl::InvalidArgumentError(absl::StrCat(op, ": num_pairs < 0"));
  if (num_pairs > 0 && pairs == nullptr) return absl::InvalidArgumentError(absl::StrCat(op, ": null pairs"));
  const int32_t nb = kv->desc.num_blocks;
  for (int32_t i = 0; i < num_pairs; ++i) {
    const strata_block_pair& p = pairs[i];
    if (p.src < 0 || (src_in_cache && p.src >= nb) || p.dst < 0 || (dst_in_cache && p.dst >= nb)) {
      return absl::InvalidArgumentError(absl::StrCat(op, ": pair ", i, " (", p.src, " -> ", p.dst,
                                                     ") outside the cache's ", nb, " blocks"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

uint64_t KvBlockBytes(const strata_kv_cache_s* kv) {
  return static_cast<uint64_t>(kv->desc.num_layers) * 2 * kv->part_bytes;
}

absl::Status CreateKvCache(const strata_kv_cache_desc* desc, strata_kv_cache_s** out) {
  if (desc == nullptr || out == nullptr) return absl::InvalidArgumentError("kv_cache_create: null desc or out");
  if (desc->struct_size < sizeof(strata_kv_cache_desc)) {
    return absl::InvalidArgumentError(absl::StrCat("kv_cache_create: struct_size ", desc->struct_size, " too small"));
  }
  if (desc->dtype != STRATA_DTYPE_F32 && desc->dtype != STRATA_DTYPE_F16 && desc->dtype != STRATA_DTYPE_BF16 &&
      desc->dtype != STRATA_DTYPE_FP8_E4M3 && desc->dtype != STRATA_DTYPE_I8) {
    return absl::UnimplementedError(absl::StrCat("kv_cache_create: KV dtype ", DtypeName(desc->dtype),
                                                 " not supported (F32, F16, BF16, FP8_E4M3 or I8)"));
  }
  // The 8-bit caches of ABI 1.9: FP8 scaled per tensor, I8 per (block, kv head, K/V).
  if (desc->dtype == STRATA_DTYPE_FP8_E4M3) {
    if (desc->scale_mode != STRATA_KV_SCALE_PER_TENSOR) {
      return absl::UnimplementedError("kv_cache_create: an FP8_E4M3 cache needs scale_mode STRATA_KV_SCALE_PER_TENSOR");
    }
    if (!(std::isfinite(desc->k_scale) && desc->k_scale >= 0.0f && std::isfinite(desc->v_scale) &&
          desc->v_scale >= 0.0f)) {
      return absl::InvalidArgumentError(absl::StrCat("kv_cache_create: k_scale ", desc->k_scale, " / v_scale ",
                                                     desc->v_scale, " must be finite and >= 0 (0 = 1.0)"));
    }
  }
  if (desc->dtype == STRATA_DTYPE_I8 && desc->scale_mode != STRATA_KV_SCALE_PER_BLOCK_HEAD) {
    return absl::UnimplementedError("kv_cache_create: an I8 cache needs scale_mode STRATA_KV_SCALE_PER_BLOCK_HEAD");
  }
  if (desc->num_layers <= 0 || desc->num_blocks <= 0 || desc->block_size <= 0 ||
      desc->num_kv_heads <= 0 || desc->head_dim <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "kv_cache_create: all sizes must be positive (layers ", desc->num_layers, ", blocks ",
        desc->num_blocks, ", block_size ", desc->block_size, ", kv_heads ", desc->num_kv_heads,
        ", head_dim ", desc->head_dim, ")"));
  }
  auto kv = std::make_unique<strata_kv_cache_s>();
  kv->desc = *desc;
  kv->desc.struct_size = sizeof(strata_kv_cache_desc);
  kv->elem_size = DtypeSize(desc->dtype);
  if (desc->dtype == STRATA_DTYPE_FP8_E4M3) {
    if (kv->desc.k_scale == 0.0f) kv->desc.k_scale = 1.0f;
    if (kv->desc.v_scale == 0.0f) kv->desc.v_scale = 1.0f;
  }
  kv->block_elems = static_cast<uint64_t>(desc->block_size) * desc->num_kv_heads * desc->head_dim;
  kv->part_bytes = kv->block_elems * kv->elem_size;
  if (desc->dtype == STRATA_DTYPE_I8) {
    kv->scales_offset = (kv->part_bytes + 3) / 4 * 4;
    kv->part_bytes = kv->scales_offset + 4 * static_cast<uint64_t>(desc->num_kv_heads);
  }
  unsigned __int128 total = static_cast<unsigned __int128>(kv->part_bytes) * desc->num_blocks * 2 *
                            desc->num_layers;
  if (total > (static_cast<unsigned __int128>(1) << 46)) {
    return absl::ResourceExhaustedError("kv_cache_create: cache larger than 64 TiB");
  }
  const uint64_t bytes = static_cast<uint64_t>(total);
  // Zero pages (page_memory.h), so that attention over not-yet-written slots reads finite
  // values without the whole pool becoming resident before it is used.
  kv->data = AllocPages(bytes, PageKind::kLazyZero);
  if (kv->data == nullptr) {
    return absl::ResourceExhaustedError(absl::StrCat("kv_cache_create: cannot allocate ", bytes, " bytes"));
  }
  kv->data_bytes = bytes;
  *out = kv.release();
  return absl::OkStatus();
}

absl::Status CopyBlocks(strata_device_s* dev, strata_kv_cache_s* kv,
                        const strata_block_pair* pairs, int32_t num_pairs) {
  if (absl::Status s = CheckPairs(kv, pairs, num_pairs, "copy_blocks", true, true); !s.ok()) return s;
  const size_t bytes = kv->part_bytes;  // values and (I8) scales
  for (int32_t i = 0; i < num_pairs; ++i) {
    if (pairs[i].src == pairs[i].dst) continue;
    for (int32_t l = 0; l < kv->desc.num_layers; ++l) {
      for (int which = 0; which < 2; ++which) {
        std::memcpy(kv->BlockPtr(l, which, pairs[i].dst), kv->BlockPtr(l, which, pairs[i].src), bytes);
      }
    }
  }
  return absl::OkStatus();
}

absl::Status SwapBlocks(strata_device_s* dev, strata_kv_cache_s* kv, void* host, uint64_t host_bytes,
                        const strata_block_pair* pairs, int32_t num_pairs, int32_t to_host) {
  if (host == nullptr && num_pairs > 0) return absl::InvalidArgumentError("swap_blocks: null host pointer");
  if (absl::Status s = CheckPairs(kv, pairs, num_pairs, "swap_blocks", to_host != 0, to_host == 0);
      !s.ok()) {
    return s;
  }
  const size_t part = kv->part_bytes;  // values and (I8) scales
  const uint64_t block_bytes = KvBlockBytes(kv);
  // All host slots are checked before anything moves, so a bad pair changes nothing.
  for (int32_t i = 0; i < num_pairs; ++i) {
    const int64_t host_slot = to_host ? pairs[i].dst : pairs[i].src;
    if (host_slot < 0 || (static_cast<uint64_t>(host_slot) + 1) * block_bytes > host_bytes) {
      return absl::InvalidArgumentError(absl::StrCat("swap_blocks: host slot ", host_slot, " lies outside the ",
                                                     host_bytes, "-byte host area"));
    }
  }
  for (int32_t i = 0; i < num_pairs; ++i) {
    const int32_t cache_block = to_host ? pairs[i].src : pairs[i].dst;
    const int64_t host_slot = to_host ? pairs[i].dst : pairs[i].src;
    char* h = static_cast<char*>(host) + static_cast<uint64_t>(host_slot) * block_bytes;
    for (int32_t l = 0; l < kv->desc.num_layers; ++l) {
      for (int which = 0; which < 2; ++which, h += part) {
        char* c = kv->BlockPtr(l, which, cache_block);
        if (to_host) {
          std::memcpy(h, c, part);
        } else {
          std::memcpy(c, h, part);
        }
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace strata::cpu
