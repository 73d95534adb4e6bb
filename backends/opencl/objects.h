// The objects behind the ABI's opaque handles, and the registry that lets every entry
// point reject a handle that was never created or was already freed.
#ifndef STRATA_BACKENDS_OPENCL_OBJECTS_H_
#define STRATA_BACKENDS_OPENCL_OBJECTS_H_

#ifndef CL_TARGET_OPENCL_VERSION
#define CL_TARGET_OPENCL_VERSION 120
#endif
#include <CL/cl.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "backends/opencl/status.h"
#include "strata/device.h"

// Bits of the device error word (kernels/opencl/common.cl).
namespace strata::opencl {
inline constexpr int kErrEmbeddingId = 1;
inline constexpr int kErrGatherIndex = 2;
inline constexpr int kErrSlot = 4;
inline constexpr int kErrBlockTable = 8;
inline constexpr int kErrBatch = 16;
}  // namespace strata::opencl

struct strata_device_s {
  int32_t index = 0;
  cl_device_id id = nullptr;
  cl_context context = nullptr;
  cl_command_queue queue = nullptr;
  cl_program program = nullptr;
  std::string name;  // "NVIDIA H200 (OpenCL 3.0 CUDA, driver 550.54)" style, for messages
  bool is_cpu = false;          // runs the CPU-shaped kernels
  bool host_huge_pages = false;  // a CPU device: large buffers on huge pages of our own (memory.cpp)
  bool has_int_dot = false;   // cl_khr_integer_dot_product
  size_t max_work_group = 1;  // CL_DEVICE_MAX_WORK_GROUP_SIZE
  cl_uint compute_units = 1;  // CL_DEVICE_MAX_COMPUTE_UNITS
  uint64_t local_mem = 0;     // CL_DEVICE_LOCAL_MEM_SIZE
  // GPU-shaped kernels: decode attention through paged_attention_decode (option
  // att_decode=off: the older one-work-group-per-head kernel) and W8A8 products of
  // gemv_max_tokens+1 .. 32 tokens through the split-K mma.sync kernel (mma_small=off: the
  // 128 x 128 tile GEMM); dense GEMV up to dense_gemv_max_tokens tokens (option of that name).
  bool att_decode = true;
  bool att_split = true;  // its split-K form for few work-groups and long contexts (att_split=off)
  bool mma_small = true;
  bool rope_fused = true;  // rope + cache write in one launch on GPUs (option rope_fused=off)
  int32_t dense_gemv_max_tokens = 32;
  int32_t dense_gemv_chunk = 8;  // tokens per dense GEMV launch (option dense_gemv_chunk=)
  // The GPU GEMV kernels' shape (kernels/opencl/gemv_reduce.cl; device options gemv_wg=,
  // gemv_rows=, gemv_rows_wide=, passed to the compiler as -DSTRATA_GEMV_*) and the largest
  // token count a W8A8 product runs as a GEMV rather than the tiled GEMM (gemv_max_tokens=:
  // 8, 16 or 32; default 32, 16 on devices with the mma.sync GEMM).
  int32_t gemv_wg = 128;
  int32_t gemv_rows = 4;
  int32_t gemv_rows_wide = 2;
  int32_t gemv_max_tokens = 32;
  bool dp4a = false;  // the int8 kernels use dp4a through inline PTX (int_dot_probe.h)
  bool mma = false;   // many-token W8A8 products use int8 mma.sync through inline PTX
  bool mma_bf16 = false;  // 9-32-token dense BF16 products use bf16 mma.sync (option bf16_mma=off: not)
  uint64_t max_alloc = 0;     // CL_DEVICE_MAX_MEM_ALLOC_SIZE
  cl_mem err_word = nullptr;  // int, bits kErr*
  std::mutex mu;              // kernels' arguments are set and enqueued under it
  std::map<std::string, cl_kernel> kernels;
  // W8A8 per-token activation scratch (grown on demand) and quantization counters.
  cl_mem act_q = nullptr;
  uint64_t act_q_bytes = 0;
  cl_mem act_scale = nullptr;
  uint64_t act_scale_bytes = 0;
  cl_mem act_cnt = nullptr;  // uint [tokens][2]: each token's clamped and non-finite counts
  uint64_t act_cnt_bytes = 0;
  // CPU devices: the activations act_q / act_scale / act_cnt hold the dynamic quantization of
  // (rms_norm or silu_mul quantize their output as they write it, kernels/opencl/
  // fused_quant_cpu.cl; quantize_act_cpu its input), so that a W8A8 product of exactly that
  // view skips its own quantization. Cleared by every other op (backend_table.cpp, OnDevice),
  // by a product that quantizes something else, and by a product that writes over the view.
  struct PendingQuant {
    bool valid = false;
    cl_mem mem = nullptr;
    uint64_t off = 0;
    int64_t stride = 0, rows = 0, cols = 0;
    uint64_t byte_begin = 0, byte_end = 0;
  } act_pending;
  bool w8a8_dynamic = false;  // a W8A8 weight with dynamic scales and no smoothing exists
  bool fuse_quant = false;    // the above is on (by default; option fuse_quant=on|off)
  // The prefill attention kernel's list of query blocks (int [blocks][2]), grown on demand.
  cl_mem att_blocks = nullptr;
  uint64_t att_blocks_bytes = 0;
  std::vector<cl_int> att_blocks_host;  // what att_blocks holds
  // The decode attention's split-K partial sums (float [tokens][heads][splits][head_dim + 2]).
  cl_mem att_split_buf = nullptr;
  uint64_t att_split_bytes = 0;
  cl_mem counters = nullptr;  // uint [3][STRATA_MAX_QUANT_COUNTER_SLOTS]: saturated, nonfinite, outliers
  // STRATA_OPENCL_PROFILE=1 (profile.h): the queue records profiling events; every kernel's
  // event is kept until the next synchronization point, then added to its kernel's totals,
  // which device_close prints to stderr.
  bool profile = false;
  struct ProfEvent {
    std::string kernel;
    cl_event event;
    double host_us;  // host time spent setting arguments and enqueueing
  };
  std::vector<ProfEvent> prof_events;
  struct ProfStat {
    uint64_t count = 0;
    double device_us = 0;  // END - START
    double host_us = 0;
  };
  std::map<std::string, ProfStat> prof_stats;
  double prof_busy_us = 0;  // sum of kernel times
  double prof_span_us = 0;  // first START to last END, per synchronization window
  uint64_t prof_windows = 0;
  std::vector<double> prof_window_busy, prof_window_span;  // per window, in us
  ~strata_device_s();
};

