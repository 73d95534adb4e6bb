// gemm_pdl=on (programmatic_gemm_start.h): in a recorded graph a cuBLASLt product may start
// before the kernel before it has finished. That is only correct if the product's kernels
// wait (griddepcontrol.wait) before they read their operands. This test records, for the
// Llama-3-8B shape's decode products at 128 tokens (with the built-in configuration table
// and with the heuristic's choice), a producer kernel that lets dependents launch at once,
// sleeps 50 us and only then writes the product's input, followed by the product through
// LtGemm with programmatic start on. A product that read early would see the zeros x held
// before; its output must equal the same graph's with an ordinary edge, bit for bit. Needs a
// GPU (skipped, visibly, without one); run on the H200 (docs/benchmarks.md).
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "backends/cuda/builtin_gemm_configs.h"
#include "backends/cuda/cublaslt_gemm.h"
#include "backends/cuda/programmatic_gemm_start.h"
#include "strata/device.h"

namespace strata::cuda {
namespace {

bool HaveGpu() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

#define SKIP_WITHOUT_GPU() \
  if (!HaveGpu()) GTEST_SKIP() << "no CUDA device: the programmatic start of products is checked on the GPU machine"

__device__ __forceinline__ uint64_t GlobalTimer() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Lets dependents launch at once, then sleeps, then writes x.
__global__ void SlowProducer(__nv_bfloat16* x, int64_t n, uint64_t delay_ns) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
  const uint64_t t0 = GlobalTimer();
  while (GlobalTimer() - t0 < delay_ns) {
  }
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    x[i] = __float2bfloat16(0.01f * static_cast<float>((i * 7919) % 201 - 100));
  }
}

struct Product {
  const char* name;
  int64_t m, k;
  bool accumulate;
  int32_t out_dtype;
};

struct DeviceBuffer {
  void* p = nullptr;
  explicit DeviceBuffer(size_t bytes) { EXPECT_EQ(cudaMalloc(&p, bytes), cudaSuccess); }
  ~DeviceBuffer() { cudaFree(p); }
};

// Records producer -> product with `programmatic` start and replays it once, from zeroed x
// and a fixed starting output; the output's bytes. *edges: how many programmatic edges
// LtGemm made.
std::vector<uint8_t> Replay(const Product& p, int64_t n, bool programmatic, bool builtin_table, const void* w,
                            void* x, void* out, size_t out_bytes, int64_t* edges) {
  cudaStream_t s = nullptr;
  EXPECT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  LtGemm* raw = nullptr;
  EXPECT_TRUE(LtGemm::Create(s, &raw).ok());
  std::unique_ptr<LtGemm> gemm(raw);
  gemm->set_programmatic_start(programmatic);
  cudaDeviceProp prop{};
  EXPECT_EQ(cudaGetDeviceProperties(&prop, 0), cudaSuccess);
  if (builtin_table) {
    if (const BuiltinGemmConfigs* b = FindBuiltinGemmConfigs(prop.name, cublasLtGetVersion())) {
      GemmConfigTable t;
      EXPECT_TRUE(GemmConfigTable::Parse(b->table, b->origin, &t).ok());
      gemm->set_config_table(std::move(t));
    }
  }
  GemmArgs a{};
  a.w = w;
  a.w_dtype = STRATA_DTYPE_BF16;
  a.x = x;
  a.ldx = p.k;
  a.x_dtype = STRATA_DTYPE_BF16;
  a.out = out;
  a.ldo = p.m;
  a.out_dtype = p.out_dtype;
  a.m = p.m;
  a.n = n;
  a.k = p.k;
  a.accumulate = p.accumulate;
  EXPECT_EQ(cudaMemset(x, 0, static_cast<size_t>(p.k * n * 2)), cudaSuccess);
  EXPECT_EQ(cudaMemset(out, 0x3c, out_bytes), cudaSuccess);  // what beta = 1 adds to
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  cudaGraph_t g = nullptr;
  cudaGraphExec_t ge = nullptr;
  EXPECT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  SlowProducer<<<132, 256, 0, s>>>(static_cast<__nv_bfloat16*>(x), p.k * n, 50000);
  const Status st = gemm->Run(a, /*may_time=*/false);
  EXPECT_TRUE(st.ok()) << st.message;
  EXPECT_EQ(cudaStreamEndCapture(s, &g), cudaSuccess);
  EXPECT_EQ(cudaGraphInstantiate(&ge, g, 0), cudaSuccess);
  EXPECT_EQ(cudaGraphLaunch(ge, s), cudaSuccess);
  EXPECT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  std::vector<uint8_t> result(out_bytes);
  EXPECT_EQ(cudaMemcpy(result.data(), out, out_bytes, cudaMemcpyDeviceToHost), cudaSuccess);
  *edges = gemm->programmatic_starts();
  cudaGraphExecDestroy(ge);
  cudaGraphDestroy(g);
  gemm.reset();
  cudaStreamDestroy(s);
  return result;
}

