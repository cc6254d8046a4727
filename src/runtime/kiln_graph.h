/* kiln graph executor in C: run a compiled model (mod.so + mod.json + mod.params) without Python.
 *
 * The graph JSON is what relay.build exports (docs/graph.md); memory is planned like the Python
 * executor (kiln/runtime/graph_executor.py): one buffer per storage_id, as large as its largest
 * tensor, and every node output a view at the start of its buffer. Kernels are looked up in the
 * library by the nodes' func_name and checked against the library's metadata once, when the
 * executor is created; kiln_graph_run is then a loop of direct calls.
 *
 * An executor is used by one thread at a time (its arrays are its state); run several executors
 * over one loaded module for concurrency. Like the rest of the runtime, calls return 0 on success and -1 on failure, with the reason in
 * kiln_last_error(). Described in docs/c-runtime.md ("Graph executor and kiln_run").
 */
#ifndef KILN_GRAPH_H_
#define KILN_GRAPH_H_

#include "kiln_runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct KilnGraph KilnGraph;

/* A tvmc package (.tar holding mod.so, mod.json, mod.params: `tvmc compile -o x.tar`) on `dev`
 * (CPU, or an OpenCL device for packages compiled with an "opencl, llvm" target), with its
 * parameters loaded. mod.so is extracted into a private directory under $TMPDIR (default /tmp)
 * that is removed again once the library is loaded. A path ending in .so is a one-file library
 * instead (relay.build(...).export_library("x.so"), graph and parameters inside). The executor
 * owns the module. */
KILN_API int kiln_graph_load_package(const char* tar_path, DLDevice dev, KilnGraph** out);

/* An executor over a graph JSON text and an already loaded kernel library. `lib` must outlive
 * the executor (it is not freed with it). */
KILN_API int kiln_graph_create(const char* graph_json, size_t len, KilnModule* lib, DLDevice dev,
                               KilnGraph** out);
/* Copy the arrays of a parameter blob (mod.params, `relay.save_param_dict`) into the inputs of
 * the same names; arrays without an input (folded away at build time) are ignored. */
KILN_API int kiln_graph_load_params(KilnGraph* g, const void* blob, size_t len);
KILN_API void kiln_graph_free(KilnGraph* g);

/* Inputs: every graph input, parameters included, in the graph's order. */
KILN_API int kiln_graph_num_inputs(const KilnGraph* g);
KILN_API const char* kiln_graph_input_name(const KilnGraph* g, int index);
/* Index of input `name`, or -1 (no error is set). */
KILN_API int kiln_graph_input_index(const KilnGraph* g, const char* name);
/* 1 if the input was set by kiln_graph_load_params (a weight), else 0. */
KILN_API int kiln_graph_input_is_param(const KilnGraph* g, int index);
/* The input's array (shape, dtype, device); owned by the executor. NULL for a bad index. */
KILN_API const DLTensor* kiln_graph_input(const KilnGraph* g, int index);
/* "global" (a buffer), or the texture scope of an input kept in an OpenCL image (graphs built for
 * opencl -device=adreno; docs/c-runtime.md "Texture entries"). Data goes in and out as the
 * tensor's C-order bytes either way. */
KILN_API const char* kiln_graph_input_scope(const KilnGraph* g, int index);
KILN_API const char* kiln_graph_output_scope(const KilnGraph* g, int index);
/* Copy `nbytes` of compact row-major host data into input `name`; nbytes must be its size. */
KILN_API int kiln_graph_set_input(KilnGraph* g, const char* name, const void* data, size_t nbytes);
/* The same from an array of the input's shape and dtype (any device). */
KILN_API int kiln_graph_set_input_tensor(KilnGraph* g, int index, const DLTensor* value);

/* Run every kernel in order (OpenCL: waits for the device before returning). */
KILN_API int kiln_graph_run(KilnGraph* g);

/* Outputs, named "output_0", "output_1", ... as tvmc names them. */
KILN_API int kiln_graph_num_outputs(const KilnGraph* g);
/* Index of "output_N" or of the name of the node that computes the output; -1 if none. */
KILN_API int kiln_graph_output_index(const KilnGraph* g, const char* name);
/* The output's array (overwritten by the next run); owned by the executor. NULL for a bad index. */
KILN_API const DLTensor* kiln_graph_output(const KilnGraph* g, int index);
/* Copy output `index` to host memory; nbytes must be its size (kiln_ndarray_nbytes). */
KILN_API int kiln_graph_get_output(const KilnGraph* g, int index, void* data, size_t nbytes);

/* Kernels the graph calls per run, and the name of the k-th one. */
KILN_API int kiln_graph_num_kernels(const KilnGraph* g);
KILN_API const char* kiln_graph_kernel_name(const KilnGraph* g, int k);
/* Run only kernel k (for per-kernel timing); inputs must be in place. */
KILN_API int kiln_graph_run_kernel(KilnGraph* g, int k);

#ifdef __cplusplus
}
#endif
#endif /* KILN_GRAPH_H_ */
