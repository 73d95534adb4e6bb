#include "core/model/llama_model.h"

#include <malloc.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/common/half.h"
#include "core/common/monotonic_seconds.h"
#include "core/common/status_macros.h"
#include "core/model/changed_ranges.h"
#include "core/model/decode_step_padding.h"
#include "core/model/step_layout.h"
#include "core/quant/stack_rows.h"
#include "core/parallel/tensor_shard.h"

namespace strata {
namespace {

// Drops the resident pages wholly inside [p, p + bytes) of the model file's mappings once
// the backend holds its own copy of those bytes (backends read host pointers only during
// weight_create). Without it, loading keeps the mapped file and the backend's copy resident
// together: 2x the weights at peak. The mappings are read-only private file mappings, so
// MADV_DONTNEED only forgets pages (touched again, they are read from the file). Ranges
// outside the mappings (stacked or dequantized copies) are left alone.
void ReleaseMappedPages(const ModelFile& file, const void* p, size_t bytes) {
  const uint8_t* b = static_cast<const uint8_t*>(p);
  for (const auto& m : file.mappings) {
    if (m->data() == nullptr || b < m->data() || b + bytes > m->data() + m->size()) continue;
    const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
    const uintptr_t begin = (reinterpret_cast<uintptr_t>(b) + page - 1) / page * page;
    const uintptr_t end = (reinterpret_cast<uintptr_t>(b) + bytes) / page * page;
    if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
  }
}

strata_dtype ToDeviceDType(TensorDType t) {
  switch (t) {
    case TensorDType::kF32: return STRATA_DTYPE_F32;
    case TensorDType::kF16: return STRATA_DTYPE_F16;
    case TensorDType::kBF16: return STRATA_DTYPE_BF16;
  }
  return STRATA_DTYPE_COUNT;
}

std::vector<float> ToF32(const TensorView& t) {
  std::vector<float> out(static_cast<size_t>(t.numel()));
  for (size_t i = 0; i < out.size(); ++i) {
    switch (t.dtype) {
      case TensorDType::kF32: std::memcpy(&out[i], t.data + 4 * i, 4); break;
      case TensorDType::kF16: {
        uint16_t h;
        std::memcpy(&h, t.data + 2 * i, 2);
        out[i] = F16ToF32(h);
        break;
      }
      case TensorDType::kBF16: {
        uint16_t h;
        std::memcpy(&h, t.data + 2 * i, 2);
        out[i] = Bf16ToF32(h);
        break;
      }
    }
  }
  return out;
}

absl::StatusOr<const TensorView*> Require(const ModelFile& f, const std::string& name) {
  const TensorView* t = f.Find(name);
  if (t == nullptr) return absl::NotFoundError(absl::StrCat(f.source_path, ": missing tensor ", name));
  return t;
}

// One matrix of the file: dense (a TensorView) or kept quantized (ModelFile::quantized).
struct WeightPart {
  const TensorView* dense = nullptr;
  const QuantizedTensor* quant = nullptr;
  int64_t rows() const { return dense ? dense->shape[0] : quant->rows; }
};

absl::StatusOr<WeightPart> RequireMatrix(const ModelFile& f, const std::string& name) {
  auto q = f.quantized.find(name);
  if (q != f.quantized.end()) return WeightPart{nullptr, &q->second};
  const TensorView* t = f.Find(name);
  if (t == nullptr) return absl::NotFoundError(absl::StrCat(f.source_path, ": missing tensor ", name));
  return WeightPart{t, nullptr};
}

// Stacks matrices with the same column count and dtype into one [sum(rows), cols] weight, so
// Q/K/V (and gate/up) become one GEMM whose output the later ops address as column slices.
absl::StatusOr<std::vector<uint8_t>> StackRows(const std::vector<const TensorView*>& parts,
                                               const std::string& what) {
  size_t total = 0;
  for (const TensorView* p : parts) {
    if (p->dtype != parts[0]->dtype || p->shape.size() != 2 || p->shape[1] != parts[0]->shape[1])
      return absl::InvalidArgumentError(absl::StrCat(what, ": parts differ in dtype or columns"));
    total += p->bytes;
  }
  std::vector<uint8_t> out(total);
  size_t off = 0;
  for (const TensorView* p : parts) {
    std::memcpy(out.data() + off, p->data, p->bytes);
    off += p->bytes;
  }
  return out;
}

}  // namespace

absl::StatusOr<std::unique_ptr<LlamaModel>> LlamaModel::Load(Device& device, const ModelFile& file,
                                                             const ModelRuntimeOptions& options) {
  STRATA_RETURN_IF_ERROR(ValidateLlamaTensors(file));
  // A parallel rank loads only its shard (tensor_shard.h); its config counts its heads,
  // intermediate rows and layers.
  const ParallelPlan& plan = options.parallel.plan;
  std::unique_ptr<ModelFile> shard;
  if (plan.parallel()) {
    if ((plan.tp_size > 1 && options.parallel.tp == nullptr) || (plan.pp_size > 1 && options.parallel.world == nullptr))
      return absl::InvalidArgumentError("a parallel model needs its communicators");
    // The shard copies dense tensors only (tensor_shard.h): quantized weights would be lost.
    if (!file.quantized.empty())
      return absl::UnimplementedError(absl::StrCat(file.source_path, ": tensor and pipeline parallelism do not take "
                                                   "quantized weights yet (", file.quantized.size(), " quantized tensors)"));
    STRATA_ASSIGN_OR_RETURN(shard, ShardModelFile(file, plan));
  }
  const ModelFile& src = shard != nullptr ? *shard : file;
  std::unique_ptr<LlamaModel> m(new LlamaModel(device));
  m->config_ = src.config;
  m->options_ = options;
  m->act_dtype_ = static_cast<strata_dtype>(device.info().preferred_activation_dtype);
  if (m->options_.max_context <= 0) m->options_.max_context = file.config.max_position;
  if (m->options_.max_context <= 0) return absl::InvalidArgumentError("model has no context length");
  if (m->options_.kv_dtype == STRATA_DTYPE_COUNT) m->options_.kv_dtype = m->act_dtype_;
  if (m->options_.block_size <= 0 || m->options_.max_batch_tokens <= 0 || m->options_.max_seqs <= 0)
    return absl::InvalidArgumentError("block size, batch tokens and sequences must be positive");
  m->max_blocks_per_seq_ = static_cast<int32_t>(
      (m->options_.max_context + m->options_.block_size - 1) / m->options_.block_size);
  if (m->options_.num_blocks <= 0) m->options_.num_blocks = m->max_blocks_per_seq_ * m->options_.max_seqs;
  m->rope_ = ComputeRopeTable(m->config_);

  for (strata_op op : {STRATA_OP_EMBEDDING, STRATA_OP_RMS_NORM, STRATA_OP_MATMUL, STRATA_OP_ROPE_KV_WRITE,
                       STRATA_OP_ATTENTION, STRATA_OP_SILU_MUL, STRATA_OP_GATHER_ROWS}) {
    if (!device.Supports(op, m->act_dtype_))
      return absl::UnimplementedError(absl::StrCat(device.backend_name(), " backend lacks op ", op,
                                                   " for ", DTypeName(m->act_dtype_), " activations"));
  }
  STRATA_RETURN_IF_ERROR(m->UploadWeights(src));
  // Loading freed large temporaries (stacked q/k/v and gate/up rows, converted norms). glibc
  // raises its mmap threshold to the largest freed mapping, so later ones of that size came
  // from the heap, and freed heap memory below the top stays resident: ~15 MiB on the 110M
  // model, 5% of its f16 weights. malloc_trim(0) returns those free pages to the system.
  malloc_trim(0);
  m->options_.on_load_progress = nullptr;  // it may capture the caller's locals
  STRATA_RETURN_IF_ERROR(m->AllocateWorkspace());
  return m;
}

absl::Status LlamaModel::UploadWeights(const ModelFile& file) {
  // Progress in bytes of the file's tensors handed to the backend (all of them count: the
  // few the model does not use are small).
  uint64_t load_total = 0, load_done = 0;
  for (const auto& [name, t] : file.tensors) load_total += t.bytes;
  for (const auto& [name, q] : file.quantized) load_total += q.TotalBytes();
  if (options_.on_load_progress) options_.on_load_progress(0, load_total);  // starts the clock
  auto report_bytes = [&](uint64_t bytes) {
    load_done += bytes;
    if (options_.on_load_progress) options_.on_load_progress(std::min(load_done, load_total), load_total);
  };
  auto report_loaded = [&](const std::vector<const TensorView*>& parts) {
    uint64_t bytes = 0;
    for (const TensorView* p : parts) bytes += p->bytes;
    report_bytes(bytes);
  };
  auto report_parts = [&](const std::vector<WeightPart>& parts) {
    uint64_t bytes = 0;
    for (const WeightPart& p : parts) bytes += p.quant != nullptr ? p.quant->TotalBytes() : p.dense->bytes;
    report_bytes(bytes);
  };
  auto make_dense = [&](const std::vector<const TensorView*>& parts,
                        const std::string& name) -> absl::StatusOr<DeviceWeight> {
    const strata_dtype dt = ToDeviceDType(parts[0]->dtype);
    if (!device_.Supports(STRATA_OP_MATMUL, act_dtype_, STRATA_WEIGHT_DENSE, dt))
      return absl::UnimplementedError(absl::StrCat(device_.backend_name(), " backend cannot multiply ",
                                                   DTypeName(dt), " weights (", name, ")"));
    std::vector<uint8_t> stacked;
    const void* data = parts[0]->data;
    int64_t rows = parts[0]->shape[0];
    if (parts.size() > 1) {
      STRATA_ASSIGN_OR_RETURN(stacked, StackRows(parts, name));
      data = stacked.data();
      rows = 0;
      for (const TensorView* p : parts) rows += p->shape[0];
      // The stacked copy is what the backend reads: the parts' file pages can go now, not
      // after weight_create (at the load's peak, gate+up of TinyLlama held 45 MB of file
      // pages beside their stacked copy and the backend's; 235 MB on Llama-3-8B).
      for (const TensorView* p : parts) ReleaseMappedPages(file, p->data, p->bytes);
    }
    strata_weight_desc d{};
    d.struct_size = sizeof(d);
    d.format = STRATA_WEIGHT_DENSE;
    d.dtype = dt;
    d.rows = rows;
    d.cols = parts[0]->shape[1];
    d.data = data;
    d.name = name.c_str();
    weight_bytes_ += static_cast<uint64_t>(rows * d.cols) * DTypeSize(dt);
    absl::StatusOr<DeviceWeight> w = device_.CreateWeight(d);
    // The backend has its own copy now: keep the peak resident memory near one copy.
    if (w.ok()) {
      for (const TensorView* p : parts) ReleaseMappedPages(file, p->data, p->bytes);
    }
    report_loaded(parts);
    return w;
  };
  // Quantized parts go to the device quantized (ABI 1.9, counter slot = layer index, -1 for
  // the output head); parts that cannot be one quantized weight (dense mixed with quantized,
  // incompatible layouts, a format the backend lacks) become one dense F32 weight instead.
  auto make_weight = [&](const std::vector<WeightPart>& parts, const std::string& name,
                         int32_t counter_slot) -> absl::StatusOr<DeviceWeight> {
    size_t nq = 0;
    for (const WeightPart& p : parts) nq += p.quant != nullptr;
    if (nq == 0) {
      std::vector<const TensorView*> views;
      for (const WeightPart& p : parts) views.push_back(p.dense);
      return make_dense(views, name);
    }
    std::string why;
    if (nq == parts.size()) {
      std::vector<const QuantizedTensor*> qs;
      for (const WeightPart& p : parts) qs.push_back(p.quant);
      absl::StatusOr<QuantizedTensor> stacked_or =
          qs.size() == 1 ? absl::StatusOr<QuantizedTensor>(*qs[0]) : StackQuantizedRows(qs, name);
      if (stacked_or.ok()) {
        const QuantizedTensor& q = *stacked_or;
        const int32_t wdt = q.ToWeightDesc(nullptr, 0).dtype;
        if (device_.Supports(STRATA_OP_MATMUL, act_dtype_, static_cast<strata_weight_format>(q.format),
                             static_cast<strata_dtype>(wdt))) {
          const strata_weight_desc d = q.ToWeightDesc(name.c_str(), counter_slot);
          weight_bytes_ += q.TotalBytes();
          has_quantized_weights_ = true;
          absl::StatusOr<DeviceWeight> w = device_.CreateWeight(d);
          report_parts(parts);
          return w;
        }
        why = absl::StrCat(device_.backend_name(), " backend lacks ", WeightFormatName(q.format));
      } else {
        why = std::string(stacked_or.status().message());
      }
    } else {
      why = "dense and quantized parts";
    }
    // Dense F32 fallback.
    std::vector<float> all;
    for (const WeightPart& p : parts) {
      std::vector<float> f = p.quant ? Dequantize(*p.quant) : ToF32(*p.dense);
      all.insert(all.end(), f.begin(), f.end());
    }
    int64_t rows = 0;
    for (const WeightPart& p : parts) rows += p.rows();
    dense_fallbacks_.push_back(absl::StrCat(name, " (", why, ")"));
    strata_weight_desc d{};
    d.struct_size = sizeof(d);
    d.format = STRATA_WEIGHT_DENSE;
    d.dtype = STRATA_DTYPE_F32;
    d.rows = rows;
    d.cols = static_cast<int64_t>(all.size()) / rows;
    d.data = all.data();
    d.name = name.c_str();
    weight_bytes_ += all.size() * 4;
    absl::StatusOr<DeviceWeight> w = device_.CreateWeight(d);
    report_parts(parts);
    return w;
  };
  auto make_f32 = [&](const std::vector<const TensorView*>& parts) -> absl::StatusOr<DeviceBuffer> {
    std::vector<float> v;
    for (const TensorView* p : parts) {
      std::vector<float> f = ToF32(*p);
      v.insert(v.end(), f.begin(), f.end());
    }
    STRATA_ASSIGN_OR_RETURN(DeviceBuffer b, device_.Alloc(v.size() * 4));
    STRATA_RETURN_IF_ERROR(device_.Upload(b, 0, v.data(), v.size() * 4));
    weight_bytes_ += v.size() * 4;
    report_loaded(parts);
    return b;
  };

  // A pipeline stage holds the embedding only if it is the first, the head only if the last.
  const ParallelPlan& plan = options_.parallel.plan;
  if (plan.first_stage()) {
    const uint64_t before_embedding = weight_bytes_;
    // The embedding table is read by rows (embedding op): always dense.
    if (auto q = file.quantized.find("tok_embeddings"); q != file.quantized.end()) {
      const std::vector<float> f = Dequantize(q->second);
      TensorView v;
      v.dtype = TensorDType::kF32;
      v.shape = {q->second.rows, q->second.cols};
      v.data = reinterpret_cast<const uint8_t*>(f.data());
      v.bytes = f.size() * 4;
      STRATA_ASSIGN_OR_RETURN(embedding_, make_dense({&v}, "tok_embeddings"));
    } else {
      STRATA_ASSIGN_OR_RETURN(const TensorView* emb, Require(file, "tok_embeddings"));
      STRATA_ASSIGN_OR_RETURN(embedding_, make_dense({emb}, "tok_embeddings"));
    }
    embedding_bytes_ = weight_bytes_ - before_embedding;
  }
  if (plan.last_stage()) {
    if (!config_.tie_word_embeddings && (file.Find("output") != nullptr || file.quantized.count("output"))) {
      STRATA_ASSIGN_OR_RETURN(WeightPart out, RequireMatrix(file, "output"));
      STRATA_ASSIGN_OR_RETURN(output_, make_weight({out}, "output", -1));
    } else if (config_.tie_word_embeddings && file.quantized.count("tok_embeddings")) {
      // Tied embeddings stored quantized (GGUF Q4_0 / Q8_0 token_embd): the head reads the
      // quantized table, as llama.cpp does, not the F32 copy the embedding op needs (vocab x
      // dim x 4 bytes per token: 98 MB against 14 MB for a 110M model's Q4_0 head).
      STRATA_ASSIGN_OR_RETURN(WeightPart head, RequireMatrix(file, "tok_embeddings"));
      STRATA_ASSIGN_OR_RETURN(output_, make_weight({head}, "output", -1));
    }
    STRATA_ASSIGN_OR_RETURN(const TensorView* fn, Require(file, "norm"));
    STRATA_ASSIGN_OR_RETURN(final_norm_, make_f32({fn}));
  }

  layers_.resize(config_.num_layers);
  for (int64_t l = 0; l < config_.num_layers; ++l) {
    const std::string p = absl::StrCat("layers.", l, ".");
    Layer& L = layers_[l];
    STRATA_ASSIGN_OR_RETURN(const TensorView* an, Require(file, p + "attn_norm"));
    STRATA_ASSIGN_OR_RETURN(const TensorView* fnn, Require(file, p + "ffn_norm"));
    STRATA_ASSIGN_OR_RETURN(WeightPart wq, RequireMatrix(file, p + "wq"));
    STRATA_ASSIGN_OR_RETURN(WeightPart wk, RequireMatrix(file, p + "wk"));
    STRATA_ASSIGN_OR_RETURN(WeightPart wv, RequireMatrix(file, p + "wv"));
    STRATA_ASSIGN_OR_RETURN(WeightPart wo, RequireMatrix(file, p + "wo"));
    STRATA_ASSIGN_OR_RETURN(WeightPart wg, RequireMatrix(file, p + "w_gate"));
    STRATA_ASSIGN_OR_RETURN(WeightPart wu, RequireMatrix(file, p + "w_up"));
    STRATA_ASSIGN_OR_RETURN(WeightPart wd, RequireMatrix(file, p + "w_down"));
    const int32_t slot = static_cast<int32_t>(l);
    STRATA_ASSIGN_OR_RETURN(L.attn_norm, make_f32({an}));
    STRATA_ASSIGN_OR_RETURN(L.ffn_norm, make_f32({fnn}));
    STRATA_ASSIGN_OR_RETURN(L.wqkv, make_weight({wq, wk, wv}, p + "wqkv", slot));
    STRATA_ASSIGN_OR_RETURN(L.wo, make_weight({wo}, p + "wo", slot));
    STRATA_ASSIGN_OR_RETURN(L.w_gate_up, make_weight({wg, wu}, p + "w_gate_up", slot));
    STRATA_ASSIGN_OR_RETURN(L.w_down, make_weight({wd}, p + "w_down", slot));
    const TensorView* bq = file.Find(p + "wq.bias");
    const TensorView* bk = file.Find(p + "wk.bias");
    const TensorView* bv = file.Find(p + "wv.bias");
    if (bq != nullptr || bk != nullptr || bv != nullptr) {
      if (bq == nullptr || bk == nullptr || bv == nullptr)
        return absl::InvalidArgumentError(absl::StrCat(file.source_path, ": layer ", l,
                                                       " has a bias on some of q/k/v but not all"));
      STRATA_ASSIGN_OR_RETURN(L.qkv_bias, make_f32({bq, bk, bv}));
      L.has_qkv_bias = true;
    }
    if (config_.qk_norm) {
      STRATA_ASSIGN_OR_RETURN(const TensorView* qn, Require(file, p + "q_norm"));
      STRATA_ASSIGN_OR_RETURN(const TensorView* kn, Require(file, p + "k_norm"));
      std::vector<const TensorView*> heads(static_cast<size_t>(config_.num_heads), qn);
      heads.insert(heads.end(), static_cast<size_t>(config_.num_kv_heads), kn);
      STRATA_ASSIGN_OR_RETURN(L.qk_norm, make_f32(heads));
    }
  }
  STRATA_ASSIGN_OR_RETURN(inv_freq_, device_.Alloc(rope_.inv_freq.size() * 4 + 4));
  STRATA_RETURN_IF_ERROR(device_.Upload(inv_freq_, 0, rope_.inv_freq.data(), rope_.inv_freq.size() * 4));

  strata_kv_cache_desc kd{};
  kd.struct_size = sizeof(kd);
  kd.num_layers = static_cast<int32_t>(config_.num_layers);
  kd.num_blocks = options_.num_blocks;
  kd.block_size = options_.block_size;
  kd.num_kv_heads = static_cast<int32_t>(config_.num_kv_heads);
  kd.head_dim = static_cast<int32_t>(config_.head_dim);
  kd.dtype = options_.kv_dtype;
  // 8-bit caches (ABI 1.9): FP8 per tensor with scale 1.0 (stories-scale activations sit well
  // inside E4M3's +-448), I8 with scales per (block, kv head, K/V) that the backend picks.
  kd.scale_mode = kd.dtype == STRATA_DTYPE_I8 ? STRATA_KV_SCALE_PER_BLOCK_HEAD : STRATA_KV_SCALE_PER_TENSOR;
  kd.k_scale = 1.0f;
  kd.v_scale = 1.0f;
  auto kv_or = device_.CreateKvCache(kd);
  if (!kv_or.ok() && (kd.dtype == STRATA_DTYPE_I8 || kd.dtype == STRATA_DTYPE_FP8_E4M3)) {
    return absl::Status(kv_or.status().code(),
                        absl::StrCat("the ", device_.backend_name(), " backend refuses an ", DTypeName(static_cast<strata_dtype>(kd.dtype)),
                                     " KV cache (--kv-dtype): ", kv_or.status().message()));
  }
  STRATA_ASSIGN_OR_RETURN(kv_, std::move(kv_or));
  const uint64_t per_block = device_.api().kv_block_bytes != nullptr
                                 ? device_.api().kv_block_bytes(device_.handle(), kv_.handle())
                                 : 0;
  kv_cache_bytes_ = per_block > 0 ? per_block * static_cast<uint64_t>(kd.num_blocks)
                                  : static_cast<uint64_t>(kd.num_layers) * 2 * kd.num_blocks * kd.block_size *
                                        kd.num_kv_heads * kd.head_dim * DTypeSize(options_.kv_dtype);
  return absl::OkStatus();
}

absl::StatusOr<QuantLayerCounters> LlamaModel::ReadQuantCounters() const {
  QuantLayerCounters c;
  const strata_backend_v1& api = device_.api();
  if (!has_quantized_weights_ || !STRATA_BACKEND_HAS_QUANT_COUNTERS(&api)) return c;
  const size_t n = static_cast<size_t>(std::min<int64_t>(config_.num_layers, STRATA_MAX_QUANT_COUNTER_SLOTS));
  c.saturated.resize(n);
  c.nonfinite.resize(n);
  c.outliers.resize(n);
  STRATA_RETURN_IF_ERROR(device_.Check(api.quant_counters(device_.handle(), static_cast<int32_t>(n), c.saturated.data(),
                                                          c.nonfinite.data(), c.outliers.data()),
                                       "quant_counters"));
  return c;
}

absl::Status LlamaModel::AllocateWorkspace() {
  const int64_t T = options_.max_batch_tokens;
  const int64_t S = options_.max_seqs;
  const int64_t d = config_.hidden_size;
  const int64_t qdim = config_.num_heads * config_.head_dim;
  const int64_t kvdim = config_.num_kv_heads * config_.head_dim;
  const size_t a = DTypeSize(act_dtype_);
  auto alloc = [&](DeviceBuffer& b, int64_t bytes) -> absl::Status {
    STRATA_ASSIGN_OR_RETURN(b, device_.Alloc(static_cast<uint64_t>(bytes)));
    return absl::OkStatus();
  };
  const int64_t ff = config_.intermediate_size;
  STRATA_RETURN_IF_ERROR(alloc(h_, T * d * a));
  STRATA_RETURN_IF_ERROR(alloc(delta_, T * d * a));
  STRATA_RETURN_IF_ERROR(alloc(qkv_gate_up_, T * std::max(qdim + 2 * kvdim, 2 * ff) * a));
  STRATA_RETURN_IF_ERROR(alloc(norm_attn_act_, T * std::max({d, qdim, ff}) * a));
  STRATA_RETURN_IF_ERROR(alloc(rows_, T * d * a));
  STRATA_RETURN_IF_ERROR(alloc(logits_, T * config_.vocab_size * 4));
  if (options_.parallel.plan.vocab_parallel())
    STRATA_RETURN_IF_ERROR(alloc(logits_shard_, T * options_.parallel.plan.vocab_per_rank * 4));
  // A sampling step's ids, then (ABI 1.7) its logprob rows' values and top ids right behind
  // them, so that one readback brings back all of it; at most max_seqs rows want logprobs.
  STRATA_RETURN_IF_ERROR(alloc(sampled_ids_, (T + int64_t{S} * (1 + 2 * STRATA_MAX_TOP_LOGPROBS)) * 4));
  const StepLayout most = StepLayout::For(T, S, T, max_blocks_per_seq_);
  STRATA_RETURN_IF_ERROR(alloc(step_arrays_, most.total * 4));
  return absl::OkStatus();
}

absl::Status LlamaModel::UploadStep(const StepInput& in) {
  const size_t n = in.token_ids.size();
  const size_t s = in.seq_lens.size();
  if (n == 0 || s == 0) return absl::InvalidArgumentError("empty step");
  if (n > static_cast<size_t>(options_.max_batch_tokens))
    return absl::InvalidArgumentError(absl::StrCat("step has ", n, " tokens, the limit is ",
                                                   options_.max_batch_tokens));
  if (s > static_cast<size_t>(options_.max_seqs))
    return absl::InvalidArgumentError(absl::StrCat("step has ", s, " sequences, the limit is ",
                                                   options_.max_seqs));
  if (in.positions.size() != n || in.slot_mapping.size() != n || in.query_start_loc.size() != s + 1 ||
      in.block_tables.size() != s * static_cast<size_t>(max_blocks_per_seq_) || in.logits_rows.empty() ||
      in.logits_rows.size() > static_cast<size_t>(options_.max_batch_tokens) || in.query_start_loc.front() != 0 ||
      in.query_start_loc.back() != static_cast<int32_t>(n))
    return absl::InvalidArgumentError("step arrays have inconsistent sizes");
  for (size_t i = 0; i < s; ++i) {
    const int32_t q = in.query_start_loc[i + 1] - in.query_start_loc[i];
    if (q <= 0 || in.seq_lens[i] < q || in.seq_lens[i] > options_.max_context)
      return absl::InvalidArgumentError(absl::StrCat("sequence ", i, " has ", q, " new tokens and context ",
                                                     in.seq_lens[i], " (limit ", options_.max_context, ")"));
  }
  const bool feedback = SupportsOverlappedSteps();
  for (int32_t id : in.token_ids) {
    if (id < 0 && feedback && -static_cast<int64_t>(id) - 1 < feedback_rows_) continue;  // sampled on the device
    if (id < 0 || id >= config_.vocab_size)
      return absl::InvalidArgumentError(
          id < 0 ? absl::StrCat("token id ", id, " names sampled row ", -static_cast<int64_t>(id) - 1,
                                " of the previous step, which sampled ", feedback_rows_, " rows",
                                feedback ? "" : " (this backend cannot feed sampled ids back)")
                 : absl::StrCat("token id ", id, " outside the vocabulary of ", config_.vocab_size));
  }
  for (int32_t r : in.logits_rows)
    if (r < 0 || r >= static_cast<int32_t>(n)) return absl::InvalidArgumentError("logits row out of range");
  const StepLayout L = StepLayout::For(static_cast<int64_t>(n), static_cast<int64_t>(s),
                                       static_cast<int64_t>(in.logits_rows.size()), max_blocks_per_seq_);
  // Every element is written below (regions, then the zero padding up to the next
  // region), so the buffer is not cleared first: at 128 sequences it is 256 KB, and each
  // pass over it delays the step.
  step_staging_.resize(static_cast<size_t>(L.total));
  auto put = [&](int64_t at, const std::vector<int32_t>& v) {
    std::copy(v.begin(), v.end(), step_staging_.begin() + at);
    const int64_t end = at + static_cast<int64_t>(v.size());
    std::fill(step_staging_.begin() + end, step_staging_.begin() + std::min<int64_t>(L.total, (end + 3) / 4 * 4), 0);
  };
  const ParallelPlan& plan = options_.parallel.plan;
  put(L.ids, plan.vocab_parallel() && plan.first_stage() ? ShardEmbeddingIds(in.token_ids) : in.token_ids);
  put(L.positions, in.positions);
  put(L.slots, in.slot_mapping);
  put(L.rows, in.logits_rows);
  put(L.query_start, in.query_start_loc);
  put(L.seq_lens, in.seq_lens);
  put(L.block_tables, in.block_tables);
  return UploadChangedStepArrays({static_cast<int64_t>(n), static_cast<int64_t>(s),
                                  static_cast<int64_t>(in.logits_rows.size())});
}

absl::Status LlamaModel::UploadChangedStepArrays(const std::array<int64_t, 3>& shape) {
  // Between two decode steps of one batch the ids, positions, slots and lengths change,
  // but a sequence's block-table row changes once per block_size tokens, and the tables
  // are nearly all of the bytes (128 sequences x 512 blocks at an 8K context: 256 KB, a
  // pageable copy the next step waits for). So when the layout is the one the device
  // holds, only the 1 KB chunks that differ are sent, as a few merged ranges.
  constexpr size_t kChunk = 256;    // int32 elements
  constexpr size_t kMergeGap = 16;  // chunks
  const size_t total = step_staging_.size();
  std::vector<std::pair<size_t, size_t>> ranges;
  if (step_on_device_.size() == total && step_on_device_shape_ == shape) {
    ranges = ChangedRanges(step_staging_, step_on_device_, kChunk, kMergeGap);
  } else {
    ranges.emplace_back(0, total);
  }
  step_on_device_.clear();  // unknown until every range has landed
  for (const auto& [begin, end] : ranges) {
    STRATA_RETURN_IF_ERROR(device_.Upload(step_arrays_, begin * 4, step_staging_.data() + begin, (end - begin) * 4));
    call_times_.uploaded_bytes += static_cast<int64_t>((end - begin) * 4);
  }
  std::swap(step_staging_, step_on_device_);
  step_on_device_shape_ = shape;
  return absl::OkStatus();
}

absl::Status LlamaModel::CopyKvBlocks(std::span<const strata_block_pair> pairs) {
  if (pairs.empty()) return absl::OkStatus();
  if (options_.parallel.broadcaster != nullptr) STRATA_RETURN_IF_ERROR(options_.parallel.broadcaster->CopyBlocks(pairs));
  return CopyPeerKvBlocks(pairs);
}

absl::Status LlamaModel::CopyPeerKvBlocks(std::span<const strata_block_pair> pairs) {
  if (pairs.empty()) return absl::OkStatus();
  return device_.Check(device_.api().copy_blocks(device_.handle(), kv_.handle(), pairs.data(),
                                                 static_cast<int32_t>(pairs.size())),
                       "copy_blocks");
}

absl::Status LlamaModel::Forward(const StepInput& in, std::vector<float>* logits) {
  STRATA_RETURN_IF_ERROR(RunToLogits(in));
  const int64_t r = static_cast<int64_t>(in.logits_rows.size());
  logits->resize(static_cast<size_t>(r * config_.vocab_size));
  return ReadBack(logits->data(), logits_, logits->size() * 4, MonotonicSeconds());
}

absl::Status LlamaModel::EnqueueGreedy(const StepInput& in) {
  if (!device_.Supports(STRATA_OP_ARGMAX, STRATA_DTYPE_F32))
    return absl::UnimplementedError(absl::StrCat(device_.backend_name(), " backend has no argmax"));
  STRATA_RETURN_IF_ERROR(RunToLogits(in));
  const int64_t r = static_cast<int64_t>(in.logits_rows.size());
  const strata_tensor logits = logits_.View(STRATA_DTYPE_F32, {r, config_.vocab_size});
  const strata_tensor ids = sampled_ids_.View(STRATA_DTYPE_I32, {r});
  feedback_rows_ = 0;  // unknown if the op fails
  STRATA_RETURN_IF_ERROR(device_.Check(device_.api().argmax(device_.handle(), &logits, &ids), "argmax"));
  feedback_rows_ = r;
  return absl::OkStatus();
}

absl::Status LlamaModel::ForwardGreedy(const StepInput& in, std::vector<int32_t>* token_ids) {
  STRATA_RETURN_IF_ERROR(EnqueueGreedy(in));
  token_ids->resize(in.logits_rows.size());
  return ReadBack(token_ids->data(), sampled_ids_, token_ids->size() * 4, MonotonicSeconds());
}

absl::Status LlamaModel::ForwardSample(const StepInput& in, const DeviceSampleRows& rows,
                                       std::vector<int32_t>* token_ids, DeviceLogprobs* logprobs) {
  if (!rows.logprob_rows.empty() && logprobs == nullptr)
    return absl::InvalidArgumentError("ForwardSample: logprob rows but nowhere to put their logprobs");
  STRATA_RETURN_IF_ERROR(EnqueueSample(in, rows));
  const int64_t r = static_cast<int64_t>(in.logits_rows.size());
  const int64_t k = static_cast<int64_t>(rows.logprob_rows.size());
  if (k == 0) {
    token_ids->resize(static_cast<size_t>(r));
    return ReadBack(token_ids->data(), sampled_ids_, token_ids->size() * 4, MonotonicSeconds());
  }
  std::vector<int32_t> words(static_cast<size_t>(r + k * (1 + 2 * int64_t{rows.logprob_top_n})));
  STRATA_RETURN_IF_ERROR(ReadBack(words.data(), sampled_ids_, words.size() * 4, MonotonicSeconds()));
  return UnpackSampled(words, r, k, rows.logprob_top_n, token_ids, logprobs);
}

absl::Status LlamaModel::UnpackSampled(std::span<const int32_t> words, int64_t rows, int64_t logprob_rows,
                                       int32_t logprob_top_n, std::vector<int32_t>* token_ids,
                                       DeviceLogprobs* logprobs) {
  const size_t r = static_cast<size_t>(rows), nv = static_cast<size_t>(logprob_rows * (1 + logprob_top_n)),
               nt = static_cast<size_t>(logprob_rows * logprob_top_n);
  if (words.size() != r + nv + nt) return absl::InternalError("sampled readback has the wrong size");
  token_ids->assign(words.begin(), words.begin() + static_cast<std::ptrdiff_t>(r));
  if (logprob_rows == 0) return absl::OkStatus();
  if (logprobs == nullptr) return absl::InvalidArgumentError("logprobs came back but nowhere to put them");
  logprobs->top_n = logprob_top_n;
  logprobs->values.resize(nv);
  std::memcpy(logprobs->values.data(), words.data() + r, nv * 4);
  logprobs->top_ids.assign(words.begin() + static_cast<std::ptrdiff_t>(r + nv), words.end());
  return absl::OkStatus();
}

absl::Status LlamaModel::ReadLogitsRows(std::span<const size_t> rows, std::vector<float>* logits) {
  const double t = MonotonicSeconds();
  const uint64_t row_bytes = static_cast<uint64_t>(config_.vocab_size) * 4;
  logits->resize(rows.size() * static_cast<size_t>(config_.vocab_size));
  // One copy per run of consecutive rows (every row, when every request wants logprobs).
  for (size_t i = 0; i < rows.size();) {
    size_t run = 1;
    while (i + run < rows.size() && rows[i + run] == rows[i] + run) ++run;
    STRATA_RETURN_IF_ERROR(device_.Download(logits->data() + i * static_cast<size_t>(config_.vocab_size), logits_,
                                            rows[i] * row_bytes, run * row_bytes));
    i += run;
  }
  call_times_.readback_s += MonotonicSeconds() - t;
  return absl::OkStatus();
}

// Not in parallel runs: the other ranks' steps would need the ids rank 0 sampled on its device.
bool LlamaModel::SupportsOverlappedSteps() const {
  return device_.SupportsOverlappedSteps() && !options_.parallel.plan.parallel();
}

bool LlamaModel::CanLaunchSampled(int64_t rows, int64_t logprob_rows, int32_t logprob_top_n) const {
  const uint64_t words = static_cast<uint64_t>(rows + logprob_rows * (1 + 2 * int64_t{logprob_top_n}));
  return SupportsOverlappedSteps() && rows > 0 && words * 4 <= STRATA_READBACK_MAX_BYTES;
}

absl::Status LlamaModel::CheckLaunchable(int64_t rows, int64_t logprob_rows, int32_t logprob_top_n) const {
  if (CanLaunchSampled(rows, logprob_rows, logprob_top_n)) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("cannot launch a step of ", rows, " sampled rows (", logprob_rows,
                                                 " with logprobs) without waiting (", device_.backend_name(),
                                                 " backend)"));
}