TEST(ProgrammaticGemmStart, ProductsWaitForTheKernelBeforeThem) {
  SKIP_WITHOUT_GPU();
  cudaDeviceProp prop{};
  ASSERT_EQ(cudaGetDeviceProperties(&prop, 0), cudaSuccess);
  if (prop.major < 9) GTEST_SKIP() << prop.name << ": programmatic dependent launch needs sm_90";
  constexpr int64_t kTokens = 128;
  const Product products[] = {
      {"qkv", 6144, 4096, false, STRATA_DTYPE_BF16},       {"o", 4096, 4096, true, STRATA_DTYPE_BF16},
      {"gate_up", 28672, 4096, false, STRATA_DTYPE_BF16},  {"down", 4096, 14336, true, STRATA_DTYPE_BF16},
      {"logits", 128256, 4096, false, STRATA_DTYPE_F32},
  };
  for (const Product& p : products) {
    const size_t wbytes = static_cast<size_t>(p.m * p.k * 2);
    const size_t out_bytes = static_cast<size_t>(p.m * kTokens) * (p.out_dtype == STRATA_DTYPE_F32 ? 4 : 2);
    DeviceBuffer w(wbytes), x(static_cast<size_t>(p.k * kTokens * 2)), out(out_bytes);
    {
      std::vector<uint16_t> host(static_cast<size_t>(p.m * p.k));
      uint64_t r = 0x9e3779b97f4a7c15ull;
      for (uint16_t& v : host) {
        r = r * 6364136223846793005ull + 1442695040888963407ull;
        const float f = (static_cast<float>(r >> 40) / 16777216.0f * 2.0f - 1.0f) * 0.02f;
        uint32_t b;
        std::memcpy(&b, &f, 4);
        v = static_cast<uint16_t>(b >> 16);
      }
      ASSERT_EQ(cudaMemcpy(w.p, host.data(), wbytes, cudaMemcpyHostToDevice), cudaSuccess);
    }
    for (const bool table : {true, false}) {
      SCOPED_TRACE(std::string(p.name) + (table ? " with the built-in table" : " with the heuristic's choice"));
      int64_t plain_edges = 0, edges = 0;
      const std::vector<uint8_t> plain = Replay(p, kTokens, false, table, w.p, x.p, out.p, out_bytes, &plain_edges);
      const std::vector<uint8_t> early = Replay(p, kTokens, true, table, w.p, x.p, out.p, out_bytes, &edges);
      EXPECT_EQ(plain_edges, 0);
      EXPECT_TRUE(plain == early) << "the product read its input before the kernel before it had written it";
      // On the GPU this was measured on, every one of these products takes the edge.
      if (std::string(prop.name) == "NVIDIA H200" && cublasLtGetVersion() / 10000 == 13) EXPECT_EQ(edges, 1);
      // And it is the product of the producer's x, not of zeros (which gives 0, or with
      // beta = 1 the starting output).
      EXPECT_FALSE(early == std::vector<uint8_t>(out_bytes, p.accumulate ? 0x3c : 0));
    }
  }
}

TEST(ProgrammaticGemmStart, NoEdgeOutsideCaptureOrAfterANonKernelNode) {
  SKIP_WITHOUT_GPU();
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  bool made = true;
  EXPECT_EQ(StartNextNodeEarly(s, &made), cudaSuccess);
  EXPECT_FALSE(made);  // not capturing
  DeviceBuffer b(256);
  cudaGraph_t g = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  EXPECT_EQ(cudaMemsetAsync(b.p, 0, 256, s), cudaSuccess);
  made = true;
  EXPECT_EQ(StartNextNodeEarly(s, &made), cudaSuccess);
  EXPECT_FALSE(made);  // after a memset node
  SlowProducer<<<1, 32, 0, s>>>(static_cast<__nv_bfloat16*>(b.p), 16, 0);
  EXPECT_EQ(StartNextNodeEarly(s, &made), cudaSuccess);
  EXPECT_TRUE(made);  // after a kernel node
  SlowProducer<<<1, 32, 0, s>>>(static_cast<__nv_bfloat16*>(b.p), 16, 0);
  ASSERT_EQ(cudaStreamEndCapture(s, &g), cudaSuccess);
  cudaGraphExec_t ge = nullptr;
  EXPECT_EQ(cudaGraphInstantiate(&ge, g, 0), cudaSuccess);
  EXPECT_EQ(cudaGraphLaunch(ge, s), cudaSuccess);
  EXPECT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  cudaGraphExecDestroy(ge);
  cudaGraphDestroy(g);
  cudaStreamDestroy(s);
}

}  // namespace
}  // namespace strata::cuda
