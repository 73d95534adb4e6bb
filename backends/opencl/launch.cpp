#include "backends/opencl/launch.h"

#include "backends/opencl/profile.h"

namespace strata::opencl {

Status ClFailure(strata_device_s* dev, cl_int e, const char* what) {
  const strata_status code = e == CL_OUT_OF_RESOURCES || e == CL_MEM_OBJECT_ALLOCATION_FAILURE ||
                                     e == CL_OUT_OF_HOST_MEMORY || e == CL_INVALID_BUFFER_SIZE
                                 ? STRATA_ERROR_OUT_OF_MEMORY
                                 : STRATA_ERROR_DEVICE;
  return Error(code, what, ": OpenCL device ", dev->name, ": ", ClErrorName(e), " (", e, ")");
}

Launch& Launch::Set(size_t size, const void* value) {
  if (!status_.ok()) return *this;
  const cl_int e = clSetKernelArg(k_, next_, size, value);
  if (e != CL_SUCCESS) {
    status_ = Error(STRATA_ERROR_INTERNAL, "OpenCL device ", dev_->name, ": kernel '", name_, "' argument ", next_,
                    ": ", ClErrorName(e));
  }
  ++next_;
  return *this;
}

Status Launch::Run(cl_uint dims, const size_t* global, const size_t* local) {
  if (!status_.ok()) return status_;
  for (cl_uint i = 0; i < dims; ++i) {
    if (global[i] == 0) return Ok();
  }
  cl_event ev = nullptr;
  const cl_int e =
      clEnqueueNDRangeKernel(dev_->queue, k_, dims, nullptr, global, local, 0, nullptr, dev_->profile ? &ev : nullptr);
  if (e != CL_SUCCESS) {
    const std::string what = StrCat("kernel '", name_, "'");
    return ClFailure(dev_, e, what.c_str());
  }
  if (ev != nullptr) {
    const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0_).count();
    dev_->prof_events.push_back({name_, ev, us});
    if (dev_->prof_events.size() >= 65536) ProfileHarvest(dev_);
  }
  return Ok();
}

}  // namespace strata::opencl
