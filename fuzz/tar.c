/* libFuzzer target: module archives (src/runtime/tar.c), read from a file as the loaders do:
 * the objects and metadata of a .tar module extracted into a folder, and the named-member reader
 * (graph packages) keeping one member in memory. Whatever it extracts is removed again. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"

static char dir[64], path[96];

static void clear_dir(void) {
  static const char* names[] = {"lib0.o", "lib1.o", "lib2.o", "metadata.json", "mod.json", "mod.params"};
  char p[160];
  for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
    snprintf(p, sizeof(p), "%s/%s", dir, names[i]);
    unlink(p);
  }
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (!dir[0]) {
    snprintf(dir, sizeof(dir), "/tmp/kiln-fuzz-tar-%d", (int)getpid());
    snprintf(path, sizeof(path), "%s.tar", dir);
    if (mkdtemp(strcpy(dir, "/tmp/kiln-fuzz-tar-XXXXXX")) == NULL) abort();
  }
  FILE* f = fopen(path, "wb");
  if (!f) abort();
  fwrite(data, 1, size, f);
  fclose(f);

  int objects = 0;
  kiln_untar_module(path, dir, &objects);
  clear_dir();

  const char* names[] = {"mod.json", "mod.params", "lib0.o"};
  int found[3];
  char* in_memory[3] = {(char*)1, NULL, NULL}; /* mod.json read into memory, the others to dir */
  size_t lens[3] = {0, 0, 0};
  kiln_untar_named(path, dir, names, 3, found, in_memory, lens);
  if (in_memory[0] != (char*)1) free(in_memory[0]);
  clear_dir();
  unlink(path);
  return 0;
}
