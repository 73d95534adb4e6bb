// What is specific to the OpenCL backend (the op checks are in tests/backends/conformance):
// the on-disk cache of program binaries (hit, miss, corrupt and refused entries rebuilt),
// and errors that name the device and the kernel file when the kernels do not build or
// memory runs out, with the other backends still usable. Runs on PoCL on CI; skips
// visibly without an OpenCL device (fails with STRATA_REQUIRE_BACKENDS=opencl).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "plugins/plugin_loader.h"
#include "strata/device.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

using CacheInfoFn = int32_t (*)(int32_t* hits, int32_t* misses, int32_t* rejected, char* path, int32_t path_size);

struct CacheInfo {
  int32_t hits = 0, misses = 0, rejected = 0;
  std::string path;
};

bool Required() {
  const char* env = std::getenv("STRATA_REQUIRE_BACKENDS");
  return env != nullptr && std::string(env).find("opencl") != std::string::npos;
}

class OpenClBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string path = std::string(STRATA_PLUGIN_DIR) + "/libstrata-backend-opencl.so";
    ASSERT_TRUE(registry_.LoadFile(path)) << registry_.rejected().back().reason;
    const LoadedPlugin& p = registry_.loaded().back();
    if (p.device_count == 0) {
      if (Required()) FAIL() << "no OpenCL device: " << p.unavailable_reason;
      GTEST_SKIP() << "no OpenCL device: " << p.unavailable_reason;
    }
    api_ = p.backend;
    info_ = reinterpret_cast<CacheInfoFn>(api_->get_proc_address("strata_opencl_program_cache_info"));
    ASSERT_NE(info_, nullptr);
    // A cache folder of this test's own.
    cache_home_ = fs::path(STRATA_TEST_TMP) / ("opencl-cache-" + std::to_string(getpid()));
    fs::remove_all(cache_home_);
    setenv("XDG_CACHE_HOME", cache_home_.c_str(), 1);
  }
  void TearDown() override {
    unsetenv("XDG_CACHE_HOME");
    fs::remove_all(cache_home_);
  }

  CacheInfo Info() {
    CacheInfo c;
    char path[1024] = {};
    info_(&c.hits, &c.misses, &c.rejected, path, sizeof(path));
    c.path = path;
    return c;
  }

  // Opens device 0 (with `options`), checks an op runs, closes it.
  strata_status OpenRunClose(const char* options = nullptr) {
    strata_device_options o{};
    o.struct_size = sizeof(o);
    o.options = options;
    strata_device dev = nullptr;
    const strata_status s = api_->device_open(0, &o, &dev);
    if (s != STRATA_OK) return s;
    strata_buffer a = nullptr, b = nullptr;
    EXPECT_EQ(api_->buffer_alloc(dev, 16, &a), STRATA_OK);
    EXPECT_EQ(api_->buffer_alloc(dev, 16, &b), STRATA_OK);
    const float x[4] = {1, 2, 3, 4};
    EXPECT_EQ(api_->upload(dev, a, 0, x, 16), STRATA_OK);
    strata_tensor ta{a, 0, STRATA_DTYPE_F32, 2, {1, 4}, 0}, tb{b, 0, STRATA_DTYPE_F32, 2, {1, 4}, 0};
    EXPECT_EQ(api_->add(dev, &ta, &ta, &tb), STRATA_OK) << api_->last_error();
    float y[4] = {};
    EXPECT_EQ(api_->download(dev, y, b, 0, 16), STRATA_OK);
    EXPECT_EQ(y[3], 8.0f);
    api_->buffer_free(dev, a);
    api_->buffer_free(dev, b);
    api_->device_close(dev);
    return STRATA_OK;
  }

  PluginRegistry registry_;
  const strata_backend_v1* api_ = nullptr;
  CacheInfoFn info_ = nullptr;
  fs::path cache_home_;
};

