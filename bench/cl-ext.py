#!/usr/bin/env python3
"""Prints every OpenCL platform, its devices and their extensions (no clinfo needed), through
the ICD loader: `python3 bench/cl-ext.py [substring]` lists only extensions containing the
substring."""
import ctypes
import sys

cl = ctypes.CDLL("libOpenCL.so.1")
want = sys.argv[1] if len(sys.argv) > 1 else ""


def info(fn, obj, param):
    n = ctypes.c_size_t()
    fn(obj, param, 0, None, ctypes.byref(n))
    buf = ctypes.create_string_buffer(n.value)
    fn(obj, param, n, buf, None)
    return buf.value.decode(errors="replace")


CL_PLATFORM_NAME, CL_PLATFORM_EXTENSIONS = 0x0902, 0x0904
CL_DEVICE_NAME, CL_DEVICE_VERSION, CL_DEVICE_EXTENSIONS = 0x102B, 0x102F, 0x1030
CL_DEVICE_TYPE_ALL = 0xFFFFFFFF
n = ctypes.c_uint()
cl.clGetPlatformIDs(0, None, ctypes.byref(n))
plats = (ctypes.c_void_p * n.value)()
cl.clGetPlatformIDs(n, plats, None)
for p in plats:
    print("platform:", info(cl.clGetPlatformInfo, ctypes.c_void_p(p), CL_PLATFORM_NAME))
    nd = ctypes.c_uint()
    cl.clGetDeviceIDs(ctypes.c_void_p(p), ctypes.c_uint64(CL_DEVICE_TYPE_ALL), 0, None,
                      ctypes.byref(nd))
    devs = (ctypes.c_void_p * nd.value)()
    cl.clGetDeviceIDs(ctypes.c_void_p(p), ctypes.c_uint64(CL_DEVICE_TYPE_ALL), nd, devs, None)
    for d in devs:
        dv = ctypes.c_void_p(d)
        print("  device:", info(cl.clGetDeviceInfo, dv, CL_DEVICE_NAME), "|",
              info(cl.clGetDeviceInfo, dv, CL_DEVICE_VERSION))
        ext = info(cl.clGetDeviceInfo, dv, CL_DEVICE_EXTENSIONS).split()
        shown = [e for e in ext if want in e]
        print("    extensions (%d of %d):" % (len(shown), len(ext)), " ".join(shown))
