/* Subgraphs a library offloads to external compilers (bring your own codegen, docs/byoc.md).
 *
 * relay.build links `__kiln_external_modules` into such a library: a NUL-terminated JSON list
 * of {"type_key", "symbol", "source"}, `source` being the subgraph's JSON graph
 * (kiln/relay/backend/contrib/json_graph.py). Each entry becomes one more function of the
 * module, named by its symbol, whose arguments (inputs, constants, outputs) are described by
 * the graph, so the graph executor and the RPC server find, check and call it like a kernel.
 * Calls go to the executor of the entry's compiler (the table below).
 *
 * A compiler this runtime has no executor for fails the load with one line naming it: better
 * than a library that loads and then cannot run its model.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define SYMBOL "__kiln_external_modules"
#define JSON_GRAPH_VERSION 1 /* kiln/relay/backend/contrib/json_graph.py */

static const KilnExternalKind KINDS[] = {
    {"dnnl", kiln_dnnl_create, kiln_dnnl_run, kiln_dnnl_free, kiln_dnnl_input_changed},
};
#define NUM_KINDS (sizeof(KINDS) / sizeof(KINDS[0]))

static const KilnExternalKind* kind_of(const char* type_key) {
  for (size_t i = 0; i < NUM_KINDS; i++)
    if (strcmp(KINDS[i].type_key, type_key) == 0) return &KINDS[i];
  return NULL;
}

static const JsonNode* nth(const JsonNode* array, int64_t i) {
  if (!array || array->type != JSON_ARRAY || i < 0 || (size_t)i >= array->count) return NULL;
  const JsonNode* c = array->child;
  while (i--) c = c->next;
  return c;
}

/* One tensor argument from a graph entry ({"name"?, "shape", "dtype"}). */
static int tensor_spec(ArgSpec* a, const char* name, const JsonNode* entry, const char* label) {
  const JsonNode* shape = json_get(entry, "shape");
  const char* dtype = json_string(json_get(entry, "dtype"));
  if (!(a->name = strdup(name))) return kiln_error("out of memory");
  a->kind = ARG_TENSOR;
  a->code = KILN_DLTENSOR;
  if (!dtype || !shape || shape->type != JSON_ARRAY || shape->count > 64)
    return kiln_error("%s: offloaded argument %s has no shape or dtype; re-export the library", label, name);
  if (kiln_dtype_parse(dtype, strlen(dtype), &a->dtype)) return -1;
  snprintf(a->dtype_name, sizeof(a->dtype_name), "%s", dtype);
  if (kiln_arg_alloc_dims(a, shape->count)) return -1;
  int i = 0;
  for (const JsonNode* d = shape->child; d; d = d->next, i++) {
    if (d->type != JSON_NUMBER || !d->is_integer || d->integer < 0)
      return kiln_error("%s: offloaded argument %s has a dimension that is not a number", label, name);
    a->dims[i] = d->integer;
  }
  return 0;
}

/* The graph entry `e`: inputs, then constants, then one per node. */
static const JsonNode* graph_entry(const JsonNode* graph, int64_t e) {
  const JsonNode *ins = json_get(graph, "inputs"), *consts = json_get(graph, "constants"),
                 *nodes = json_get(graph, "nodes");
  size_t ni = ins ? ins->count : 0, nc = consts ? consts->count : 0;
  if (e < 0) return NULL;
  if ((size_t)e < ni) return nth(ins, e);
  if ((size_t)e < ni + nc) return nth(consts, e - (int64_t)ni);
  return nth(nodes, e - (int64_t)(ni + nc));
}

/* The function's arguments: the graph's inputs, its constants, then its outputs. */
static int read_args(KilnFunction* f, const JsonNode* graph, const char* label) {
  const JsonNode *ins = json_get(graph, "inputs"), *consts = json_get(graph, "constants"),
                 *outs = json_get(graph, "outputs");
  if (!ins || ins->type != JSON_ARRAY || !consts || consts->type != JSON_ARRAY || !outs ||
      outs->type != JSON_ARRAY || ins->count + consts->count + outs->count > 4096)
    return kiln_error("%s: the JSON graph of %s has no inputs, constants or outputs list; re-export the library",
                      label, f->name);
  size_t n = ins->count + consts->count + outs->count;
  f->num_args = (int32_t)n;
  f->args = calloc(n + 1, sizeof(ArgSpec));
  f->codes = calloc(n + 1, sizeof(int32_t));
  if (!f->args || !f->codes) return kiln_error("out of memory");
  int i = 0;
  for (const JsonNode* e = ins->child; e; e = e->next, i++) {
    const char* name = json_string(json_get(e, "name"));
    if (tensor_spec(&f->args[i], name ? name : "input", e, label)) return -1;
  }
  for (const JsonNode* e = consts->child; e; e = e->next, i++) {
    const char* name = json_string(json_get(e, "name"));
    if (tensor_spec(&f->args[i], name ? name : "constant", e, label)) return -1;
  }
  int k = 0;
  for (const JsonNode* o = outs->child; o; o = o->next, i++, k++) {
    char name[32];
    snprintf(name, sizeof(name), "output_%d", k);
    const JsonNode* e = o->type == JSON_NUMBER && o->is_integer ? graph_entry(graph, o->integer) : NULL;
    if (!e) return kiln_error("%s: output %d of %s refers to no entry of its JSON graph", label, k, f->name);
    if (tensor_spec(&f->args[i], name, e, label)) return -1;
  }
  for (size_t j = 0; j < n; j++) f->codes[j] = KILN_DLTENSOR;
  return 0;
}