absl::StatusOr<PendingSample> LlamaModel::StartSampleReadback(int64_t rows, int64_t logprob_rows,
                                                              int32_t logprob_top_n) {
  PendingSample p;
  p.rows = rows;
  p.logprob_rows = logprob_rows;
  p.logprob_top_n = logprob_top_n;
  const uint64_t words = static_cast<uint64_t>(rows + logprob_rows * (1 + 2 * int64_t{logprob_top_n}));
  STRATA_ASSIGN_OR_RETURN(p.readback, device_.StartReadback(sampled_ids_, 0, words * 4));
  return p;
}

absl::StatusOr<PendingSample> LlamaModel::LaunchGreedy(const StepInput& in) {
  STRATA_RETURN_IF_ERROR(CheckLaunchable(static_cast<int64_t>(in.logits_rows.size())));
  STRATA_RETURN_IF_ERROR(EnqueueGreedy(in));
  return StartSampleReadback(static_cast<int64_t>(in.logits_rows.size()));
}

absl::StatusOr<PendingSample> LlamaModel::LaunchSample(const StepInput& in, const DeviceSampleRows& rows) {
  const int64_t r = static_cast<int64_t>(in.logits_rows.size());
  const int64_t k = static_cast<int64_t>(rows.logprob_rows.size());
  STRATA_RETURN_IF_ERROR(CheckLaunchable(r, k, rows.logprob_top_n));
  STRATA_RETURN_IF_ERROR(EnqueueSample(in, rows));
  return StartSampleReadback(r, k, rows.logprob_top_n);
}

