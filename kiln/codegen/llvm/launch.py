"""Kernel launches in GPU host functions: ``tir.kiln_launch`` as a call of ``__kiln_device_launch``.

``tir.kiln_launch(kernel_id, gx, gy, gz, bx, by, bz, dyn_shared_bytes, *args)`` (made by
split_host_device) becomes, per docs/abi.md "GPU modules"::

    int32_t rc = __kiln_device_launch(__kiln_device_ctx, kernel_id, values, type_codes, n, launch, dyn);

with buffer arguments as KILN_HANDLE (3, the DLTensor's data: the device buffer handle),
integers as KILN_INT (0) and floats as KILN_FLOAT (2). An empty grid (some extent <= 0, e.g.
n = 0) launches nothing. A NULL hook means nobody loaded the device code: the function fails
with a message saying so. A non-zero rc is returned as is.

Device workspace (tensors between kernels) goes through the same hook with kernel ids -1
(allocate: args nbytes, address of a handle slot to fill, a buffer on the wanted device) and
-2 (free: args the handle).
"""

from __future__ import annotations

from ...ir.dtype import DType, INT64

_F64 = DType("float", 64)
NOT_LOADED = ("device code not loaded: load the module with tvm.runtime.load_module (or build it) "
              "before calling")


def launch_globals() -> list[str]:
    """The two hook globals the device-module loader writes after dlopen."""
    return ["@__kiln_device_launch = protected global ptr null, align 8",
            "@__kiln_device_ctx = protected global ptr null, align 8"]


ALLOC_ID, FREE_ID = -1, -2  # hook "kernel ids" of the workspace requests
ALLOC_TEXTURE_ID = -3  # an image for a texture-scoped tensor (docs/adreno.md)


def _call_hook(cg, kid: int, args: list, codes: list, extents=None) -> None:
    """Call the hook with (pre-converted) i64/ptr args; return rc from the function on failure."""
    fw = cg.fw
    n = len(args)
    values = fw.alloca("i64", max(n, 1), 8)
    code_arr = fw.alloca("i32", max(n, 1), 4)
    for k, (ty, v) in enumerate(args):
        slot = fw.emit(f"getelementptr inbounds i64, ptr {values}, i64 {k}", "p")
        fw.emit_void(f"store {ty} {v}, ptr {slot}, align 8")
        cp = fw.emit(f"getelementptr inbounds i32, ptr {code_arr}, i64 {k}", "p")
        fw.emit_void(f"store i32 {codes[k]}, ptr {cp}, align 4")
    launch = fw.alloca("i64", 6, 8)
    for k in range(6):
        slot = fw.emit(f"getelementptr inbounds i64, ptr {launch}, i64 {k}", "p")
        fw.emit_void(f"store i64 0, ptr {slot}, align 8")
    hook = fw.emit("load ptr, ptr @__kiln_device_launch, align 8")
    missing = fw.emit(f"icmp eq ptr {hook}, null")
    cg.fail_if(missing, NOT_LOADED)
    ctx = fw.emit("load ptr, ptr @__kiln_device_ctx, align 8")
    rc = fw.emit(f"call i32 {hook}(ptr {ctx}, i32 {kid}, ptr {values}, ptr {code_arr}, i32 {n}, ptr {launch}, i64 0)")
    failed = fw.emit(f"icmp ne i32 {rc}, 0")
    bad, ok = fw.label("hook.fail"), fw.label("hook.ok")
    fw.cond_br(failed, bad, ok)
    fw.start_block(bad)
    fw.ret(rc)
    fw.start_block(ok)


def emit_alloc(cg, e) -> str:
    """Device workspace: hook(kernel_id=-1, [nbytes, &handle, like]) stores the new buffer's handle."""
    fw = cg.fw
    nbytes = cg.cast(cg.expr(e.args[0]), e.args[0].dtype, INT64)
    like = e.args[1]
    like_v = cg.expr(like) if like.dtype.is_handle else "null"
    out = fw.alloca("ptr", 1, 8)
    fw.emit_void(f"store ptr null, ptr {out}, align 8")
    _call_hook(cg, ALLOC_ID, [("i64", nbytes), ("ptr", out), ("ptr", like_v)], [0, 3, 3])
    return fw.emit(f"load ptr, ptr {out}, align 8")


