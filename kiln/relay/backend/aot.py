"""The AOT executor: a model as one C function over a statically planned arena (docs/microtvm.md).

    int32_t tvmgen_default_run(struct tvmgen_default_inputs* inputs,
                               struct tvmgen_default_outputs* outputs);

The graph codegen's output is the plan: nodes in execution order, each kernel's arguments, and
a storage id per tensor (memory_plan.py already shares one id between tensors whose lifetimes do
not overlap). This module turns it into C: every storage id used by an intermediate tensor gets an
offset in one static arena (``workspace-byte-alignment`` apart), inputs and outputs are the
caller's buffers, and the constants are ``const`` arrays, which a microcontroller's linker puts in
flash. The kernels (C target, kiln/codegen/c.py) are called through their unpacked entries with
raw pointers: no DLTensor, no packed arguments, no allocation at run time.
"""

from __future__ import annotations

import json
import math
import re

import numpy as np

from kiln.errors import CompileError

_C_TYPES = {"float32": "float", "float64": "double", "int8": "int8_t", "int16": "int16_t", "int32": "int32_t",
            "int64": "int64_t", "uint8": "uint8_t", "uint16": "uint16_t", "uint32": "uint32_t",
            "uint64": "uint64_t", "bool": "uint8_t"}


def c_ident(name: str) -> str:
    out = re.sub(r"\W", "_", name)
    return "_" + out if not out or out[0].isdigit() else out


def _ctype(dtype: str) -> str:
    t = _C_TYPES.get(dtype)
    if t is None:
        raise CompileError(f"AOT executor: tensors of {dtype} have no C type here")
    return t


def _nbytes(shape, dtype: str) -> int:
    return int(np.prod(shape, dtype=np.int64)) * np.dtype("uint8" if dtype == "bool" else dtype).itemsize


def _literal(v, dtype: str) -> str:
    if dtype.startswith("float"):
        v = float(v)
        if math.isnan(v):
            return "NAN"
        if math.isinf(v):
            return "-INFINITY" if v < 0 else "INFINITY"
        return v.hex() + ("f" if dtype == "float32" else "")
    return str(int(v)) + ("LL" if dtype in ("int64", "uint64") else "")


