// Weights and the two ops that read them: embedding lookups and matmul (GEMV for decode,
// oneDNN for prefill; F16/BF16 weights are converted in blocks, never copied whole).
#include <malloc.h>

#include <algorithm>
#include <atomic>
#include <exception>
#include <mutex>
#include <string>
#include <cstring>
#include <vector>
#include <memory>

#include "absl/strings/str_cat.h"
#include "backends/cpu/cpu_ops.h"
#include "backends/cpu/dnnl_matmul.h"
#include "backends/cpu/ops_matmul_quant.h"
#include "backends/cpu/page_memory.h"
#include "backends/cpu/quant_weight.h"
#include "backends/cpu/scratch_arena.h"
#include "backends/cpu/simd_kernels.h"
#include "backends/cpu/tensor_view.h"
#include "backends/cpu/thread_pool.h"

namespace strata::cpu {
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

// Prefill (more than kGemvMaxTokens rows of x): y = x W^T on the device's thread pool, each
// tile of weight rows multiplied by oneDNN on the thread that claimed it, single-threaded.
//
// Why the pool and not oneDNN's own OpenMP team: an OpenMP parallel region ends at a
// barrier that waits for every thread of the team, so when one of them is descheduled (a
// busy machine) every matmul waits a scheduler time slice for it: 110M prefill fell from
// ~80 tok/s on one thread to ~15 tok/s on two beside other jobs. Tiles claimed from the
// pool are finished by whichever threads run (thread_pool.h).
//
// Tile shape: oneDNN's single-threaded f32 GEMM (gemm:jit here) packs both operands per
// call and runs well only on large enough tiles. Measured on this machine's AVX-512 cores
// (one thread, GFLOP/s): [128 tokens x 768] x [96 rows]^T 138-152, with 128 rows 153-170,
// 512 rows 160-190; at k = 2048 96 rows fell to 79 against 147-155 for 128-512 rows; token
// blocks of 128-512 all run well, 32 tokens lose a third. So a tile is at least
// kMinTileRows rows (a multiple of kRowsAlign) by kMinTileTokens to kMaxTileTokens tokens,
// and a matrix is cut into about kTilesPerThread tiles per thread: enough that a late
// thread's share is taken over by the others, few enough that the tiles stay large. Rows
// are cut first (a tile of rows is converted once, below); tokens only as far as the
// threads need (many cores, few rows). (The first version cut every matrix into 4 blocks
// per thread of 16-row multiples: 96-row tiles on the 110M model, prefill 0.69x of
// oneDNN's own OpenMP team on a quiet machine.)
//
// F16/BF16 weights are multiplied as stored: a tile's rows are converted to F32 in the
// thread's scratch arena (scratch_arena.h; at most kScratchBytes) just before oneDNN reads
// them, so no F32 copy of the model exists; a thread that goes on to the next token block of
// the same rows reuses them. Why not oneDNN's own f16/bf16 matmul: the Debian oneDNN (2.6) multiplies
// bf16 only with bf16 activations (a precision loss the GEMV decode path does not have, so
// prefill and decode would disagree) and f16 only on AVX512-FP16 CPUs (not this one). On a
// CPU with AMX the bf16 matmul is used anyway, with split operands that keep f32 accuracy
// (PrefillMatmulAmx below); this f32 path is the rest.
constexpr int64_t kRowsAlign = 64;
constexpr int64_t kMinTileRows = 128;
constexpr int64_t kMinTileTokens = 64;
constexpr int64_t kMaxTileTokens = 512;
constexpr int64_t kTilesPerThread = 3;
// Upper bound on a half-precision tile's F32 scratch (unless kMinTileRows rows need more):
// about two cores' L2, so the rows are still cached when oneDNN packs them.
constexpr int64_t kScratchBytes = int64_t{1} << 20;
// A thread is worth it for about this many multiply-adds (tens of microseconds of work); a
// small product (stories260K's 64-wide matrices) runs on the caller alone.
constexpr int64_t kMacsPerThread = int64_t{1} << 20;

// --- AMX prefill (default where oneDNN has AMX; amx_prefill=off / STRATA_CPU_AMX_PREFILL=0) --
//
// F16/BF16 weights multiplied by oneDNN's bf16 matmul (the AMX tiles on CPUs that have them)
// with error-compensated splits, so the product keeps about f32 accuracy:
//   an f16 weight w is exactly w_hi + w_lo with w_hi = bf16(w), w_lo = bf16(w - w_hi) (f16 has
//   11 significant bits, two bf16 parts 16, and f16's exponent range is inside bf16's); a bf16
//   weight is one exact part (w_lo = 0). An f32 activation x = x_hi + x_lo + r with |r| <=
//   2^-16 |x| (both parts rounded to nearest even). Then
//     y = X_hi W_hi + X_lo W_hi + X_hi W_lo   (f16; relative error ~2^-16 per product: the
//                                              dropped X_lo W_lo and r)
//     y = X_hi W + X_lo W                     (bf16 weights)
//   as ONE bf16 GEMM with k concatenated: [X_hi | X_lo | X_hi] x [W_hi | W_hi | W_lo]^T, so
//   oneDNN accumulates the three products in f32. Weight rows are split per tile into the
//   thread's scratch (as the f32 path converts them), never for the whole model.
constexpr uint64_t kAmxMaxActivationBytes = uint64_t{12} << 20;  // split activations per call
constexpr int64_t kAmxMaxTokens = 512;
// Below this many tokens the f32 path stays: the weight split is paid per matmul, whatever the
// token count. Measured (110M f16, 2 threads, prefill tok/s f32 -> AMX): 16 tokens 565 -> 444,
// 32: 798 -> 756, 40: 889 -> 836, 48: 989 -> 965, 64: 1,059 -> 1,175; TinyLlama 32: 84 -> 80,
// 64: 102 -> 118.
constexpr int64_t kAmxMinTokens = 64;

// Activations row by row: [x_hi | x_lo | x_hi] (f16 weights) or [x_hi | x_lo] (bf16).
void SplitActivationRow(const float* x, int64_t k, bool three, uint16_t* out) {
  SplitToBf16(x, STRATA_DTYPE_F32, out, three ? out + 2 * k : nullptr, out + k, k);
}

// Weight rows [r0, r0 + nr) of a [*, k] F16/BF16 matrix into [w_hi | w_hi | w_lo] / [w | w].
void SplitWeightRows(const void* w, int32_t dtype, int64_t k, int64_t nr, uint16_t* out, float* f32_row) {
  const int64_t kc = dtype == STRATA_DTYPE_F16 ? 3 * k : 2 * k;
  if (dtype == STRATA_DTYPE_BF16) {
    const uint16_t* src = static_cast<const uint16_t*>(w);
    for (int64_t r = 0; r < nr; ++r) {
      std::memcpy(out + r * kc, src + r * k, static_cast<size_t>(k) * 2);
      std::memcpy(out + r * kc + k, src + r * k, static_cast<size_t>(k) * 2);
    }
    return;
  }
  // Through an f32 row in L1 first: converting straight from memory with three output streams
  // ran at a quarter of ConvertToF32's rate (the f16 loads stalled), ~0.9 against ~0.45 ns per
  // element on one core converting-then-splitting.
  const char* src = static_cast<const char*>(w);
  for (int64_t r = 0; r < nr; ++r) {
    uint16_t* row = out + r * kc;
    ConvertToF32(src + r * k * 2, STRATA_DTYPE_F16, f32_row, k);
    SplitToBf16(f32_row, STRATA_DTYPE_F32, row, row + k, row + 2 * k, k);  // lo: exact
  }
}

// Rows per tile of a [rows, k] weight multiplied on `threads` threads (see above).
int64_t TileRows(int64_t rows, int64_t k, int32_t threads, bool half, int64_t bytes_per_elem = 4) {
  const int64_t tiles = threads == 1 ? 1 : int64_t{threads} * kTilesPerThread;
  int64_t tile = (rows + tiles - 1) / tiles;
  tile = std::max(kMinTileRows, (tile + kRowsAlign - 1) / kRowsAlign * kRowsAlign);
  if (half) {
    tile = std::min(tile, std::max(kMinTileRows, kScratchBytes / bytes_per_elem / k / kRowsAlign * kRowsAlign));
  }
  return std::min(tile, rows);
}

// Token blocks for m tokens: blocks of at most kMaxTileTokens, and more (down to
// kMinTileTokens tokens) while the row tiles alone are fewer than the threads want.
int64_t TokenBlocks(int64_t m, int64_t row_tiles, int32_t threads) {
  const int64_t want = threads == 1 ? 1 : int64_t{threads} * kTilesPerThread;
  int64_t blocks = (m + kMaxTileTokens - 1) / kMaxTileTokens;
  blocks = std::max(blocks, std::min((want + row_tiles - 1) / row_tiles, m / kMinTileTokens));
  return std::max<int64_t>(1, blocks);
}

// The AMX path (see above) for m tokens, transposed: y^T = W_split X_split^T, so that the
// activations are oneDNN's B operand, packed ONCE per call into the blocked layout its AMX
// kernel reads (with W as B, oneDNN repacks every weight tile on every call: measured 650-780
// GFLOP/s on one core against 900-1150 with B prepacked, shapes [128..192 x 2304..16896] x
// 128 tokens). The weight tiles (A) are read as split, row-major; each thread multiplies its
// tile into a [rows, m] scratch and writes it transposed (plus the bias) into y.
absl::Status PrefillMatmulAmx(strata_device_s* dev, const View& xv, int64_t m, strata_weight_s* w,
                              const float* b, const View& ov) {
  const int64_t k = w->cols, rows = w->rows;
  const bool three = w->dtype == STRATA_DTYPE_F16;
  const int64_t kc = (three ? 3 : 2) * k;
  // Token chunks whose split (and packed) activations fit kAmxMaxActivationBytes each.
  const int64_t chunk = std::clamp<int64_t>(static_cast<int64_t>(kAmxMaxActivationBytes / (kc * 2)), 1,
                                            kAmxMaxTokens);
  if (m > chunk) {
    for (int64_t i0 = 0; i0 < m; i0 += chunk) {
      View xs = xv, os = ov;
      xs.base = reinterpret_cast<char*>(xv.Row<float>(i0));
      os.base = reinterpret_cast<char*>(ov.Row<float>(i0));
      if (absl::Status st = PrefillMatmulAmx(dev, xs, std::min(chunk, m - i0), w, b, os); !st.ok()) return st;
    }
    return absl::OkStatus();
  }
  const int32_t threads = static_cast<int32_t>(
      std::clamp<int64_t>(m * k * rows / kMacsPerThread, 1, dev->num_threads));
  const int64_t tile = TileRows(rows, k, threads, /*half=*/true, /*bytes_per_elem=*/kc / k * 2);
  const int64_t row_tiles = (rows + tile - 1) / tile;
  const size_t es = DtypeSize(w->dtype);
  ScratchArena& caller_arena = ScratchArena::ForThisThread();
  ScratchArena::Scope caller_scope(caller_arena);
  dnnl::memory::desc packed;
  void* xp = nullptr;
  try {
    packed = dev->dnnl->PackedB(tile, kc, m);
    xp = caller_arena.Allocate(packed.get_size());
    if (xp == nullptr) {
      return absl::ResourceExhaustedError(
          absl::StrCat("matmul: cannot allocate ", packed.get_size(), " bytes of split activations"));
    }
    // The layout oneDNN 2.6 picks here (BA16a64b2a: blocks of 32 k x 64 tokens, k pairs
    // innermost) is written directly, in parallel over groups of 16 tokens; another layout goes
    // through oneDNN's reorder.
    const dnnl::memory::desc direct({kc, m}, dnnl::memory::data_type::bf16,
                                    dnnl::memory::format_tag::BA16a64b2a);
    if (packed == direct && kc % 32 == 0) {
      if (m % 64 != 0) std::memset(xp, 0, packed.get_size());
      uint32_t* dst = static_cast<uint32_t*>(xp);
      const int64_t kblocks = kc / 32;
      // Each group of 16 tokens is split into 16 rows, then written pair index by pair index:
      // 16 tokens' pairs fill one 64-byte line of the packed block (token by token, every
      // store went to a line 256 bytes from the last, all in 16 of L1's sets: 0.6 ms per
      // 128-token matmul, most of the AMX path's time).
      dev->pool->ParallelForThreads((m + 15) / 16, threads, [&](int64_t g0, int64_t g1) {
        ScratchArena& arena = ScratchArena::ForThisThread();
        ScratchArena::Scope scope(arena);
        uint16_t* rows16 = arena.AllocateArray<uint16_t>(static_cast<uint64_t>(16 * kc));
        if (rows16 == nullptr) return;  // 16 rows of at most a few hundred KiB: within the reserve
        for (int64_t g = g0; g < g1; ++g) {
          const int64_t t0 = g * 16, nt = std::min<int64_t>(16, m - t0);
          for (int64_t j = 0; j < nt; ++j) SplitActivationRow(xv.Row<float>(t0 + j), k, three, rows16 + j * kc);
          const uint32_t* src32 = reinterpret_cast<const uint32_t*>(rows16);
          uint32_t* col = dst + (t0 / 64) * kblocks * 1024 + (t0 % 64);
          for (int64_t p = 0; p < kc / 2; ++p) {
            uint32_t* line = col + (p / 16) * 1024 + (p % 16) * 64;
            for (int64_t j = 0; j < nt; ++j) line[j] = src32[j * (kc / 2) + p];
          }
        }
      });
    } else {
      uint16_t* xs = caller_arena.AllocateArray<uint16_t>(static_cast<uint64_t>(m * kc));
      if (xs == nullptr) {
        return absl::ResourceExhaustedError(absl::StrCat("matmul: cannot allocate ", m * kc * 2,
                                                         " bytes of split activations"));
      }
      for (int64_t i = 0; i < m; ++i) SplitActivationRow(xv.Row<float>(i), k, three, xs + i * kc);
      dev->dnnl->PackB(xs, m, kc, packed, xp);
    }
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("matmul: oneDNN failed: ", e.what()));
  }
  std::atomic<bool> no_scratch{false};
  std::atomic<bool> failed{false};
  std::string error;
  std::mutex error_mu;
  dev->pool->ParallelForThreads(row_tiles, threads, [&](int64_t t0, int64_t t1) {
    ScratchArena& arena = ScratchArena::ForThisThread();
    ScratchArena::Scope scope(arena);
    uint16_t* split = arena.AllocateArray<uint16_t>(static_cast<uint64_t>(tile * kc));
    float* yt = arena.AllocateArray<float>(static_cast<uint64_t>(tile * m));
    float* f32_row = arena.AllocateArray<float>(static_cast<uint64_t>(k));
    if (split == nullptr || yt == nullptr || f32_row == nullptr) {
      no_scratch.store(true);
      return;
    }
    for (int64_t rt = t0; rt < t1; ++rt) {
      const int64_t r0 = rt * tile, nr = std::min(tile, rows - r0);
      SplitWeightRows(static_cast<const char*>(w->data) + r0 * k * es, w->dtype, k, nr, split, f32_row);
      try {
        dev->dnnl->RunBf16PackedB(split, nr, kc, xp, packed, m, yt);
      } catch (const std::exception& e) {
        std::lock_guard<std::mutex> lock(error_mu);
        if (!failed.exchange(true)) error = e.what();
        return;
      }
      // yt [nr, m] -> y[i, r0 + r], in blocks of 16 rows so both sides stay in cache lines.
      for (int64_t rb = 0; rb < nr; rb += 16) {
        const int64_t re = std::min(nr, rb + 16);
        for (int64_t i = 0; i < m; ++i) {
          float* out = ov.Row<float>(i) + r0;
          for (int64_t r = rb; r < re; ++r) out[r] = yt[r * m + i] + (b != nullptr ? b[r0 + r] : 0.0f);
        }
      }
    }
  });
  if (no_scratch.load()) {
    return absl::ResourceExhaustedError(
        absl::StrCat("matmul: cannot allocate the ", tile * kc * 2, "-byte split weight block"));
  }
  if (failed.load()) return absl::InternalError(absl::StrCat("matmul: oneDNN failed: ", error));
  return absl::OkStatus();
}

