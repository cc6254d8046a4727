/* Loading module files: .so through dlopen, .tar by relinking its objects first. */
#define _GNU_SOURCE /* RTLD_NODELETE */
#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"

/* dlopen hands back the library already loaded from a path even when the file was replaced
 * since (an RPC client re-uploading lib.so), so remember what each path held and load a
 * changed file from a fresh copy. Loads are rare; a short list is enough. */
typedef struct Loaded {
  char* path;
  dev_t dev;
  ino_t ino;
  struct timespec mtime;
  struct Loaded* next;
} Loaded;
static Loaded* loaded_files;

static int ends_with(const char* s, const char* suffix) {
  size_t n = strlen(s), m = strlen(suffix);
  return n >= m && strcmp(s + n - m, suffix) == 0;
}

static const char* base_name(const char* path) {
  const char* slash = strrchr(path, '/');
  return slash ? slash + 1 : path;
}

static int copy_file(const char* from, const char* to) {
  int in = open(from, O_RDONLY), out = open(to, O_WRONLY | O_CREAT | O_EXCL, 0700);
  char buf[65536];
  ssize_t n = 0;
  while (in >= 0 && out >= 0 && (n = read(in, buf, sizeof(buf))) > 0)
    if (write(out, buf, (size_t)n) != n) { n = -1; break; }
  int ok = in >= 0 && out >= 0 && n == 0;
  if (in >= 0) close(in);
  if (out >= 0) close(out);
  return ok ? 0 : -1;
}

/* The path to hand to dlopen: `path`, or a private copy when it changed since it was loaded. */
static char* path_to_open(const char* path) {
  struct stat st;
  if (stat(path, &st) != 0) { kiln_error("module file %s does not exist", path); return NULL; }
  for (Loaded* l = loaded_files; l; l = l->next) {
    if (strcmp(l->path, path) != 0) continue;
    if (l->dev == st.st_dev && l->ino == st.st_ino && l->mtime.tv_sec == st.st_mtim.tv_sec &&
        l->mtime.tv_nsec == st.st_mtim.tv_nsec)
      return strdup(path);
    size_t n = strlen(path) + 32;
    char* copy = malloc(n);
    if (!copy) return NULL;
    static unsigned serial;
    for (int tries = 0; tries < 100; tries++) {
      snprintf(copy, n, "%s.%d.%u.so", path, (int)getpid(), ++serial);
      if (copy_file(path, copy) == 0) return copy;
    }
    free(copy);
    kiln_error("cannot make a private copy of the changed library %s", path);
    return NULL;
  }
  Loaded* l = calloc(1, sizeof(Loaded));
  if (l && (l->path = strdup(path))) {
    l->dev = st.st_dev;
    l->ino = st.st_ino;
    l->mtime = st.st_mtim;
    l->next = loaded_files;
    loaded_files = l;
  } else {
    free(l);
  }
  return strdup(path);
}

static int32_t configured_threads(void) {
  const char* v = getenv("KILN_NUM_THREADS");
  if (!v || !*v) v = getenv("TVM_NUM_THREADS");
  return v && *v ? (int32_t)atoi(v) : 0;
}

/* The device APIs this runtime runs GPU modules on, by the device_code's type_key. */
static const KilnDeviceApi* const DEVICE_APIS[] = {&kiln_opencl_device_api, &kiln_cuda_device_api};

/* The device half of a GPU module, from its metadata's device_code (docs/abi.md "GPU modules"):
 * the one place that makes device modules, by type_key; another kind is one error. A CPU module
 * has none. */
static int device_module_create(KilnModule* mod, const char* meta, const char* label) {
  JsonNode* root = json_parse(meta, strlen(meta));
  if (!root) return -1;
  const JsonNode* code = json_get(root, "device_code");
  const char* type = code && code->type == JSON_OBJECT ? json_string(json_get(code, "type_key")) : NULL;
  const KilnDeviceApi* api = NULL;
  for (size_t i = 0; type && i < sizeof(DEVICE_APIS) / sizeof(DEVICE_APIS[0]); i++)
    if (!strcmp(type, DEVICE_APIS[i]->type_key)) api = DEVICE_APIS[i];
  int rc = 0;
  KilnDeviceModule* d;
  if (!code || code->type != JSON_OBJECT) {
    rc = 0;
  } else if (!api) {
    rc = kiln_error("%s carries '%s' device code, which this runtime cannot run (it runs 'opencl' and 'cuda'); "
                    "rebuild for a target this device supports", label, type ? type : "?");
  } else if (!(d = mod->device = calloc(1, sizeof(KilnDeviceModule)))) {
    rc = kiln_error("out of memory");
  } else { /* on failure the half-made module is freed with mod (kiln_module_free) */
    d->api = api;
    if (kiln_device_code_read(code, label, api->text_key, api->missing_hint, api->kernel_size, api->read_kernel,
                              &d->text, &d->kernels, &d->num_kernels))
      rc = -1;
    else if (!(d->impl = calloc(1, api->state_size)))
      rc = kiln_error("out of memory");
  }
  json_free(root);
  return rc;
}