std::vector<char> ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<char>((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void WriteAll(const std::string& path, const std::vector<char>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

TEST_F(OpenClBackendTest, ProgramCacheIsWrittenReusedAndRebuiltWhenCorrupt) {
  const CacheInfo start = Info();
  ASSERT_EQ(OpenRunClose(), STRATA_OK) << api_->last_error();
  const CacheInfo first = Info();
  EXPECT_EQ(first.misses, start.misses + 1) << "a fresh cache folder: built from source";
  ASSERT_TRUE(first.path.rfind(cache_home_.string() + "/strata/opencl/", 0) == 0) << first.path;
  ASSERT_TRUE(fs::exists(first.path));
  const std::vector<char> good = ReadAll(first.path);
  ASSERT_GT(good.size(), 24u);

  ASSERT_EQ(OpenRunClose(), STRATA_OK) << api_->last_error();
  const CacheInfo second = Info();
  EXPECT_EQ(second.hits, first.hits + 1) << "the entry is reused";
  EXPECT_EQ(second.misses, first.misses);

  // A flipped byte in the binary: the checksum fails, the entry is rebuilt and rewritten.
  std::vector<char> bad = good;
  bad[bad.size() / 2] ^= 0x5a;
  WriteAll(first.path, bad);
  ASSERT_EQ(OpenRunClose(), STRATA_OK) << api_->last_error();
  const CacheInfo third = Info();
  EXPECT_EQ(third.rejected, second.rejected + 1);
  EXPECT_EQ(third.misses, second.misses + 1);
  EXPECT_EQ(third.hits, second.hits) << "a corrupt entry is never used";
  EXPECT_NE(ReadAll(first.path), bad) << "the entry is rewritten";

  // A truncated file, and one whose checksum matches a binary the driver cannot load.
  WriteAll(first.path, std::vector<char>(good.begin(), good.begin() + 20));
  ASSERT_EQ(OpenRunClose(), STRATA_OK) << api_->last_error();
  std::vector<char> garbage(good.begin(), good.begin() + 24);
  const std::string junk = "not a program binary at all";
  uint64_t size = junk.size(), sum = 1469598103934665603ull;
  for (unsigned char ch : junk) {
    sum ^= ch;
    sum *= 1099511628211ull;
  }
  std::memcpy(garbage.data() + 8, &size, 8);
  std::memcpy(garbage.data() + 16, &sum, 8);
  garbage.insert(garbage.end(), junk.begin(), junk.end());
  WriteAll(first.path, garbage);
  ASSERT_EQ(OpenRunClose(), STRATA_OK) << api_->last_error();
  const CacheInfo last = Info();
  EXPECT_EQ(last.rejected, third.rejected + 2);
  EXPECT_EQ(last.hits, third.hits);
  ASSERT_EQ(OpenRunClose(), STRATA_OK);
  EXPECT_EQ(Info().hits, last.hits + 1) << "the rewritten entry is good again";
}

TEST_F(OpenClBackendTest, KernelBuildFailureNamesDeviceAndFileAndOtherBackendsStillWork) {
  strata_device_options o{};
  o.struct_size = sizeof(o);
  o.options = "cl_build_options=-DSTRATA_TEST_BROKEN_KERNEL";
  strata_device dev = nullptr;
  ASSERT_EQ(api_->device_open(0, &o, &dev), STRATA_ERROR_DEVICE);
  const std::string msg = api_->last_error();
  strata_device_info info{};
  info.struct_size = sizeof(info);
  ASSERT_EQ(api_->device_info(0, &info), STRATA_OK);
  EXPECT_NE(msg.find(info.name), std::string::npos) << msg;
  EXPECT_NE(msg.find("building the kernels failed"), std::string::npos) << msg;
  EXPECT_NE(msg.find("matmul.cl"), std::string::npos) << "the build log names the kernel file: " << msg;
  // The same device opens with the normal program, and the CPU backend loads beside it.
  EXPECT_EQ(OpenRunClose(), STRATA_OK) << api_->last_error();
  ASSERT_TRUE(registry_.LoadFile(std::string(STRATA_PLUGIN_DIR) + "/libstrata-backend-cpu.so"));
  EXPECT_GT(registry_.loaded().back().device_count, 0);
}

// The GPU GEMV's shape options (run on any device with kernels=gpu): bad values are
// refused; odd shapes (3 rows per group of 64, 5 for 16-32 tokens, GEMM above 16 tokens)
// give exact W8A8 products. Integer activations with a 127 in every token quantize to
// themselves (scale 1) and the weight scale is 0.5, so every product is exact in F32.
TEST_F(OpenClBackendTest, GemvShapeOptionsAreCheckedAndOddShapesAreExact) {
  strata_device_options o{};
  o.struct_size = sizeof(o);
  strata_device dev = nullptr;
  for (const char* bad : {"gemv_wg=100", "gemv_rows=0", "gemv_max_tokens=64", "gemv_wg=1024;gemv_rows=8"}) {
    o.options = bad;
    EXPECT_EQ(api_->device_open(0, &o, &dev), STRATA_ERROR_INVALID_ARGUMENT) << bad;
  }
  o.options = "kernels=gpu;gemv_wg=64;gemv_rows=3;gemv_rows_wide=5;gemv_max_tokens=16";
  ASSERT_EQ(api_->device_open(0, &o, &dev), STRATA_OK) << api_->last_error();
  const int64_t rows = 37, cols = 96;
  std::vector<int8_t> w(rows * cols);
  for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<int8_t>(static_cast<int>((i * 37) % 255) - 127);
  const std::vector<float> scales(rows, 0.5f);
  strata_weight_desc d{};
  d.struct_size = sizeof(d);
  d.format = STRATA_WEIGHT_W8A8;
  d.dtype = STRATA_DTYPE_I8;
  d.rows = rows;
  d.cols = cols;
  d.data = w.data();
  d.scales = scales.data();
  d.scales_dtype = STRATA_DTYPE_F32;
  strata_weight wt = nullptr;
  ASSERT_EQ(api_->weight_create(dev, &d, &wt), STRATA_OK) << api_->last_error();
  for (int64_t n : {1, 5, 12, 20, 40}) {
    SCOPED_TRACE(testing::Message() << "n=" << n);
    std::vector<float> x(n * cols);
    for (int64_t t = 0; t < n; ++t) {
      for (int64_t c = 0; c < cols; ++c) x[t * cols + c] = static_cast<float>(((t * 31 + c * 17) % 255) - 127);
      x[t * cols + (t % cols)] = 127.0f;
    }
    strata_buffer xb = nullptr, yb = nullptr;
    ASSERT_EQ(api_->buffer_alloc(dev, x.size() * 4, &xb), STRATA_OK);
    ASSERT_EQ(api_->buffer_alloc(dev, n * rows * 4, &yb), STRATA_OK);
    ASSERT_EQ(api_->upload(dev, xb, 0, x.data(), x.size() * 4), STRATA_OK);
    strata_tensor tx{xb, 0, STRATA_DTYPE_F32, 2, {n, cols}, 0}, ty{yb, 0, STRATA_DTYPE_F32, 2, {n, rows}, 0};
    ASSERT_EQ(api_->matmul(dev, &tx, wt, nullptr, &ty), STRATA_OK) << api_->last_error();
    std::vector<float> y(n * rows);
    ASSERT_EQ(api_->download(dev, y.data(), yb, 0, y.size() * 4), STRATA_OK);
    for (int64_t t = 0; t < n; ++t) {
      for (int64_t r = 0; r < rows; ++r) {
        int64_t sum = 0;
        for (int64_t c = 0; c < cols; ++c) sum += static_cast<int64_t>(x[t * cols + c]) * w[r * cols + c];
        ASSERT_EQ(y[t * rows + r], 0.5f * static_cast<float>(sum)) << "token " << t << " row " << r;
      }
    }
    api_->buffer_free(dev, xb);
    api_->buffer_free(dev, yb);
  }
  api_->weight_free(dev, wt);
  api_->device_close(dev);
}

// On every device by default (option fuse_quant=off: not) rms_norm and silu_mul quantize the rows they
// write when a W8A8 weight is about, and the next W8A8 product of exactly those rows uses that
// quantization instead of its own (act_pending, backends/opencl/objects.h). Checked here: the product equals the one
// made after an op that discards the fused quantization, bit for bit; a write into the rows
// between the two (upload) is seen; each product counts the non-finite activations into its
// own weight's counter slot. On other devices the same calls check the unfused path.
class FusedQuantTest : public OpenClBackendTest, public ::testing::WithParamInterface<const char*> {};

TEST_P(FusedQuantTest, FusedActivationQuantizationIsExactAndNeverStale) {
  strata_device_options o{};
  o.struct_size = sizeof(o);
  o.options = GetParam()[0] != '\0' ? GetParam() : nullptr;
  strata_device dev = nullptr;
  ASSERT_EQ(api_->device_open(0, &o, &dev), STRATA_OK) << api_->last_error();
  const int64_t rows = 37, cols = 96, n = 3;
  auto make_weight = [&](int32_t slot, int seed) {
    std::vector<int8_t> w(rows * cols);
    for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<int8_t>(static_cast<int>((i * 37 + seed) % 255) - 127);
    const std::vector<float> scales(rows, 0.5f);
    strata_weight_desc d{};
    d.struct_size = sizeof(d);
    d.format = STRATA_WEIGHT_W8A8;
    d.dtype = STRATA_DTYPE_I8;
    d.rows = rows;
    d.cols = cols;
    d.data = w.data();
    d.scales = scales.data();
    d.scales_dtype = STRATA_DTYPE_F32;
    d.counter_slot = slot;
    strata_weight wt = nullptr;
    EXPECT_EQ(api_->weight_create(dev, &d, &wt), STRATA_OK) << api_->last_error();
    return std::make_pair(wt, w);
  };
  const auto [w5, q5] = make_weight(5, 0);
  const auto [w6, q6] = make_weight(6, 11);
  auto buffer = [&](int64_t r, int64_t c, const std::vector<float>* init) {
    strata_buffer b = nullptr;
    EXPECT_EQ(api_->buffer_alloc(dev, r * c * 4, &b), STRATA_OK);
    if (init != nullptr) EXPECT_EQ(api_->upload(dev, b, 0, init->data(), init->size() * 4), STRATA_OK);
    return strata_tensor{b, 0, STRATA_DTYPE_F32, 2, {r, c}, 0};
  };
  // Nothing but the product runs between a producer and the product (any other op, even a
  // buffer_alloc, discards the fused quantization), so the output buffer is made up front.
  const strata_tensor y = buffer(n, rows, nullptr);
  auto product = [&](const strata_tensor& x, strata_weight w) {
    EXPECT_EQ(api_->matmul(dev, &x, w, nullptr, &y), STRATA_OK) << api_->last_error();
    std::vector<float> out(n * rows);
    EXPECT_EQ(api_->download(dev, out.data(), y.buffer, 0, out.size() * 4), STRATA_OK);
    return out;
  };
  std::vector<float> xs(n * cols), ones(cols, 1.0f), gate(n * cols), up(n * cols), zeros(n * cols, 0.0f);
  for (size_t i = 0; i < xs.size(); ++i) xs[i] = static_cast<float>(static_cast<int>((i * 7919) % 201) - 100) / 37.0f;
  for (size_t i = 0; i < gate.size(); ++i) gate[i] = xs[(i * 13) % xs.size()];
  for (size_t i = 0; i < up.size(); ++i) up[i] = 1.0f + static_cast<float>(i % 5);
  gate[cols + 3] = INFINITY;  // silu(inf) * up = inf: one non-finite activation, in token 1
  strata_tensor x = buffer(n, cols, &xs), norm_w = buffer(1, cols, &ones), xn = buffer(n, cols, nullptr);
  strata_tensor g = buffer(n, cols, &gate), u = buffer(n, cols, &up), act = buffer(n, cols, nullptr);
  strata_tensor zero = buffer(n, cols, &zeros);

  // rms_norm -> product, against rms_norm -> add(xn, 0) -> product (the add discards it).
  ASSERT_EQ(api_->rms_norm(dev, &x, nullptr, &norm_w, 1e-5f, &xn), STRATA_OK) << api_->last_error();
  const std::vector<float> fused = product(xn, w5);
  ASSERT_EQ(api_->rms_norm(dev, &x, nullptr, &norm_w, 1e-5f, &xn), STRATA_OK);
  ASSERT_EQ(api_->add(dev, &xn, &zero, &xn), STRATA_OK) << api_->last_error();
  EXPECT_EQ(product(xn, w5), fused);

  // A write into the rows after rms_norm is what the product sees: integer rows with a 127
  // in each (activation scale 1, so the product is an exact integer sum).
  std::vector<float> ints(n * cols);
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t c = 0; c < cols; ++c) ints[t * cols + c] = static_cast<float>(((t * 31 + c * 17) % 255) - 127);
    ints[t * cols + (t % cols)] = 127.0f;
  }
  ASSERT_EQ(api_->rms_norm(dev, &x, nullptr, &norm_w, 1e-5f, &xn), STRATA_OK);
  ASSERT_EQ(api_->upload(dev, xn.buffer, 0, ints.data(), ints.size() * 4), STRATA_OK);
  const std::vector<float> yi = product(xn, w5);
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t r = 0; r < rows; ++r) {
      int64_t sum = 0;
      for (int64_t c = 0; c < cols; ++c) sum += static_cast<int64_t>(ints[t * cols + c]) * q5[r * cols + c];
      ASSERT_EQ(yi[t * rows + r], 0.5f * static_cast<float>(sum)) << "token " << t << " row " << r;
    }
  }

  // silu_mul -> two products (slots 5 and 6, the second reusing the quantization too),
  // against silu_mul -> add -> product; each product counts the one non-finite activation in
  // its own slot.
  std::vector<uint64_t> before(8), after(8);
  ASSERT_EQ(api_->quant_counters(dev, 8, nullptr, before.data(), nullptr), STRATA_OK) << api_->last_error();
  const strata_tensor y6 = buffer(n, rows, nullptr);
  ASSERT_EQ(api_->silu_mul(dev, &g, &u, &act), STRATA_OK) << api_->last_error();
  ASSERT_EQ(api_->matmul(dev, &act, w5, nullptr, &y), STRATA_OK) << api_->last_error();
  ASSERT_EQ(api_->matmul(dev, &act, w6, nullptr, &y6), STRATA_OK) << api_->last_error();
  std::vector<float> fused5(n * rows), fused6(n * rows);
  ASSERT_EQ(api_->download(dev, fused5.data(), y.buffer, 0, fused5.size() * 4), STRATA_OK);
  ASSERT_EQ(api_->download(dev, fused6.data(), y6.buffer, 0, fused6.size() * 4), STRATA_OK);
  ASSERT_EQ(api_->quant_counters(dev, 8, nullptr, after.data(), nullptr), STRATA_OK);
  EXPECT_EQ(after[5] - before[5], 1u);
  EXPECT_EQ(after[6] - before[6], 1u);
  ASSERT_EQ(api_->silu_mul(dev, &g, &u, &act), STRATA_OK);
  ASSERT_EQ(api_->add(dev, &act, &zero, &act), STRATA_OK);
  EXPECT_EQ(product(act, w5), fused5);
  EXPECT_EQ(product(act, w6), fused6);
  for (const strata_tensor* t : std::initializer_list<const strata_tensor*>{&x, &norm_w, &xn, &g, &u, &act, &zero, &y, &y6}) {
    api_->buffer_free(dev, t->buffer);
  }
  api_->weight_free(dev, w5);
  api_->weight_free(dev, w6);
  api_->device_close(dev);
}

