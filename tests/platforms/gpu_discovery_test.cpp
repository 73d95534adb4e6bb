// GPU discovery must never fail: without a driver it says why, with one it lists devices.
#include "platforms/gpu_discovery.h"

#include <dlfcn.h>

#include "gtest/gtest.h"

namespace strata {
namespace {

bool LibraryLoads(const char* name) {
  void* h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) return false;
  dlclose(h);
  return true;
}

TEST(GpuDiscoveryTest, CudaYieldsDevicesOrAReason) {
  const CudaDiscovery d = DetectCudaDevices();
  if (!LibraryLoads("libcuda.so.1")) {
    EXPECT_FALSE(d.driver_found);
    EXPECT_TRUE(d.devices.empty());
    EXPECT_NE(d.reason.find("no CUDA driver"), std::string::npos) << d.reason;
    EXPECT_NE(d.reason.find("libcuda.so.1"), std::string::npos) << d.reason;  // dlerror text
    return;
  }
  if (d.devices.empty()) {
    EXPECT_FALSE(d.reason.empty());
    return;
  }
  EXPECT_TRUE(d.driver_found);
  EXPECT_TRUE(d.reason.empty()) << d.reason;
  for (const CudaDeviceInfo& dev : d.devices) {
    EXPECT_FALSE(dev.name.empty());
    EXPECT_GT(dev.total_memory, 0u);
    EXPECT_GE(dev.cc_major, 3) << dev.name;
  }
}

TEST(GpuDiscoveryTest, OpenClYieldsDevicesOrAReason) {
  const OpenClDiscovery d = DetectOpenClDevices();
  EXPECT_EQ(d.loader_found, LibraryLoads("libOpenCL.so.1"));
  if (d.devices.empty()) {
    EXPECT_FALSE(d.reason.empty());
    if (!d.loader_found) {
      EXPECT_NE(d.reason.find("no OpenCL ICD loader"), std::string::npos) << d.reason;
    }
    return;
  }
  EXPECT_TRUE(d.reason.empty()) << d.reason;
  for (const OpenClDeviceInfo& dev : d.devices) {
    EXPECT_FALSE(dev.name.empty());
    EXPECT_NE(dev.type, 0u);
  }
}

TEST(GpuDiscoveryTest, RepeatedCallsAreSafe) {
  for (int i = 0; i < 3; ++i) {
    (void)DetectCudaDevices();
    (void)DetectOpenClDevices();
  }
}

}  // namespace
}  // namespace strata