static void device_module_free(KilnDeviceModule* d) {
  if (!d) return;
  if (d->impl) d->api->release(d);
  free(d->impl);
  for (int k = 0; k < d->num_kernels; k++) {
    void* record = (char*)d->kernels + (size_t)k * d->api->kernel_size;
    if (d->api->free_kernel) d->api->free_kernel(record);
    kiln_device_kernel_free(record);
  }
  free(d->kernels);
  free(d->text);
  free(d);
}

/* The launch hook of every GPU library (KilnDeviceLaunch in docs/abi.md; ctx is the
 * KilnDeviceModule): workspace requests, else a kernel id and argument count checked here, for
 * every device API alike, before the API launches. */
static int32_t device_launch(void* ctx, int32_t kernel_id, const KilnValue* args, const int32_t* codes,
                             int32_t num_args, const int64_t* dims, int64_t dyn_shared_bytes) {
  KilnDeviceModule* d = ctx;
  int32_t rc;
  if (kernel_id < 0) {
    rc = d->api->workspace(kernel_id, args, num_args);
  } else if (kernel_id >= d->num_kernels) {
    rc = kiln_error("%s module has %d kernels; kernel id %d is out of range (rebuild)", d->api->type_key,
                    d->num_kernels, kernel_id);
  } else {
    const KilnKernelInfo* k = (const KilnKernelInfo*)((char*)d->kernels + (size_t)kernel_id * d->api->kernel_size);
    rc = num_args != k->num_params
             ? kiln_error("%s takes %d arguments, the host code passed %d: rebuild the module", k->name,
                          k->num_params, num_args)
             : d->api->launch(d, kernel_id, args, codes, num_args, dims, dyn_shared_bytes);
  }
  if (rc) d->failed = 1;
  return rc;
}

int kiln_device_module_take_failure(KilnDeviceModule* d) {
  int failed = d->failed;
  d->failed = 0;
  return failed;
}

int kiln_module_load_so(const char* path, KilnModule** out) {
  if (kiln_elf_check(path)) return -1;
  char* target = path_to_open(path);
  if (!target) return -1;
  if (!strchr(target, '/')) { /* dlopen would search the library path for a bare name, not "." */
    char* here = malloc(strlen(target) + 3);
    if (here) sprintf(here, "./%s", target);
    free(target);
    if (!(target = here)) return kiln_error("out of memory");
  }
  KilnModule* mod = calloc(1, sizeof(KilnModule));
  if (!mod) { free(target); return kiln_error("out of memory"); }
  /* Modules linked by ld.lld without a sysroot carry no DT_NEEDED for libm: make its symbols
   * (floorf, expf, ...) global once, as the Python runtime's process already has them. */
  static int libm_loaded;
  if (!libm_loaded) {
    libm_loaded = dlopen("libm.so.6", RTLD_NOW | RTLD_GLOBAL) != NULL;
  }
  /* RTLD_LOCAL: two modules may both define add_one; RTLD_NOW: a missing libc symbol fails
   * here with a message, not in the middle of a call. */
  /* RTLD_NODELETE: the module's thread pool (docs/abi.md) keeps its workers alive inside the
   * library, so unmapping it in kiln_module_free would pull code from under them. */
  mod->lib = dlopen(target, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
  free(target);
  if (!mod->lib) {
    kiln_error("cannot load %s: %s", base_name(path), dlerror());
    free(mod);
    return -1;
  }
  mod->path = strdup(path);
  const char* meta = dlsym(mod->lib, "__kiln_metadata");
  if (!meta) {
    kiln_error("%s is not a kiln module: it has no __kiln_metadata symbol (export modules with "
               "Module.export_library)", base_name(path));
    goto fail;
  }
  if (kiln_metadata_read(mod, meta, strlen(meta), base_name(path))) goto fail;
  if (device_module_create(mod, meta, base_name(path))) goto fail;
  if (mod->device) {
    void* hook = dlsym(mod->lib, "__kiln_device_launch");
    void* ctx = dlsym(mod->lib, "__kiln_device_ctx");
    if (!hook || !ctx) {
      kiln_error("%s: its metadata carries device code but it does not define __kiln_device_launch "
                 "and __kiln_device_ctx; rebuild it with this kiln version", base_name(path));
      goto fail;
    }
    *(void**)ctx = mod->device;
    *(int32_t (**)(void*, int32_t, const KilnValue*, const int32_t*, int32_t, const int64_t*, int64_t))hook =
        device_launch;
  }
  mod->last_error = dlsym(mod->lib, "__kiln_last_error");
  mod->num_threads = dlsym(mod->lib, "__kiln_num_threads");
  for (int i = 0; i < mod->num_functions; i++) {
    KilnFunction* f = &mod->functions[i];
    f->kernel = (KilnKernel)dlsym(mod->lib, f->name);
    if (!f->kernel) {
      kiln_error("%s: metadata lists function '%s' but the library does not export it; rebuild it",
                 base_name(path), f->name);
      goto fail;
    }
  }
  kiln_module_set_num_threads(mod, configured_threads());
  if (kiln_external_load(mod, base_name(path))) goto fail;
  *out = mod;
  return 0;
fail:
  kiln_module_free(mod);
  return -1;
}

/* The unpack directory holds only files tar.c wrote (libN.o, metadata.json): remove them all,
 * also after a failure halfway through. */
static void remove_unpacked(const char* dir) {
  DIR* d = opendir(dir);
  struct dirent* e;
  char path[4096];
  while (d && (e = readdir(d))) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
    unlink(path);
  }
  if (d) closedir(d);
  rmdir(dir);
}

