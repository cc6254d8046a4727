/* An application using the kiln C API: load a tvmc package, set an input by name, run, read the
 * outputs with their shapes and dtypes. No Python on the device; link with libkiln_runtime.
 *
 *   make -C src/runtime                        # or CROSS=aarch64-linux-gnu- for a board
 *   cc -O2 -Isrc/runtime examples/c_api/classify.c src/runtime/build/host/libkiln_runtime.a \
 *      -ldl -lm -lpthread -o classify
 *   ./classify model.tar data                  # the package, then the name of its input
 *
 * The input is filled with a ramp (0, 0.001, 0.002, ...) so that the run is reproducible; a real
 * application would put its image there. Prints each output's shape and dtype, its first values
 * and, for the first output, the index of the largest value (the predicted class).
 */
#include <stdio.h>
#include <stdlib.h>

#include "kiln_graph.h"

static int fail(const char* where) {
  fprintf(stderr, "classify: %s: %s\n", where, kiln_last_error());
  return 1;
}

int main(int argc, char** argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: classify PACKAGE.tar INPUT_NAME\n");
    return 2;
  }
  KilnGraph* g;
  DLDevice cpu = {KILN_DEVICE_CPU, 0};
  if (kiln_graph_load_package(argv[1], cpu, &g)) return fail("load");

  /* The input's shape and dtype come from the graph. */
  int index = kiln_graph_input_index(g, argv[2]);
  if (index < 0) {
    fprintf(stderr, "classify: the model has no input '%s'\n", argv[2]);
    kiln_graph_free(g);
    return 2;
  }
  const DLTensor* in = kiln_graph_input(g, index);
  if (in->dtype.code != KILN_DL_FLOAT || in->dtype.bits != 32) {
    fprintf(stderr, "classify: this example fills float32 inputs only\n");
    kiln_graph_free(g);
    return 2;
  }
  size_t nbytes = kiln_ndarray_nbytes(in), n = nbytes / sizeof(float);
  float* data = malloc(nbytes);
  for (size_t i = 0; i < n; i++) data[i] = (float)(i % 1000) * 0.001f;
  if (kiln_graph_set_input(g, argv[2], data, nbytes)) return fail("set_input");
  free(data);

  if (kiln_graph_run(g)) return fail("run");

  for (int o = 0; o < kiln_graph_num_outputs(g); o++) {
    const DLTensor* out = kiln_graph_output(g, o);
    char dtype[16];
    kiln_dtype_format(out->dtype, dtype, sizeof(dtype));
    printf("output_%d: %s [", o, dtype);
    for (int d = 0; d < out->ndim; d++) printf("%s%lld", d ? ", " : "", (long long)out->shape[d]);
    printf("]\n");
    if (out->dtype.code != KILN_DL_FLOAT || out->dtype.bits != 32) continue;
    size_t m = kiln_ndarray_nbytes(out) / sizeof(float);
    float* values = malloc(m * sizeof(float) + 1);
    if (kiln_graph_get_output(g, o, values, m * sizeof(float))) return fail("get_output");
    size_t best = 0;
    for (size_t i = 0; i < m; i++)
      if (values[i] > values[best]) best = i;
    printf("  first values:");
    for (size_t i = 0; i < m && i < 5; i++) printf(" %.6f", values[i]);
    printf("\n  argmax: %zu (%.6f)\n", best, m ? values[best] : 0.0f);
    free(values);
  }
  kiln_graph_free(g);
  return 0;
}