absl::Status LlamaModel::FinishSample(PendingSample& pending, std::vector<int32_t>* token_ids,
                                      DeviceLogprobs* logprobs) {
  const double t = MonotonicSeconds();
  absl::Status st;
  if (pending.logprob_rows == 0) {
    token_ids->resize(static_cast<size_t>(pending.rows));
    st = device_.FinishReadback(pending.readback, token_ids->data());
  } else {
    std::vector<int32_t> words(
        static_cast<size_t>(pending.rows + pending.logprob_rows * (1 + 2 * int64_t{pending.logprob_top_n})));
    st = device_.FinishReadback(pending.readback, words.data());
    if (st.ok()) st = UnpackSampled(words, pending.rows, pending.logprob_rows, pending.logprob_top_n, token_ids, logprobs);
  }
  call_times_.readback_s += MonotonicSeconds() - t;
  return st;
}

void DeviceSampleRows::AddPenalties(float repetition, float frequency, float presence,
                                    const std::vector<std::pair<int32_t, int32_t>>& tokens, int32_t feedback_row) {
  if (penalty_row_start.empty()) penalty_row_start.push_back(0);
  repetition_penalty.push_back(repetition);
  frequency_penalty.push_back(frequency);
  presence_penalty.push_back(presence);
  for (const auto& [token, count] : tokens) {
    penalty_token_ids.push_back(token);
    penalty_counts.push_back(count);
  }
  penalty_row_start.push_back(static_cast<int32_t>(penalty_token_ids.size()));
  penalty_feedback_rows.push_back(feedback_row);
  any_penalty = any_penalty || repetition != 1.0f || frequency != 0.0f || presence != 0.0f;
  any_penalty_feedback = any_penalty_feedback || feedback_row >= 0;
}

