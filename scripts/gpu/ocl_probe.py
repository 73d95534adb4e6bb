# Asks NVIDIA's OpenCL ICD for its platforms as an ICD loader does (through
# clGetExtensionFunctionAddress("clIcdGetPlatformIDsKHR")), then the first libOpenCL.so.1 on
# the library path for all platforms: tells a driver problem from a loader problem.
import ctypes
import os

NV = os.environ.get("STRATA_NVIDIA_OCL", "/usr/local/nvidia/lib64/libnvidia-opencl.so.1")
try:
    lib = ctypes.CDLL(NV)
    gefa = lib.clGetExtensionFunctionAddress
    gefa.restype = ctypes.c_void_p
    gefa.argtypes = [ctypes.c_char_p]
    p = gefa(b"clIcdGetPlatformIDsKHR")
    n = ctypes.c_uint(0)
    rc = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_uint, ctypes.c_void_p, ctypes.POINTER(ctypes.c_uint))(p)(
        0, None, ctypes.byref(n)) if p else "no entry point"
    print("vendor ICD %s: rc %s, platforms %d" % (NV, rc, n.value))
except OSError as e:
    print("vendor ICD probe failed:", e)
try:
    cl = ctypes.CDLL("libOpenCL.so.1")
    n = ctypes.c_uint(0)
    print("loader libOpenCL.so.1 (OCL_ICD_FILENAMES=%s): rc %d, platforms %d"
          % (os.environ.get("OCL_ICD_FILENAMES", ""), cl.clGetPlatformIDs(0, None, ctypes.byref(n)), n.value))
except OSError as e:
    print("loader probe failed:", e)
