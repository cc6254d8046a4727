/* kiln C runtime: load kiln module files and call their functions without Python.
 *
 * The contract with the compiler is docs/abi.md; the API is described in docs/c-runtime.md.
 * Every function that can fail returns 0 on success and -1 on failure; the reason is then
 * available from kiln_last_error() (per thread). Depends only on libc, libdl, libm, pthread.
 */
#ifndef KILN_RUNTIME_H_
#define KILN_RUNTIME_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The runtime builds with -fvisibility=hidden; only these functions are exported. */
#define KILN_API __attribute__((visibility("default")))

/* ---- DLPack (v0.8) types, as the kernels see them ------------------------------------- */
typedef struct { int32_t device_type; int32_t device_id; } DLDevice;
typedef struct { uint8_t code; uint8_t bits; uint16_t lanes; } DLDataType;
typedef struct {
  void* data;
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t* shape;
  int64_t* strides;
  uint64_t byte_offset;
} DLTensor;

enum { KILN_DL_INT = 0, KILN_DL_UINT = 1, KILN_DL_FLOAT = 2, KILN_DL_BOOL = 6 };
enum { KILN_DEVICE_CPU = 1, KILN_DEVICE_CUDA = 2, KILN_DEVICE_OPENCL = 4 };

/* ---- the packed calling convention ----------------------------------------------------- */
typedef union { int64_t v_int64; double v_float64; void* v_handle; } KilnValue;
enum { KILN_INT = 0, KILN_FLOAT = 2, KILN_HANDLE = 3, KILN_DLTENSOR = 7 };

typedef int32_t (*KilnKernel)(const KilnValue* args, const int32_t* type_codes, int32_t num_args);