absl::Status LlamaModel::EnqueueSample(const StepInput& in, const DeviceSampleRows& rows) {
  if (!device_.Supports(STRATA_OP_SAMPLE, STRATA_DTYPE_F32))
    return absl::UnimplementedError(absl::StrCat(device_.backend_name(), " backend has no sampler"));
  const size_t r = in.logits_rows.size();
  const int64_t previous_rows = feedback_rows_;  // the rows a feedback index may name
  if (rows.temperature.size() != r || rows.top_k.size() != r || rows.top_p.size() != r || rows.min_p.size() != r ||
      rows.seed.size() != r || rows.step.size() != r)
    return absl::InvalidArgumentError(absl::StrCat("ForwardSample: sampling parameters for ", rows.temperature.size(),
                                                   " rows, the step has ", r, " logits rows"));
  if (rows.penalized()) {
    if (!device_.SupportsPenalties())
      return absl::UnimplementedError(absl::StrCat(device_.backend_name(), " backend cannot apply penalties"));
    if (rows.repetition_penalty.size() != r || rows.penalty_row_start.size() != r + 1 ||
        rows.penalty_feedback_rows.size() != r)
      return absl::InvalidArgumentError(absl::StrCat("ForwardSample: penalties for ", rows.repetition_penalty.size(),
                                                     " rows, the step has ", r, " logits rows"));
    if (rows.any_penalty_feedback) {
      if (!device_.SupportsPenaltyFeedback())
        return absl::UnimplementedError(
            absl::StrCat(device_.backend_name(), " backend cannot count a sampled token in the penalties"));
      for (int32_t f : rows.penalty_feedback_rows) {
        if (f >= previous_rows)
          return absl::InvalidArgumentError(absl::StrCat("ForwardSample: penalties count sampled row ", f,
                                                         " of the previous step, which sampled ", previous_rows, " rows"));
      }
    }
  }
  if (!rows.logprob_rows.empty()) {
    if (!device_.SupportsLogprobs())
      return absl::UnimplementedError(absl::StrCat(device_.backend_name(), " backend cannot compute logprobs"));
    if (rows.logprob_rows.size() > static_cast<size_t>(options_.max_seqs) || rows.logprob_top_n < 0 ||
        rows.logprob_top_n > STRATA_MAX_TOP_LOGPROBS)
      return absl::InvalidArgumentError(absl::StrCat("ForwardSample: ", rows.logprob_rows.size(), " logprob rows with ",
                                                     rows.logprob_top_n, " alternatives"));
    for (size_t i = 0; i < rows.logprob_rows.size(); ++i) {
      const int32_t row = rows.logprob_rows[i];
      if (row < 0 || static_cast<size_t>(row) >= r || (i > 0 && row <= rows.logprob_rows[i - 1]))
        return absl::InvalidArgumentError(absl::StrCat("ForwardSample: logprob row ", row, " of ", r, " (ascending)"));
      // Logprobs are of the raw logits, which the penalties would change first.
      if (rows.penalized() &&
          (rows.repetition_penalty[row] != 1.0f || rows.frequency_penalty[row] != 0.0f ||
           rows.presence_penalty[row] != 0.0f))
        return absl::InvalidArgumentError(absl::StrCat("ForwardSample: logprob row ", row, " is penalized"));
    }
  }
  STRATA_RETURN_IF_ERROR(RunToLogits(in));
  const int64_t n = static_cast<int64_t>(r);
  const strata_tensor logits = logits_.View(STRATA_DTYPE_F32, {n, config_.vocab_size});
  if (rows.penalized()) {
    strata_penalty_params pp{};
    pp.struct_size = sizeof(pp);
    pp.repetition_penalty = rows.repetition_penalty.data();
    pp.frequency_penalty = rows.frequency_penalty.data();
    pp.presence_penalty = rows.presence_penalty.data();
    pp.row_start = rows.penalty_row_start.data();
    pp.token_ids = rows.penalty_token_ids.data();
    pp.counts = rows.penalty_counts.data();
    feedback_rows_ = 0;  // unknown if the op fails
    if (rows.any_penalty_feedback) {
      // The previous step's sampled ids, still in sampled_ids_ (this step samples after).
      const strata_tensor previous = sampled_ids_.View(STRATA_DTYPE_I32, {previous_rows});
      STRATA_RETURN_IF_ERROR(device_.Check(device_.api().apply_penalties_feedback(
                                               device_.handle(), &logits, &pp, rows.penalty_feedback_rows.data(), &previous),
                                           "apply_penalties_feedback"));
    } else {
      STRATA_RETURN_IF_ERROR(
          device_.Check(device_.api().apply_penalties(device_.handle(), &logits, &pp), "apply_penalties"));
    }
  }
  const strata_tensor ids = sampled_ids_.View(STRATA_DTYPE_I32, {n});
  strata_sample_params p{};
  p.struct_size = sizeof(p);
  p.temperature = rows.temperature.data();
  p.top_k = rows.top_k.data();
  p.top_p = rows.top_p.data();
  p.min_p = rows.min_p.data();
  p.seed = rows.seed.data();
  p.step = rows.step.data();
  feedback_rows_ = 0;  // unknown if the op fails
  STRATA_RETURN_IF_ERROR(device_.Check(device_.api().sample(device_.handle(), &logits, &p, &ids), "sample"));
  feedback_rows_ = n;
  if (!rows.logprob_rows.empty()) {
    // Behind the ids (UnpackSampled reads them there): values, then top ids.
    const int64_t k = static_cast<int64_t>(rows.logprob_rows.size()), top = rows.logprob_top_n;
    const strata_tensor values = sampled_ids_.View(STRATA_DTYPE_F32, {k, 1 + top}, static_cast<uint64_t>(n) * 4);
    const strata_tensor top_ids =
        sampled_ids_.View(STRATA_DTYPE_I32, {k, std::max<int64_t>(top, 1)}, static_cast<uint64_t>(n + k * (1 + top)) * 4);
    STRATA_RETURN_IF_ERROR(device_.Check(
        device_.api().logprobs(device_.handle(), &logits, rows.logprob_rows.data(), static_cast<int32_t>(k), &ids,
                               rows.logprob_top_n, &values, top > 0 ? &top_ids : nullptr),
        "logprobs"));
  }
  return absl::OkStatus();
}