def emit_alloc_texture(cg, e) -> str:
    """Texture workspace: hook(kernel_id=-3, [width, height, element bits, &handle, like]) makes an
    RGBA image of width x height texels (CL_FLOAT for 32 bits, CL_HALF_FLOAT for 16)."""
    fw = cg.fw
    dims = [cg.cast(cg.expr(a), a.dtype, INT64) for a in e.args[:3]]
    like = e.args[3]
    like_v = cg.expr(like) if like.dtype.is_handle else "null"
    out = fw.alloca("ptr", 1, 8)
    fw.emit_void(f"store ptr null, ptr {out}, align 8")
    _call_hook(cg, ALLOC_TEXTURE_ID, [("i64", d) for d in dims] + [("ptr", out), ("ptr", like_v)], [0, 0, 0, 3, 3])
    return fw.emit(f"load ptr, ptr {out}, align 8")


def emit_free(cg, e) -> str:
    _call_hook(cg, FREE_ID, [("ptr", cg.expr(e.args[0]))], [3])
    return "0"


def emit_launch(cg, e) -> str:
    fw = cg.fw
    kid = e.args[0].value
    extents = e.args[1:7]
    dyn = e.args[7]
    args = e.args[8:]
    n = len(args)
    values = fw.alloca("i64", max(n, 1), 8)
    codes = fw.alloca("i32", max(n, 1), 4)
    launch = fw.alloca("i64", 6, 8)
    for k, a in enumerate(args):
        slot = fw.emit(f"getelementptr inbounds i64, ptr {values}, i64 {k}", "p")
        v = cg.expr(a)
        if a.dtype.is_handle:
            fw.emit_void(f"store ptr {v}, ptr {slot}, align 8")
            code = 3
        elif a.dtype.is_float:
            fw.emit_void(f"store double {cg.cast(v, a.dtype, _F64)}, ptr {slot}, align 8")
            code = 2
        else:
            fw.emit_void(f"store i64 {cg.cast(v, a.dtype, INT64)}, ptr {slot}, align 8")
            code = 0
        cp = fw.emit(f"getelementptr inbounds i32, ptr {codes}, i64 {k}", "p")
        fw.emit_void(f"store i32 {code}, ptr {cp}, align 4")
    empty = None
    for k, x in enumerate(extents):
        v = cg.cast(cg.expr(x), x.dtype, INT64)
        slot = fw.emit(f"getelementptr inbounds i64, ptr {launch}, i64 {k}", "p")
        fw.emit_void(f"store i64 {v}, ptr {slot}, align 8")
        bad = fw.emit(f"icmp sle i64 {v}, 0")
        empty = bad if empty is None else fw.emit(f"or i1 {empty}, {bad}")
    go, done = fw.label("launch"), fw.label("launched")
    fw.cond_br(empty, done, go)
    fw.start_block(go)
    hook = fw.emit("load ptr, ptr @__kiln_device_launch, align 8")
    missing = fw.emit(f"icmp eq ptr {hook}, null")
    cg.fail_if(missing, NOT_LOADED)
    ctx = fw.emit("load ptr, ptr @__kiln_device_ctx, align 8")
    dyn_v = cg.cast(cg.expr(dyn), dyn.dtype, INT64)
    rc = fw.emit(f"call i32 {hook}(ptr {ctx}, i32 {kid}, ptr {values}, ptr {codes}, i32 {n}, ptr {launch}, i64 {dyn_v})")
    failed = fw.emit(f"icmp ne i32 {rc}, 0")
    bad, ok = fw.label("launch.fail"), fw.label("launch.ok")
    fw.cond_br(failed, bad, ok)
    fw.start_block(bad)
    fw.ret(rc)
    fw.start_block(ok)
    fw.br(done)
    fw.start_block(done)
    return "0"