/* ---- errors ---------------------------------------------------------------------------- */
/* The message of the last failure in this thread ("" if none). */
KILN_API const char* kiln_last_error(void);
/* Set the message (printf-style); returns -1 so callers can `return kiln_error(...)`. */
KILN_API int kiln_error(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

/* ---- arrays ---------------------------------------------------------------------------- */
/* Default alignment of array data, in bytes (like TVM's USE_KALLOC_ALIGNMENT).
 * Build with `make KALLOC_ALIGNMENT=32` or override at run time. */
#ifndef KILN_ALLOC_ALIGNMENT
#define KILN_ALLOC_ALIGNMENT 64
#endif
KILN_API size_t kiln_alloc_alignment(void);
/* Power of two, at least sizeof(void*). Affects arrays allocated afterwards. */
KILN_API int kiln_set_alloc_alignment(size_t bytes);

/* Parse "float32", "int8", "uint16", "bool" ...; format back into buf. */
KILN_API int kiln_dtype_parse(const char* name, size_t len, DLDataType* out);
KILN_API int kiln_dtype_format(DLDataType dtype, char* buf, size_t size);

/* A compact row-major array; free it with kiln_ndarray_free. On an OpenCL device (type 4)
 * `data` is the cl_mem handle and the bytes are reached with kiln_ndarray_read/write/copy. */
KILN_API int kiln_ndarray_alloc(const int64_t* shape, int32_t ndim, DLDataType dtype, DLDevice device,
                       DLTensor** out);
/* The same in a memory scope: NULL or "global" (kiln_ndarray_alloc), or a texture scope
 * ("global.texture", "global.texture-nhwc", "global.texture-weight") on an OpenCL device: an RGBA
 * image holding a float32/float16 5-D tensor whose innermost dimension is 4, folded to 2-D as
 * the compiler folds it (docs/adreno.md). read/write/copy see its row-major bytes. */
KILN_API int kiln_ndarray_alloc_scoped(const int64_t* shape, int32_t ndim, DLDataType dtype, DLDevice device,
                                       const char* mem_scope, DLTensor** out);
KILN_API void kiln_ndarray_free(DLTensor* array);
/* Bytes of the array's data; (size_t)-1 if the element count overflows. */
KILN_API size_t kiln_ndarray_nbytes(const DLTensor* array);
/* Copy between two arrays of the same shape and dtype. */
KILN_API int kiln_ndarray_copy(const DLTensor* from, DLTensor* to);
/* Copy raw bytes into / out of the array at a byte offset (bounds-checked). */
KILN_API int kiln_ndarray_write(DLTensor* array, uint64_t offset, const void* data, size_t nbytes);
KILN_API int kiln_ndarray_read(const DLTensor* array, uint64_t offset, void* data, size_t nbytes);

/* ---- modules --------------------------------------------------------------------------- */
typedef struct KilnModule KilnModule;
typedef struct KilnFunction KilnFunction;

/* The C compiler used to relink .tar modules (default: $KILN_CC, $CC, then cc/gcc on PATH).
 * The string may hold options: "aarch64-linux-gnu-gcc -march=armv8-a". NULL resets. */
KILN_API void kiln_set_compiler(const char* cc);

/* Load "x.so" (dlopen) or "x.tar" (relinked into "x.tar.so" with the compiler above). The
 * file's architecture is checked first, so a library for another machine gets a message
 * naming both machines instead of a loader error. */
KILN_API int kiln_module_load(const char* path, KilnModule** out);
KILN_API void kiln_module_free(KilnModule* mod);
KILN_API const char* kiln_module_entry_name(const KilnModule* mod);
KILN_API int kiln_module_num_functions(const KilnModule* mod);
KILN_API const char* kiln_module_function_name(const KilnModule* mod, int index);
/* Threads for the module's parallel loops (0 = one per online CPU). */
KILN_API void kiln_module_set_num_threads(KilnModule* mod, int32_t n);
/* The function `name`; owned by the module. Fails (with the list of names) if absent. */
KILN_API int kiln_module_get_function(KilnModule* mod, const char* name, KilnFunction** out);
KILN_API const char* kiln_func_name(const KilnFunction* func);
KILN_API int kiln_func_num_args(const KilnFunction* func);

/* Check the arguments against the module metadata (count, kinds, dtypes, shapes, symbolic
 * dimensions, devices) and call. Integer codes are accepted for float scalars. */
KILN_API int kiln_func_call(KilnFunction* func, const KilnValue* args, const int32_t* type_codes,
                   int32_t num_args);

/* Time `func` like TVM's time_evaluator: one untimed warm-up call, then `repeat` rounds of
 * `number` calls each; `number` grows until a round lasts min_repeat_ms. Writes the mean
 * seconds per call of each round into costs[0..repeat). Arguments are checked once. */
KILN_API int kiln_func_time(KilnFunction* func, const KilnValue* args, const int32_t* type_codes,
                   int32_t num_args, int number, int repeat, double min_repeat_ms, double* costs);

/* ---- devices ---------------------------------------------------------------------------- */
/* 1 if the device is present: the CPU always; OpenCL devices when libOpenCL.so.1 loads (at run
 * time, with dlopen) and its first platform with devices has this one. Never fails. */
KILN_API int kiln_device_exist(DLDevice device);
/* Wait for everything queued on the device. */
KILN_API int kiln_device_sync(DLDevice device);
/* A device property by TVM's name (max_threads_per_block, max_shared_memory_per_block,
 * warp_size, multi_processor_count, max_thread_dimensions, device_name, compute_version,
 * max_clock_rate, image_support): numbers go to ints[0..*count) (*count <= 3), text to `text`
 * (*count = 0). Fails for an absent device or an unknown name. */
KILN_API int kiln_device_attr(DLDevice device, const char* name, int64_t ints[3], int* count,
                              char* text, size_t size);

/* ---- this machine ---------------------------------------------------------------------- */
/* "aarch64", "armv7", "x86_64", ... as kiln names the architecture this runtime was built for. */
KILN_API const char* kiln_device_arch(void);

#ifdef __cplusplus
}
#endif
#endif /* KILN_RUNTIME_H_ */
