// Times the CUDA backend's hot ops at Llama-3-8B shapes through the device ABI (dlopen of
// the plugin, bf16 activations, random data): decode GEMVs (weight GB/s against the
// 4.24 TB/s copy bandwidth measured on the H200; 1..8 tokens take the GEMV kernel), prefill
// GEMMs (TFLOP/s), decode attention over a paged bf16 KV cache (KV GB/s) and prefill
// attention (TFLOP/s, tensor cores), each on the default ("auto"), the previous
// ("previous": the GEMV's row kernel, gemm_tune=on, pdl=off) and the oldest ("legacy":
// gemv=cublas, prefill_attention=simple) kernel paths, plus the GEMV up to 8 tokens; and one
// decode layer's products unfused against matmul_ex; and a decode step's rope + KV write +
// attention as two ops against ABI 1.3's rope_attention. Weights rotate through copies so
// that no product finds its weight in L2.
// Medians of 20 samples (each 10 back-to-back runs) after 3 warm-ups. One JSON object per
// line. Not a test: no assertions on time. STRATA_OP_BENCH=gemm|layer|decode_attention|sampling|
// attention runs one part only (see each).
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "strata/device.h"

namespace {

const strata_backend_v1* api = nullptr;
strata_device dev = nullptr;

#define CHECK(call)                                                                   \
  do {                                                                                \
    if ((call) != STRATA_OK) {                                                        \
      std::fprintf(stderr, "%s failed: %s\n", #call, api->last_error());              \
      std::exit(1);                                                                   \
    }                                                                                 \
  } while (0)

std::vector<uint16_t> RandomBf16(size_t n, float scale) {
  std::vector<uint16_t> v(n);
  uint64_t s = 0x9e3779b97f4a7c15ull ^ n;
  for (auto& h : v) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    const float f = (static_cast<float>(s >> 40) / 16777216.0f * 2.0f - 1.0f) * scale;
    uint32_t b;
    std::memcpy(&b, &f, 4);
    h = static_cast<uint16_t>(b >> 16);
  }
  return v;
}

// A device buffer; inputs get random bf16 values (never time on all-zero data).
strata_buffer Alloc(size_t bytes, bool random = true) {
  strata_buffer b = nullptr;
  CHECK(api->buffer_alloc(dev, bytes, &b));
  if (random) {
    std::vector<uint16_t> v = RandomBf16(bytes / 2, 0.5f);
    CHECK(api->upload(dev, b, 0, v.data(), v.size() * 2));
  }
  return b;
}

strata_tensor T(strata_buffer b, int32_t t, std::vector<int64_t> shape) {
  strata_tensor x{};
  x.buffer = b;
  x.dtype = t;
  x.ndim = static_cast<int32_t>(shape.size());
  for (size_t i = 0; i < shape.size(); ++i) x.shape[i] = shape[i];
  return x;
}

// Each sample is 10 back-to-back runs with one synchronize at the end, divided by 10: the
// op's cost in a stream of work (launch overheads overlap the previous kernel, as in a
// forward pass), not the ~10-20 us round trip of a synchronize.
double MedianSeconds(const std::function<void()>& op) {
  for (int i = 0; i < 3; ++i) op();
  CHECK(api->synchronize(dev));
  std::vector<double> t;
  for (int i = 0; i < 20; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int j = 0; j < 10; ++j) op();
    CHECK(api->synchronize(dev));
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / 10);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// Llama-3-8B layer shapes (rows = out features, cols = in features).
struct Shape { const char* name; int64_t rows, cols; };
const Shape kShapes[] = {{"qkv", 6144, 4096}, {"o", 4096, 4096}, {"gate_up", 28672, 4096}, {"down", 4096, 14336},
                         {"logits", 128256, 4096}};

// Copies of one BF16 weight on `dev`, enough for 128 MB (at most 8): each timed call reads a
// different copy, so no call finds its weight in L2, as in a forward pass, where each
// projection's weights are evicted by the ~16 GB read between two uses. Runs before
// 2026-11-30 evening timed one copy, which flattered the qkv and o projections (50 and
// 34 MB: they fit in L2).
std::vector<strata_weight> WeightCopies(const Shape& s, const std::vector<uint16_t>& w) {
  const double bytes = 2.0 * s.rows * s.cols;
  const int copies = std::clamp(static_cast<int>(std::ceil(128e6 / bytes)), 1, 8);
  std::vector<strata_weight> ws(static_cast<size_t>(copies));
  for (strata_weight& W : ws) {
    strata_weight_desc d{};
    d.struct_size = sizeof(d);
    d.format = STRATA_WEIGHT_DENSE;
    d.dtype = STRATA_DTYPE_BF16;
    d.rows = s.rows;
    d.cols = s.cols;
    d.data = w.data();
    CHECK(api->weight_create(dev, &d, &W));
  }
  return ws;
}

// Times f as a graph: `reps` calls recorded once, the graph replayed; seconds per call (-1
// when the backend has no graphs).
double GraphSecondsPerCall(const std::function<void()>& f, int reps) {
  if (!STRATA_BACKEND_HAS_GRAPHS(api) || api->graph_begin(dev) != STRATA_OK) return -1.0;
  for (int j = 0; j < reps; ++j) f();
  strata_graph g = nullptr;
  if (api->graph_end(dev, &g) != STRATA_OK) return -1.0;
  const double sec = MedianSeconds([&] { CHECK(api->graph_launch(dev, g)); }) / reps;
  api->graph_free(dev, g);
  return sec;
}

// STRATA_OP_BENCH=gemm: only the decode-batch GEMMs (8..256 tokens; STRATA_OP_BENCH_TOKENS=
// "128,256" picks) on cuBLASLt and on the sm_90 wgmma kernel with its per-shape split-K;
// STRATA_OP_BENCH_WGMMA_SPLITS=all adds each forced split and cuBLASLt's split-K;
// STRATA_OP_BENCH_GEMM_CANDIDATES=N cuBLASLt's first N heuristic candidates, each forced.
// Two timings per product: "us" as the other sweeps (10 back-to-back launches from the host,
// so launch costs count), and "graph_us": the 10 launches recorded once as a graph and
// replayed, the GPU time a decode step's graph pays (cuBLASLt at 128 tokens: 0.62-0.80 of
// bandwidth eager, 0.62-0.83 replayed; run 55).
void GemmSweep() {
  struct Variant { std::string name, options; strata_device dev = nullptr; };
  std::vector<Variant> vs = {{"cublas", "activations=bf16;gemm=cublas"},
                             {"wgmma", "activations=bf16;gemm=wgmma"}};
  // STRATA_OP_BENCH_GEMM_CANDIDATES=N: also cuBLASLt's heuristic candidates 0..N-1 forced.
  if (const char* c = std::getenv("STRATA_OP_BENCH_GEMM_CANDIDATES"); c != nullptr) {
    for (int i = 0; i < std::atoi(c) && i < 8; ++i) {
      vs.push_back({"cublas_c" + std::to_string(i), "activations=bf16;gemm=cublas;gemm_candidate=" + std::to_string(i)});
    }
  }
  const char* all = std::getenv("STRATA_OP_BENCH_WGMMA_SPLITS");  // "all": every split factor
  if (all != nullptr && std::strcmp(all, "all") == 0) {
    for (int s : {2, 4, 8}) {
      vs.push_back({"cublas_sk" + std::to_string(s), "activations=bf16;gemm=cublas;gemm_splitk=" + std::to_string(s)});
    }
    for (int s : {1, 2, 3, 4, 6, 8}) {
      vs.push_back({"wgmma_s" + std::to_string(s), "activations=bf16;gemm=wgmma;wgmma_splits=" + std::to_string(s)});
    }
  }
  std::vector<int64_t> token_counts = {8, 16, 32, 64, 128, 256};
  if (const char* env = std::getenv("STRATA_OP_BENCH_TOKENS"); env != nullptr && *env != '\0') {
    token_counts.clear();
    for (const char* p = env; *p != '\0';) {
      token_counts.push_back(std::strtoll(p, const_cast<char**>(&p), 10));
      while (*p == ',' || *p == ' ') ++p;
    }
  }
  for (Variant& v : vs) {
    strata_device_options o{};
    o.struct_size = sizeof(o);
    o.options = v.options.c_str();
    if (api->device_open(0, &o, &v.dev) != STRATA_OK) {
      std::printf("{\"skipped\":\"%s: %s\"}\n", v.name.c_str(), api->last_error());
      v.dev = nullptr;
    }
  }
  for (const Shape& s : kShapes) {
    std::vector<uint16_t> w = RandomBf16(static_cast<size_t>(s.rows * s.cols), 0.02f);
    for (Variant& v : vs) {
      if (v.dev == nullptr) continue;
      dev = v.dev;
      const std::vector<strata_weight> ws = WeightCopies(s, w);
      size_t next = 0;
      for (int64_t tokens : token_counts) {
        strata_buffer xb = Alloc(tokens * s.cols * 2), ob = Alloc(tokens * s.rows * 2, false);
        strata_tensor x = T(xb, STRATA_DTYPE_BF16, {tokens, s.cols}), out = T(ob, STRATA_DTYPE_BF16, {tokens, s.rows});
        auto once = [&] { CHECK(api->matmul(dev, &x, ws[next++ % ws.size()], nullptr, &out)); };
        const double sec = MedianSeconds(once);
        // The same 10 launches as a graph (recorded after the eager runs above, so nothing
        // is first met while recording), replayed.
        const double graph_sec = GraphSecondsPerCall(once, 10);
        const double bytes = 2.0 * s.rows * s.cols, flops = 2.0 * tokens * s.rows * s.cols;
        std::printf("{\"op\":\"gemm\",\"path\":\"%s\",\"shape\":\"%s\",\"tokens\":%lld,\"us\":%.1f,"
                    "\"graph_us\":%.1f,\"weight_GBps\":%.0f,\"TFLOPs\":%.1f,\"bw_fraction_of_4.24TBps\":%.3f,"
                    "\"graph_bw_fraction\":%.3f}\n",
                    v.name.c_str(), s.name, (long long)tokens, sec * 1e6, graph_sec * 1e6, bytes / sec / 1e9,
                    flops / sec / 1e12, bytes / sec / 4.24e12, graph_sec > 0 ? bytes / graph_sec / 4.24e12 : 0.0);
        std::fflush(stdout);
        api->buffer_free(dev, xb);
        api->buffer_free(dev, ob);
      }
      for (strata_weight W : ws) api->weight_free(dev, W);
    }
  }
  for (Variant& v : vs) {
    if (v.dev != nullptr) api->device_close(v.dev);
  }
}

// One decode layer's products with what sits between them (attention left out), for n
// tokens: unfused (rms_norm + qkv, o, rms_norm with residual + gate_up, silu_mul + down: 8
// kernels) against matmul_ex (at one token the norms, silu_mul and the residual adds run
// inside the 4 streaming GEMVs; at more tokens matmul_ex runs the parts), with
// programmatic dependent launch on and off. Also, as graphs (the decode step's case: no
// host launch cost), the 4 products alone and the elementwise kernels alone, so that what
// the kernels between the products and their boundaries cost shows. Weight copies rotate
// as above, so every product reads its weights from HBM. STRATA_OP_BENCH=layer: only this,
// at 1, 32 and 128 tokens.
void DecodeLayerChain(const std::vector<int64_t>& token_counts) {
  constexpr int32_t BF16 = STRATA_DTYPE_BF16;
  struct ChainDev { const char* name; const char* options; strata_device dev; };
  ChainDev cds[] = {{"pdl_on", "activations=bf16", nullptr}, {"pdl_off", "activations=bf16;pdl=off", nullptr}};
  for (ChainDev& c : cds) {
    strata_device_options o{};
    o.struct_size = sizeof(o);
    o.options = c.options;
    CHECK(api->device_open(0, &o, &c.dev));
  }
  std::vector<std::vector<uint16_t>> host_w;
  for (int i = 0; i < 4; ++i) {
    host_w.push_back(RandomBf16(static_cast<size_t>(kShapes[i].rows * kShapes[i].cols), 0.02f));
  }
  for (ChainDev& c : cds) {
    dev = c.dev;
    std::vector<std::vector<strata_weight>> ws;
    for (int i = 0; i < 4; ++i) ws.push_back(WeightCopies(kShapes[i], host_w[i]));
    size_t next = 0;
    const int64_t d = 4096, ff = 14336, qkvd = 6144;
    for (int64_t n : token_counts) {
      strata_buffer hb = Alloc(n * d * 2), db = Alloc(n * d * 2), nb = Alloc(n * d * 2, false),
                    qb = Alloc(n * qkvd * 2, false), ab = Alloc(n * d * 2), gb = Alloc(n * 2 * ff * 2, false),
                    sb = Alloc(n * ff * 2, false), wb = nullptr;
      CHECK(api->buffer_alloc(dev, d * 4, &wb));
      std::vector<float> ones(static_cast<size_t>(d), 1.0f);
      CHECK(api->upload(dev, wb, 0, ones.data(), ones.size() * 4));
      strata_tensor h = T(hb, BF16, {n, d}), delta = T(db, BF16, {n, d}), normed = T(nb, BF16, {n, d}),
                    qkv = T(qb, BF16, {n, qkvd}), attn = T(ab, BF16, {n, d}), gu = T(gb, BF16, {n, 2 * ff}),
                    gate = T(gb, BF16, {n, ff}), up = T(gb, BF16, {n, ff}), act = T(sb, BF16, {n, ff}),
                    nw = T(wb, STRATA_DTYPE_F32, {d});
      gate.row_stride = up.row_stride = 2 * ff;
      up.offset = static_cast<uint64_t>(ff) * 2;
      auto w = [&](int i) { return ws[i][next % ws[i].size()]; };
      auto unfused_layer = [&] {
        CHECK(api->rms_norm(dev, &delta, &h, &nw, 1e-5f, &normed));
        CHECK(api->matmul(dev, &normed, w(0), nullptr, &qkv));
        CHECK(api->matmul(dev, &attn, w(1), nullptr, &delta));
        CHECK(api->rms_norm(dev, &delta, &h, &nw, 1e-5f, &normed));
        CHECK(api->matmul(dev, &normed, w(2), nullptr, &gu));
        CHECK(api->silu_mul(dev, &gate, &up, &act));
        CHECK(api->matmul(dev, &act, w(3), nullptr, &delta));
        ++next;
      };
      strata_matmul_params norm{}, add{}, silu{};
      norm.struct_size = add.struct_size = silu.struct_size = sizeof(norm);
      norm.prologue = STRATA_PROLOGUE_RMS_NORM;
      norm.norm_weight = &nw;
      norm.eps = 1e-5f;
      norm.prologue_scratch = &normed;
      add.accumulate = 1;
      add.product_scratch = &delta;
      silu.prologue = STRATA_PROLOGUE_SILU_MUL;
      silu.up = &up;
      silu.accumulate = 1;
      silu.prologue_scratch = &act;
      silu.product_scratch = &delta;
      auto fused_layer = [&] {
        CHECK(api->matmul_ex(dev, &h, w(0), &norm, &qkv));
        CHECK(api->matmul_ex(dev, &attn, w(1), &add, &h));
        CHECK(api->matmul_ex(dev, &h, w(2), &norm, &gu));
        CHECK(api->matmul_ex(dev, &gate, w(3), &silu, &h));
        ++next;
      };
      auto products_only = [&] {
        CHECK(api->matmul(dev, &normed, w(0), nullptr, &qkv));
        CHECK(api->matmul(dev, &attn, w(1), nullptr, &delta));
        CHECK(api->matmul(dev, &normed, w(2), nullptr, &gu));
        CHECK(api->matmul(dev, &act, w(3), nullptr, &delta));
        ++next;
      };
      auto elementwise_only = [&] {
        CHECK(api->rms_norm(dev, &delta, &h, &nw, 1e-5f, &normed));
        CHECK(api->rms_norm(dev, &delta, &h, &nw, 1e-5f, &normed));
        CHECK(api->silu_mul(dev, &gate, &up, &act));
      };
      const double unfused = MedianSeconds(unfused_layer);
      const double fused = MedianSeconds(fused_layer);
      const double fused_graph = GraphSecondsPerCall(fused_layer, 8);
      const double products_graph = GraphSecondsPerCall(products_only, 8);
      const double elementwise_graph = GraphSecondsPerCall(elementwise_only, 8);
      const double bytes = 2.0 * d * (qkvd + d + 2 * ff) + 2.0 * ff * d;
      std::printf("{\"op\":\"decode_layer_products\",\"device\":\"%s\",\"tokens\":%lld,\"unfused_us\":%.1f,"
                  "\"fused_us\":%.1f,\"fused_bw_fraction_of_4.24TBps\":%.3f,\"fused_graph_us\":%.1f,"
                  "\"products_only_graph_us\":%.1f,\"elementwise_only_graph_us\":%.1f}\n",
                  c.name, (long long)n, unfused * 1e6, fused * 1e6, bytes / fused / 4.24e12, fused_graph * 1e6,
                  products_graph * 1e6, elementwise_graph * 1e6);
      std::fflush(stdout);
      for (strata_buffer b : {hb, db, nb, qb, ab, gb, sb, wb}) api->buffer_free(dev, b);
    }
    for (auto& v : ws) {
      for (strata_weight W : v) api->weight_free(dev, W);
    }
  }
  for (ChainDev& c : cds) api->device_close(c.dev);
}

// STRATA_OP_BENCH=decode_attention: the decode kernels (attention, and rope_attention with
// the rope/KV write fused) at serving batch sizes: the GQA kernel and the tensor-core kernel
// (device option decode_attention=gqa|mma), over a 4-layer cache whose layer rotates per
// call (a layer's KV of 128 sequences x 192 tokens is 100 MB; no call finds it in L2).
// Block tables in order or shuffled; and, as a control for DRAM locality, one KV head with
// 4 query heads and 8x the sequences: the same work per (token, KV head), but its rows are
// contiguous instead of interleaved with the other heads' rows.
// STRATA_OP_BENCH_KV_DTYPES=bf16,fp8,int8 times those cache types (default bf16; kv_GBps
// counts the bytes each reads); STRATA_OP_BENCH_DECODE_CONTEXT=N keeps the configurations of
// that context only (e.g. 4096: 32 sequences at 4,096 tokens, issue 28's TPOT shape);
// STRATA_OP_BENCH_DECODE_KERNELS=mma (or gqa) times that kernel only.
void DecodeAttentionSweep() {
  struct Variant { const char* kernel; strata_device dev = nullptr; };
  std::vector<Variant> vs = {{"gqa"}, {"mma"}};
  if (const char* e = std::getenv("STRATA_OP_BENCH_DECODE_KERNELS"); e != nullptr && *e != '\0') {
    std::vector<Variant> keep;
    for (const Variant& v : vs) {
      if (std::strstr(e, v.kernel) != nullptr) keep.push_back(v);
    }
    vs = keep;
  }
  for (Variant& v : vs) {
    const std::string opts = std::string("activations=bf16;decode_attention=") + v.kernel;
    strata_device_options o{};
    o.struct_size = sizeof(o);
    o.options = opts.c_str();
    CHECK(api->device_open(0, &o, &v.dev));
  }
  struct Config { int32_t batch, ctx, heads, kv_heads; bool shuffled; };
  const Config configs[] = {{128, 192, 32, 8, false}, {128, 192, 32, 8, true},  {128, 1024, 32, 8, false},
                            {64, 192, 32, 8, false},  {64, 1024, 32, 8, false}, {32, 192, 32, 8, false},
                            {32, 1024, 32, 8, false}, {16, 1024, 32, 8, false}, {1, 128, 32, 8, false},
                            {1, 256, 32, 8, false},   {1, 1024, 32, 8, false}, {1, 4096, 32, 8, false},
                            {32, 4096, 32, 8, false}, {1024, 192, 4, 1, false}};
  constexpr int32_t BF16 = STRATA_DTYPE_BF16, D = 128, BS = 16, kLayers = 4;
  std::vector<std::pair<std::string, int32_t>> kv_types = {{"bf16", BF16}};
  if (const char* e = std::getenv("STRATA_OP_BENCH_KV_DTYPES"); e != nullptr && *e != '\0') {
    kv_types.clear();
    std::string list = e;
    for (size_t at = 0; at <= list.size();) {
      const size_t end = std::min(list.find(',', at), list.size());
      const std::string name = list.substr(at, end - at);
      if (name == "bf16") kv_types.push_back({name, BF16});
      if (name == "fp8") kv_types.push_back({name, STRATA_DTYPE_FP8_E4M3});
      if (name == "int8") kv_types.push_back({name, STRATA_DTYPE_I8});
      at = end + 1;
    }
  }
  const char* only_ctx = std::getenv("STRATA_OP_BENCH_DECODE_CONTEXT");
  for (const Config& c : configs) {
    if (only_ctx != nullptr && *only_ctx != '\0' && std::atoi(only_ctx) != c.ctx) continue;
    for (const auto& [kv_name, kv_dtype] : kv_types)
    for (Variant& v : vs) {
      dev = v.dev;
      const int32_t bps = (c.ctx + BS - 1) / BS;
      strata_kv_cache_desc kd{};
      kd.struct_size = sizeof(kd);
      kd.num_layers = kLayers;
      kd.num_blocks = bps * c.batch;
      kd.block_size = BS;
      kd.num_kv_heads = c.kv_heads;
      kd.head_dim = D;
      kd.dtype = kv_dtype;
      kd.scale_mode = kv_dtype == STRATA_DTYPE_I8 ? STRATA_KV_SCALE_PER_BLOCK_HEAD : STRATA_KV_SCALE_PER_TENSOR;
      strata_kv_cache kv = nullptr;
      CHECK(api->kv_cache_create(dev, &kd, &kv));
      std::vector<int32_t> qsl(c.batch + 1), lens(c.batch, c.ctx), pos(c.batch, c.ctx - 1), slots(c.batch);
      std::vector<int32_t> tables(static_cast<size_t>(c.batch) * bps);
      for (int32_t s2 = 0; s2 <= c.batch; ++s2) qsl[s2] = s2;
      for (size_t i = 0; i < tables.size(); ++i) tables[i] = static_cast<int32_t>(i);
      if (c.shuffled) {
        uint64_t r = 12345;
        for (size_t i = tables.size(); i > 1; --i) {
          r = r * 6364136223846793005ull + 1442695040888963407ull;
          std::swap(tables[i - 1], tables[(r >> 33) % i]);
        }
      }
      for (int32_t s2 = 0; s2 < c.batch; ++s2) {
        slots[s2] = tables[static_cast<size_t>(s2) * bps + (c.ctx - 1) / BS] * BS + (c.ctx - 1) % BS;
      }
      auto ints = [&](const std::vector<int32_t>& vals) {
        strata_buffer b = nullptr;
        CHECK(api->buffer_alloc(dev, vals.size() * 4, &b));
        CHECK(api->upload(dev, b, 0, vals.data(), vals.size() * 4));
        return b;
      };
      std::vector<float> inv(D / 2);
      for (int32_t j = 0; j < D / 2; ++j) inv[j] = std::pow(500000.0f, -2.0f * j / D);
      strata_buffer qslb = ints(qsl), lensb = ints(lens), tb = ints(tables), posb = ints(pos), slotb = ints(slots);
      strata_buffer invb = nullptr;
      CHECK(api->buffer_alloc(dev, inv.size() * 4, &invb));
      CHECK(api->upload(dev, invb, 0, inv.data(), inv.size() * 4));
      strata_tensor qslt = T(qslb, STRATA_DTYPE_I32, {c.batch + 1}), lenst = T(lensb, STRATA_DTYPE_I32, {c.batch}),
                    tt = T(tb, STRATA_DTYPE_I32, {c.batch, bps}), post = T(posb, STRATA_DTYPE_I32, {c.batch}),
                    slott = T(slotb, STRATA_DTYPE_I32, {c.batch}), invt = T(invb, STRATA_DTYPE_F32, {D / 2});
      strata_batch_desc bd{};
      bd.struct_size = sizeof(bd);
      bd.num_tokens = c.batch;
      bd.num_seqs = c.batch;
      bd.max_query_len = 1;
      bd.max_seq_len = c.ctx;
      bd.max_blocks_per_seq = bps;
      bd.positions = &post;
      bd.slot_mapping = &slott;
      bd.query_start_loc = &qslt;
      bd.seq_lens = &lenst;
      bd.block_tables = &tt;
      bd.host_query_start_loc = qsl.data();
      bd.host_seq_lens = lens.data();
      strata_attention_params ap{};
      ap.struct_size = sizeof(ap);
      ap.num_heads = c.heads;
      ap.num_kv_heads = c.kv_heads;
      ap.head_dim = D;
      ap.scale = 0.0884f;
      strata_rope_params rp{};
      rp.struct_size = sizeof(rp);
      rp.style = STRATA_ROPE_NEOX;
      rp.rotary_dim = D;
      rp.attention_factor = 1.0f;
      rp.inv_freq = &invt;
      const size_t tokens = static_cast<size_t>(c.batch);
      strata_buffer qb = Alloc(tokens * c.heads * D * 2), ob = Alloc(tokens * c.heads * D * 2, false),
                    kb = Alloc(tokens * c.kv_heads * D * 2), vb = Alloc(tokens * c.kv_heads * D * 2);
      strata_tensor q = T(qb, BF16, {c.batch, c.heads * D}), out = T(ob, BF16, {c.batch, c.heads * D}),
                    k = T(kb, BF16, {c.batch, c.kv_heads * D}), vt = T(vb, BF16, {c.batch, c.kv_heads * D});
      int32_t layer = 0;
      const double plain = MedianSeconds([&] {
        CHECK(api->attention(dev, &ap, &bd, &q, kv, layer, &out));
        layer = (layer + 1) % kLayers;
      });
      const double fused = MedianSeconds([&] {
        CHECK(api->rope_attention(dev, &rp, &ap, &bd, &q, &k, &vt, kv, layer, &out));
        layer = (layer + 1) % kLayers;
      });
      const double kv_bytes = 2.0 * c.batch * c.ctx * c.kv_heads * D * (kv_dtype == BF16 ? 2 : 1);
      std::printf("{\"op\":\"decode_attention\",\"kernel\":\"%s\",\"kv_dtype\":\"%s\",\"batch\":%d,"
                  "\"context\":%d,\"heads\":%d,\"kv_heads\":%d,\"block_tables\":\"%s\",\"attention_us\":%.1f,"
                  "\"rope_attention_us\":%.1f,\"kv_GBps\":%.0f,\"rope_attention_kv_GBps\":%.0f,"
                  "\"bw_fraction_of_4.24TBps\":%.3f}\n",
                  v.kernel, kv_name.c_str(), c.batch, c.ctx, c.heads, c.kv_heads, c.shuffled ? "shuffled" : "in order",
                  plain * 1e6,
                  fused * 1e6, kv_bytes / plain / 1e9, kv_bytes / fused / 1e9, kv_bytes / plain / 4.24e12);
      std::fflush(stdout);
      for (strata_buffer b : {qslb, lensb, tb, posb, slotb, invb, qb, ob, kb, vb}) api->buffer_free(dev, b);
      api->kv_cache_free(dev, kv);
    }
  }
  for (Variant& v : vs) api->device_close(v.dev);
}

}  // namespace

