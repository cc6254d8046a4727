/* Declarations shared by the runtime's C files; not part of the public API. */
#ifndef KILN_INTERNAL_H_
#define KILN_INTERNAL_H_

#include "kiln_runtime.h"

/* ---- json.c: a small JSON reader for module metadata ---------------------------------- */
typedef enum { JSON_NULL, JSON_BOOL, JSON_NUMBER, JSON_STRING, JSON_ARRAY, JSON_OBJECT } JsonType;

typedef struct JsonNode {
  JsonType type;
  double number;           /* JSON_NUMBER, also 1/0 for JSON_BOOL */
  int is_integer;          /* JSON_NUMBER written without fraction or exponent */
  int64_t integer;         /* its value when is_integer */
  char* string;            /* JSON_STRING: decoded UTF-8, NUL-terminated */
  char* key;               /* the member name when this node is an object member */
  struct JsonNode* child;  /* first element or member */
  struct JsonNode* next;   /* next sibling */
  size_t count;            /* number of children */
} JsonNode;

/* Parse `len` bytes; NULL with kiln_last_error set on malformed input. */
JsonNode* json_parse(const char* text, size_t len);
void json_free(JsonNode* node);
const JsonNode* json_get(const JsonNode* object, const char* key); /* NULL if absent */
const char* json_string(const JsonNode* node);                     /* NULL if not a string */

/* ---- elf.c ------------------------------------------------------------------------------ */
/* Fail with "lib.so was built for X; this device is Y ..." when `path` is not loadable here. */
int kiln_elf_check(const char* path);
/* Fail when the metadata's triple names another architecture than this device's. */
int kiln_triple_check(const char* triple, const char* file_label);

/* ---- ndarray.c ---------------------------------------------------------------------------- */
/* $KILN_LOAD_LIMIT (bytes, or with a K/M/G/T suffix), else 4 GiB: the most bytes one array, or a
 * graph's buffers together, that a loaded file may declare (kiln/limits.py's load_limit). */
size_t kiln_load_limit(void);

/* ---- elf_integrity.c -------------------------------------------------------------------- */
/* Fail with "NAME is damaged: ..." unless the shared object's structure lies inside its `size`
 * bytes and its kiln seal, when it has one (or must have one), matches (docs/security.md). */
int kiln_elf_check_intact(const unsigned char* p, size_t size, const char* name);
int kiln_elf_check_file_intact(const char* path, const char* name);

/* ---- tar.c ------------------------------------------------------------------------------ */
/* Extract the members of a module archive that a loader needs (libN.o, metadata.json) into
 * `dir`. Names that could escape `dir`, links and special files are refused. Writes the
 * number of libN.o objects found to *num_objects. */
int kiln_untar_module(const char* tar_path, const char* dir, int* num_objects);

/* ---- link.c ----------------------------------------------------------------------------- */
/* Link dir/lib0.o .. lib{n-1}.o into `output` with the configured C compiler. */
int kiln_link_objects(const char* dir, int num_objects, const char* output);

/* ---- module.c --------------------------------------------------------------------------- */
int kiln_module_load_so(const char* path, KilnModule** out);

/* ---- opencl.c: device memory for arrays on OpenCL devices (data is a cl_mem) -------------- */
int kiln_opencl_alloc(int32_t device_id, size_t nbytes, void** out);
void kiln_opencl_free(void* mem);
int kiln_opencl_write(const DLTensor* t, uint64_t offset, const void* data, size_t n);
int kiln_opencl_read(const DLTensor* t, uint64_t offset, void* data, size_t n);
int kiln_opencl_copy(const DLTensor* from, DLTensor* to, size_t n); /* either side on OpenCL */
int kiln_opencl_sync(int32_t device_id);
int kiln_opencl_attr(int32_t device_id, const char* name, int64_t* ints, int* count, char* text, size_t size);

/* ---- texture.c: texture-scoped arrays (docs/adreno.md) ---------------------------------- */
/* Leading dimensions a scope folds into the image height: 0 for "global" (or NULL), -1 unknown. */
int kiln_texture_split(const char* scope);
/* An image array (kiln_ndarray_alloc_scoped's) folded to fit images of at most `limit` texels
 * a side as well as the device's: the limit the kernels were compiled for. */
int kiln_texture_alloc(const int64_t* shape, int32_t ndim, DLDataType dtype, DLDevice device, const char* scope,
                       size_t limit, DLTensor** out);