// The device's own kernels (the CPU-shaped ones on PoCL), and the GPU-shaped ones (fused by
// default on every device since 2026-12-03; fuse_quant=on kept to say what is tested).
INSTANTIATE_TEST_SUITE_P(Kernels, FusedQuantTest, ::testing::Values("", "kernels=gpu;fuse_quant=on"),
                         [](const ::testing::TestParamInfo<const char*>& i) {
                           return std::string(i.index == 0 ? "default" : "gpu_kernels_fused");
                         });

TEST_F(OpenClBackendTest, OutOfMemoryNamesTheDevice) {
  strata_device_options o{};
  o.struct_size = sizeof(o);
  strata_device dev = nullptr;
  ASSERT_EQ(api_->device_open(0, &o, &dev), STRATA_OK) << api_->last_error();
  strata_buffer b = nullptr;
  EXPECT_EQ(api_->buffer_alloc(dev, uint64_t{1} << 50, &b), STRATA_ERROR_OUT_OF_MEMORY);
  strata_device_info info{};
  info.struct_size = sizeof(info);
  ASSERT_EQ(api_->device_info(0, &info), STRATA_OK);
  EXPECT_NE(std::string(api_->last_error()).find(info.name), std::string::npos) << api_->last_error();
  // Still usable.
  EXPECT_EQ(api_->buffer_alloc(dev, 64, &b), STRATA_OK);
  api_->buffer_free(dev, b);
  api_->device_close(dev);
}

TEST_F(OpenClBackendTest, ReportsAcceleratorsWithInt8AndScoresBelowCuda) {
  strata_device_info info{};
  info.struct_size = sizeof(info);
  ASSERT_EQ(api_->device_info(0, &info), STRATA_OK);
  EXPECT_EQ(info.kind, STRATA_DEVICE_ACCELERATOR);
  EXPECT_NE(info.capabilities & STRATA_CAP_INT8_MATMUL, 0u);
  const LoadedPlugin& p = registry_.loaded().back();
  EXPECT_GT(p.score, 0);
  EXPECT_LT(p.score, 100) << "CUDA's score is 100";
  // An OpenCL CPU device (PoCL) ranks below the native CPU backend (>= 10).
  if (std::string(info.features).rfind("cpu ", 0) == 0) {
    EXPECT_LT(p.score, 10);
  }
  strata_device dev = nullptr;
  strata_device_options o{};
  o.struct_size = sizeof(o);
  int32_t count = 0;
  ASSERT_EQ(api_->device_count(&count), STRATA_OK);
  EXPECT_EQ(api_->device_open(count, &o, &dev), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(api_->last_error()).find("index"), std::string::npos);
}

}  // namespace
}  // namespace strata