absl::Status LlamaModel::ReadBack(void* dst, const DeviceBuffer& src, uint64_t bytes, double since) {
  absl::Status st = device_.Download(dst, src, 0, bytes);
  call_times_.readback_s += MonotonicSeconds() - since;
  return st;
}

absl::Status LlamaModel::RunToLogits(const StepInput& in) {
  ++call_times_.calls;
  // Rank 0 of a parallel run tells the other ranks first; they run the same step.
  if (options_.parallel.broadcaster != nullptr) STRATA_RETURN_IF_ERROR(options_.parallel.broadcaster->Step(in));
  if (options_.parallel.plan.pp_size > 1) return RunPipelined(in);
  // No decode graphs in parallel runs (collectives are not recorded yet).
  if (options_.decode_graphs != DecodeGraphMode::kOff && !options_.parallel.plan.parallel()) {
    bool handled = false;
    STRATA_RETURN_IF_ERROR(RunDecodeGraph(in, &handled));
    if (handled) return absl::OkStatus();
  }
  const double t0 = MonotonicSeconds();
  STRATA_RETURN_IF_ERROR(UploadStep(in));
  const double t1 = MonotonicSeconds();
  call_times_.upload_s += t1 - t0;
  ++graph_stats_.eager;
  absl::Status st = EnqueueOps(in, /*graph_form=*/false);
  call_times_.enqueue_s += MonotonicSeconds() - t1;
  return st;
}