/* The same name as a static string ("global" for buffers and unknown names). */
const char* kiln_texture_scope_name(const char* scope);
/* 0 when a tensor of this shape and dtype can live in `scope`, else -1 with a message. */
int kiln_texture_check(const int64_t* shape, int32_t ndim, DLDataType dtype, const char* scope);
/* The image (texels) holding a checked texture tensor on a device of max_w x max_h images. */
#define KILN_TEXTURE_DEFAULT_LIMIT 8192 /* the compiler's, without -texture_spatial_limit */
void kiln_texture_fold(const int64_t* shape, const char* scope, size_t max_w, size_t max_h, size_t* width,
                       size_t* height);

/* ---- the device half of GPU modules (docs/abi.md "GPU modules") ----------------------------- */
/* One kernel entry of the metadata's device_code: the first member of every device API's kernel
 * record, so module.c's launch hook checks kernel ids and argument counts for all of them. */
typedef struct KilnKernelInfo {
  char* name;
  int num_params;
  int* kinds;         /* KILN_KERNEL_BUFFER / KILN_KERNEL_SCALAR per parameter */
  DLDataType* dtypes; /* of the scalars */
} KilnKernelInfo;
enum { KILN_KERNEL_BUFFER, KILN_KERNEL_SCALAR };

struct KilnDeviceModule;
/* What a device API (opencl_module.c, cuda.c) does for module.c, which makes every device module
 * from the device_code (by type_key) and owns the launch hook the library calls. */
typedef struct KilnDeviceApi {
  const char* type_key;     /* the device_code's type_key this API runs */
  const char* text_key;     /* the device_code's code for the device: "source" (OpenCL C), "ptx" */
  const char* missing_hint; /* what to do when the device_code lacks it */
  size_t kernel_size;       /* the API's kernel record: a KilnKernelInfo first, then its own fields */
  int (*read_kernel)(void* kernel, const JsonNode* node, const char* label); /* one record */
  void (*free_kernel)(void* kernel); /* what read_kernel allocated beyond the KilnKernelInfo, or NULL */
  size_t state_size; /* d->impl: the API's state (programs, loaded modules per device), zeroed */
  void (*release)(struct KilnDeviceModule* d); /* what the state holds on devices */
  /* A checked launch: kernel_id is in range and num_args is the kernel's parameter count. */
  int32_t (*launch)(struct KilnDeviceModule* d, int32_t kernel_id, const KilnValue* args, const int32_t* codes,
                    int32_t num_args, const int64_t* dims, int64_t dyn_shared_bytes);
  /* Kernel ids < 0: device workspace requests (docs/abi.md). */
  int32_t (*workspace)(int32_t request, const KilnValue* args, int32_t num_args);
  void (*timing_begin)(struct KilnDeviceModule* d);
  double (*timing_end)(struct KilnDeviceModule* d); /* device seconds, or -1 if nothing ran */
} KilnDeviceApi;
extern const KilnDeviceApi kiln_opencl_device_api; /* opencl_module.c */
extern const KilnDeviceApi kiln_cuda_device_api;   /* cuda.c */

typedef struct KilnDeviceModule {
  const KilnDeviceApi* api;
  char* text;         /* the device_code's api->text_key */
  void* kernels;      /* num_kernels records of api->kernel_size bytes */
  int num_kernels;
  void* impl;         /* api->state_size bytes of the API's state */
  int failed;         /* the last launch failed; its message is kiln_last_error */
} KilnDeviceModule;
/* module.c: whether the last launch failed; clears the flag. */
int kiln_device_module_take_failure(KilnDeviceModule* d);

/* ---- cuda.c: CUDA devices (data is a CUdeviceptr) and the CUDA half of GPU modules ------- */
int kiln_cuda_device_count(void); /* 0 without libcuda.so.1 or a GPU */
int kiln_cuda_alloc(int32_t device_id, size_t nbytes, void** out);
void kiln_cuda_free(void* p);
int kiln_cuda_write(const DLTensor* t, uint64_t offset, const void* data, size_t n);
int kiln_cuda_read(const DLTensor* t, uint64_t offset, void* data, size_t n);
int kiln_cuda_copy(const DLTensor* from, DLTensor* to, size_t n); /* either side on CUDA */
int kiln_cuda_sync(int32_t device_id);
int kiln_cuda_attr(int32_t device_id, const char* name, int64_t* ints, int* count, char* text, size_t size);

#endif

/* ---- module internals shared by module.c and call.c ------------------------------------- */
enum { ARG_TENSOR, ARG_SCALAR, ARG_HANDLE };

typedef struct {
  char* name;
  int kind;             /* ARG_* */
  DLDataType dtype;
  char dtype_name[16];
  int32_t ndim;         /* tensors */
  int64_t* dims;        /* concrete dims; -1 where symbolic */
  char** syms;          /* symbolic dim names (NULL where concrete) */
  int32_t code;         /* the type code the kernel expects */
} ArgSpec;

