/* A host test program for an AOT model: input bytes on stdin, output bytes on stdout. */
#include <stdio.h>
#include <stdlib.h>
#include "tvmgen_default.h"

extern char __kiln_last_error[];
static float input[TVMGEN_DEFAULT_INPUT_SIZE / sizeof(float)];
static float output[TVMGEN_DEFAULT_OUTPUT_SIZE / sizeof(float)];

int main(void) {
  if (fread(input, 1, sizeof input, stdin) != sizeof input) { fprintf(stderr, "short input\n"); return 2; }
  struct tvmgen_default_inputs in = {input};
  struct tvmgen_default_outputs out = {output};
  if (tvmgen_default_run(&in, &out) != 0) { fprintf(stderr, "run failed: %s\n", __kiln_last_error); return 1; }
  fwrite(output, 1, sizeof output, stdout);
  return 0;
}