absl::Status PrefillMatmul(strata_device_s* dev, const View& xv, int64_t m, strata_weight_s* w,
                           const float* b, const View& ov) {
  const int64_t k = w->cols, rows = w->rows;
  const bool half = w->dtype != STRATA_DTYPE_F32;
  if (half && dev->amx_prefill && m >= kAmxMinTokens) return PrefillMatmulAmx(dev, xv, m, w, b, ov);
  const int32_t threads = static_cast<int32_t>(
      std::clamp<int64_t>(m * k * rows / kMacsPerThread, 1, dev->num_threads));
  const int64_t tile = TileRows(rows, k, threads, half);
  const int64_t row_tiles = (rows + tile - 1) / tile;
  // Token blocks of equal size (a ragged last block would get its own oneDNN primitive).
  const int64_t token_blocks = TokenBlocks(m, row_tiles, threads);
  const int64_t token_block = (m + token_blocks - 1) / token_blocks;
  const size_t es = DtypeSize(w->dtype);
  std::atomic<bool> no_scratch{false};
  std::atomic<bool> failed{false};
  std::string error;
  std::mutex error_mu;
  // Item = row tile * token_blocks + token block: a thread's run of consecutive items
  // mostly stays on one row tile.
  dev->pool->ParallelForThreads(row_tiles * token_blocks, threads, [&](int64_t t0, int64_t t1) {
    // The tile lives as long as this chunk of items (consecutive items mostly share a row
    // tile); oneDNN's scratchpad is allocated above it, per call (dnnl_matmul.h).
    ScratchArena& arena = ScratchArena::ForThisThread();
    ScratchArena::Scope scope(arena);
    float* converted = nullptr;
    int64_t converted_rt = -1;
    if (half && (converted = arena.AllocateArray<float>(static_cast<uint64_t>(tile * k))) == nullptr) {
      no_scratch.store(true);
      return;
    }
    for (int64_t item = t0; item < t1; ++item) {
      const int64_t rt = item / token_blocks, i0 = (item % token_blocks) * token_block;
      if (i0 >= m) continue;
      const int64_t r0 = rt * tile, nr = std::min(tile, rows - r0);
      const float* wf = static_cast<const float*>(w->data) + (half ? 0 : r0 * k);
      if (half) {
        if (converted_rt != rt) {
          ConvertToF32(static_cast<const char*>(w->data) + r0 * k * es, w->dtype, converted, nr * k);
          converted_rt = rt;
        }
        wf = converted;
      }
      try {  // a pool body must not throw
        dev->dnnl->Run(xv.Row<float>(i0), std::min(token_block, m - i0), k, xv.stride, wf, nr,
                       b != nullptr ? b + r0 : nullptr, ov.Row<float>(i0) + r0, ov.stride,
                       /*num_threads=*/1);
      } catch (const std::exception& e) {
        std::lock_guard<std::mutex> lock(error_mu);
        if (!failed.exchange(true)) error = e.what();
        return;
      }
    }
  });
  if (no_scratch.load()) {
    return absl::ResourceExhaustedError(
        absl::StrCat("matmul: cannot allocate the ", tile * k * 4, "-byte conversion block"));
  }
  if (failed.load()) return absl::InternalError(absl::StrCat("matmul: oneDNN failed: ", error));
  return absl::OkStatus();
}

}  // namespace