absl::Status LlamaModel::RunDecodeGraph(const StepInput& in, bool* handled) {
  *handled = false;
  const bool record = options_.decode_graphs == DecodeGraphMode::kOn && device_.SupportsGraphs();
  if (!record && options_.decode_graphs != DecodeGraphMode::kPadOnly) return absl::OkStatus();
  if (!IsGraphableDecodeStep(in)) return absl::OkStatus();
  const int32_t max_bucket =
      std::min({options_.max_graph_batch, options_.max_seqs, options_.max_batch_tokens});
  const int32_t bucket = DecodeGraphBucket(in.num_seqs(), max_bucket);
  if (bucket == 0 || eager_buckets_.contains(bucket)) return absl::OkStatus();
  const double t0 = MonotonicSeconds();
  // A step that fills its bucket is uploaded as it is (no copy of its block tables).
  StepInput padded_copy;
  if (bucket != in.num_seqs()) padded_copy = PadDecodeStep(in, bucket, max_blocks_per_seq_);
  const StepInput& padded = bucket != in.num_seqs() ? padded_copy : in;
  STRATA_RETURN_IF_ERROR(UploadStep(padded));
  const double t1 = MonotonicSeconds();
  call_times_.upload_s += t1 - t0;
  *handled = true;
  ++graph_stats_.padded;
  if (auto it = graphs_.find(bucket); it != graphs_.end()) {
    ++graph_stats_.replays;
    absl::Status st = device_.LaunchGraph(it->second);
    call_times_.enqueue_s += MonotonicSeconds() - t1;
    return st;
  }
  // First step of this bucket: run it op by op in graph form (which also lets the backend
  // size its workspaces for these shapes), then record the same calls for later steps.
  // Recording enqueues nothing, so the logits of this step stay as computed above.
  ++graph_stats_.eager;
  STRATA_RETURN_IF_ERROR(EnqueueOps(padded, /*graph_form=*/true));
  if (!record) return absl::OkStatus();
  if (absl::Status begin = device_.BeginGraph(); !begin.ok()) {
    // Not fatal either: this step's logits are computed; the bucket stays op by op.
    eager_buckets_.insert(bucket);
    graph_stats_.failure = absl::StrCat("bucket ", bucket, ": ", begin.message());
    return absl::OkStatus();
  }
  const absl::Status ops = EnqueueOps(padded, /*graph_form=*/true);
  absl::StatusOr<DeviceGraph> g = device_.EndGraph();
  if (!ops.ok() || !g.ok()) {
    // Not fatal: this bucket runs op by op from now on.
    eager_buckets_.insert(bucket);
    graph_stats_.failure = absl::StrCat("bucket ", bucket, ": ", (!ops.ok() ? ops : g.status()).message());
    return absl::OkStatus();
  }
  graphs_.emplace(bucket, *std::move(g));
  ++graph_stats_.recorded;
  return absl::OkStatus();
}

absl::Status LlamaModel::ObserveLinearInputs(const StepInput& in, LinearInputObserver& observer) {
  if (observer.first_layer() < 0 || observer.last_layer() < observer.first_layer() ||
      observer.last_layer() >= static_cast<int32_t>(layers_.size()))
    return absl::InvalidArgumentError(absl::StrCat("observed layers ", observer.first_layer(), "..",
                                                   observer.last_layer(), " outside the model's ", layers_.size()));
  STRATA_RETURN_IF_ERROR(UploadStep(in));
  observer_ = &observer;
  absl::Status st = EnqueueOps(in, /*graph_form=*/false);
  observer_ = nullptr;
  return st;
}

