/* The session's object table: the ids a client holds for remote arrays, modules, functions.
 *
 * Ids grow from 1 and index a slot array directly. Loaded modules stay loaded until the
 * session ends even when the client frees their handle: functions fetched from a module
 * point into its library, and the worker process (with everything in it) ends with the
 * session anyway.
 */
#include <stdlib.h>

#include "../kiln_graph.h"
#include "rpc.h"

#define MAX_IDS (1u << 24)

uint64_t obj_store(ObjTable* t, int kind, void* ptr, int builtin) {
  if (t->next == 0) t->next = 1;
  if (t->next >= MAX_IDS) { kiln_error("this session created %u objects; open a new session", MAX_IDS); return 0; }
  if (t->next >= t->cap) {
    uint64_t cap = t->cap ? t->cap * 2 : 256;
    Obj* slots = realloc(t->slots, cap * sizeof(Obj));
    if (!slots) { kiln_error("out of memory"); return 0; }
    for (uint64_t i = t->cap; i < cap; i++) slots[i] = (Obj){0, NULL, 0};
    t->slots = slots;
    t->cap = cap;
  }
  uint64_t id = t->next++;
  t->slots[id] = (Obj){kind, ptr, builtin};
  return id;
}

static const char* kind_name(int kind) {
  return kind == OBJ_ARRAY ? "array" : kind == OBJ_MODULE ? "module" : "function";
}

Obj* obj_get(ObjTable* t, const KVal* v, int kind, const char* what) {
  uint64_t id = 0;
  if (v && (v->tag == T_ARRAY_REF || v->tag == T_MODULE_REF || v->tag == T_FUNC_REF)) id = v->id;
  else if (v && v->tag == T_INT && v->i > 0) id = (uint64_t)v->i;
  Obj* o = id && id < t->cap ? &t->slots[id] : NULL;
  int ok = o && o->kind && (o->kind == kind || (kind == OBJ_FUNC && o->kind == OBJ_BUILTIN));
  if (!ok) {
    kiln_error("%s #%llu does not exist in this session (freed, or from another session)",
               what ? what : kind_name(kind), (unsigned long long)id);
    return NULL;
  }
  return o;
}

void obj_free(ObjTable* t, uint64_t id) {
  if (id == 0 || id >= t->cap) return;
  Obj* o = &t->slots[id];
  if (o->kind == OBJ_ARRAY) kiln_ndarray_free(o->ptr);
  *o = (Obj){0, NULL, 0};
}

int obj_keep_module(ObjTable* t, KilnModule* m) {
  KilnModule** p = realloc(t->modules, (t->nmodules + 1) * sizeof(KilnModule*));
  if (!p) return kiln_error("out of memory");
  t->modules = p;
  t->modules[t->nmodules++] = m;
  return 0;
}

void obj_table_clear(ObjTable* t) {
  for (uint64_t i = 1; i < t->next && i < t->cap; i++) obj_free(t, i);
  for (size_t i = 0; i < t->ngraphs; i++) kiln_graph_free(t->graphs[i]); /* before the modules they call */
  for (size_t i = 0; i < t->nmodules; i++) kiln_module_free(t->modules[i]);
  free(t->graphs);
  free(t->slots);
  free(t->modules);
  *t = (ObjTable){0};
}
