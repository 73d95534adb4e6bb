// Per-kernel timing of the OpenCL backend, switched on by STRATA_OPENCL_PROFILE=1 at
// device_open: the queue is created with CL_QUEUE_PROFILING_ENABLE, Launch keeps every
// kernel's event (with the host time spent setting its arguments and enqueueing it), the
// next synchronization point (synchronize, download, device_close) adds the events to their
// kernel's totals, and device_close prints a table to stderr: per kernel the launches, the
// device time (END - START) and the host time; and for the whole run the sum of kernel
// times against the span of each synchronization window (first START to last END), whose
// difference is the time the device sat between kernels (launch gaps).
#ifndef STRATA_BACKENDS_OPENCL_PROFILE_H_
#define STRATA_BACKENDS_OPENCL_PROFILE_H_

#include "backends/opencl/objects.h"

namespace strata::opencl {

bool ProfileRequested();
// Moves the finished events of `dev` into its totals (the queue must have drained).
void ProfileHarvest(strata_device_s* dev);
// Prints the totals of `dev` to stderr (nothing when profiling is off or nothing ran).
void ProfilePrint(strata_device_s* dev);

}  // namespace strata::opencl

#endif  // STRATA_BACKENDS_OPENCL_PROFILE_H_