// STRATA_OP_BENCH=sampling (or argmax): token selection over the Llama-3 vocabulary (F32
// logits) at decode batch sizes: argmax graph-replayed (as in a decode step), then sample()
// with temperature 0.8 alone, with top-p 0.9, and with top-k 50 and top-p 0.9 (each call
// uploads its per-row parameters, so it is timed in the stream, not as a graph); bytes of
// logits over time as GB/s. sample() runs on two kinds of logits: "flat" (|x| <= 0.5, every
// token within a factor 2 of the most likely: the widest nucleus, the worst case for cuts
// that gather the tokens around the crossing) and "peaked" (normal with sd 2 plus 20 strong
// tokens, as a model's logits are), and "tied" (16 values, each held by 1/16 of the row, as
// in `--synthetic` models, whose weights repeat a pool of 65,536 numbers: the tie groups
// are larger than the cuts can gather). STRATA_OP_BENCH_SAMPLING_ROWS=N measures N rows only.
void SamplingSweep() {
  strata_device_options opts{};
  opts.struct_size = sizeof(opts);
  opts.options = "activations=bf16";
  CHECK(api->device_open(0, &opts, &dev));
  const int64_t vocab = 128256;
  std::vector<int64_t> row_counts = {1, 8, 32, 128, 256};
  if (const char* e = std::getenv("STRATA_OP_BENCH_SAMPLING_ROWS")) row_counts = {std::atoll(e)};
  for (int64_t rows : row_counts) {
    strata_buffer lb = Alloc(rows * vocab * 4), ob = Alloc(rows * 4, false);
    strata_tensor l = T(lb, STRATA_DTYPE_F32, {rows, vocab}), o = T(ob, STRATA_DTYPE_I32, {rows});
    const double sec = MedianSeconds([&] { CHECK(api->argmax(dev, &l, &o)); });
    const double graph = GraphSecondsPerCall([&] { CHECK(api->argmax(dev, &l, &o)); }, 10);
    std::printf("{\"op\":\"argmax\",\"rows\":%lld,\"vocab\":%lld,\"us\":%.1f,\"graph_us\":%.1f,\"GBps\":%.0f}\n",
                (long long)rows, (long long)vocab, sec * 1e6, graph * 1e6, rows * vocab * 4.0 / graph / 1e9);
    std::mt19937 rng(5);
    std::normal_distribution<float> normal(0.0f, 2.0f);
    std::vector<float> peaked(rows * vocab);
    for (float& x : peaked) x = normal(rng);
    for (int64_t r = 0; r < rows; ++r) {
      for (int i = 0; i < 20; ++i) peaked[r * vocab + rng() % vocab] = 14.0f + normal(rng);
    }
    strata_buffer pb = Alloc(rows * vocab * 4, false);
    CHECK(api->upload(dev, pb, 0, peaked.data(), peaked.size() * 4));
    const strata_tensor pl = T(pb, STRATA_DTYPE_F32, {rows, vocab});
    std::vector<float> tied(rows * vocab), values(16);
    for (float& v : values) v = 0.64f * normal(rng);
    for (size_t i = 0; i < tied.size(); ++i) tied[i] = values[(i % vocab) % 16];
    strata_buffer tb = Alloc(rows * vocab * 4, false);
    CHECK(api->upload(dev, tb, 0, tied.data(), tied.size() * 4));
    const strata_tensor tl = T(tb, STRATA_DTYPE_F32, {rows, vocab});
    struct Mode { const char* name; int32_t top_k; float top_p; };
    for (const char* kind : {"flat", "peaked", "tied"})
    for (Mode m : {Mode{"temperature", 0, 1.0f}, Mode{"top_p", 0, 0.9f}, Mode{"top_k_top_p", 50, 0.9f}}) {
      const strata_tensor& logits = std::strcmp(kind, "flat") == 0 ? l : std::strcmp(kind, "peaked") == 0 ? pl : tl;
      std::vector<float> temp(rows, 0.8f), top_p(rows, m.top_p), min_p(rows, 0.0f);
      std::vector<int32_t> top_k(rows, m.top_k);
      std::vector<uint64_t> seed(rows, 7), step(rows, 0);
      strata_sample_params sp{sizeof(sp), temp.data(), top_k.data(), top_p.data(),
                              min_p.data(), seed.data(), step.data()};
      const double ss = MedianSeconds([&] {
        ++step[0];
        CHECK(api->sample(dev, &logits, &sp, &o));
      });
      std::printf("{\"op\":\"sample\",\"mode\":\"%s\",\"logits\":\"%s\",\"rows\":%lld,\"vocab\":%lld,\"us\":%.1f,"
                  "\"GBps\":%.0f}\n",
                  m.name, kind, (long long)rows, (long long)vocab, ss * 1e6, rows * vocab * 4.0 / ss / 1e9);
    }
    api->buffer_free(dev, tb);
    api->buffer_free(dev, pb);
    api->buffer_free(dev, lb);
    api->buffer_free(dev, ob);
  }
}

