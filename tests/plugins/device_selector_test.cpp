#include "plugins/device_selector.h"

#include <string>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace strata {
namespace {

std::string TestPlugin(const std::string& name) {
  return std::string(STRATA_TEST_PLUGIN_DIR) + "/libstrata-backend-" + name + ".so";
}

// All test plugins: fakegood (score 1), fakefast (10), fakenodev (100 but no device),
// fakezero (score 0), and the rejected wrongabi and noinit.
class DeviceSelectorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    PluginSearchOptions o;
    o.search_executable_dir = false;
    o.search_env = false;
    o.extra_dirs = {STRATA_TEST_PLUGIN_DIR};
    registry_.DiscoverAndLoad(o);
    ASSERT_EQ(registry_.loaded().size(), 4u);
  }
  PluginRegistry registry_;
};

TEST_F(DeviceSelectorTest, AutoPicksHighestScoreWithADevice) {
  absl::StatusOr<const LoadedPlugin*> p = SelectBackend(registry_, "auto");
  ASSERT_TRUE(p.ok()) << p.status();
  // fakenodev scores 100 but has no device; fakezero cannot run.
  EXPECT_EQ((*p)->name, "fakefast");
}

TEST_F(DeviceSelectorTest, ByName) {
  absl::StatusOr<const LoadedPlugin*> p = SelectBackend(registry_, "fakegood");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ((*p)->name, "fakegood");
  EXPECT_EQ((*p)->path, TestPlugin("fakegood"));
}

TEST_F(DeviceSelectorTest, UnknownNameListsAvailableAndRejected) {
  absl::StatusOr<const LoadedPlugin*> p = SelectBackend(registry_, "cuda");
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), absl::StatusCode::kNotFound);
  const std::string msg(p.status().message());
  EXPECT_TRUE(absl::StrContains(msg, "\"cuda\"")) << msg;
  for (const char* name : {"fakegood", "fakefast", "fakenodev", "fakezero"}) {
    EXPECT_TRUE(absl::StrContains(msg, name)) << msg;
  }
  EXPECT_TRUE(absl::StrContains(msg, TestPlugin("wrongabi") +
                                         ": ABI version 2.0, this strata needs 1.x"))
      << msg;
}

TEST_F(DeviceSelectorTest, NamedPluginWithoutDeviceSaysWhy) {
  absl::StatusOr<const LoadedPlugin*> p = SelectBackend(registry_, "fakenodev");
  ASSERT_FALSE(p.ok());
  EXPECT_TRUE(absl::StrContains(p.status().message(), "fake backend: no device on purpose"))
      << p.status();
  absl::StatusOr<const LoadedPlugin*> zero = SelectBackend(registry_, "fakezero");
  ASSERT_FALSE(zero.ok());
  EXPECT_TRUE(absl::StrContains(zero.status().message(), TestPlugin("fakezero")))
      << zero.status();
}

TEST(DeviceSelectorEmptyTest, AutoWithNothingLoaded) {
  PluginRegistry registry;
  absl::StatusOr<const LoadedPlugin*> p = SelectBackend(registry, "auto");
  ASSERT_FALSE(p.ok());
  EXPECT_TRUE(absl::StrContains(p.status().message(), "no backend plugin can run here"))
      << p.status();
}

}  // namespace
}  // namespace strata

namespace strata {
namespace {

TEST_F(DeviceSelectorTest, NameWithDeviceIndex) {
  // fakefast reports two devices.
  absl::StatusOr<const LoadedPlugin*> p = SelectBackend(registry_, "fakefast:1");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ((*p)->name, "fakefast");
  absl::StatusOr<DeviceSpec> spec = ParseDeviceSpec("fakefast:1");
  ASSERT_TRUE(spec.ok());
  EXPECT_EQ(spec->backend, "fakefast");
  EXPECT_EQ(spec->index, 1);

  absl::StatusOr<const LoadedPlugin*> beyond = SelectBackend(registry_, "fakefast:2");
  ASSERT_FALSE(beyond.ok());
  EXPECT_TRUE(absl::StrContains(beyond.status().message(), "has 2 devices")) << beyond.status();
  for (const char* bad : {"fakefast:", "fakefast:x", "fakefast:-1", "auto:1"}) {
    absl::StatusOr<const LoadedPlugin*> q = SelectBackend(registry_, bad);
    EXPECT_TRUE(absl::IsInvalidArgument(q.status())) << bad << ": " << q.status();
  }
}

}  // namespace
}  // namespace strata
