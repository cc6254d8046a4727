/* Parameter blobs (mod.params), tvmc packages (.tar of mod.so + mod.json + mod.params) and
 * one-file libraries (relay.build(...).export_library("x.so"): the graph and parameters are data
 * symbols next to the kernels, docs/graph.md "How one file carries the graph").
 *
 * The blob format is kiln/runtime/params.py's (all integers little-endian):
 *   "KILNPRM1", u64 count, then per array: u64 name_len, name, u64 dtype_len, dtype,
 *   u64 ndim, ndim x i64 shape, u64 nbytes, data (C order).
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"
#include "kiln_graph.h"

typedef struct {
  const unsigned char* p;
  size_t left;
} Reader;

static int take(Reader* r, size_t n, const unsigned char** out) {
  if (n > r->left) return kiln_error("mod.params: the blob is truncated; re-export it with tvmc compile");
  *out = r->p;
  r->p += n;
  r->left -= n;
  return 0;
}

static int take_u64(Reader* r, uint64_t* v) {
  const unsigned char* b = NULL;
  if (take(r, 8, &b)) return -1;
  *v = 0;
  for (int i = 7; i >= 0; i--) *v = (*v << 8) | b[i];
  return 0;
}

int kiln_graph_load_params(KilnGraph* g, const void* blob, size_t len) {
  Reader r = {blob, len};
  const unsigned char* magic;
  if (len < 8 || take(&r, 8, &magic) || memcmp(magic, "KILNPRM1", 8) != 0)
    return kiln_error("mod.params is not a kiln parameter blob (bad magic); write it with "
                      "relay.save_param_dict or tvmc compile");
  uint64_t count;
  if (take_u64(&r, &count)) return -1;
  for (uint64_t a = 0; a < count; a++) {
    uint64_t name_len = 0, dtype_len = 0, ndim = 0, nbytes = 0;
    const unsigned char *name = NULL, *dtype = NULL, *shape_bytes = NULL, *data = NULL;
    if (take_u64(&r, &name_len) || take(&r, name_len, &name) || take_u64(&r, &dtype_len) ||
        take(&r, dtype_len, &dtype) || take_u64(&r, &ndim) || ndim > 64 || take(&r, ndim * 8, &shape_bytes) ||
        take_u64(&r, &nbytes) || take(&r, nbytes, &data))
      return ndim > 64 ? kiln_error("mod.params: an array has %llu dimensions", (unsigned long long)ndim) : -1;
    char key[256];
    if (name_len >= sizeof(key)) continue; /* no graph input has such a name */
    memcpy(key, name, name_len);
    key[name_len] = '\0';
    int i = kiln_graph_input_index(g, key);
    if (i < 0) continue; /* folded away at build time */
    const DLTensor* t = kiln_graph_input(g, i);
    DLDataType dt;
    int same = dtype_len < 16 && kiln_dtype_parse((const char*)dtype, dtype_len, &dt) == 0 &&
               memcmp(&dt, &t->dtype, sizeof(dt)) == 0 && ndim == (uint64_t)t->ndim;
    for (uint64_t d = 0; same && d < ndim; d++) {
      uint64_t v = 0;
      for (int b = 7; b >= 0; b--) v = (v << 8) | shape_bytes[d * 8 + (uint64_t)b];
      same = (int64_t)v == t->shape[d];
    }
    if (!same || nbytes != kiln_ndarray_nbytes(t))
      return kiln_error("mod.params: parameter '%s' does not match the graph's input of that name "
                        "(dtype or shape); were mod.json and mod.params built together?", key);
    if (kiln_graph_set_input(g, key, data, (size_t)nbytes)) return -1;
    kiln_graph_mark_param(g, i);
  }
  return 0;
}

static int load_library(const char* path, DLDevice dev, KilnGraph** out) {
  KilnModule* lib;
  if (kiln_module_load(path, &lib)) return -1;
  const char* json = dlsym(lib->lib, "__kiln_graph_json");
  const unsigned char* params = dlsym(lib->lib, "__kiln_graph_params");
  const char* base = strrchr(path, '/');
  base = base ? base + 1 : path;
  if (!json || !params) {
    kiln_module_free(lib);
    return kiln_error("%s carries no graph: export relay.build's result (lib.export_library(\"%s\")), not "
                      "lib.get_lib(), or pass a tvmc package .tar", base, base);
  }
  uint64_t n = 0;
  for (int i = 7; i >= 0; i--) n = (n << 8) | params[i];
  if (kiln_graph_create(json, strlen(json), lib, dev, out)) {
    kiln_module_free(lib);
    return -1;
  }
  kiln_graph_take_module(*out);
  if (kiln_graph_load_params(*out, params + 8, (size_t)n)) {
    kiln_graph_free(*out);
    *out = NULL;
    return -1;
  }
  return 0;
}

int kiln_graph_load_package(const char* tar_path, DLDevice dev, KilnGraph** out) {
  *out = NULL;
  if (access(tar_path, R_OK) != 0)
    return kiln_error("package %s does not exist; make one with tvmc compile MODEL -o %s", tar_path, tar_path);
  size_t len = strlen(tar_path);
  if (len > 3 && strcmp(tar_path + len - 3, ".so") == 0) return load_library(tar_path, dev, out);
  const char* tmp = getenv("TMPDIR");
  char dir[4096];
  snprintf(dir, sizeof(dir), "%s/kiln-package-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(dir)) return kiln_error("cannot create a directory under %s for the package", tmp && *tmp ? tmp : "/tmp");
  static const char* const names[3] = {"mod.so", "mod.json", "mod.params"};
  char paths[3][4200];
  for (int i = 0; i < 3; i++) snprintf(paths[i], sizeof(paths[i]), "%s/%s", dir, names[i]);
  int found[3];
  /* mod.so must be a file for dlopen; the graph and the weights are read straight into memory. */
  char* data[3] = {NULL, (char*)1, (char*)1};
  size_t lens[3] = {0, 0, 0};
  KilnModule* lib = NULL;
  int rc = -1;
  const char* base = strrchr(tar_path, '/');
  base = base ? base + 1 : tar_path;
  if (kiln_untar_named(tar_path, dir, names, 3, found, data, lens)) goto done;
  for (int i = 0; i < 3; i++)
    if (!found[i]) {
      kiln_error("%s is not a tvmc package: it lacks %s (packages hold mod.so, mod.json and mod.params; "
                 "make one with tvmc compile)", base, names[i]);
      goto done;
    }
  if (kiln_module_load(paths[0], &lib)) goto done;
  if (kiln_graph_create(data[1], lens[1], lib, dev, out)) goto done;
  kiln_graph_take_module(*out);
  lib = NULL;
  if (kiln_graph_load_params(*out, data[2], lens[2])) {
    kiln_graph_free(*out);
    *out = NULL;
    goto done;
  }
  rc = 0;
done:
  if (lib) kiln_module_free(lib);
  for (int i = 1; i < 3; i++)
    if (data[i] != (char*)1) free(data[i]);
  /* The loaded library stays mapped after its file is gone. */
  for (int i = 0; i < 3; i++) unlink(paths[i]);
  rmdir(dir);
  return rc;
}
