"""The wmma calls of a kernel done with ``ldmatrix`` and ``mma.sync.m16n8k16`` instead (sm_80+).

Chosen per kernel by the pragma ``kiln_mma_sync`` on one of its loops (the tensor-core schedule's
knob ``mma``), and only where every fragment is a 16 x 16 x 16 tile of float16 inputs, A is loaded
row-major and B column-major from shared memory, and accumulators are filled, multiplied and
stored but never loaded. The fragments keep their structs (cuda_wmma.py), in the register order
``mma.sync`` defines, which is what a store then writes out lane by lane:

- A (16 x 16): ``ldmatrix.x4`` of its four 8 x 8 quarters, a0..a3 (lane l gives row l % 16,
  column 8 * (l / 16));
- B (16 x 16, n rows of 16 contiguous k): ``ldmatrix.x4``, b0 b1 for columns 0-7 of n, then
  for 8-15 (lane l gives n row l % 8 + 8 * (l / 16), k column 8 * ((l / 8) % 2));
- the accumulator: two m16n8 halves, each c0 c1 at (row g, columns 2t, 2t+1) and c2 c3 at row
  g + 8, for lane = 4 g + t (float16: one f16x2 register per row).
"""

from __future__ import annotations

from ..ir import expr as E
from ..ir.functor import post_order_visit

PRAGMA = "pragma_kiln_mma_sync"

LANE = """__device__ __forceinline__ int kiln_lane() { int l; asm("mov.u32 %0, %%laneid;" : "=r"(l)); return l; }
"""


def wanted(kernel) -> bool:
    found = []
    post_order_visit(kernel.body, lambda n: found.append(n) if getattr(n, "annotations", None)
                     and n.annotations.get(PRAGMA) else None)
    return bool(found)


def usable(kernel, frags: dict, shared: set) -> bool:
    """Whether every wmma call of the kernel has an mma.sync form (module doc)."""
    if not frags or any(f.shape != (16, 16, 16) or f.buf.dtype.is_bfloat for f in frags.values()):
        return False  # (bfloat16 keeps wmma)
    ok = [True]

    def visit(n):
        if not isinstance(n, E.Call):
            return
        name = n.op[4:] if n.op.startswith("tir.") else n.op
        if name == "tvm_load_matrix_sync":
            f = frags.get(id(n.args[0]))
            ptr = n.args[5]
            from_shared = isinstance(ptr, E.Call) and ptr.op == "tir.tvm_access_ptr" and id(ptr.args[1]) in shared
            want = {"wmma.matrix_a": "row_major", "wmma.matrix_b": "col_major"}.get(f.scope if f else "")
            if not (from_shared and isinstance(n.args[7], E.StringImm) and n.args[7].value == want):
                ok[0] = False
        elif name == "tvm_store_matrix_sync" and not (isinstance(n.args[7], E.StringImm)
                                                       and n.args[7].value == "row_major"):
            ok[0] = False

    post_order_visit(kernel.body, visit)
    return ok[0]


def load(scope: str) -> tuple[str, str]:
    which, addr = (("a", "p + (l % 16) * ld + (l / 16) * 8") if scope == "wmma.matrix_a"
                   else ("b", "p + ((l % 8) + (l / 16) * 8) * ld + ((l / 8) % 2) * 8"))
    name = f"kiln_mma_load_{which}"
    text = (f"__device__ __forceinline__ void {name}(kiln_frag_ab& f, const half* p, int ld) {{\n"
            f"  int l = kiln_lane();\n"
            f'  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {{%0,%1,%2,%3}}, [%4];"\n'
            f'      : "=r"(f.x[0]), "=r"(f.x[1]), "=r"(f.x[2]), "=r"(f.x[3])\n'
            f'      : "r"((unsigned)__cvta_generic_to_shared({addr})) : "memory");\n}}\n')
    return name, text