/* metadata.c: a tensor argument's ndim and its zeroed dims / syms (one spare slot each). */
int kiln_arg_alloc_dims(ArgSpec* a, size_t ndim);

struct KilnFunction {
  char* name;
  KilnKernel kernel;
  int32_t num_args;
  ArgSpec* args;
  int32_t* codes;
  KilnModule* module;
  /* An offloaded subgraph (json_external.c): run by its compiler's executor, not `kernel`. */
  const struct KilnExternalKind* external;
  void* executor;
};

struct KilnModule {
  void* lib;
  char* path;
  char* entry;
  int32_t device_type;
  int64_t texture_limit;    /* the target's -texture_spatial_limit, 0 when not given */
  int num_functions;
  KilnFunction* functions;
  const char* last_error;   /* the module's __kiln_last_error buffer */
  int32_t* num_threads;     /* the module's __kiln_num_threads */
  KilnDeviceModule* device; /* the kernels of a GPU module (NULL for CPU modules) */
};

/* call.c: check arguments once (array arguments only need no conversion), then call many times. */
int kiln_func_check(KilnFunction* f, const KilnValue* args, const int32_t* codes, int32_t n);
int kiln_func_call_prepared(KilnFunction* f, const KilnValue* args, int32_t n);

/* tar.c: extract the regular members named names[0..n) (exact names, "./" prefixes ignored) into
 * dir by those names; found[i] is set to 1 for each one present. With `data`, a member whose
 * data[i] is (char*)1 on entry is read into memory instead: data[i] becomes a malloc'd,
 * NUL-terminated copy and lens[i] its size. */
int kiln_untar_named(const char* tar_path, const char* dir, const char* const* names, int n, int* found,
                     char** data, size_t* lens);

/* graph.c, for graph_package.c */
struct KilnGraph;
void kiln_graph_mark_param(struct KilnGraph* g, int input);
void kiln_graph_take_module(struct KilnGraph* g);
/* The graph node of kernel k (rpc/session_graph.c's profile rows). */
int kiln_graph_kernel_node(const struct KilnGraph* g, int k);

/* One kernel entry of the metadata's device_code: name, parameter kinds and scalar dtypes
   (arrays allocated here, released by kiln_device_kernel_free). */
int kiln_device_kernel_read(const JsonNode* node, const char* label, KilnKernelInfo* k);
void kiln_device_kernel_free(KilnKernelInfo* k);
/* The device_code's text (`text_key`: "source", "ptx") and kernel records, read alike for every
   device API; read_kernel fills one record of kernel_size bytes (metadata.c). */
int kiln_device_code_read(const JsonNode* code, const char* label, const char* text_key, const char* missing_hint,
                          size_t kernel_size, int (*read_kernel)(void* kernel, const JsonNode* node, const char* label),
                          char** text, void** kernels, int* num_kernels);

/* json_external.c: the subgraphs a library offloads to external compilers (docs/byoc.md), read
 * from its __kiln_external_modules symbol and appended to mod's functions. */
typedef struct KilnExternalKind {
  const char* type_key;
  int (*create)(const JsonNode* graph, const char* label, void** executor);
  int (*run)(void* executor, const KilnValue* args, int32_t n, int32_t threads);
  void (*free)(void* executor);
  /* The caller overwrote the tensor at `data` in place (a graph input or parameter): an
   * executor keeping a converted copy of it (oneDNN's reordered weights) converts it again. */
  void (*input_changed)(void* executor, const void* data);
} KilnExternalKind;
int kiln_external_load(KilnModule* mod, const char* label);
/* The same from the symbol's text (the fuzz target feeds it directly). */
int kiln_external_load_text(KilnModule* mod, const char* text, const char* label);
void kiln_external_free(KilnModule* mod);
void kiln_external_input_changed(KilnModule* mod, const void* data);
/* dnnl.c: the oneDNN executor of "dnnl" subgraphs (through the libkiln_dnnl.so shim). */
int kiln_dnnl_create(const JsonNode* graph, const char* label, void** executor);
int kiln_dnnl_run(void* executor, const KilnValue* args, int32_t n, int32_t threads);
void kiln_dnnl_free(void* executor);
void kiln_dnnl_input_changed(void* executor, const void* data);

/* Parse the metadata JSON into mod (functions, entry, device type). */
int kiln_metadata_read(KilnModule* mod, const char* json, size_t len, const char* label);
void kiln_metadata_free(KilnModule* mod);
