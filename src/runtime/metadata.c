/* Module metadata (docs/abi.md "Metadata") into argument specs the call path checks against. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define ABI_VERSION 1

static char* dup_str(const char* s) {
  char* d = strdup(s ? s : "");
  if (!d) kiln_error("out of memory");
  return d;
}

int kiln_arg_alloc_dims(ArgSpec* a, size_t ndim) {
  a->ndim = (int32_t)ndim;
  a->dims = calloc(ndim + 1, sizeof(int64_t));
  a->syms = calloc(ndim + 1, sizeof(char*));
  if (!a->dims || !a->syms) return kiln_error("out of memory");
  return 0;
}

static int read_arg(ArgSpec* a, const JsonNode* node, const char* func, const char* label) {
  const char* name = json_string(json_get(node, "name"));
  const char* kind = json_string(json_get(node, "kind"));
  const char* dtype = json_string(json_get(node, "dtype"));
  if (!(a->name = dup_str(name ? name : "?"))) return -1;
  if (!kind || !dtype) return kiln_error("%s: argument %s of %s has no kind or dtype", label, a->name, func);
  if (kiln_dtype_parse(dtype, strlen(dtype), &a->dtype)) return -1;
  snprintf(a->dtype_name, sizeof(a->dtype_name), "%s", dtype);
  if (!strcmp(kind, "scalar")) {
    a->kind = ARG_SCALAR;
    a->code = a->dtype.code == KILN_DL_FLOAT ? KILN_FLOAT : KILN_INT;
    return 0;
  }
  if (!strcmp(kind, "handle")) {
    a->kind = ARG_HANDLE;
    a->code = KILN_HANDLE;
    return 0;
  }
  if (strcmp(kind, "tensor") != 0)
    return kiln_error("%s: %s argument %s has unknown kind '%s'; this runtime knows tensor, "
                      "scalar, handle (the module may need a newer kiln)", label, func, a->name, kind);
  a->kind = ARG_TENSOR;
  a->code = KILN_DLTENSOR;
  const JsonNode* shape = json_get(node, "shape");
  if (!shape || shape->type != JSON_ARRAY || shape->count > 64)
    return kiln_error("%s: %s argument %s has no shape list", label, func, a->name);
  if (kiln_arg_alloc_dims(a, shape->count)) return -1;
  int i = 0;
  for (const JsonNode* d = shape->child; d; d = d->next, i++) {
    if (d->type == JSON_STRING) {
      a->dims[i] = -1;
      if (!(a->syms[i] = dup_str(d->string))) return -1;
    } else if (d->type == JSON_NUMBER && d->is_integer && d->integer >= 0) {
      a->dims[i] = d->integer;
    } else {
      return kiln_error("%s: %s argument %s has a bad shape entry", label, func, a->name);
    }
  }
  return 0;
}

static int read_function(KilnFunction* f, const JsonNode* node, const char* label) {
  const char* name = json_string(json_get(node, "name"));
  const JsonNode* args = json_get(node, "args");
  if (!name || !args || args->type != JSON_ARRAY || args->count > 4096)
    return kiln_error("%s: a function entry lacks 'name' or 'args'", label);
  if (!(f->name = dup_str(name))) return -1;
  f->num_args = (int32_t)args->count;
  f->args = calloc(args->count + 1, sizeof(ArgSpec));
  f->codes = calloc(args->count + 1, sizeof(int32_t));
  if (!f->args || !f->codes) return kiln_error("out of memory");
  int i = 0;
  for (const JsonNode* a = args->child; a; a = a->next, i++) {
    if (read_arg(&f->args[i], a, name, label)) return -1;
    f->codes[i] = f->args[i].code;
  }
  return 0;
}

int kiln_metadata_read(KilnModule* mod, const char* json, size_t len, const char* label) {
  JsonNode* root = json_parse(json, len);
  if (!root) {
    char why[256]; /* copied: the message buffer cannot be both source and destination */
    snprintf(why, sizeof(why), "%s", kiln_last_error());
    return kiln_error("%s: its metadata is not valid JSON (%s); rebuild it", label, why);
  }
  int rc = -1;
  const JsonNode* version = json_get(root, "abi_version");
  const JsonNode* funcs = json_get(root, "functions");
  if (!version || version->type != JSON_NUMBER || !version->is_integer || version->integer != ABI_VERSION) {
    const char* built_by = json_string(json_get(root, "kiln_version"));
    kiln_error("%s uses kiln ABI version %lld; this runtime speaks version %d. Rebuild the module "
               "with a matching kiln (%s built it)", label,
               version && version->is_integer ? (long long)version->integer : -1LL, ABI_VERSION,
               built_by ? built_by : "?");
    goto done;
  }
  if (!funcs || funcs->type != JSON_ARRAY || funcs->count > 65536) {
    kiln_error("%s: metadata has no 'functions' list", label);
    goto done;
  }
  const JsonNode* dev = json_get(root, "device_type");
  mod->device_type = dev && dev->type == JSON_NUMBER && dev->is_integer ? (int32_t)dev->integer : 1;
  mod->functions = calloc(funcs->count + 1, sizeof(KilnFunction));
  if (!mod->functions) { kiln_error("out of memory"); goto done; }
  for (const JsonNode* f = funcs->child; f; f = f->next) {
    KilnFunction* fn = &mod->functions[mod->num_functions++];
    fn->module = mod;
    if (read_function(fn, f, label)) goto done;
  }
  /* The largest image the compiler folded texture tensors for (texture.c); 0: its default. */
  const char* target = json_string(json_get(root, "target"));
  const char* limit = target ? strstr(target, "-texture_spatial_limit=") : NULL;
  mod->texture_limit = limit ? strtoll(limit + strlen("-texture_spatial_limit="), NULL, 10) : 0;
  if (mod->texture_limit < 0) mod->texture_limit = 0;
  const char* entry = json_string(json_get(root, "entry"));
  if (!entry || !*entry) entry = mod->num_functions ? mod->functions[0].name : "";
  if (!(mod->entry = dup_str(entry))) goto done;
  rc = 0;