def mma(d_bits: int, c_bits: int) -> tuple[str, str]:
    if d_bits != c_bits:
        raise ValueError("mma.sync path: accumulators of one product have one dtype")
    f32 = d_bits == 32
    name = f"kiln_mma_16x16x16_{'f32' if f32 else 'f16'}"
    struct = "kiln_frag_f32" if f32 else "kiln_frag_f16"
    kind, n = ("f", 4) if f32 else ("r", 2)
    t = "f32" if f32 else "f16"
    halves = []
    for j in range(2):
        d = ", ".join(f'"={kind}"(d.x[{n * j + i}])' for i in range(n))
        c = ", ".join(f'"{kind}"(c.x[{n * j + i}])' for i in range(n))
        regs_d = ",".join(f"%{i}" for i in range(n))
        regs_c = ",".join(f"%{n + 6 + i}" for i in range(n))
        halves.append(
            f'  asm volatile("mma.sync.aligned.m16n8k16.row.col.{t}.f16.f16.{t} {{{regs_d}}}, '
            f'{{%{n},%{n + 1},%{n + 2},%{n + 3}}}, {{%{n + 4},%{n + 5}}}, {{{regs_c}}};"\n'
            f'      : {d} : "r"(a.x[0]), "r"(a.x[1]), "r"(a.x[2]), "r"(a.x[3]), "r"(b.x[{2 * j}]), '
            f'"r"(b.x[{2 * j + 1}]), {c});\n')
    text = (f"__device__ __forceinline__ void {name}({struct}& d, const kiln_frag_ab& a, const kiln_frag_ab& b, "
            f"const {struct}& c) {{\n" + "".join(halves) + "}\n")
    return name, text


def float_rows(pieces: int, ctype: str) -> str:
    """C lines storing one warp's 16-row slab of float accumulators in the m16n8 layout: ``pieces``
    8-column blocks, block j's f.x[4j], f.x[4j+1] at row g, columns 8j + 2t, + 1 and f.x[4j+2],
    f.x[4j+3] at row g + 8 (lane 4g + t), as ``ctype`` at ``p`` (rows ``ld`` apart, ld even). The
    mma.sync accumulator and each warp's part of a wgmma accumulator (cuda_wgmma.py) are so laid out."""
    pair = {"float": "*((float2*)({at})) = make_float2({a}, {b});",
            "half": "*((half2*)({at})) = half2{{half({a}), half({b})}};"}.get(ctype)
    lines = []
    for row, k in (("g", 0), ("(g + 8)", 2)):
        at = f"p + {row} * ld + j * 8 + 2 * t"
        a, b = f"f.x[4 * j + {k}]", f"f.x[4 * j + {k + 1}]"
        if pair:
            lines.append("    " + pair.format(at=at, a=a, b=b))
        else:
            lines.append(f"    ({at})[0] = ({ctype}){a}; ({at})[1] = ({ctype}){b};")
    return f"#pragma unroll\n  for (int j = 0; j < {pieces}; ++j) {{\n" + "\n".join(lines) + "\n  }\n"


def store(bits: int) -> tuple[str, str]:
    if bits == 32:
        name = "kiln_mma_store_f32"
        body = float_rows(2, "float")
        sig = "float* p, const kiln_frag_f32& f, int ld"
    else:
        name = "kiln_mma_store_f16"
        body = ("  for (int j = 0; j < 2; ++j) {\n"
                "    *((unsigned*)(p + g * ld + j * 8 + 2 * t)) = f.x[2 * j];\n"
                "    *((unsigned*)(p + (g + 8) * ld + j * 8 + 2 * t)) = f.x[2 * j + 1];\n"
                "  }\n")
        sig = "half* p, const kiln_frag_f16& f, int ld"
    text = (f"__device__ __forceinline__ void {name}({sig}) {{\n"
            "  int l = kiln_lane(), g = l / 4, t = l % 4;\n" + body + "}\n")
    return name, text