struct strata_buffer_s {
  cl_mem mem = nullptr;
  uint64_t size = 0;  // bytes requested by buffer_alloc()
  strata_device_s* dev = nullptr;
  ~strata_buffer_s();
};

struct strata_weight_s {
  int32_t format = STRATA_WEIGHT_DENSE;
  int32_t dtype = STRATA_DTYPE_F32;
  int64_t rows = 0;
  int64_t cols = 0;
  cl_mem data = nullptr;    // row-major [rows, cols] as given (dense, I8)
  cl_mem scales = nullptr;  // INT8 formats: F32 [rows, groups]
  int32_t group_size = 0;   // INT8 formats: 0 = one scale per row
  int32_t groups = 1;       // scales per row
  cl_mem smooth = nullptr;  // W8A8: F32 [cols] or null
  int32_t act_scale_mode = STRATA_ACT_SCALE_DYNAMIC;
  float act_scale = 0.0f;
  int32_t counter_slot = -1;
  std::string name;
  ~strata_weight_s();
};

struct strata_kv_cache_s {
  strata_kv_cache_desc desc{};
  size_t elem_size = 0;
  uint64_t block_elems = 0;  // block_size * num_kv_heads * head_dim
  // One buffer per layer: K blocks then V blocks ([num_blocks][block_elems] each).
  std::vector<cl_mem> layers;
  // I8 caches: per layer, F32 scales [2][num_blocks][num_kv_heads] (K then V).
  std::vector<cl_mem> scales;
  ~strata_kv_cache_s();
  uint64_t half_bytes() const { return static_cast<uint64_t>(desc.num_blocks) * block_elems * elem_size; }
  uint64_t scale_half_bytes() const {
    return scales.empty() ? 0 : static_cast<uint64_t>(desc.num_blocks) * desc.num_kv_heads * sizeof(float);
  }
};

namespace strata::opencl {

enum class HandleKind { kDevice, kBuffer, kWeight, kKvCache };

void RegisterHandle(const void* h, HandleKind kind);
void UnregisterHandle(const void* h);
bool IsLiveHandle(const void* h, HandleKind kind);
Status CheckHandle(const void* h, HandleKind kind, const char* what);

}  // namespace strata::opencl

#endif  // STRATA_BACKENDS_OPENCL_OBJECTS_H_
