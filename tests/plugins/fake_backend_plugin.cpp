// A backend plugin for the loader tests, built several times with different definitions:
//   FAKE_NAME         plugin name
//   FAKE_ABI_MAJOR    major ABI version it claims (minor 0)
//   FAKE_SCORE        value of strata_backend_score(); undefined = symbol not exported
//   FAKE_DEVICES      number of devices it reports
//   FAKE_NO_INIT      defined = does not export strata_backend_init
// Every op returns STRATA_ERROR_UNSUPPORTED: the loader never runs ops.
#include <cstring>

#include "strata/device.h"

namespace {

const char* LastError() { return "fake backend: unsupported"; }

strata_status DeviceCount(int32_t* count) {
  *count = FAKE_DEVICES;
  return STRATA_OK;
}

strata_status DeviceInfo(int32_t index, strata_device_info* info) {
  if (index < 0 || index >= FAKE_DEVICES) return STRATA_ERROR_INVALID_ARGUMENT;
  std::memset(info, 0, sizeof(*info));
  info->struct_size = sizeof(*info);
  info->kind = STRATA_DEVICE_CPU;
  std::strncpy(info->name, "fake device", sizeof(info->name) - 1);
  return STRATA_OK;
}

strata_status DeviceOpen(int32_t, const strata_device_options*, strata_device*) {
  return STRATA_ERROR_UNSUPPORTED;
}

const char* UnavailableReason() { return "fake backend: no device on purpose"; }

strata_backend_v1 MakeTable() {
  strata_backend_v1 t;
  std::memset(&t, 0, sizeof(t));
  t.struct_size = sizeof(t);
  t.last_error = LastError;
  t.device_count = DeviceCount;
  t.device_info = DeviceInfo;
  t.device_open = DeviceOpen;
  return t;
}

const strata_backend_v1 kTable = MakeTable();

const strata_plugin_info kInfo = {
    sizeof(strata_plugin_info), static_cast<uint32_t>(FAKE_ABI_MAJOR) << 16, FAKE_NAME, "0.0-test", &kTable,
    UnavailableReason,
};

}  // namespace

extern "C" {

#ifndef FAKE_NO_INIT
STRATA_PLUGIN_EXPORT const strata_plugin_info* strata_backend_init(void) { return &kInfo; }
#else
// Exported under another name, so that the file is a valid library without the entry.
STRATA_PLUGIN_EXPORT const strata_plugin_info* not_the_entry_point(void) { return &kInfo; }
#endif

#ifdef FAKE_SCORE
STRATA_PLUGIN_EXPORT int32_t strata_backend_score(void) { return FAKE_SCORE; }
#endif

}  // extern "C"