absl::Status LlamaModel::ObserveInput(int32_t layer, LinearInput input, const DeviceBuffer& buf, int64_t n,
                                      int64_t cols) {
  if (layer < observer_->first_layer() || layer > observer_->last_layer()) return absl::OkStatus();
  const size_t count = static_cast<size_t>(n * cols);
  std::vector<float> x(count);
  if (act_dtype_ == STRATA_DTYPE_F32) {
    STRATA_RETURN_IF_ERROR(device_.Download(x.data(), buf, 0, count * 4));
  } else {
    std::vector<uint16_t> h(count);
    STRATA_RETURN_IF_ERROR(device_.Download(h.data(), buf, 0, count * 2));
    for (size_t i = 0; i < count; ++i) x[i] = act_dtype_ == STRATA_DTYPE_F16 ? F16ToF32(h[i]) : Bf16ToF32(h[i]);
  }
  return observer_->Observe(layer, input, x.data(), n, cols);
}

absl::Status LlamaModel::NormalizeQkHeads(const Layer& L, const strata_tensor& qk) {
  const int64_t heads = config_.num_heads + config_.num_kv_heads, hd = config_.head_dim;
  const float eps = static_cast<float>(config_.rms_norm_eps);
  if (device_.SupportsRmsNormHeads()) {
    const strata_tensor w = L.qk_norm.View(STRATA_DTYPE_F32, {heads, hd});
    return device_.Check(device_.api().rms_norm_heads(device_.handle(), &qk, &w, eps), "rms_norm_heads");
  }
  // A plugin before ABI 1.8: each head's column slice is a [n, head_dim] view of its own.
  for (int64_t h = 0; h < heads; ++h) {
    strata_tensor head = qk;
    head.offset += static_cast<uint64_t>(h * hd) * DTypeSize(static_cast<strata_dtype>(qk.dtype));
    head.shape[1] = hd;
    head.row_stride = qk.row_stride != 0 ? qk.row_stride : qk.shape[1];
    const strata_tensor w = L.qk_norm.View(STRATA_DTYPE_F32, {hd}, static_cast<uint64_t>(h * hd) * 4);
    STRATA_RETURN_IF_ERROR(
        device_.Check(device_.api().rms_norm(device_.handle(), &head, nullptr, &w, eps, &head), "rms_norm (q/k head)"));
  }
  return absl::OkStatus();
}

