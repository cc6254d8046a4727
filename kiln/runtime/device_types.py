"""DLPack device type codes (dlpack.h) and their names; the kernel ABI uses the same numbers.

Its own file so that device.py (the Device class) and devices/ (the device APIs it calls)
both read it without importing each other.
"""

CPU, CUDA, CUDA_HOST, OPENCL = 1, 2, 3, 4
VULKAN, METAL, ROCM = 7, 8, 10
EXT_DEV = 12  # kDLExtDev: an accelerator; here kiln's VTA simulator (kiln/vta)

_TYPE_NAMES = {CPU: "cpu", CUDA: "cuda", CUDA_HOST: "cuda_host", OPENCL: "opencl",
               VULKAN: "vulkan", METAL: "metal", ROCM: "rocm", EXT_DEV: "ext_dev"}