absl::Status CreateWeight(const strata_weight_desc* desc, strata_weight_s** out) {
  if (desc == nullptr || out == nullptr) {
    return absl::InvalidArgumentError("weight_create: null desc or out");
  }
  if (desc->struct_size < offsetof(strata_weight_desc, scales)) {
    return absl::InvalidArgumentError(
        absl::StrCat("weight_create: struct_size ", desc->struct_size, " too small"));
  }
  const char* name = (desc->struct_size >= offsetof(strata_weight_desc, name) + sizeof(const char*) &&
                      desc->name != nullptr)
                         ? desc->name
                         : "(unnamed)";
  if (desc->format != STRATA_WEIGHT_DENSE) {
    auto q = std::make_unique<QuantWeight>();
    if (absl::Status st = CreateQuantWeight(desc, name, q.get()); !st.ok()) {
      if (desc->format < 0 || desc->format >= STRATA_WEIGHT_FORMAT_COUNT)
        return absl::UnimplementedError(absl::StrCat("weight_create: weight '", name, "': format ",
                                                     FormatName(desc->format), " (", desc->format, ")"));
      return st;
    }
    auto w = std::make_unique<strata_weight_s>();
    w->format = desc->format;
    w->dtype = desc->dtype;
    w->rows = desc->rows;
    w->cols = desc->cols;
    w->quant = std::move(q);
    *out = w.release();
    return absl::OkStatus();
  }
  if (desc->dtype != STRATA_DTYPE_F32 && desc->dtype != STRATA_DTYPE_F16 &&
      desc->dtype != STRATA_DTYPE_BF16) {
    return absl::UnimplementedError(absl::StrCat("weight_create: weight '", name, "': DENSE dtype ",
                                                 DtypeName(desc->dtype),
                                                 " not supported (F32, F16 or BF16)"));
  }
  if (desc->rows <= 0 || desc->cols <= 0 || desc->rows > (int64_t{1} << 31) ||
      desc->cols > (int64_t{1} << 31)) {
    return absl::InvalidArgumentError(absl::StrCat("weight_create: weight '", name, "': shape [",
                                                   desc->rows, ", ", desc->cols, "] out of range"));
  }
  if (desc->data == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("weight_create: weight '", name, "': null data"));
  }
  auto w = std::make_unique<strata_weight_s>();
  w->format = desc->format;
  w->dtype = desc->dtype;
  w->rows = desc->rows;
  w->cols = desc->cols;
  // Row-major is what both the GEMV (streams each row once) and oneDNN (reads it as the
  // transposed "ba" matrix) want, so the copy keeps the caller's layout.
  const uint64_t bytes = static_cast<uint64_t>(w->rows * w->cols) * DtypeSize(w->dtype);
  // Huge pages (page_memory.h): decode streams every byte of it once per token.
  w->data = AllocPages(bytes, PageKind::kHugePages);
  if (w->data == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat("weight_create: weight '", name, "': cannot allocate ", bytes, " bytes"));
  }
  w->data_bytes = bytes;
  std::memcpy(w->data, desc->data, bytes);
  *out = w.release();
  return absl::OkStatus();
}

