// Device memory: allocation with clear out-of-memory errors, the error word check, weights
// and the paged KV cache with its block copies and host swaps.
#include <sys/mman.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "backends/opencl/launch.h"
#include "backends/opencl/ops.h"
#include "backends/opencl/profile.h"

namespace strata::opencl {

namespace {

constexpr uint64_t kHugePage = uint64_t{2} << 20;

struct HostPages {
  void* p;
  size_t bytes;
};

void CL_CALLBACK FreeHostPages(cl_mem, void* user) {
  auto* h = static_cast<HostPages*>(user);
  ::munmap(h->p, h->bytes);
  delete h;
}

// A buffer of a CPU device over memory of our own: 2 MiB aligned, advised as transparent huge
// pages (the device reads it in place, CL_MEM_USE_HOST_PTR). Null when that fails; the caller
// then allocates as usual.
cl_mem AllocHugePageBuffer(strata_device_s* dev, uint64_t bytes) {
  const size_t size = (bytes + kHugePage - 1) / kHugePage * kHugePage;
  void* raw = ::mmap(nullptr, size + kHugePage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                     -1, 0);
  if (raw == MAP_FAILED) return nullptr;
  const uintptr_t begin = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t aligned = (begin + kHugePage - 1) / kHugePage * kHugePage;
  if (aligned > begin) ::munmap(raw, aligned - begin);
  const uintptr_t end = begin + size + kHugePage;
  if (end > aligned + size) ::munmap(reinterpret_cast<void*>(aligned + size), end - (aligned + size));
  void* p = reinterpret_cast<void*>(aligned);
  ::madvise(p, size, MADV_HUGEPAGE);  // advice only
  cl_int e = CL_SUCCESS;
  cl_mem m = clCreateBuffer(dev->context, CL_MEM_READ_WRITE | CL_MEM_USE_HOST_PTR, bytes, p, &e);
  if (e != CL_SUCCESS) {
    ::munmap(p, size);
    return nullptr;
  }
  auto* h = new HostPages{p, size};
  if (clSetMemObjectDestructorCallback(m, FreeHostPages, h) != CL_SUCCESS) {
    clReleaseMemObject(m);
    ::munmap(p, size);
    delete h;
    return nullptr;
  }
  return m;
}

}  // namespace

Status AllocMem(strata_device_s* dev, uint64_t bytes, const char* what, cl_mem* out) {
  if (bytes > dev->max_alloc) {
    return Error(STRATA_ERROR_OUT_OF_MEMORY, what, ": ", bytes, " bytes is more than OpenCL device ", dev->name,
                 " allocates at once (CL_DEVICE_MAX_MEM_ALLOC_SIZE ", dev->max_alloc, ")");
  }
  // CPU devices, buffers of 2 MiB and more (weights, KV cache): huge pages, as the CPU
  // backend's weights (backends/cpu/page_memory.cpp): fewer TLB misses while streaming.
  if (dev->host_huge_pages && bytes >= kHugePage) {
    if (cl_mem m = AllocHugePageBuffer(dev, bytes); m != nullptr) {
      *out = m;
      return Ok();
    }
  }
  cl_int e = CL_SUCCESS;
  cl_mem m = clCreateBuffer(dev->context, CL_MEM_READ_WRITE, std::max<uint64_t>(bytes, 4), nullptr, &e);
  if (e != CL_SUCCESS) {
    return Error(STRATA_ERROR_OUT_OF_MEMORY, what, ": cannot allocate ", bytes, " bytes on OpenCL device ", dev->name,
                 " (", ClErrorName(e), ")");
  }
  *out = m;
  return Ok();
}

Status SyncAndCheck(strata_device_s* dev, const char* what) {
  cl_int word = 0;
  cl_int e = clEnqueueReadBuffer(dev->queue, dev->err_word, CL_TRUE, 0, sizeof(word), &word, 0, nullptr, nullptr);
  if (e != CL_SUCCESS) return ClFailure(dev, e, what);
  ProfileHarvest(dev);
  if (word == 0) return Ok();
  const cl_int zero = 0;
  e = clEnqueueWriteBuffer(dev->queue, dev->err_word, CL_TRUE, 0, sizeof(zero), &zero, 0, nullptr, nullptr);
  if (e != CL_SUCCESS) return ClFailure(dev, e, what);
  std::string which;
  auto add = [&](int bit, const char* name) {
    if (word & bit) which += StrCat(which.empty() ? "" : ", ", name);
  };
  add(kErrEmbeddingId, "embedding ids outside the table");
  add(kErrGatherIndex, "gather_rows indices outside x");
  add(kErrSlot, "slot_mapping beyond the KV cache");
  add(kErrBlockTable, "block_tables entries outside the KV cache");
  add(kErrBatch, "inconsistent batch arrays");
  return InvalidArgument(what, ": an earlier op met out-of-range device indices (", which,
                         "); those elements were skipped");
}

namespace {

const char* FormatName(int32_t f) {
  switch (f) {
    case STRATA_WEIGHT_DENSE: return "DENSE";
    case STRATA_WEIGHT_INT8_PER_CHANNEL: return "INT8_PER_CHANNEL";
    case STRATA_WEIGHT_W8A8: return "W8A8";
    case STRATA_WEIGHT_INT4_GROUP: return "INT4_GROUP";
    case STRATA_WEIGHT_INT8_OUTLIER_SPLIT: return "INT8_OUTLIER_SPLIT";
    case STRATA_WEIGHT_FP8: return "FP8";
    default: return "unknown format";
  }
}

Status Upload(strata_device_s* dev, cl_mem m, const void* src, uint64_t bytes, const char* what) {
  if (bytes == 0) return Ok();
  const cl_int e = clEnqueueWriteBuffer(dev->queue, m, CL_TRUE, 0, bytes, src, 0, nullptr, nullptr);
  return e == CL_SUCCESS ? Ok() : ClFailure(dev, e, what);
}

float HalfToFloat(uint16_t h) {
  const uint32_t sign = (h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ffu, bits;
  if (exp == 0) {
    if (man == 0) {
      bits = sign;
    } else {  // subnormal: normalize
      exp = 127 - 15 + 1;
      while ((man & 0x400u) == 0) {
        man <<= 1;
        --exp;
      }
      bits = sign | (exp << 23) | ((man & 0x3ffu) << 13);
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (man << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (man << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// INT8_PER_CHANNEL / W8A8: I8 data [rows, cols], scales F32/F16 [rows, groups] kept as F32.
Status CreateInt8Weight(strata_device_s* dev, const strata_weight_desc* desc, const char* name, strata_weight_s* w) {
  if (desc->dtype != STRATA_DTYPE_I8) {
    return InvalidArgument("weight_create: weight '", name, "': ", FormatName(desc->format), " data must be I8, got ",
                           strata_dtype_name(desc->dtype));
  }
  if (desc->scales == nullptr) return InvalidArgument("weight_create: weight '", name, "': null scales");
  if (desc->scales_dtype != STRATA_DTYPE_F32 && desc->scales_dtype != STRATA_DTYPE_F16) {
    return InvalidArgument("weight_create: weight '", name, "': scales must be F32 or F16, got ",
                           strata_dtype_name(desc->scales_dtype));
  }
  if (desc->group_size < 0) return InvalidArgument("weight_create: weight '", name, "': group_size < 0");
  w->group_size = desc->group_size;
  w->groups = desc->group_size > 0 ? static_cast<int32_t>((desc->cols + desc->group_size - 1) / desc->group_size) : 1;
  const uint64_t ns = static_cast<uint64_t>(desc->rows) * w->groups;
  std::vector<float> scales(ns);
  for (uint64_t i = 0; i < ns; ++i) {
    scales[i] = desc->scales_dtype == STRATA_DTYPE_F32 ? static_cast<const float*>(desc->scales)[i]
                                                       : HalfToFloat(static_cast<const uint16_t*>(desc->scales)[i]);
  }
  STRATA_RETURN_IF_ERROR(AllocMem(dev, ns * 4, "weight_create: scales", &w->scales));
  STRATA_RETURN_IF_ERROR(Upload(dev, w->scales, scales.data(), ns * 4, "weight_create: scales"));
  if (desc->format == STRATA_WEIGHT_W8A8) {
    if (STRATA_WEIGHT_DESC_HAS(desc, act_scale)) {
      w->act_scale_mode = desc->act_scale_mode;
      w->act_scale = desc->act_scale;
      if (w->act_scale_mode != STRATA_ACT_SCALE_DYNAMIC && w->act_scale_mode != STRATA_ACT_SCALE_STATIC) {
        return InvalidArgument("weight_create: weight '", name, "': act_scale_mode ", w->act_scale_mode,
                               " (0 = dynamic, 1 = static)");
      }
      if (w->act_scale_mode == STRATA_ACT_SCALE_STATIC && !(w->act_scale > 0.0f)) {
        return InvalidArgument("weight_create: weight '", name, "': a static act_scale must be > 0");
      }
    }
    if (desc->smooth != nullptr) {
      STRATA_RETURN_IF_ERROR(AllocMem(dev, desc->cols * 4, "weight_create: smooth", &w->smooth));
      STRATA_RETURN_IF_ERROR(Upload(dev, w->smooth, desc->smooth, desc->cols * 4, "weight_create: smooth"));
    }
  }
  if (STRATA_WEIGHT_DESC_HAS(desc, counter_slot)) {
    w->counter_slot = desc->counter_slot >= 0 && desc->counter_slot < STRATA_MAX_QUANT_COUNTER_SLOTS
                          ? desc->counter_slot
                          : -1;
  }
  return Ok();
}

uint16_t FloatToHalf(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const int32_t exp = static_cast<int32_t>((x >> 23) & 0xff) - 127 + 15;
  uint32_t man = x & 0x7fffffu;
  if (((x >> 23) & 0xff) == 0xff) return static_cast<uint16_t>(sign | 0x7c00u | (man ? 0x200u : 0));
  if (exp >= 31) return static_cast<uint16_t>(sign | 0x7c00u);
  if (exp <= 0) {
    if (exp < -10) return static_cast<uint16_t>(sign);
    man |= 0x800000u;
    const int shift = 14 - exp;
    uint32_t h = man >> shift;
    const uint32_t rem = man & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (h & 1u))) ++h;
    return static_cast<uint16_t>(sign | h);
  }
  uint32_t h = (static_cast<uint32_t>(exp) << 10) | (man >> 13);
  const uint32_t rem = man & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;
  return static_cast<uint16_t>(sign | h);
}

Status CreateDequantizedGroups(strata_device_s* dev, const strata_weight_desc* desc, const char* name,
                               std::unique_ptr<strata_weight_s> w, strata_weight_s** out) {
  const int64_t rows = desc->rows, cols = desc->cols, gs = desc->group_size, groups = w->groups;
  std::vector<uint16_t> values(static_cast<size_t>(rows * cols));
  const auto* q = static_cast<const int8_t*>(desc->data);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      const int64_t si = r * groups + c / gs;
      const float s = desc->scales_dtype == STRATA_DTYPE_F32 ? static_cast<const float*>(desc->scales)[si]
                                                             : HalfToFloat(static_cast<const uint16_t*>(desc->scales)[si]);
      values[r * cols + c] = FloatToHalf(static_cast<float>(q[r * cols + c]) * s);
    }
  }
  clReleaseMemObject(w->scales);
  w->scales = nullptr;
  w->format = STRATA_WEIGHT_DENSE;
  w->dtype = STRATA_DTYPE_F16;
  w->group_size = 0;
  w->groups = 1;
  const uint64_t bytes = values.size() * 2;
  const std::string what = StrCat("weight_create: weight '", name, "'");
  STRATA_RETURN_IF_ERROR(AllocMem(dev, bytes, what.c_str(), &w->data));
  STRATA_RETURN_IF_ERROR(Upload(dev, w->data, values.data(), bytes, what.c_str()));
  *out = w.release();
  return Ok();
}

}  // namespace

Status CreateWeight(strata_device_s* dev, const strata_weight_desc* desc, strata_weight_s** out) {
  if (desc == nullptr || out == nullptr) return InvalidArgument("weight_create: null desc or out");
  if (desc->struct_size < offsetof(strata_weight_desc, scales)) {
    return InvalidArgument("weight_create: struct_size ", desc->struct_size, " too small");
  }
  const char* name =
      (desc->struct_size >= offsetof(strata_weight_desc, name) + sizeof(const char*) && desc->name != nullptr)
          ? desc->name
          : "(unnamed)";
  const bool dense = desc->format == STRATA_WEIGHT_DENSE;
  const bool int8 = desc->format == STRATA_WEIGHT_INT8_PER_CHANNEL || desc->format == STRATA_WEIGHT_W8A8;
  if (!dense && !int8) {
    return Unsupported("weight_create: weight '", name, "': format ", FormatName(desc->format), " (", desc->format,
                       ") is not supported by the OpenCL backend (DENSE F32/F16/BF16, INT8_PER_CHANNEL, W8A8)");
  }
  if (dense && desc->dtype != STRATA_DTYPE_F32 && desc->dtype != STRATA_DTYPE_F16 && desc->dtype != STRATA_DTYPE_BF16) {
    return Unsupported("weight_create: weight '", name, "': DENSE dtype ", strata_dtype_name(desc->dtype),
                       " not supported (F32, F16 or BF16)");
  }
  if (desc->rows <= 0 || desc->cols <= 0 || desc->rows > (int64_t{1} << 31) || desc->cols > (int64_t{1} << 31)) {
    return InvalidArgument("weight_create: weight '", name, "': shape [", desc->rows, ", ", desc->cols,
                           "] out of range");
  }
  if (desc->data == nullptr) return InvalidArgument("weight_create: weight '", name, "': null data");
  auto w = std::make_unique<strata_weight_s>();
  w->format = desc->format;
  w->dtype = desc->dtype;
  w->rows = desc->rows;
  w->cols = desc->cols;
  w->name = name;
  if (int8) STRATA_RETURN_IF_ERROR(CreateInt8Weight(dev, desc, name, w.get()));
  if (desc->format == STRATA_WEIGHT_INT8_PER_CHANNEL && w->group_size > 0) {
    // Per-(row, group) scales (GGUF Q8_0) without activation quantization: kept as F16
    // values q * scale, multiplied by the dense kernels.
    return CreateDequantizedGroups(dev, desc, name, std::move(w), out);
  }
  const uint64_t bytes = static_cast<uint64_t>(w->rows) * static_cast<uint64_t>(w->cols) * strata_dtype_size(w->dtype);
  const std::string what = StrCat("weight_create: weight '", name, "'");
  STRATA_RETURN_IF_ERROR(AllocMem(dev, bytes, what.c_str(), &w->data));
  STRATA_RETURN_IF_ERROR(Upload(dev, w->data, desc->data, bytes, what.c_str()));
  if (w->format == STRATA_WEIGHT_W8A8 && w->group_size == 0 && w->smooth == nullptr &&
      w->act_scale_mode == STRATA_ACT_SCALE_DYNAMIC) {
    dev->w8a8_dynamic = true;  // rms_norm / silu_mul start quantizing their outputs (ops_matmul_int8.h)
  }
  *out = w.release();
  return Ok();
}

uint64_t KvBlockBytes(const strata_kv_cache_s* kv) {
  const uint64_t values = 2 * kv->block_elems * kv->elem_size;
  const uint64_t scales = kv->scales.empty() ? 0 : 2 * static_cast<uint64_t>(kv->desc.num_kv_heads) * sizeof(float);
  return static_cast<uint64_t>(kv->desc.num_layers) * (values + scales);
}

Status CreateKvCache(strata_device_s* dev, const strata_kv_cache_desc* desc, strata_kv_cache_s** out) {
  if (desc == nullptr || out == nullptr) return InvalidArgument("kv_cache_create: null desc or out");
  if (desc->struct_size < offsetof(strata_kv_cache_desc, scale_mode)) {
    return InvalidArgument("kv_cache_create: struct_size ", desc->struct_size, " too small");
  }
  strata_kv_cache_desc d{};
  std::memcpy(&d, desc, std::min<size_t>(desc->struct_size, sizeof(d)));
  d.struct_size = sizeof(d);
  const bool i8 = d.dtype == STRATA_DTYPE_I8;
  if (d.dtype != STRATA_DTYPE_F32 && d.dtype != STRATA_DTYPE_F16 && d.dtype != STRATA_DTYPE_BF16 && !i8) {
    return Unsupported("kv_cache_create: KV dtype ", strata_dtype_name(d.dtype),
                       " not supported by the OpenCL backend (F32, F16, BF16 or I8)");
  }
  if (i8 && d.scale_mode != STRATA_KV_SCALE_PER_BLOCK_HEAD) {
    return InvalidArgument("kv_cache_create: an I8 cache needs scale_mode STRATA_KV_SCALE_PER_BLOCK_HEAD");
  }
  if (d.num_layers <= 0 || d.num_blocks <= 0 || d.block_size <= 0 || d.num_kv_heads <= 0 || d.head_dim <= 0) {
    return InvalidArgument("kv_cache_create: all sizes must be positive (layers ", d.num_layers, ", blocks ",
                           d.num_blocks, ", block_size ", d.block_size, ", kv_heads ", d.num_kv_heads, ", head_dim ",
                           d.head_dim, ")");
  }
  if (d.head_dim > 512) return Unsupported("kv_cache_create: head_dim ", d.head_dim, " > 512");
  auto kv = std::make_unique<strata_kv_cache_s>();
  kv->desc = d;
  kv->elem_size = strata_dtype_size(d.dtype);
  kv->block_elems = static_cast<uint64_t>(d.block_size) * d.num_kv_heads * d.head_dim;
  const unsigned __int128 layer_bytes =
      static_cast<unsigned __int128>(kv->block_elems) * d.num_blocks * 2 * kv->elem_size;
  if (layer_bytes > (static_cast<unsigned __int128>(1) << 46)) {
    return Error(STRATA_ERROR_OUT_OF_MEMORY, "kv_cache_create: one layer's cache is larger than 64 TiB");
  }
  std::vector<char> zeros;
  for (int32_t l = 0; l < d.num_layers; ++l) {
    cl_mem m = nullptr;
    STRATA_RETURN_IF_ERROR(AllocMem(dev, static_cast<uint64_t>(layer_bytes), "kv_cache_create", &m));
    kv->layers.push_back(m);
    // Zeroed so that attention over slots not yet written reads finite values.
    const cl_uchar zero = 0;
    cl_int e = clEnqueueFillBuffer(dev->queue, m, &zero, 1, 0, static_cast<size_t>(layer_bytes), 0, nullptr, nullptr);
    if (e != CL_SUCCESS) return ClFailure(dev, e, "kv_cache_create: clearing the cache");
    if (i8) {
      cl_mem s = nullptr;
      STRATA_RETURN_IF_ERROR(AllocMem(dev, 2 * static_cast<uint64_t>(d.num_blocks) * d.num_kv_heads * sizeof(float), "kv_cache_create: scales", &s));
      kv->scales.push_back(s);
      e = clEnqueueFillBuffer(dev->queue, s, &zero, 1, 0, 2 * static_cast<uint64_t>(d.num_blocks) * d.num_kv_heads * sizeof(float), 0, nullptr, nullptr);
      if (e != CL_SUCCESS) return ClFailure(dev, e, "kv_cache_create: clearing the scales");
    }
  }
  const cl_int e = clFinish(dev->queue);
  if (e != CL_SUCCESS) return ClFailure(dev, e, "kv_cache_create");
  *out = kv.release();
  return Ok();
}

namespace {

Status CheckPairs(const strata_kv_cache_s* kv, const strata_block_pair* pairs, int32_t num_pairs, const char* op,
                  bool src_in_cache, bool dst_in_cache) {
  if (num_pairs < 0) return InvalidArgument(op, ": num_pairs < 0");
  if (num_pairs > 0 && pairs == nullptr) return InvalidArgument(op, ": null pairs");
  const int32_t nb = kv->desc.num_blocks;
  for (int32_t i = 0; i < num_pairs; ++i) {
    const strata_block_pair& p = pairs[i];
    if (p.src < 0 || (src_in_cache && p.src >= nb) || p.dst < 0 || (dst_in_cache && p.dst >= nb)) {
      return InvalidArgument(op, ": pair ", i, " (", p.src, " -> ", p.dst, ") outside the cache's ", nb, " blocks");
    }
  }
  return Ok();
}

// The byte ranges of one block in a layer: K values, V values and (I8) K and V scales.
struct BlockPart {
  bool scales;  // in kv->scales[layer] rather than kv->layers[layer]
  uint64_t offset, bytes;
};

std::vector<BlockPart> BlockParts(const strata_kv_cache_s* kv, int64_t block) {
  const uint64_t vb = kv->block_elems * kv->elem_size;
  std::vector<BlockPart> parts = {{false, block * vb, vb}, {false, kv->half_bytes() + block * vb, vb}};
  if (!kv->scales.empty()) {
    const uint64_t sb = static_cast<uint64_t>(kv->desc.num_kv_heads) * sizeof(float);
    parts.push_back({true, block * sb, sb});
    parts.push_back({true, kv->scale_half_bytes() + block * sb, sb});
  }
  return parts;
}

}  // namespace

Status CopyBlocks(strata_device_s* dev, strata_kv_cache_s* kv, const strata_block_pair* pairs, int32_t num_pairs) {
  STRATA_RETURN_IF_ERROR(CheckPairs(kv, pairs, num_pairs, "copy_blocks", true, true));
  for (int32_t i = 0; i < num_pairs; ++i) {
    if (pairs[i].src == pairs[i].dst) continue;
    const std::vector<BlockPart> src = BlockParts(kv, pairs[i].src), dst = BlockParts(kv, pairs[i].dst);
    for (int32_t l = 0; l < kv->desc.num_layers; ++l) {
      for (size_t p = 0; p < src.size(); ++p) {
        cl_mem m = src[p].scales ? kv->scales[l] : kv->layers[l];
        const cl_int e =
            clEnqueueCopyBuffer(dev->queue, m, m, src[p].offset, dst[p].offset, src[p].bytes, 0, nullptr, nullptr);
        if (e != CL_SUCCESS) return ClFailure(dev, e, "copy_blocks");
      }
    }
  }
  return Ok();
}

Status SwapBlocks(strata_device_s* dev, strata_kv_cache_s* kv, void* host, uint64_t host_bytes,
                  const strata_block_pair* pairs, int32_t num_pairs, int32_t to_host) {
  if (host == nullptr && num_pairs > 0) return InvalidArgument("swap_blocks: null host pointer");
  STRATA_RETURN_IF_ERROR(CheckPairs(kv, pairs, num_pairs, "swap_blocks", to_host != 0, to_host == 0));
  const uint64_t block_bytes = KvBlockBytes(kv);
  for (int32_t i = 0; i < num_pairs; ++i) {
    const int64_t slot = to_host ? pairs[i].dst : pairs[i].src;
    if (slot < 0 || (static_cast<uint64_t>(slot) + 1) * block_bytes > host_bytes) {
      return InvalidArgument("swap_blocks: host slot ", slot, " lies outside the ", host_bytes, "-byte host area");
    }
  }
  for (int32_t i = 0; i < num_pairs; ++i) {
    const int32_t block = to_host ? pairs[i].src : pairs[i].dst;
    const int64_t slot = to_host ? pairs[i].dst : pairs[i].src;
    char* h = static_cast<char*>(host) + static_cast<uint64_t>(slot) * block_bytes;
    const std::vector<BlockPart> parts = BlockParts(kv, block);
    for (int32_t l = 0; l < kv->desc.num_layers; ++l) {
      for (const BlockPart& p : parts) {
        cl_mem m = p.scales ? kv->scales[l] : kv->layers[l];
        const cl_int e = to_host ? clEnqueueReadBuffer(dev->queue, m, CL_FALSE, p.offset, p.bytes, h, 0, nullptr, nullptr)
                                 : clEnqueueWriteBuffer(dev->queue, m, CL_FALSE, p.offset, p.bytes, h, 0, nullptr, nullptr);
        if (e != CL_SUCCESS) return ClFailure(dev, e, "swap_blocks");
        h += p.bytes;
      }
    }
  }
  // The host area is the caller's again when the call returns.
  const cl_int e = clFinish(dev->queue);
  return e == CL_SUCCESS ? Ok() : ClFailure(dev, e, "swap_blocks");
}

}  // namespace strata::opencl