int main(int argc, char** argv) {
  const std::string path = std::string(argc > 1 ? argv[1] : STRATA_PLUGIN_DIR) + "/libstrata-backend-cuda.so";
  void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) {
    std::fprintf(stderr, "dlopen %s: %s\n", path.c_str(), dlerror());
    return 1;
  }
  auto init = reinterpret_cast<strata_backend_init_fn>(dlsym(h, STRATA_BACKEND_INIT_SYMBOL));
  const strata_plugin_info* info = init();
  api = info->backend;
  int32_t n = 0;
  api->device_count(&n);
  if (n == 0) {
    std::printf("{\"skipped\":\"no CUDA device: %s\"}\n", info->unavailable_reason());
    return 0;
  }
  if (const char* only = std::getenv("STRATA_OP_BENCH");
      only != nullptr && (std::strcmp(only, "sampling") == 0 || std::strcmp(only, "argmax") == 0)) {
    SamplingSweep();
    return 0;
  }
  if (const char* only = std::getenv("STRATA_OP_BENCH"); only != nullptr && std::strcmp(only, "decode_attention") == 0) {
    DecodeAttentionSweep();
    return 0;
  }
  if (const char* only = std::getenv("STRATA_OP_BENCH"); only != nullptr && std::strcmp(only, "gemm") == 0) {
    GemmSweep();
    return 0;
  }
  if (const char* only = std::getenv("STRATA_OP_BENCH"); only != nullptr && std::strcmp(only, "layer") == 0) {
    DecodeLayerChain({1, 32, 128});
    return 0;
  }

  // Devices on GPU 0: the default kernel paths (the streaming GEMV at 1 token, else
  // cuBLASLt's first heuristic choice; the wgmma prefill attention on sm_90, else FA2, or the
  // kernel STRATA_CUDA_PREFILL_ATTENTION names; GQA decode attention), the
  // fused one-token kernel for plain products too ("fused": matmul_ex's kernel, without a
  // prologue), the previous paths (the row kernel only) with the opt-in
  // matmul tuning (gemm_tune=on; WMMA prefill, per-head split-K decode) and the oldest
  // (cuBLASLt everywhere, SIMT attention).
  struct Path { const char* name; const char* options; strata_device dev; };
  Path paths[] = {{"auto", "activations=bf16;gemv=auto;decode_attention=auto", nullptr},
                  {"previous", "activations=bf16;gemv=rows;gemm_tune=on;pdl=off;prefill_attention=wmma;decode_attention=simple", nullptr},
                  {"legacy", "activations=bf16;gemv=cublas;gemm_tune=off;pdl=off;prefill_attention=simple;decode_attention=simple", nullptr},
                  {"fused", "activations=bf16;gemv=fused", nullptr}};
  for (Path& p : paths) {
    strata_device_options o{};
    o.struct_size = sizeof(o);
    o.options = p.options;
    CHECK(api->device_open(0, &o, &p.dev));
  }
  constexpr int32_t BF16 = STRATA_DTYPE_BF16;
  // STRATA_OP_BENCH=attention: only the attention cases below (prefill and decode, each
  // path, and rope_kv_write / rope_attention on the default path).
  const char* only = std::getenv("STRATA_OP_BENCH");
  const bool attention_only = only != nullptr && std::strcmp(only, "attention") == 0;

  // GEMMs at the Llama-3-8B layer shapes, weights rotating through copies (WeightCopies).
  for (const Shape& s : attention_only ? std::span<const Shape>() : std::span<const Shape>(kShapes)) {
    std::vector<uint16_t> w = RandomBf16(static_cast<size_t>(s.rows * s.cols), 0.02f);
    for (Path& p : paths) {
      dev = p.dev;
      const std::vector<strata_weight> ws = WeightCopies(s, w);
      size_t next = 0;
      for (int64_t tokens : {1, 2, 4, 8, 32, 128, 4096}) {
        if (&p == &paths[2] && tokens > 8) continue;  // "legacy" = "previous" there
        if (&p == &paths[3] && tokens > 1) continue;  // "fused" = "auto" there
        strata_buffer xb = Alloc(tokens * s.cols * 2), ob = Alloc(tokens * s.rows * 2, false);
        strata_tensor x = T(xb, BF16, {tokens, s.cols}), out = T(ob, BF16, {tokens, s.rows});
        const double sec =
            MedianSeconds([&] { CHECK(api->matmul(dev, &x, ws[next++ % ws.size()], nullptr, &out)); });
        const double bytes = 2.0 * s.rows * s.cols, flops = 2.0 * tokens * s.rows * s.cols;
        std::printf("{\"op\":\"matmul\",\"path\":\"%s\",\"shape\":\"%s\",\"m\":%lld,\"k\":%lld,\"tokens\":%lld,"
                    "\"weight_copies\":%zu,\"us\":%.1f,\"weight_GBps\":%.0f,\"TFLOPs\":%.1f,"
                    "\"bw_fraction_of_4.24TBps\":%.3f}\n",
                    p.name, s.name, (long long)s.rows, (long long)s.cols, (long long)tokens, ws.size(), sec * 1e6,
                    bytes / sec / 1e9, flops / sec / 1e12, bytes / sec / 4.24e12);
        api->buffer_free(dev, xb);
        api->buffer_free(dev, ob);
      }
      for (strata_weight W : ws) api->weight_free(dev, W);
    }
  }

  if (!attention_only) DecodeLayerChain({1});

  // Elementwise ops of a layer on the default path: the fused residual add + RMSNorm (reads
  // x and the residual, writes both: 4 x 8 KB per token) and silu_mul on the halves of the
  // gate/up output (reads 2 x 28 KB, writes 28 KB per token); bytes over time as GB/s.
  dev = paths[0].dev;
  for (int64_t tokens : attention_only ? std::vector<int64_t>{} : std::vector<int64_t>{1, 128, 4096}) {
    const int64_t d = 4096, ff = 14336;
    strata_buffer xb = Alloc(tokens * d * 2), rb = Alloc(tokens * d * 2), ob = Alloc(tokens * d * 2, false);
    strata_buffer wb = nullptr;
    CHECK(api->buffer_alloc(dev, d * 4, &wb));
    std::vector<float> ones(static_cast<size_t>(d), 1.0f);
    CHECK(api->upload(dev, wb, 0, ones.data(), ones.size() * 4));
    strata_tensor x = T(xb, BF16, {tokens, d}), r = T(rb, BF16, {tokens, d}), o = T(ob, BF16, {tokens, d}),
                  w = T(wb, STRATA_DTYPE_F32, {d});
    double sec = MedianSeconds([&] { CHECK(api->rms_norm(dev, &x, &r, &w, 1e-5f, &o)); });
    std::printf("{\"op\":\"rms_norm_fused_residual\",\"tokens\":%lld,\"us\":%.1f,\"GBps\":%.0f}\n", (long long)tokens,
                sec * 1e6, 4.0 * tokens * d * 2 / sec / 1e9);
    strata_buffer gb = Alloc(tokens * 2 * ff * 2), ab = Alloc(tokens * ff * 2, false);
    strata_tensor gate = T(gb, BF16, {tokens, ff}), up = T(gb, BF16, {tokens, ff}), act = T(ab, BF16, {tokens, ff});
    gate.row_stride = up.row_stride = 2 * ff;
    up.offset = static_cast<uint64_t>(ff) * 2;
    sec = MedianSeconds([&] { CHECK(api->silu_mul(dev, &gate, &up, &act)); });
    std::printf("{\"op\":\"silu_mul\",\"tokens\":%lld,\"us\":%.1f,\"GBps\":%.0f}\n", (long long)tokens, sec * 1e6,
                3.0 * tokens * ff * 2 / sec / 1e9);
    for (strata_buffer b : {xb, rb, ob, wb, gb, ab}) api->buffer_free(dev, b);
  }

  // Attention: 32 heads, 8 KV heads, block 16, bf16 cache (one layer), head_dim 128 (Llama-3-8B)
  // or 64 (Llama-3.2-1B, prefill cases only).
  // (batch, context, query_len): decode (128 x 192: the 128-sequence serving run's mean
  // context), a 4096-token prompt, a 512-token chunk after 3584
  // cached tokens, 8 prompts of 1024, 64 prompts of 128 (the first prefill step of the
  // 128-sequence serving run). STRATA_OP_BENCH_ATTENTION_CASES="128x192x1,64x128x128x64" picks
  // cases (batch x context x query_len, x64 for head_dim 64), and then times the default path
  // only.
  const int32_t H = 32, KVH = 8, BS = 16;
  const char* picked = std::getenv("STRATA_OP_BENCH_ATTENTION_CASES");
  for (auto [batch, ctx, qlen, D] : std::vector<std::tuple<int32_t, int32_t, int32_t, int32_t>>{
           {1, 4096, 1, 128}, {32, 1024, 1, 128}, {128, 1024, 1, 128}, {128, 192, 1, 128}, {1, 4096, 4096, 128},
           {1, 4096, 512, 128}, {8, 1024, 1024, 128}, {64, 128, 128, 128}, {1, 4096, 4096, 64}, {1, 4096, 512, 64},
           {8, 1024, 1024, 64}, {64, 128, 128, 64}}) {
    if (picked != nullptr) {
      std::string list(","), name(",");
      list.append(picked).append(",");
      name.append(std::to_string(batch)).append("x").append(std::to_string(ctx)).append("x");
      name.append(std::to_string(qlen)).append(D == 128 ? "," : "x64,");
      if (list.find(name) == std::string::npos) continue;
    }
    for (Path& p : paths) {
      if (picked != nullptr && &p != &paths[0]) continue;
      if (&p == &paths[2] && qlen == 1) continue;  // decode: "legacy" is "previous"
      if (&p == &paths[3]) continue;  // a matmul-only variant
      dev = p.dev;
      const int32_t blocks_per_seq = (ctx + BS - 1) / BS;
      strata_kv_cache_desc kd{};
      kd.struct_size = sizeof(kd);
      kd.num_layers = 1;
      kd.num_blocks = blocks_per_seq * batch;
      kd.block_size = BS;
      kd.num_kv_heads = KVH;
      kd.head_dim = D;
      kd.dtype = BF16;
      strata_kv_cache kv = nullptr;
      CHECK(api->kv_cache_create(dev, &kd, &kv));
      const int32_t tokens = batch * qlen;
      std::vector<int32_t> qsl(batch + 1), lens(batch, ctx), tables(static_cast<size_t>(batch) * blocks_per_seq);
      for (int32_t s = 0; s <= batch; ++s) qsl[s] = s * qlen;
      for (size_t i = 0; i < tables.size(); ++i) tables[i] = static_cast<int32_t>(i);
      auto ints = [&](const std::vector<int32_t>& v) {
        strata_buffer b = nullptr;
        CHECK(api->buffer_alloc(dev, v.size() * 4, &b));
        CHECK(api->upload(dev, b, 0, v.data(), v.size() * 4));
        return b;
      };
      strata_buffer qslb = ints(qsl), lensb = ints(lens), tb = ints(tables);
      strata_tensor qslt = T(qslb, STRATA_DTYPE_I32, {batch + 1}), lenst = T(lensb, STRATA_DTYPE_I32, {batch}),
                    tt = T(tb, STRATA_DTYPE_I32, {batch, blocks_per_seq});
      strata_batch_desc bd{};
      bd.struct_size = sizeof(bd);
      bd.num_tokens = tokens;
      bd.num_seqs = batch;
      bd.max_query_len = qlen;
      bd.max_seq_len = ctx;
      bd.max_blocks_per_seq = blocks_per_seq;
      bd.query_start_loc = &qslt;
      bd.seq_lens = &lenst;
      bd.block_tables = &tt;
      bd.host_query_start_loc = qsl.data();
      bd.host_seq_lens = lens.data();
      strata_attention_params ap{};
      ap.struct_size = sizeof(ap);
      ap.num_heads = H;
      ap.num_kv_heads = KVH;
      ap.head_dim = D;
      ap.scale = 1.0f / std::sqrt(static_cast<float>(D));
      strata_buffer qb = Alloc(static_cast<size_t>(tokens) * H * D * 2),
                    ob = Alloc(static_cast<size_t>(tokens) * H * D * 2, false);
      strata_tensor q = T(qb, BF16, {tokens, H * D}), out = T(ob, BF16, {tokens, H * D});
      const double sec = MedianSeconds([&] { CHECK(api->attention(dev, &ap, &bd, &q, kv, 0, &out)); });
      const double kv_bytes = 2.0 * batch * ctx * KVH * D * 2;
      // Causal score count: each query at position p sees p + 1 keys.
      const double keys_seen = double(batch) * (double(qlen) * (ctx - qlen) + double(qlen) * (qlen + 1) / 2);
      const double flops = 4.0 * H * D * keys_seen;
      std::printf("{\"op\":\"attention\",\"path\":\"%s\",\"batch\":%d,\"context\":%d,\"query_len\":%d,"
                  "\"head_dim\":%d,\"us\":%.1f,\"kv_GBps\":%.0f,\"TFLOPs\":%.2f}\n",
                  p.name, batch, ctx, qlen, D, sec * 1e6, kv_bytes / sec / 1e9, flops / sec / 1e12);
      if (&p == &paths[0] && STRATA_BACKEND_HAS_ROPE_ATTENTION(api)) {
        // A step's rope + KV write + attention: rope_kv_write alone, the two ops, and ABI
        // 1.3's rope_attention (on CUDA one kernel at a decode step: the decode kernel
        // rotates q and writes the new K/V itself). Llama 3 rope (NEOX, full rotary), each
        // sequence's tokens at its last positions; q and k rotate again on every call, which
        // changes no cost.
        std::vector<int32_t> pos(static_cast<size_t>(tokens)), slots(static_cast<size_t>(tokens));
        for (int32_t s2 = 0; s2 < batch; ++s2) {
          for (int32_t j = 0; j < qlen; ++j) {
            const int32_t at = ctx - qlen + j;
            pos[static_cast<size_t>(s2) * qlen + j] = at;
            slots[static_cast<size_t>(s2) * qlen + j] =
                tables[static_cast<size_t>(s2) * blocks_per_seq + at / BS] * BS + at % BS;
          }
        }
        std::vector<float> inv(D / 2);
        for (int32_t j = 0; j < D / 2; ++j) inv[j] = std::pow(500000.0f, -2.0f * j / D);
        strata_buffer posb = ints(pos), slotb = ints(slots), invb = nullptr;
        CHECK(api->buffer_alloc(dev, inv.size() * 4, &invb));
        CHECK(api->upload(dev, invb, 0, inv.data(), inv.size() * 4));
        strata_buffer kb = Alloc(static_cast<size_t>(tokens) * KVH * D * 2),
                      vb = Alloc(static_cast<size_t>(tokens) * KVH * D * 2);
        strata_tensor post = T(posb, STRATA_DTYPE_I32, {tokens}), slott = T(slotb, STRATA_DTYPE_I32, {tokens}),
                      invt = T(invb, STRATA_DTYPE_F32, {D / 2}), k = T(kb, BF16, {tokens, KVH * D}),
                      v = T(vb, BF16, {tokens, KVH * D});
        bd.positions = &post;
        bd.slot_mapping = &slott;
        strata_rope_params rp{};
        rp.struct_size = sizeof(rp);
        rp.style = STRATA_ROPE_NEOX;
        rp.rotary_dim = D;
        rp.attention_factor = 1.0f;
        rp.inv_freq = &invt;
        const double rope_only = MedianSeconds([&] { CHECK(api->rope_kv_write(dev, &rp, &ap, &bd, &q, &k, &v, kv, 0)); });
        const double two = MedianSeconds([&] {
          CHECK(api->rope_kv_write(dev, &rp, &ap, &bd, &q, &k, &v, kv, 0));
          CHECK(api->attention(dev, &ap, &bd, &q, kv, 0, &out));
        });
        const double fused =
            MedianSeconds([&] { CHECK(api->rope_attention(dev, &rp, &ap, &bd, &q, &k, &v, kv, 0, &out)); });
        std::printf("{\"op\":\"rope_attention\",\"batch\":%d,\"context\":%d,\"query_len\":%d,\"head_dim\":%d,"
                    "\"rope_kv_write_us\":%.1f,\"two_ops_us\":%.1f,\"fused_us\":%.1f}\n",
                    batch, ctx, qlen, D, rope_only * 1e6, two * 1e6, fused * 1e6);
        for (strata_buffer b2 : {posb, slotb, invb, kb, vb}) api->buffer_free(dev, b2);
      }
      for (strata_buffer b : {qslb, lensb, tb, qb, ob}) api->buffer_free(dev, b);
      api->kv_cache_free(dev, kv);
    }
  }
  for (Path& p : paths) api->device_close(p.dev);
  return 0;
}