absl::Status LlamaModel::EnqueueOps(const StepInput& in, bool graph_form) {
  const strata_backend_v1& api = device_.api();
  strata_device dev = device_.handle();
  const int64_t n = static_cast<int64_t>(in.token_ids.size());
  const int32_t s = in.num_seqs();
  const int64_t d = config_.hidden_size;
  const int64_t hd = config_.head_dim;
  const int64_t qdim = config_.num_heads * hd;
  const int64_t kvdim = config_.num_kv_heads * hd;
  const int64_t qkvdim = qdim + 2 * kvdim;
  const int64_t ff = config_.intermediate_size;
  const size_t a = DTypeSize(act_dtype_);
  const float eps = static_cast<float>(config_.rms_norm_eps);
  const strata_dtype A = act_dtype_;

  int32_t max_q = 0, max_len = 0;
  for (int32_t i = 0; i < s; ++i) {
    max_q = std::max(max_q, in.query_start_loc[i + 1] - in.query_start_loc[i]);
    max_len = std::max(max_len, in.seq_lens[i]);
  }
  const int64_t r = static_cast<int64_t>(in.logits_rows.size());
  const StepLayout SL = StepLayout::For(n, s, r, max_blocks_per_seq_);
  auto arr = [&](int64_t at, std::initializer_list<int64_t> shape) {
    return step_arrays_.View(STRATA_DTYPE_I32, shape, static_cast<uint64_t>(at) * 4);
  };
  const strata_tensor ids = arr(SL.ids, {n});
  const strata_tensor positions = arr(SL.positions, {n});
  const strata_tensor slots = arr(SL.slots, {n});
  const strata_tensor qsl = arr(SL.query_start, {s + 1});
  const strata_tensor lens = arr(SL.seq_lens, {s});
  const strata_tensor tables = arr(SL.block_tables, {s, max_blocks_per_seq_});
  strata_batch_desc batch{};
  batch.struct_size = sizeof(batch);
  batch.num_tokens = static_cast<int32_t>(n);
  batch.num_seqs = s;
  batch.max_query_len = max_q;
  batch.max_seq_len = graph_form ? static_cast<int32_t>(options_.max_context) : max_len;
  batch.max_blocks_per_seq = max_blocks_per_seq_;
  batch.positions = &positions;
  batch.slot_mapping = &slots;
  batch.query_start_loc = &qsl;
  batch.seq_lens = &lens;
  batch.block_tables = &tables;
  batch.host_query_start_loc = graph_form ? nullptr : in.query_start_loc.data();
  batch.host_seq_lens = graph_form ? nullptr : in.seq_lens.data();

  const strata_tensor inv_freq = inv_freq_.View(STRATA_DTYPE_F32, {static_cast<int64_t>(rope_.inv_freq.size())});
  strata_rope_params rope{};
  rope.struct_size = sizeof(rope);
  rope.style = config_.rope_style == RopeStyle::kInterleaved ? STRATA_ROPE_INTERLEAVED : STRATA_ROPE_NEOX;
  rope.rotary_dim = rope_.rotary_dim;
  rope.attention_factor = rope_.attention_factor;
  rope.inv_freq = &inv_freq;
  strata_attention_params attn{};
  attn.struct_size = sizeof(attn);
  attn.num_heads = static_cast<int32_t>(config_.num_heads);
  attn.num_kv_heads = static_cast<int32_t>(config_.num_kv_heads);
  attn.head_dim = static_cast<int32_t>(hd);
  attn.scale = 1.0f / std::sqrt(static_cast<float>(hd));
  attn.sliding_window = static_cast<int32_t>(config_.sliding_window);

  const strata_tensor h = h_.View(A, {n, d});
  const strata_tensor delta = delta_.View(A, {n, d});
  // Shared buffers (llama_model.h): in the order of a layer's ops, each of these is dead
  // before the next one in the same buffer is written. qkv: written by the qkv product, read
  // by attention; gate_up: written by the gate_up product. normed: the qkv product's input;
  // attn_out: attention's output, the o product's input; normed again: gate_up's input; act:
  // the down product's input.
  const strata_tensor qkv = qkv_gate_up_.View(A, {n, qkvdim});
  const strata_tensor q = qkv_gate_up_.View(A, {n, qdim}, 0, qkvdim);
  const strata_tensor k = qkv_gate_up_.View(A, {n, kvdim}, qdim * a, qkvdim);
  const strata_tensor v = qkv_gate_up_.View(A, {n, kvdim}, (qdim + kvdim) * a, qkvdim);
  const strata_tensor gate_up = qkv_gate_up_.View(A, {n, 2 * ff});
  const strata_tensor gate = qkv_gate_up_.View(A, {n, ff}, 0, 2 * ff);
  const strata_tensor up = qkv_gate_up_.View(A, {n, ff}, ff * a, 2 * ff);
  const strata_tensor normed = norm_attn_act_.View(A, {n, d});
  const strata_tensor attn_out = norm_attn_act_.View(A, {n, qdim});
  const strata_tensor act = norm_attn_act_.View(A, {n, ff});

  auto check = [&](strata_status st, const char* what) { return device_.Check(st, what); };
  const ParallelPlan& plan = options_.parallel.plan;
  Communicator* tp = plan.tp_size > 1 ? options_.parallel.tp : nullptr;
  if (!plan.first_stage()) {
    STRATA_RETURN_IF_ERROR(ReceiveStageInput(h));  // a later pipeline stage
  } else if (SupportsOverlappedSteps()) {
    // Ids < 0 are tokens the previous step sampled on the device (overlapped steps).
    const strata_tensor feedback = sampled_ids_.View(STRATA_DTYPE_I32, {options_.max_batch_tokens});
    STRATA_RETURN_IF_ERROR(
        check(api.embedding_feedback(dev, embedding_.handle(), &ids, &feedback, &h), "embedding"));
  } else {
    STRATA_RETURN_IF_ERROR(check(api.embedding(dev, embedding_.handle(), &ids, &h), "embedding"));
    // Vocab-parallel: each rank looked up its rows (zeros for the others'); the sum is the lookup.
    if (plan.vocab_parallel()) STRATA_RETURN_IF_ERROR(tp->AllReduceSum(h));
  }
  // With the backend's fused matmul (ABI 1.2) a layer is four products around attention:
  // the norms ride in the qkv and gate_up products, silu_mul in the down product, and the o
  // and down products add themselves into the residual stream h. In decode that saves three
  // kernel launches per layer, each costing about as much as a small kernel.
  // Under observation every product's input must exist as a tensor of its own: unfused. Not
  // with tensor parallelism either: there the o and down products are partial sums that are
  // all-reduced before they join the residual stream.
  const bool fused = observer_ == nullptr && options_.fused_matmul && STRATA_BACKEND_HAS_MATMUL_EX(&api) &&
                     plan.tp_size == 1;
  // ABI 1.3: rope + KV write + attention as one call (one kernel at a decode step on CUDA).
  const bool fused_attention = options_.fused_attention && STRATA_BACKEND_HAS_ROPE_ATTENTION(&api);
  auto matmul_ex = [&](const strata_tensor& x, const DeviceWeight& w, const strata_matmul_params& mp,
                       const strata_tensor& out, const char* what) {
    return check(api.matmul_ex(dev, &x, w.handle(), &mp, &out), what);
  };
  auto params = [](int32_t prologue) {
    strata_matmul_params mp{};
    mp.struct_size = sizeof(mp);
    mp.prologue = prologue;
    return mp;
  };
  for (size_t l = 0; l < layers_.size(); ++l) {
    const Layer& L = layers_[l];
    const int32_t li = static_cast<int32_t>(l);
    const strata_tensor an = L.attn_norm.View(STRATA_DTYPE_F32, {d});
    const strata_tensor fnw = L.ffn_norm.View(STRATA_DTYPE_F32, {d});
    const strata_tensor qkv_bias = L.qkv_bias.View(STRATA_DTYPE_F32, {qkvdim});
    if (fused) {
      strata_matmul_params mp = params(STRATA_PROLOGUE_RMS_NORM);
      mp.norm_weight = &an;
      mp.eps = eps;
      mp.bias = L.has_qkv_bias ? &qkv_bias : nullptr;
      mp.prologue_scratch = &normed;
      STRATA_RETURN_IF_ERROR(matmul_ex(h, L.wqkv, mp, qkv, "matmul_ex norm+qkv"));
    } else {
      // The residual stream h absorbs the previous layer's MLP output inside the fused norm.
      if (l == 0) {
        STRATA_RETURN_IF_ERROR(check(api.rms_norm(dev, &h, nullptr, &an, eps, &normed), "rms_norm"));
      } else {
        STRATA_RETURN_IF_ERROR(check(api.rms_norm(dev, &delta, &h, &an, eps, &normed), "rms_norm"));
      }
      if (observer_ != nullptr) STRATA_RETURN_IF_ERROR(ObserveInput(li, LinearInput::kQkv, norm_attn_act_, n, d));
      STRATA_RETURN_IF_ERROR(check(
          api.matmul(dev, &normed, L.wqkv.handle(), L.has_qkv_bias ? &qkv_bias : nullptr, &qkv), "matmul qkv"));
    }
    if (config_.qk_norm) STRATA_RETURN_IF_ERROR(NormalizeQkHeads(L, qkv_gate_up_.View(A, {n, qdim + kvdim}, 0, qkvdim)));
    if (fused_attention) {
      STRATA_RETURN_IF_ERROR(check(
          api.rope_attention(dev, &rope, &attn, &batch, &q, &k, &v, kv_.handle(), li, &attn_out), "rope_attention"));
    } else {
      STRATA_RETURN_IF_ERROR(check(api.rope_kv_write(dev, &rope, &attn, &batch, &q, &k, &v, kv_.handle(), li),
                                   "rope_kv_write"));
      STRATA_RETURN_IF_ERROR(check(api.attention(dev, &attn, &batch, &q, kv_.handle(), li, &attn_out), "attention"));
    }
    if (fused) {
      strata_matmul_params o = params(STRATA_PROLOGUE_NONE);
      o.accumulate = 1;
      o.product_scratch = &delta;
      STRATA_RETURN_IF_ERROR(matmul_ex(attn_out, L.wo, o, h, "matmul_ex o+residual"));
      strata_matmul_params gu = params(STRATA_PROLOGUE_RMS_NORM);
      gu.norm_weight = &fnw;
      gu.eps = eps;
      gu.prologue_scratch = &normed;
      STRATA_RETURN_IF_ERROR(matmul_ex(h, L.w_gate_up, gu, gate_up, "matmul_ex norm+gate_up"));
      strata_matmul_params dn = params(STRATA_PROLOGUE_SILU_MUL);
      dn.up = &up;
      dn.accumulate = 1;
      dn.prologue_scratch = &act;
      dn.product_scratch = &delta;
      STRATA_RETURN_IF_ERROR(matmul_ex(gate, L.w_down, dn, h, "matmul_ex silu+down+residual"));
    } else {
      if (observer_ != nullptr) STRATA_RETURN_IF_ERROR(ObserveInput(li, LinearInput::kAttnOut, norm_attn_act_, n, qdim));
      STRATA_RETURN_IF_ERROR(check(api.matmul(dev, &attn_out, L.wo.handle(), nullptr, &delta), "matmul o"));
      if (tp != nullptr) STRATA_RETURN_IF_ERROR(tp->AllReduceSum(delta));  // row-parallel o
      STRATA_RETURN_IF_ERROR(check(api.rms_norm(dev, &delta, &h, &fnw, eps, &normed), "rms_norm"));
      if (observer_ != nullptr) STRATA_RETURN_IF_ERROR(ObserveInput(li, LinearInput::kGateUp, norm_attn_act_, n, d));
      STRATA_RETURN_IF_ERROR(
          check(api.matmul(dev, &normed, L.w_gate_up.handle(), nullptr, &gate_up), "matmul gate_up"));
      STRATA_RETURN_IF_ERROR(check(api.silu_mul(dev, &gate, &up, &act), "silu_mul"));
      if (observer_ != nullptr) STRATA_RETURN_IF_ERROR(ObserveInput(li, LinearInput::kDown, norm_attn_act_, n, ff));
      STRATA_RETURN_IF_ERROR(check(api.matmul(dev, &act, L.w_down.handle(), nullptr, &delta), "matmul down"));
      if (tp != nullptr) STRATA_RETURN_IF_ERROR(tp->AllReduceSum(delta));  // row-parallel down
    }
    if (observer_ != nullptr && li == observer_->last_layer()) return absl::OkStatus();  // calibration stops here
  }
  const strata_tensor out = logits_.View(STRATA_DTYPE_F32, {r, config_.vocab_size},
                                         static_cast<uint64_t>(logits_row_offset_ * config_.vocab_size) * 4);
  if (!plan.last_stage()) {
    // The residual stream goes on to the next stage whole (the last layer's MLP output
    // added), and rank 0 gets the logits from the last stage.
    if (!fused) STRATA_RETURN_IF_ERROR(check(api.add(dev, &h, &delta, &h), "add (stage output)"));
    STRATA_RETURN_IF_ERROR(SendStageOutput(h));
    return defer_stage_logits_ ? absl::OkStatus() : LogitsToRankZero(out);
  }
  const strata_tensor fnw = final_norm_.View(STRATA_DTYPE_F32, {d});
  if (fused) {  // h already holds the last layer's output
    STRATA_RETURN_IF_ERROR(check(api.rms_norm(dev, &h, nullptr, &fnw, eps, &normed), "rms_norm final"));
  } else {
    STRATA_RETURN_IF_ERROR(check(api.rms_norm(dev, &delta, &h, &fnw, eps, &normed), "rms_norm final"));
  }
  const strata_tensor row_idx = arr(SL.rows, {r});
  const strata_tensor rows = rows_.View(A, {r, d});
  STRATA_RETURN_IF_ERROR(check(api.gather_rows(dev, &normed, &row_idx, &rows), "gather_rows"));
  if (plan.vocab_parallel()) {
    STRATA_RETURN_IF_ERROR(ParallelLogits(rows, out));
  } else {
    const DeviceWeight& head = output_.handle() != nullptr ? output_ : embedding_;
    STRATA_RETURN_IF_ERROR(check(api.matmul(dev, &rows, head.handle(), nullptr, &out), "matmul logits"));
  }
  return defer_stage_logits_ ? absl::OkStatus() : LogitsToRankZero(out);
}

}  // namespace strata
