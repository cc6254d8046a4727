"""VTA-class accelerator: static schedule search vs exhaustive cycle-model search, per-layer GEMM
utilization and whole-model cycles of ResNet-18's convs, and a hardware design-space sweep.

    .venv/bin/python bench/vta.py search [--layers N] [--max-points P]
    .venv/bin/python bench/vta.py search --full-size [--only K] [--skip-single-pixel]
    .venv/bin/python bench/vta.py search --whole-rows
    .venv/bin/python bench/vta.py resnet [--size 224] [--layers N]
    .venv/bin/python bench/vta.py sweep [--budget-kib 512]
    .venv/bin/python bench/vta.py graph [--size 224] [--mode cycle]

search: for each layer, every valid tile of the space in kiln/vta/search.py (output-row,
column, channel-block and input-channel-block divisors x 1 or 2 virtual threads, SRAM-pruned)
is built and run on the cycle model (the exhaustive baseline) and scored by the cost model; it
prints the space size, Spearman rank correlation, the model pick's cycles against the best
found, and the two search times (wall clock, on a machine shared with other jobs: noisy).
By default the layers are ResNet-18's channel shapes at reduced spatial sizes (minutes);
--full-size runs three full-size ResNet-18 layers over their whole spaces (160-197 tiles, 8-29
minutes each here), --whole-rows the 28x28 layer over its whole-row tiles (104 of 890).
resnet: every conv of ResNet-18 except the 3-channel stem, at the cost model's pick, on the
cycle model, bit-exact against numpy; GEMM utilization per layer, total cycles, and the
published VTA figures beside them (a different, FPGA setup; sources in PUBLISHED).
graph: relay.testing's ResNet-18 quantized by relay.quantize(weight_scale="power2"), realized to
shift requantization, packed (19 convs on the accelerator, stem and the rest on the CPU) and
compared with the CPU int8 build of the same graph, element for element.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from kiln import vta  # noqa: E402
from kiln.vta import search, top  # noqa: E402

# (C, H, O, k, stride, pad) of ResNet-18's convs after the stem, for a 224x224 input
RESNET18 = [(64, 56, 64, 3, 1, 1)] * 4 + [(64, 56, 128, 3, 2, 1), (128, 28, 128, 3, 1, 1), (64, 56, 128, 1, 2, 0)] + \
    [(128, 28, 128, 3, 1, 1)] * 2 + [(128, 28, 256, 3, 2, 1), (256, 14, 256, 3, 1, 1), (128, 28, 256, 1, 2, 0)] + \
    [(256, 14, 256, 3, 1, 1)] * 2 + [(256, 14, 512, 3, 2, 1), (512, 7, 512, 3, 1, 1), (256, 14, 512, 1, 2, 0)] + \
    [(512, 7, 512, 3, 1, 1)] * 2
# Full-size ResNet-18 layers for the exhaustive baseline, over every valid tile of
# search.space: the two stride-2 convs into 512 channels (160 and 197 tiles) and the 512x7x7
# conv (175). With --skip-single-pixel the tiles of one output pixel are left out of both
# searches (117 and 142 tiles left): they are over a quarter of each space but about 77 % of its
# compile work (one instruction group per pixel and channel step). The 28x28 and 56x56 layers
# have 477-890 valid tiles each, too many for a session at one compile per tile.
FULL_SIZE_LAYERS = [top.ConvShape(1, 256, 14, 14, 512, 3, 3, 2, 1), top.ConvShape(1, 256, 14, 14, 512, 1, 1, 2, 0),
                    top.ConvShape(1, 512, 7, 7, 512, 3, 3, 1, 1)]
SEARCH_LAYERS = [top.ConvShape(1, 32, 8, 8, 32, 3, 3, 1, 1), top.ConvShape(1, 64, 8, 8, 64, 3, 3, 1, 1),
                 top.ConvShape(1, 64, 8, 8, 64, 1, 1, 2, 0), top.ConvShape(1, 128, 4, 4, 128, 3, 3, 1, 1)]


# Published VTA figures, for context only: the FPGA design on a Pynq board, not this simulator.
# Each is as read in the source named beside it.
PUBLISHED_CONFIG = {"LOG_BATCH": 0, "LOG_BLOCK_IN": 4, "LOG_BLOCK_OUT": 4, "LOG_INP_WIDTH": 3,
                    "LOG_WGT_WIDTH": 3, "LOG_ACC_WIDTH": 5, "LOG_UOP_BUFF_SIZE": 15, "LOG_INP_BUFF_SIZE": 15,
                    "LOG_WGT_BUFF_SIZE": 18, "LOG_ACC_BUFF_SIZE": 17}  # apache/tvm-vta config/vta_config.json
PUBLISHED_MHZ = 100  # Pynq target: fpga_freq = 100, xc7z020 FPGA, 64-bit AXI (apache/tvm-vta config/pkg_config.py)
PUBLISHED = [
    "default configuration: 1x16x16 int8 GEMM core, int32 accumulators; SRAMs uop 32 KiB, inp 32 KiB, "
    "wgt 256 KiB, acc 128 KiB (apache/tvm-vta config/vta_config.json, LOG_* = 0/4/15/15/18/17)",
    "pynq target (the default board): Zynq xc7z020 FPGA at 100 MHz, 64-bit AXI bus "
    "(apache/tvm-vta config/pkg_config.py)",
    "the GEMM core performs one input-weight matrix multiplication per cycle (TVM docs, "
    "docs/topic/vta/dev/hardware.rst): 1x16x16 = 256 MACs per cycle, 51.2 GOP/s at 100 MHz (our arithmetic)",
    "ResNet-18 on the board (roofline per conv layer, end-to-end time with and without VTA): published as "
    "charts only (tvm.apache.org/2018/07/12/vta-release-announcement.html); no figure read from them is quoted",
]


def conv_ops(shape) -> int:
    """Multiply-adds x 2 of one conv layer."""
    return 2 * shape.n * shape.o * shape.oh * shape.ow * shape.c * shape.kh * shape.kw


def print_published(env, total_cycles: int, ops: int, what: str = "conv work") -> None:
    print("published VTA figures, a different setup (the FPGA design on a Pynq board, not this cycle model), "
          "for context:")
    for line in PUBLISHED:
        print(f"  - {line}")
    ours = {k: getattr(env, k) for k in PUBLISHED_CONFIG}
    diff = {k: v for k, v in ours.items() if v != PUBLISHED_CONFIG[k]}
    print(f"  this configuration {'is the published default' if not diff else f'differs from it: {diff}'}; "
          f"DMA here: {env.DMA_BYTES_PER_CYCLE} B/cycle, {env.DMA_LATENCY} cycles latency (a model, not measured)")
    ms = total_cycles / PUBLISHED_MHZ / 1e3
    peak = env.BATCH * env.BLOCK_IN * env.BLOCK_OUT * 2 * PUBLISHED_MHZ / 1e3
    print(f"  at the published {PUBLISHED_MHZ} MHz: {total_cycles} cycles = {ms:.1f} ms for {ops / 1e9:.2f} GOP of "
          f"{what} = {ops / ms / 1e6:.1f} GOP/s ({100 * ops / ms / 1e6 / peak:.0f} % of the {peak:.1f} GOP/s peak)")


def run_layer(env, shape, tile, rng, check=True):
    tens = top.conv2d(env, shape, shift=8)
    s, args = top.schedule_conv2d(env, tens, tile)
    t0 = time.perf_counter()
    f = vta.build(s, args, env.target, name="conv", env=env, mode="cycle")
    build_s = time.perf_counter() - t0
    x = rng.integers(-128, 128, (shape.n, shape.c, shape.h, shape.w)).astype(np.int8)
    w = rng.integers(-8, 8, (shape.o, shape.c, shape.kh, shape.kw)).astype(np.int8)
    out = np.zeros(tuple(int(d.value) for d in args[2].shape), np.int8)
    f(top.pack_nchw(x, env.BATCH, env.BLOCK_IN), top.pack_oihw(w, env.BLOCK_OUT, env.BLOCK_IN), out)
    if check:
        ref = top.conv2d_reference(x, w, shape.stride, shape.pad, 8)
        assert np.array_equal(top.unpack_nchw(out), ref), f"{shape} {tile}: not bit-exact"
    return f["conv"].last_stats, build_s


def cmd_search(args):
    env = vta.get_env()
    rng = np.random.default_rng(0)
    rhos, gaps, speedups = [], [], []
    layers = SEARCH_LAYERS[:args.layers]
    if args.full_size:  # ResNet-18 layers at full size, every valid tile
        layers = FULL_SIZE_LAYERS if args.only is None else [FULL_SIZE_LAYERS[args.only]]
    if args.whole_rows:  # the 28x28 layer at full size, tiles of whole output rows only (w = 28)
        layers = [top.ConvShape(1, 128, 28, 28, 128, 3, 3, 1, 1)]
    for shape in layers:
        tiles = search.space(env, shape, max_points=args.max_points)
        full = len(tiles)
        if args.whole_rows:
            tiles = [t for t in tiles if t.w == shape.ow]
        elif args.skip_single_pixel:
            tiles = [t for t in tiles if t.h * t.w > 1]
        which = " (whole rows)" if args.whole_rows else " (more than one output pixel)" if args.skip_single_pixel \
            else ""
        print(f"{shape}: {full} valid tiles; model and exhaustive search over the same {len(tiles)}{which}", flush=True)
        t0 = time.perf_counter()
        costs = [search.cost(env, shape, t) for t in tiles]
        pick = tiles[int(np.argmin(costs))]
        model_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        cycles = []
        for k, t in enumerate(tiles):
            cycles.append(run_layer(env, shape, t, rng, check=False)[0]["cycles"])
            if args.progress and (k + 1) % args.progress == 0:
                print(f"  {k + 1}/{len(tiles)} tiles run, {time.perf_counter() - t0:.0f} s", flush=True)
        exhaustive_s = time.perf_counter() - t0
        if args.save:
            import json
            with open(args.save, "a") as out:
                out.write(json.dumps({"shape": list(shape.__dict__.values()), "env": env.export(),
                                      "tiles": [list(t.__dict__.values()) for t in tiles], "cycles": cycles}) + "\n")
        rho = search.spearman(costs, cycles)
        got, best = cycles[tiles.index(pick)], min(cycles)
        rhos.append(rho)
        gaps.append(got / best - 1)
        speedups.append(exhaustive_s / model_s)
        print(f"{shape}: {len(tiles)} valid tiles; spearman {rho:.3f}; pick {pick} {got} cycles vs best "
              f"{best} ({100 * (got / best - 1):.1f}% slower); search {model_s * 1e3:.2f} ms vs exhaustive "
              f"{exhaustive_s:.1f} s ({exhaustive_s / model_s:.0f}x)", flush=True)
    print(f"median spearman {np.median(rhos):.3f}; worst pick gap {100 * max(gaps):.1f}%; "
          f"min speedup {min(speedups):.0f}x")


def cmd_resnet(args):
    env = vta.get_env()
    rng = np.random.default_rng(0)
    scale = args.size / 224
    total = ops = 0
    for k, (c, h, o, ks, s, p) in enumerate(RESNET18[:args.layers]):
        hh = max(1, round(h * scale))
        shape = top.ConvShape(1, c, hh, hh, o, ks, ks, s, p)
        ops += conv_ops(shape)
        tile, est = search.best(env, shape)
        stats, build_s = run_layer(env, shape, tile, rng)
        util = stats.utilization()
        total += stats["cycles"]
        print(f"conv{k + 1:02d} {c}x{hh}x{hh} -> {o} k{ks} s{s}: tile {tile}; {stats['cycles']} cycles (model "
              f"{est:.0f}); GEMM utilization {100 * util['gemm']:.1f}%, DMA {100 * util['dma']:.1f}%; "
              f"build {build_s:.1f} s; bit-exact", flush=True)
    print(f"total {total} cycles = {total / env.CLOCK_MHZ / 1e3:.2f} ms at {env.CLOCK_MHZ} MHz "
          f"({len(RESNET18[:args.layers])} convs, stem and CPU ops excluded)")
    print_published(env, total, ops)


def cmd_sweep(args):
    env = vta.get_env()
    layers = [top.ConvShape(1, c, h, h, o, k, k, s, p) for c, h, o, k, s, p in sorted(set(RESNET18))]
    t0 = time.perf_counter()
    ranked = search.sweep(env, layers, args.budget_kib * 1024)
    print(f"{len(ranked)} valid configurations within {args.budget_kib} KiB of inp+wgt+acc SRAM "
          f"({time.perf_counter() - t0:.1f} s); best first (model cycles for ResNet-18's distinct conv shapes):")
    for cycles, cfg in ranked[:args.top]:
        print(f"  {cfg.model}: {cycles:.3e}")


def cmd_graph(args):
    """relay.testing ResNet-18 -> relay.quantize(power2) -> realize -> graph_pack; bit-exact vs the CPU build."""
    import kiln as tvm
    from kiln import relay
    from kiln.contrib import graph_executor
    from kiln.relay import transform as T
    from kiln.relay.testing import resnet
    from kiln.vta import graph

    mod, params = resnet.get_workload(num_layers=18, image_shape=(3, args.size, args.size))
    mod = T.BindParams(params)(mod)
    with tvm.transform.PassContext(opt_level=3):
        mod = T.Sequential([T.InferType(), T.SimplifyInference(), T.FoldConstant(), T.FoldScaleAxis(),
                            T.FoldConstant()])(mod)
    with relay.quantize.qconfig(weight_scale="power2", calibrate_mode="global_scale", global_scale=8.0):
        qmod = relay.quantize.quantize(mod)
    imod = graph.realize_power2(T.Sequential([T.InferType(), T.FakeQuantizationToInteger(), T.InferType()])(qmod))
    x = np.random.default_rng(0).standard_normal((1, 3, args.size, args.size)).astype(np.float32)
    t0 = time.perf_counter()
    with tvm.transform.PassContext(opt_level=3):
        lib = relay.build(imod, target="llvm")
    m = graph_executor.GraphModule(lib["default"](tvm.cpu(0)))
    m.set_input(data=x)
    m.run()
    want = m.get_output(0).numpy()
    print(f"CPU int8 build {time.perf_counter() - t0:.1f} s", flush=True)
    t0 = time.perf_counter()
    packed = graph.graph_pack(imod)
    print(f"graph_pack {time.perf_counter() - t0:.1f} s: {len(packed.chains)} convs/dense layers on the accelerator, "
          f"{len(packed.steps) - len(packed.chains)} CPU functions", flush=True)
    t0 = time.perf_counter()
    got = packed.set_mode(args.mode).run(data=x)[0]
    run_s = time.perf_counter() - t0
    exact = np.array_equal(got, want)
    print(f"output bit-exact with the CPU build: {exact}; one inference with the {args.mode} simulator "
          f"{run_s:.1f} s (TVM's Verilator simulator: 228 s per ResNet-18 run, as issue 38 cites)")
    total = 0
    for k, step in enumerate(packed.accelerator_steps):
        st = step.stats
        total += st["cycles"]
        if args.mode == "cycle":
            sh = step.chain.shape
            what = f"dense {sh.m}x{sh.k}->{sh.n}" if step.chain.kind == "dense" else \
                f"conv{k + 1:02d} {sh.c}->{sh.o} {sh.h}x{sh.w} k{sh.kh} s{sh.stride}"
            print(f"  {what}: {st['cycles']} cycles, GEMM utilization {100 * st.utilization()['gemm']:.1f}%")
    if args.mode == "cycle":
        env = vta.get_env()
        print(f"accelerator total {total} cycles = {total / env.CLOCK_MHZ / 1e3:.2f} ms at {env.CLOCK_MHZ} MHz")
        print_published(env, total, sum(conv_ops(step.chain.shape) if step.chain.kind == "conv2d" else
                                        2 * step.chain.shape.m * step.chain.shape.k * step.chain.shape.n
                                        for step in packed.accelerator_steps), what="work on the accelerator")
    if not exact:
        sys.exit(1)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("search")
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--max-points", type=int, default=None)
    p.add_argument("--full-size", action="store_true",
                   help="ResNet-18's full-size stride-2 convs into 512 channels, tiles of more than one pixel")
    p.add_argument("--only", type=int, default=None, help="with --full-size: only the K-th of its layers")
    p.add_argument("--skip-single-pixel", action="store_true", help="leave out tiles of one output pixel")
    p.add_argument("--whole-rows", action="store_true", help="ResNet-18's 128x28x28 3x3 conv, whole-row tiles")
    p.add_argument("--progress", type=int, default=0, help="print a line every N tiles of the exhaustive run")
    p.add_argument("--save", default="", help="append each layer's tiles and measured cycles to this JSON-lines file")
    p = sub.add_parser("resnet")
    p.add_argument("--size", type=int, default=224)
    p.add_argument("--layers", type=int, default=len(RESNET18))
    p = sub.add_parser("graph")
    p.add_argument("--size", type=int, default=224)
    p.add_argument("--mode", choices=("functional", "cycle"), default="cycle")
    p = sub.add_parser("sweep")
    p.add_argument("--budget-kib", type=int, default=512)
    p.add_argument("--top", type=int, default=8)
    args = parser.parse_args()
    {"search": cmd_search, "resnet": cmd_resnet, "sweep": cmd_sweep, "graph": cmd_graph}[args.cmd](args)


if __name__ == "__main__":
    main()