/* A .tar holds objects to link here: unpack beside the archive, link "x.tar.so", load it. */
static int load_tar(const char* path, KilnModule** out) {
  const char* name = base_name(path);
  size_t n = strlen(path) + 16;
  char* dir = malloc(n);
  char* so = malloc(n);
  char* meta_path = malloc(n + 16);
  char* meta = NULL;
  int rc = -1, num_objects = 0;
  if (!dir || !so || !meta_path) { kiln_error("out of memory"); goto done; }
  snprintf(dir, n, "%s.d", path);
  snprintf(so, n, "%s.so", path);
  snprintf(meta_path, n + 16, "%s/metadata.json", dir);
  if (mkdir(dir, 0700) != 0 && access(dir, W_OK) != 0) {
    kiln_error("cannot create %s to unpack %s", dir, name);
    goto done;
  }
  if (kiln_untar_module(path, dir, &num_objects)) goto done;
  FILE* f = fopen(meta_path, "rb");
  if (!f) { kiln_error("%s is not a kiln module archive: it has no metadata.json", name); goto done; }
  meta = malloc(1 << 20);
  size_t len = meta ? fread(meta, 1, (1 << 20) - 1, f) : 0;
  int too_big = meta && len == (1 << 20) - 1 && fgetc(f) != EOF;
  fclose(f);
  if (!meta || too_big) { kiln_error("%s: metadata.json is missing or larger than 1 MiB", name); goto done; }
  /* Check the triple before linking: the device compiler's error about foreign objects
   * ("file in wrong format") says nothing about what to rebuild. */
  KilnModule probe = {0};
  if (kiln_metadata_read(&probe, meta, len, name)) { kiln_metadata_free(&probe); goto done; }
  kiln_metadata_free(&probe);
  JsonNode* root = json_parse(meta, len);
  const char* triple = root ? json_string(json_get(root, "triple")) : NULL;
  int bad_triple = kiln_triple_check(triple ? triple : "", name);
  json_free(root);
  if (bad_triple) goto done;
  if (num_objects == 0) { kiln_error("%s holds no objects (lib0.o, ...); re-export the module", name); goto done; }
  if (kiln_link_objects(dir, num_objects, so)) goto done;
  rc = kiln_module_load_so(so, out);
done:
  if (dir) remove_unpacked(dir);
  free(dir);
  free(so);
  free(meta_path);
  free(meta);
  return rc;
}

int kiln_module_load(const char* path, KilnModule** out) {
  *out = NULL;
  if (ends_with(path, ".tar")) return load_tar(path, out);
  return kiln_module_load_so(path, out);
}

void kiln_module_free(KilnModule* mod) {
  if (!mod) return;
  kiln_external_free(mod);
  kiln_metadata_free(mod);
  device_module_free(mod->device);
  if (mod->lib) dlclose(mod->lib);
  free(mod->path);
  free(mod);
}

const char* kiln_module_entry_name(const KilnModule* mod) { return mod->entry ? mod->entry : ""; }
int kiln_module_num_functions(const KilnModule* mod) { return mod->num_functions; }

const char* kiln_module_function_name(const KilnModule* mod, int i) {
  return i >= 0 && i < mod->num_functions ? mod->functions[i].name : NULL;
}

void kiln_module_set_num_threads(KilnModule* mod, int32_t n) {
  if (mod->num_threads) *mod->num_threads = n < 0 ? 0 : n;
}

int kiln_module_get_function(KilnModule* mod, const char* name, KilnFunction** out) {
  for (int i = 0; i < mod->num_functions; i++) {
    if (strcmp(mod->functions[i].name, name) == 0) {
      *out = &mod->functions[i];
      return 0;
    }
  }
  char names[512] = "";
  size_t used = 0;
  for (int i = 0; i < mod->num_functions && used + 2 < sizeof(names); i++) {
    int w = snprintf(names + used, sizeof(names) - used, "%s%s", i ? ", " : "", mod->functions[i].name);
    if (w < 0 || (size_t)w >= sizeof(names) - used) { used = sizeof(names) - 1; break; }
    used += (size_t)w;
  }
  return kiln_error("module has no function '%s'; its functions: %s", name, used ? names : "none");
}

const char* kiln_func_name(const KilnFunction* f) { return f->name; }
int kiln_func_num_args(const KilnFunction* f) { return f->num_args; }