absl::Status Embedding(strata_device_s* dev, strata_weight_s* table, const strata_tensor* ids,
                       const strata_tensor* feedback, const strata_tensor* out) {
  if (table->quant != nullptr) {
    return absl::UnimplementedError("embedding: the table is a quantized weight (embeddings must be dense)");
  }
  auto ids_v = CheckTensor(ids, "embedding: ids", {STRATA_DTYPE_I32});
  if (!ids_v.ok()) return ids_v.status();
  auto out_v = CheckTensor(out, "embedding: out", {STRATA_DTYPE_F32});
  if (!out_v.ok()) return out_v.status();
  const int64_t n = ids_v->numel();
  if (!ids_v->packed()) return absl::InvalidArgumentError("embedding: ids must be packed");
  if (out_v->rows != n || out_v->cols != table->cols) {
    return absl::InvalidArgumentError(absl::StrCat("embedding: out is [", out_v->rows, ", ",
                                                   out_v->cols, "], expected [", n, ", ",
                                                   table->cols, "]"));
  }
  const int32_t* given = ids_v->Row<int32_t>(0);
  std::vector<int32_t> resolved;
  const int32_t* id = given;
  if (feedback != nullptr) {
    auto fb_v = CheckTensor(feedback, "embedding: feedback", {STRATA_DTYPE_I32});
    if (!fb_v.ok()) return fb_v.status();
    if (!fb_v->packed()) return absl::InvalidArgumentError("embedding: feedback must be packed");
    const int64_t m = fb_v->numel();
    const int32_t* fb = fb_v->Row<int32_t>(0);
    resolved.assign(given, given + n);
    for (int64_t i = 0; i < n; ++i) {
      if (given[i] >= 0) continue;
      const int64_t r = -static_cast<int64_t>(given[i]) - 1;
      if (r >= m) {
        return absl::InvalidArgumentError(absl::StrCat("embedding: ids[", i, "] = ", given[i], " reads feedback row ",
                                                        r, " of ", m));
      }
      resolved[i] = fb[r];
    }
    id = resolved.data();
  }
  for (int64_t i = 0; i < n; ++i) {
    if (id[i] < 0 || id[i] >= table->rows) {
      return absl::InvalidArgumentError(absl::StrCat("embedding: ids[", i, "] = ", id[i],
                                                      " outside the table's ", table->rows, " rows"));
    }
  }
  const size_t es = DtypeSize(table->dtype);
  const View o = *out_v;
  dev->pool->ParallelFor(n, table->cols * (es + 4), [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      ConvertToF32(static_cast<const char*>(table->data) + id[i] * table->cols * es, table->dtype,
                   o.Row<float>(i), table->cols);
    }
  });
  return absl::OkStatus();
}

