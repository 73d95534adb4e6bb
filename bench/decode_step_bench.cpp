// The transformer step of a Llama model at a given shape, issued op by op through a plugin's
// ABI table (no core, no checkpoint): rms_norm, the QKV / O / gate-up / down products,
// RoPE + KV write, paged attention, silu_mul, the final norm and the LM head. Weights are
// random, one layer's set reused by every layer (a layer's weights are far larger than any
// cache, so each layer still streams them from memory). The projection weights are DENSE
// (f32 / f16 / bf16) or W8A8 (per-row int8, dynamic per-token activations); embeddings and
// the LM head stay dense bf16 (f32 with --format f32).
//
// Modes: decode (`--batch` sequences, one token each, at context --context), prefill (one
// sequence of --batch tokens). Prints one JSON line: tokens/s and ms per step (median of
// --reps steps after a warm-up step).
// --act bf16 issues the step in BF16 activations (a device opened with activations=bf16, as
// the CUDA backend runs models; default f32), --kv-dtype f32|f16|bf16|fp8|int8 picks the
// cache type (default f32): e.g. the decode step of 32 sequences at 4,096 tokens with a BF16
// and an FP8 cache (issue 28's TPOT figure, scripts/gpu/run_gpu.sh kv8).
//
//   decode_step_bench --plugin build/bin/libstrata-backend-opencl.so --shape llama-110m
//       --format w8a8 --mode decode --batch 1 --context 128 --reps 20
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "strata/device.h"

namespace {

struct Shape {
  const char* name;
  int dim, hidden, layers, heads, kv_heads, vocab;
};
const Shape kShapes[] = {
    {"llama3-8b", 4096, 14336, 32, 32, 8, 128256},
    {"llama-110m", 768, 2048, 12, 12, 12, 32000},
};

const strata_backend_v1* api = nullptr;
strata_device dev = nullptr;

void Check(strata_status s, const char* what) {
  if (s != STRATA_OK) {
    std::fprintf(stderr, "decode_step_bench: %s: %s\n", what, api->last_error());
    std::exit(1);
  }
}

strata_tensor Alloc(int32_t dtype, int64_t rows, int64_t cols) {
  strata_buffer b = nullptr;
  Check(api->buffer_alloc(dev, static_cast<uint64_t>(rows * cols) * strata_dtype_size(dtype), &b), "buffer_alloc");
  strata_tensor t{};
  t.buffer = b;
  t.dtype = dtype;
  t.ndim = 2;
  t.shape[0] = rows;
  t.shape[1] = cols;
  return t;
}

void Upload(const strata_tensor& t, const void* data, size_t bytes) { Check(api->upload(dev, t.buffer, t.offset, data, bytes), "upload"); }

uint16_t ToBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

strata_weight MakeWeight(const std::string& format, int64_t rows, int64_t cols, std::mt19937& rng) {
  strata_weight_desc d{};
  d.struct_size = sizeof(d);
  d.rows = rows;
  d.cols = cols;
  d.name = "bench";
  d.counter_slot = -1;
  std::vector<int8_t> q;
  std::vector<float> scales, f;
  std::vector<uint16_t> h;
  std::uniform_real_distribution<float> u(-0.05f, 0.05f);
  if (format == "w8a8" || format == "w8a16") {
    q.resize(static_cast<size_t>(rows * cols));
    for (auto& v : q) v = static_cast<int8_t>(static_cast<int>(rng() % 255) - 127);
    scales.assign(rows, 0.0004f);
    d.format = format == "w8a8" ? STRATA_WEIGHT_W8A8 : STRATA_WEIGHT_INT8_PER_CHANNEL;
    d.dtype = STRATA_DTYPE_I8;
    d.data = q.data();
    d.scales = scales.data();
    d.scales_dtype = STRATA_DTYPE_F32;
  } else if (format == "f32") {
    f.resize(static_cast<size_t>(rows * cols));
    for (auto& v : f) v = u(rng);
    d.format = STRATA_WEIGHT_DENSE;
    d.dtype = STRATA_DTYPE_F32;
    d.data = f.data();
  } else {
    h.resize(static_cast<size_t>(rows * cols));
    for (auto& v : h) v = ToBf16(u(rng));
    d.format = STRATA_WEIGHT_DENSE;
    d.dtype = STRATA_DTYPE_BF16;
    d.data = h.data();
  }
  strata_weight w = nullptr;
  Check(api->weight_create(dev, &d, &w), "weight_create");
  return w;
}

}  // namespace