class AOTPlan:
    """The C of one model's run function, from graph JSON, params and the kernels' metadata."""

    def __init__(self, graph_json: str, params: dict, kernel_meta: dict, mod_name: str, align: int = 16,
                 const_align: int = 16, inplace: dict | None = None):
        self.inplace_candidates = dict(inplace or {})  # node id -> input position (GraphCodegen.inplace)
        self.g = json.loads(graph_json)
        self.params = params
        self.kernels = {f["name"]: f for f in kernel_meta["functions"]}
        self.prefix = f"tvmgen_{c_ident(mod_name)}"
        self.align = align
        self.const_align = const_align
        nodes = self.g["nodes"]
        self.row = [0]
        for n in nodes:
            self.row.append(self.row[-1] + int(n.get("attrs", {}).get("num_outputs", 1)) if n["op"] == "tvm_op" else self.row[-1] + 1)
        attrs = self.g["attrs"]
        self.shape = attrs["shape"][1]
        self.dtype = attrs["dltype"][1]
        self.sid = attrs["storage_id"][1]
        self.inputs = [(nodes[i]["name"], self.row[i]) for i in self.g["arg_nodes"] if nodes[i]["name"] not in params]
        self.consts = [(nodes[i]["name"], self.row[i]) for i in self.g["arg_nodes"] if nodes[i]["name"] in params]
        heads = self.g["heads"]
        self.outputs = [("output" if len(heads) == 1 else f"output{k}", self.row[h[0]] + h[1]) for k, h in enumerate(heads)]
        self._plan_arena()

    def _plan_arena(self) -> None:
        """Offsets of the intermediate tensors in one static arena (aot_memory_plan.py)."""
        from .aot_memory_plan import Live, lifetimes, merge_inplace, peak_live_bytes, plan_offsets

        io = {e for _, e in self.inputs} | {e for _, e in self.outputs} | {e for _, e in self.consts}
        live = lifetimes(self.g, self.row, io, lambda e: _nbytes(self.shape[e], self.dtype[e]))
        nodes = self.g["nodes"]
        pairs = [(self.row[nodes[nid]["inputs"][pos][0]] + nodes[nid]["inputs"][pos][1], self.row[nid], nid)
                 for nid, pos in sorted(self.inplace_candidates.items())]
        self.inplace = merge_inplace(live, pairs)  # entry -> the entry whose bytes it writes over
        groups: dict = {}
        for e in sorted(live):
            groups.setdefault(self.inplace.get(e, e), []).append(e)
        keys = sorted(groups)
        merged = [Live(min(live[e].first for e in groups[k]), max(live[e].last for e in groups[k]),
                       max(live[e].size for e in groups[k])) for k in keys]
        offsets, self.workspace_size = plan_offsets(merged, self.align)
        self.offset = {e: off for k, off in zip(keys, offsets) for e in groups[k]}  # entry id -> arena offset
        self.lifetimes = live
        # the plan's lower bound: tensors sharing bytes in place count once
        self.peak_live_bytes = peak_live_bytes(merged)
        self.constant_size = sum(_nbytes(self.shape[e], self.dtype[e]) for _, e in self.consts)
        self.io_role = {e: f"inputs->{c_ident(n)}" for n, e in self.inputs}
        self.io_role.update({e: f"outputs->{n}" for n, e in self.outputs})
        self.io_role.update({e: f"(void*){self.prefix}_const_{c_ident(n)}" for n, e in self.consts})

    def ptr(self, eid: int) -> str:
        if eid in self.io_role:
            return self.io_role[eid]
        return f"({self.prefix}_workspace + {self.offset[eid]})"

    # -- the C ----------------------------------------------------------------------------------
    def header(self) -> str:
        guard = f"{self.prefix.upper()}_H_"
        ins = "\n".join(f"  void* {c_ident(n)};  /* {self.dtype[e]} {list(self.shape[e])} */" for n, e in self.inputs)
        outs = "\n".join(f"  void* {n};  /* {self.dtype[e]} {list(self.shape[e])} */" for n, e in self.outputs)
        sizes = "\n".join(f"#define {self.prefix.upper()}_{c_ident(n).upper()}_SIZE {_nbytes(self.shape[e], self.dtype[e])}"
                          for n, e in self.inputs + self.outputs)
        return f"""/* generated by kiln: the AOT interface of model {self.prefix} */
#ifndef {guard}
#define {guard}
#include <stdint.h>
#ifdef __cplusplus
extern "C" {{
#endif

struct {self.prefix}_inputs {{
{ins}
}};

struct {self.prefix}_outputs {{
{outs}
}};

/* Bytes of the static arena the run function uses for intermediate tensors, and of the constants. */
#define {self.prefix.upper()}_WORKSPACE_SIZE {self.workspace_size}
#define {self.prefix.upper()}_CONSTANT_SIZE {self.constant_size}
{sizes}

/* Runs the model: 0 on success, else -1 (the message is in __kiln_last_error). */
int32_t {self.prefix}_run(struct {self.prefix}_inputs* inputs, struct {self.prefix}_outputs* outputs);

#ifdef __cplusplus
}}
#endif
#endif
"""

    def source(self) -> str:
        lines = [f"/* generated by kiln: AOT executor of {self.prefix} */",
                 "#include <stdint.h>", "#include <string.h>", "#include <math.h>",
                 f'#include "{self.prefix}.h"', ""]
        called = []
        for node in self.g["nodes"]:
            if node["op"] == "tvm_op" and node["attrs"]["func_name"] not in called:
                called.append(node["attrs"]["func_name"])
        for fn in called:
            meta = self.kernels.get(fn)
            if meta is None:
                raise CompileError(f"AOT executor: kernel {fn} is missing from the compiled library")
            if any(a["kind"] != "tensor" or any(not isinstance(d, int) for d in a["shape"]) for a in meta["args"]):
                raise CompileError(f"AOT executor: kernel {fn} has symbolic shapes or scalar arguments; "
                                   "AOT needs a model with static shapes")
            args = ", ".join(f"{_ctype(a['dtype'])}*" for a in meta["args"])
            lines.append(f"int32_t {fn}_unpacked({args});")
        lines.append("")
        if self.workspace_size:
            lines.append(f"static uint8_t {self.prefix}_workspace[{self.workspace_size}] "
                         f"__attribute__((aligned({self.align})));")
        for name, eid in self.consts:
            arr = np.asarray(self.params[name]).reshape(-1)
            dt = self.dtype[eid]
            body = ", ".join(_literal(v, dt) for v in arr.tolist())
            lines.append(f"static const {_ctype(dt)} {self.prefix}_const_{c_ident(name)}[{max(arr.size, 1)}] "
                         f"__attribute__((aligned({self.const_align}))) = {{{body}}};")
        lines += ["", f"int32_t {self.prefix}_run(struct {self.prefix}_inputs* inputs, struct {self.prefix}_outputs* outputs) {{",
                  "  (void)inputs; (void)outputs;"]
        nodes = self.g["nodes"]
        produced = set()
        for nid, node in enumerate(nodes):
            if node["op"] != "tvm_op":
                continue
            fn = node["attrs"]["func_name"]
            meta = self.kernels[fn]
            eids = [self.row[i] + k for i, k, *_ in node["inputs"]]
            eids += [self.row[nid] + k for k in range(int(node["attrs"].get("num_outputs", 1)))]
            produced.update(eids[len(node["inputs"]):])
            args = ", ".join(f"({_ctype(a['dtype'])}*){self.ptr(e)}" for a, e in zip(meta["args"], eids))
            lines.append(f"  if ({fn}_unpacked({args}) != 0) return -1;")
        for name, eid in self.outputs:  # an output that is an input or a constant: copy it
            if eid not in produced:
                src = next((n for n, e in self.inputs + self.consts if e == eid), None)
                src_ptr = f"inputs->{c_ident(src)}" if any(e == eid for _, e in self.inputs) else \
                    f"{self.prefix}_const_{c_ident(src)}"
                lines.append(f"  memcpy(outputs->{name}, {src_ptr}, {_nbytes(self.shape[eid], self.dtype[eid])});")
        lines += ["  return 0;", "}", ""]
        lines += self._packed_entry()
        return "\n".join(lines)

    def _packed_entry(self) -> list:
        """``<prefix>_run_packed(DLTensor inputs..., DLTensor outputs...)``: the run function in the
        packed ABI, so a host-driven session (the CRT's registry) can call the whole model."""
        p = self.prefix
        n = len(self.inputs) + len(self.outputs)
        out = [f"#ifdef KILN_ABI_TYPES_DEFINED  /* the kernels' file defines the packed ABI types */",
               f"int32_t {p}_run_packed(const KilnValue* args, const int32_t* type_codes, int32_t num_args) {{",
               "  (void)type_codes;",
               f"  if (num_args != {n}) return -1;",
               f"  struct {p}_inputs in;", f"  struct {p}_outputs out;"]
        for k, (name, _) in enumerate(self.inputs):
            out.append(f"  in.{c_ident(name)} = ((DLTensor*)args[{k}].v_handle)->data;")
        for k, (name, _) in enumerate(self.outputs):
            out.append(f"  out.{name} = ((DLTensor*)args[{len(self.inputs) + k}].v_handle)->data;")
        out += [f"  return {p}_run(&in, &out);", "}", "#endif", ""]
        return out

    def metadata(self) -> dict:
        def tensor(n, e):
            return {"name": n, "dtype": self.dtype[e], "shape": list(self.shape[e]),
                    "size_bytes": _nbytes(self.shape[e], self.dtype[e])}
        return {"prefix": self.prefix, "workspace_size_bytes": self.workspace_size,
                "workspace_alignment": self.align, "constant_size_bytes": self.constant_size,
                "inputs": [tensor(c_ident(n), e) for n, e in self.inputs],
                "outputs": [tensor(n, e) for n, e in self.outputs]}