bool MatmulAccumulatesInPlace(const strata_weight_s* w, int64_t tokens) {
  return w->quant == nullptr && tokens <= kGemvMaxTokens;
}

absl::Status Matmul(strata_device_s* dev, const strata_tensor* x, strata_weight_s* w,
                    const strata_tensor* bias, const strata_tensor* out, bool accumulate) {
  auto x_v = CheckTensor(x, "matmul: x", {STRATA_DTYPE_F32});
  if (!x_v.ok()) return x_v.status();
  auto out_v = CheckTensor(out, "matmul: out", {STRATA_DTYPE_F32});
  if (!out_v.ok()) return out_v.status();
  if (x_v->cols != w->cols) {
    return absl::InvalidArgumentError(absl::StrCat("matmul: x has ", x_v->cols,
                                                   " columns, the weight has ", w->cols));
  }
  const int64_t n = x_v->rows;
  if (out_v->rows != n || out_v->cols != w->rows) {
    return absl::InvalidArgumentError(absl::StrCat("matmul: out is [", out_v->rows, ", ",
                                                   out_v->cols, "], expected [", n, ", ", w->rows,
                                                   "]"));
  }
  const float* b = nullptr;
  if (bias != nullptr) {
    auto b_v = CheckTensor(bias, "matmul: bias", {STRATA_DTYPE_F32});
    if (!b_v.ok()) return b_v.status();
    if (b_v->numel() != w->rows || !b_v->packed()) {
      return absl::InvalidArgumentError(absl::StrCat("matmul: bias has ", b_v->numel(),
                                                     " elements, expected ", w->rows));
    }
    b = b_v->Row<float>(0);
  }
  if (accumulate && !MatmulAccumulatesInPlace(w, n)) {
    return absl::InternalError("matmul: accumulate in place is only for the dense GEMV");
  }
  if (n == 0) return absl::OkStatus();
  const View xv = *x_v, ov = *out_v;
  if (n > kGemvMaxTokens) {
    dev->prefill_since_trim.store(true);
  } else if (dev->prefill_since_trim.exchange(false)) {
    // The first small product after prefill products (the prefill's LM head, or the first
    // decode step): give back the heap pages that oneDNN's per-call packing buffers left
    // free in the threads' malloc arenas (0.4-1.2 MB per tile call, freed on return, and
    // kept resident by glibc as holes between smaller blocks: several MiB). Decode reuses
    // none of them, and it grows the KV cache on top: without this, the run's peak RSS
    // carried both (issue 32): 110M f16 peak RSS / weights 1.2015-1.2050 without the trim,
    // 1.1862-1.1893 with it (four runs each, -p 128, 64 decoded tokens). One trim per prefill, not per op (per op it faulted ~6,000 pages
    // back in per 128-token prefill): the trim took 0.6-1.4 ms here, the next prefill faults
    // the few MiB back in once.
    malloc_trim(0);
  }
  if (w->quant != nullptr) return QuantMatmul(dev, xv, w, b, ov);
  if (n <= kGemvMaxTokens) {
    // Contiguous row ranges per chunk: each thread streams its slices of W once. Tasks
    // of 16 rows keep chunk boundaries on whole cache lines of the output.
    constexpr int64_t kRowsPerTask = 16;
    const int64_t tasks = (w->rows + kRowsPerTask - 1) / kRowsPerTask;
    const int64_t task_bytes = kRowsPerTask * w->cols * static_cast<int64_t>(DtypeSize(w->dtype));
    dev->pool->ParallelFor(tasks, task_bytes, [&](int64_t t0, int64_t t1) {
      const int64_t r0 = t0 * kRowsPerTask, r1 = std::min(w->rows, t1 * kRowsPerTask);
      GemvRows(xv.Row<float>(0), xv.stride, static_cast<int32_t>(n), w->data, w->dtype, w->cols, b,
               ov.Row<float>(0), ov.stride, r0, r1, accumulate);
    });
    return absl::OkStatus();
  }
  return PrefillMatmul(dev, xv, n, w, b, ov);
}

}  // namespace strata::cpu