int main(int argc, char** argv) {
  std::string plugin, shape_name = "llama-110m", format = "f32", mode = "decode", options, act_name = "f32",
                                                                                   kv_name = "f32";
  int batch = 1, context = 128, reps = 10, threads = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--plugin") plugin = v;
    else if (k == "--shape") shape_name = v;
    else if (k == "--format") format = v;
    else if (k == "--mode") mode = v;
    else if (k == "--batch") batch = std::atoi(v.c_str());
    else if (k == "--context") context = std::atoi(v.c_str());
    else if (k == "--reps") reps = std::atoi(v.c_str());
    else if (k == "--threads") threads = std::atoi(v.c_str());
    else if (k == "--options") options = v;
    else if (k == "--act") act_name = v;
    else if (k == "--kv-dtype") kv_name = v;
    else {
      std::fprintf(stderr, "decode_step_bench: unknown flag %s\n", k.c_str());
      return 2;
    }
  }
  const Shape* shape = nullptr;
  for (const Shape& s : kShapes) {
    if (shape_name == s.name) shape = &s;
  }
  const int32_t kv_dtype = kv_name == "f32"    ? STRATA_DTYPE_F32
                           : kv_name == "f16"  ? STRATA_DTYPE_F16
                           : kv_name == "bf16" ? STRATA_DTYPE_BF16
                           : kv_name == "fp8"  ? STRATA_DTYPE_FP8_E4M3
                           : kv_name == "int8" ? STRATA_DTYPE_I8
                                               : -1;
  if (plugin.empty() || shape == nullptr || batch <= 0 || reps <= 0 || (mode != "decode" && mode != "prefill") ||
      (act_name != "f32" && act_name != "bf16") || kv_dtype < 0) {
    std::fprintf(stderr, "usage: decode_step_bench --plugin FILE [--shape llama3-8b|llama-110m] [--format f32|bf16|w8a8|w8a16] "
                         "[--mode decode|prefill] [--batch N] [--context N] [--reps N] [--threads N] [--options S] "
                         "[--act f32|bf16] [--kv-dtype f32|f16|bf16|fp8|int8]\n");
    return 2;
  }
  const int32_t A = act_name == "bf16" ? STRATA_DTYPE_BF16 : STRATA_DTYPE_F32;  // activations
  const size_t a_es = A == STRATA_DTYPE_BF16 ? 2 : 4;
  void* h = dlopen(plugin.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) {
    std::fprintf(stderr, "decode_step_bench: %s\n", dlerror());
    return 1;
  }
  auto init = reinterpret_cast<strata_backend_init_fn>(dlsym(h, STRATA_BACKEND_INIT_SYMBOL));
  if (init == nullptr) return 1;
  api = init()->backend;
  strata_device_options o{};
  o.struct_size = sizeof(o);
  o.num_threads = threads;
  o.options = options.empty() ? nullptr : options.c_str();
  Check(api->device_open(0, &o, &dev), "device_open");
  strata_device_info info{};
  info.struct_size = sizeof(info);
  api->device_info(0, &info);

  const int D = shape->dim, F = shape->hidden, H = shape->heads, KVH = shape->kv_heads, HD = D / H;
  const int qkv_rows = (H + 2 * KVH) * HD;
  const bool decode = mode == "decode";
  const int n = decode ? batch : batch;  // tokens per step
  const int seqs = decode ? batch : 1;
  const int ctx = decode ? context : batch;
  std::mt19937 rng(1);
  strata_weight wqkv = MakeWeight(format, qkv_rows, D, rng), wo = MakeWeight(format, D, H * HD, rng);
  strata_weight wgu = MakeWeight(format, 2 * F, D, rng), wdown = MakeWeight(format, D, F, rng);
  strata_weight lm_head = MakeWeight(format == "f32" ? "f32" : "bf16", shape->vocab, D, rng);

  const int block = 16, blocks_per_seq = (ctx + block - 1) / block;
  strata_kv_cache_desc kd{};
  kd.struct_size = sizeof(kd);
  kd.num_layers = shape->layers;
  kd.num_blocks = blocks_per_seq * seqs;
  kd.block_size = block;
  kd.num_kv_heads = KVH;
  kd.head_dim = HD;
  kd.dtype = kv_dtype;
  kd.scale_mode = kv_dtype == STRATA_DTYPE_I8 ? STRATA_KV_SCALE_PER_BLOCK_HEAD : STRATA_KV_SCALE_PER_TENSOR;
  strata_kv_cache kv = nullptr;
  Check(api->kv_cache_create(dev, &kd, &kv), "kv_cache_create");

  // Activations and the step's arrays.
  strata_tensor x = Alloc(A, n, D), res = Alloc(A, n, D), xn = Alloc(A, n, D);
  strata_tensor qkv = Alloc(A, n, qkv_rows), att = Alloc(A, n, H * HD);
  strata_tensor gu = Alloc(A, n, 2 * F), act = Alloc(A, n, F);
  strata_tensor norm_w = Alloc(STRATA_DTYPE_F32, 1, D), inv_freq = Alloc(STRATA_DTYPE_F32, 1, HD / 2);
  strata_tensor last = Alloc(A, seqs, D), logits = Alloc(STRATA_DTYPE_F32, seqs, shape->vocab);
  strata_tensor ids = Alloc(STRATA_DTYPE_I32, 1, seqs);
  std::vector<float> ones(D, 1.0f), freq(HD / 2), xs(static_cast<size_t>(n) * D);
  for (int f = 0; f < HD / 2; ++f) freq[f] = std::pow(500000.0f, -2.0f * f / HD);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (auto& v : xs) v = u(rng);
  Upload(norm_w, ones.data(), D * 4);
  Upload(inv_freq, freq.data(), freq.size() * 4);
  // Activation rows as the activation type.
  auto upload_act = [&](const strata_tensor& t, const std::vector<float>& vals) {
    if (A == STRATA_DTYPE_F32) return Upload(t, vals.data(), vals.size() * 4);
    std::vector<uint16_t> hv(vals.size());
    for (size_t i = 0; i < vals.size(); ++i) hv[i] = ToBf16(vals[i]);
    Upload(t, hv.data(), hv.size() * 2);
  };
  upload_act(res, xs);
  std::vector<int32_t> positions, slots, qsl = {0}, lens, tables, last_rows;
  for (int s = 0; s < seqs; ++s) {
    const int q_len = decode ? 1 : n;
    for (int j = 0; j < q_len; ++j) {
      const int p = ctx - q_len + j;
      positions.push_back(p);
      slots.push_back((s * blocks_per_seq + p / block) * block + p % block);
    }
    qsl.push_back(static_cast<int32_t>(positions.size()));
    lens.push_back(ctx);
    for (int b = 0; b < blocks_per_seq; ++b) tables.push_back(s * blocks_per_seq + b);
    last_rows.push_back(qsl.back() - 1);
  }
  auto vec = [&](const std::vector<int32_t>& v) {
    strata_tensor t = Alloc(STRATA_DTYPE_I32, 1, static_cast<int64_t>(v.size()));
    Upload(t, v.data(), v.size() * 4);
    t.ndim = 1;
    t.shape[0] = static_cast<int64_t>(v.size());
    return t;
  };
  strata_tensor tpos = vec(positions), tslots = vec(slots), tqsl = vec(qsl), tlens = vec(lens), tlast = vec(last_rows);
  strata_tensor tbt = Alloc(STRATA_DTYPE_I32, seqs, blocks_per_seq);
  Upload(tbt, tables.data(), tables.size() * 4);
  strata_batch_desc b{};
  b.struct_size = sizeof(b);
  b.num_tokens = n;
  b.num_seqs = seqs;
  b.max_query_len = decode ? 1 : n;
  b.max_seq_len = ctx;
  b.max_blocks_per_seq = blocks_per_seq;
  b.positions = &tpos;
  b.slot_mapping = &tslots;
  b.query_start_loc = &tqsl;
  b.seq_lens = &tlens;
  b.block_tables = &tbt;
  b.host_query_start_loc = qsl.data();
  b.host_seq_lens = lens.data();
  strata_rope_params rope{};
  rope.struct_size = sizeof(rope);
  rope.style = STRATA_ROPE_NEOX;
  rope.rotary_dim = HD;
  rope.attention_factor = 1.0f;
  rope.inv_freq = &inv_freq;
  strata_attention_params ap{};
  ap.struct_size = sizeof(ap);
  ap.num_heads = H;
  ap.num_kv_heads = KVH;
  ap.head_dim = HD;
  ap.scale = 1.0f / std::sqrt(static_cast<float>(HD));
  auto col = [&](const strata_tensor& t, int64_t from, int64_t cols) {
    strata_tensor v = t;
    v.offset = from * static_cast<int64_t>(a_es);
    v.shape[1] = cols;
    v.row_stride = t.shape[1];
    return v;
  };
  const strata_tensor q = col(qkv, 0, H * HD), k = col(qkv, H * HD, KVH * HD), v = col(qkv, (H + KVH) * HD, KVH * HD);
  const strata_tensor gate = col(gu, 0, F), up = col(gu, F, F);

  auto step = [&]() {
    for (int l = 0; l < shape->layers; ++l) {
      Check(api->rms_norm(dev, &x, &res, &norm_w, 1e-5f, &xn), "rms_norm");
      Check(api->matmul(dev, &xn, wqkv, nullptr, &qkv), "matmul qkv");
      Check(api->rope_kv_write(dev, &rope, &ap, &b, &q, &k, &v, kv, l), "rope_kv_write");
      Check(api->attention(dev, &ap, &b, &q, kv, l, &att), "attention");
      Check(api->matmul(dev, &att, wo, nullptr, &x), "matmul o");
      Check(api->rms_norm(dev, &x, &res, &norm_w, 1e-5f, &xn), "rms_norm");
      Check(api->matmul(dev, &xn, wgu, nullptr, &gu), "matmul gate_up");
      Check(api->silu_mul(dev, &gate, &up, &act), "silu_mul");
      Check(api->matmul(dev, &act, wdown, nullptr, &x), "matmul down");
    }
    Check(api->rms_norm(dev, &x, &res, &norm_w, 1e-5f, &xn), "final norm");
    Check(api->gather_rows(dev, &xn, &tlast, &last), "gather_rows");
    Check(api->matmul(dev, &last, lm_head, nullptr, &logits), "lm_head");
    Check(api->argmax(dev, &logits, &ids), "argmax");
    std::vector<int32_t> out(seqs);
    Check(api->download(dev, out.data(), ids.buffer, 0, out.size() * 4), "download");
    Check(api->synchronize(dev), "synchronize");
  };
  // Resets x so activations stay finite step after step.
  std::vector<float> zeros(static_cast<size_t>(n) * D, 0.0f);
  upload_act(x, zeros);
  step();  // warm-up: kernels compiled, workspaces grown
  std::vector<double> ms;
  for (int r = 0; r < reps; ++r) {
    upload_act(res, xs);
    upload_act(x, zeros);
    const auto t0 = std::chrono::steady_clock::now();
    step();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  const double med = ms[ms.size() / 2];
  std::printf("{\"bench\":\"decode_step\",\"plugin\":\"%s\",\"device\":\"%s\",\"shape\":\"%s\",\"format\":\"%s\","
              "\"mode\":\"%s\",\"act\":\"%s\",\"kv_dtype\":\"%s\",\"batch\":%d,\"context\":%d,\"reps\":%d,"
              "\"options\":\"%s\",\"median_ms\":%.3f,\"min_ms\":%.3f,\"tokens_per_s\":%.2f}\n",
              init()->name, info.name, shape->name, format.c_str(), mode.c_str(), act_name.c_str(), kv_name.c_str(),
              batch, ctx, reps, options.c_str(), med, ms.front(), n * 1000.0 / med);
  api->device_close(dev);
  return 0;
}