class AOTExecutorFactoryModule:
    """What relay.build returns for ``Executor("aot")``: C sources, header, plan, params, graph."""

    def __init__(self, ir_mod, target, executor, runtime, graph_json: str, lib, params: dict, mod_name: str,
                 inplace: dict | None = None):
        if target.kind.name != "c":
            raise CompileError(f"relay.build: the AOT executor generates C; build with target 'c' "
                               f"(e.g. 'c -keys=arm_cpu -mcpu=cortex-m4'), not {target}")
        self.ir_mod = ir_mod
        self.target = target
        self.executor = executor
        self.runtime = runtime
        self.graph_json = graph_json
        self.lib = lib
        self.params = params
        self.libmod_name = mod_name
        self.plan = AOTPlan(graph_json, params, lib.metadata, mod_name, executor["workspace-byte-alignment"],
                            executor["constant-byte-alignment"], inplace)
        self.header_name = f"{self.plan.prefix}.h"
        self.sources = {f"{mod_name}_lib0.c": lib.get_source("c"), f"{mod_name}_lib1.c": self.plan.source()}
        self.headers = {self.header_name: self.plan.header()}
        self.workspace_size = self.plan.workspace_size

    def get_lib(self):
        return self.lib

    def get_params(self) -> dict:
        from kiln import nd
        return {k: nd.array(v) for k, v in self.params.items()}

    def get_graph_json(self) -> str:
        return self.graph_json

    def get_executor_config(self) -> dict:
        return self.plan.metadata()

    def get_source(self, name: str = "") -> str:
        if not name:
            return "\n".join(self.sources.values())
        return {**self.sources, **self.headers}[name]

    def __repr__(self) -> str:
        return f"AOTExecutorFactoryModule({self.plan.prefix}, workspace={self.workspace_size} bytes)"