/* "this library offloads subgraphs to X (symbol); the C runtime supports: dnnl" */
static int unsupported(const char* label, const char* type_key, const char* symbol) {
  char known[128] = "";
  size_t used = 0;
  for (size_t i = 0; i < NUM_KINDS && used < sizeof(known); i++)
    used += (size_t)snprintf(known + used, sizeof(known) - used, "%s%s", i ? ", " : "", KINDS[i].type_key);
  return kiln_error("%s: this library offloads subgraphs to %s (%s); the C runtime supports: %s. Run it with the "
                    "Python runtime (kiln.runtime.load_module) or build it without partition_for_%s",
                    label, type_key, symbol, known, type_key);
}

int kiln_external_load(KilnModule* mod, const char* label) {
  const char* text = dlsym(mod->lib, SYMBOL);
  return text ? kiln_external_load_text(mod, text, label) : 0;
}

int kiln_external_load_text(KilnModule* mod, const char* text, const char* label) {
  JsonNode* list = json_parse(text, strlen(text));
  if (!list) {
    char why[256];
    snprintf(why, sizeof(why), "%s", kiln_last_error());
    return kiln_error("%s: its %s symbol is not valid JSON (%s); re-export the library", label, SYMBOL, why);
  }
  int rc = -1;
  JsonNode* graph = NULL;
  if (list->type != JSON_ARRAY || list->count > 65536) {
    kiln_error("%s: its %s symbol is not a list; re-export the library", label, SYMBOL);
    goto done;
  }
  /* Refuse before creating anything: one unsupported compiler makes the model unrunnable. */
  for (const JsonNode* e = list->child; e; e = e->next) {
    const char *type_key = json_string(json_get(e, "type_key")), *symbol = json_string(json_get(e, "symbol"));
    if (!type_key || !symbol || !json_string(json_get(e, "source"))) {
      kiln_error("%s: an entry of %s lacks type_key, symbol or source; re-export the library", label, SYMBOL);
      goto done;
    }
    if (!kind_of(type_key)) {
      unsupported(label, type_key, symbol);
      goto done;
    }
  }
  KilnFunction* grown = realloc(mod->functions, (size_t)(mod->num_functions + (int)list->count + 1) *
                                                    sizeof(KilnFunction));
  if (!grown) { kiln_error("out of memory"); goto done; }
  mod->functions = grown;
  for (const JsonNode* e = list->child; e; e = e->next) {
    const char* symbol = json_string(json_get(e, "symbol"));
    const char* source = json_string(json_get(e, "source"));
    KilnFunction* f = &mod->functions[mod->num_functions++];
    memset(f, 0, sizeof(*f));
    f->module = mod;
    if (!(f->name = strdup(symbol))) { kiln_error("out of memory"); goto done; }
    if (!(graph = json_parse(source, strlen(source)))) {
      char why[256];
      snprintf(why, sizeof(why), "%s", kiln_last_error());
      kiln_error("%s: the JSON graph of %s is not valid JSON (%s); re-export the library", label, symbol, why);
      goto done;
    }
    const char* format = json_string(json_get(graph, "format"));
    const JsonNode* version = json_get(graph, "version");
    if (!format || strcmp(format, "kiln-json-graph") != 0 || !version || !version->is_integer ||
        version->integer != JSON_GRAPH_VERSION) {
      kiln_error("%s: the JSON graph of %s is not a kiln-json-graph of version %d (it says %s %lld); rebuild the "
                 "runtime and the library with one kiln version", label, symbol, JSON_GRAPH_VERSION,
                 format ? format : "no format", version && version->is_integer ? (long long)version->integer : -1LL);
      goto done;
    }
    if (read_args(f, graph, label)) goto done;
    const KilnExternalKind* kind = kind_of(json_string(json_get(e, "type_key")));
    if (kind->create(graph, symbol, &f->executor)) {
      char why[1024];
      snprintf(why, sizeof(why), "%s", kiln_last_error());
      kiln_error("%s: %s", label, why);
      goto done;
    }
    f->external = kind;
    json_free(graph);
    graph = NULL;
  }
  rc = 0;
done:
  json_free(graph);
  json_free(list);
  return rc;
}

void kiln_external_free(KilnModule* mod) {
  for (int i = 0; i < mod->num_functions; i++) {
    KilnFunction* f = &mod->functions[i];
    if (f->external && f->executor) f->external->free(f->executor);
    f->executor = NULL;
    f->external = NULL;
  }
}

void kiln_external_input_changed(KilnModule* mod, const void* data) {
  for (int i = 0; mod && i < mod->num_functions; i++) {
    KilnFunction* f = &mod->functions[i];
    if (f->external && f->executor && f->external->input_changed) f->external->input_changed(f->executor, data);
  }
}