done:
  json_free(root);
  return rc;
}

void kiln_metadata_free(KilnModule* mod) {
  for (int i = 0; i < mod->num_functions; i++) {
    KilnFunction* f = &mod->functions[i];
    for (int j = 0; j < f->num_args; j++) {
      ArgSpec* a = &f->args[j];
      free(a->name);
      for (int k = 0; a->syms && k < a->ndim; k++) free(a->syms[k]);
      free(a->syms);
      free(a->dims);
    }
    free(f->args);
    free(f->codes);
    free(f->name);
  }
  free(mod->functions);
  free(mod->entry);
  mod->functions = NULL;
  mod->entry = NULL;
  mod->num_functions = 0;
}

/* The part of a GPU module's device_code (docs/abi.md, GPU modules) that every device API
   reads alike: the `text_key` string (OpenCL C, PTX) copied into *text, and each kernel entry
   read by read_kernel into an array of kernel_size-byte records. *num_kernels counts every
   record begun, so the caller's free also releases a half-read one after a failure. */
int kiln_device_code_read(const JsonNode* code, const char* label, const char* text_key, const char* missing_hint,
                          size_t kernel_size, int (*read_kernel)(void* kernel, const JsonNode* node, const char* label),
                          char** text, void** kernels, int* num_kernels) {
  const char* s = json_string(json_get(code, text_key));
  const JsonNode* list = json_get(code, "kernels");
  if (!s || !list || list->type != JSON_ARRAY || list->count > 65536)
    return kiln_error("%s: its %s device_code lacks '%s' or 'kernels'; %s", label,
                      json_string(json_get(code, "type_key")), text_key, missing_hint);
  if (!(*text = strdup(s)) || !(*kernels = calloc(list->count + 1, kernel_size))) return kiln_error("out of memory");
  for (const JsonNode* k = list->child; k; k = k->next)
    if (read_kernel((char*)*kernels + (size_t)(*num_kernels)++ * kernel_size, k, label)) return -1;
  return 0;
}

/* One kernel of the metadata's device_code (docs/abi.md, GPU modules): its name and, per
   parameter, whether it is a buffer or a scalar of which dtype. The OpenCL and CUDA loaders share it. */
int kiln_device_kernel_read(const JsonNode* node, const char* label, KilnKernelInfo* k) {
  const char* name = json_string(json_get(node, "name"));
  const JsonNode* params = json_get(node, "params");
  if (!name || !params || params->type != JSON_ARRAY || params->count > 1024)
    return kiln_error("%s: a device_code kernel lacks 'name' or 'params'", label);
  if (!(k->name = strdup(name))) return kiln_error("out of memory");
  k->num_params = (int)params->count;
  k->kinds = calloc(params->count + 1, sizeof(int));
  k->dtypes = calloc(params->count + 1, sizeof(DLDataType));
  if (!k->kinds || !k->dtypes) return kiln_error("out of memory");
  int i = 0;
  for (const JsonNode* p = params->child; p; p = p->next, i++) {
    const char* kind = json_string(json_get(p, "kind"));
    const char* dtype = json_string(json_get(p, "dtype"));
    if (kind && !strcmp(kind, "buffer")) {
      k->kinds[i] = KILN_KERNEL_BUFFER;
      continue;
    }
    k->kinds[i] = KILN_KERNEL_SCALAR;
    if (!kind || strcmp(kind, "scalar") != 0 || !dtype || kiln_dtype_parse(dtype, strlen(dtype), &k->dtypes[i]))
      return kiln_error("%s: kernel %s has a parameter that is neither a buffer nor a scalar of a known dtype",
                        label, name);
  }
  return 0;
}

void kiln_device_kernel_free(KilnKernelInfo* k) {
  free(k->name);
  free(k->kinds);
  free(k->dtypes);
}
