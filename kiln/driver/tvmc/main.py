"""The tvmc command line: ``python -m kiln.driver.tvmc {compile,tune,run} ...`` (also ``tvmc`` and
``kiln tvmc``). Each subcommand parses its flags and calls the Python API of the same name.

A problem with the input (missing file, unknown format, bad shape, bad target, a tracker that
does not answer) prints one line, ``tvmc: error: ...``, and exits with code 2; ``--verbose``
shows the traceback too.
"""

from __future__ import annotations

import argparse
import logging
import sys
import traceback

from .common import TVMCException, parse_host_port, parse_pass_config, parse_shape_string
from .target import add_target_arguments, options_from_args
from .transform import add_transform_arguments, transform_args


def _add_verbose(p) -> None:
    # also after the subcommand; SUPPRESS keeps the top-level count when it is not given here
    p.add_argument("-v", "--verbose", action="count", default=argparse.SUPPRESS,
                   help="more logging; tracebacks on errors")


def _add_model_arguments(p) -> None:
    _add_verbose(p)
    from .model import FRONTENDS
    kinds = ", ".join(f"{' '.join(fe.extensions)} ({fe.name})" for fe in FRONTENDS.values())
    p.add_argument("FILE", help=f"the model file: {kinds}")
    p.add_argument("--model-format", choices=["onnx", "keras", "tflite", "pytorch"],
                   help="the model's format, when its extension does not say")
    p.add_argument("--input-shapes", metavar="SHAPES",
                   help='input shapes, e.g. "data:[1,3,224,224]" (several separated by spaces)')


def _add_compile(sub) -> None:
    p = sub.add_parser("compile", help="compile a model into a package .tar (mod.so + mod.json + mod.params)",
                       description="Compile a model into one package .tar: mod.so (kernels), mod.json (graph), "
                                   "mod.params (weights).")
    _add_model_arguments(p)
    add_target_arguments(p)
    p.add_argument("-o", "--output", default="module.tar", help="the package to write (default module.tar)")
    p.add_argument("--target-host", help="CPU target of a GPU target's host code (default: the CPU target of --target)")
    p.add_argument("--cross-compiler", metavar="PATH",
                   help="link mod.so with this compiler (the device's gcc/clang); without it, other triples link "
                        "with ld.lld")
    p.add_argument("--cross-compiler-options", metavar="OPTIONS", help="extra options for --cross-compiler")
    p.add_argument("--tuning-records", metavar="LOG", help="use the best configs of this tuning log")
    p.add_argument("--opt-level", type=int, default=3, help="relay optimization level 0-3 (default 3)")
    p.add_argument("--pass-config", action="append", metavar="KEY=VALUE",
                   help="a PassContext config entry, e.g. relay.FuseOps.max_depth=10 (repeatable)")
    p.add_argument("--disabled-pass", action="append", metavar="PASS", help="a relay pass not to run (repeatable)")
    p.add_argument("--dump-code", metavar="FORMATS",
                   help="also write these sources next to the package, comma separated: relay, ll, asm, cl, json")
    p.add_argument("--quantize", metavar="CALIBRATION.npz",
                   help="int8 post-training quantization (relay.quantize, kl_divergence), calibrated on the .npz's "
                        "arrays named after the inputs (one batch, or n stacked); docs/quantization.md")
    add_transform_arguments(p)


def _add_tune(sub) -> None:
    p = sub.add_parser("tune", help="auto-tune a model's kernels on a device; writes a tuning log",
                       description="Tune the conv2d/dense/batch_matmul kernels of a model by measuring candidates "
                                   "on a device (an RPC fleet with --rpc-key, else this machine).")
    _add_model_arguments(p)
    add_target_arguments(p)
    p.add_argument("-o", "--output", required=True, help="the tuning log to write (records are appended)")
    p.add_argument("--target-host", help="CPU target of a GPU target's host code")
    p.add_argument("--rpc-key", help="the device key servers registered with the tracker under")
    p.add_argument("--rpc-tracker", metavar="HOST:PORT", help="the RPC tracker, e.g. 127.0.0.1:9190")
    p.add_argument("--trials", type=int, default=1000, help="configs to measure per task (default 1000)")
    p.add_argument("--early-stopping", type=int, default=None,
                   help="stop a task after this many trials without a better config (0: never)")
    p.add_argument("--repeat", type=int, default=3, help="timed repeats per candidate (default 3)")
    p.add_argument("--number", type=int, default=10, help="runs per repeat (default 10)")
    p.add_argument("--min-repeat-ms", type=float, default=0, help="grow --number until a repeat lasts this long")
    p.add_argument("--timeout", type=float, default=10, help="seconds a build or a measurement may take")
    p.add_argument("--parallel", type=int, default=4, help="candidates built at once (default 4)")
    p.add_argument("--tuner", default="xgb",
                   choices=["xgb", "xgb_knob", "xgb_itervar", "xgb_curve", "xgb_rank", "ga", "random", "gridsearch"],
                   help="search strategy (default xgb: a cost model trained on the measurements)")
    p.add_argument("--tuning-records", metavar="PRIOR", help="records of an earlier run: their configs are not "
                                                              "measured again")
    p.add_argument("--pick-in-model", action="store_true",
                   help="then time each task's default and 3 fastest configs inside the whole model, on this "
                        "machine, and write the fastest there to OUTPUT's stem + '.picked' (pass that to tvmc "
                        "compile --tuning-records); not with --rpc-key")
    add_transform_arguments(p)


def _add_run(sub) -> None:
    p = sub.add_parser("run", help="run a package locally or on an RPC device; time it",
                       description="Run a compiled package (tvmc compile -o PKG.tar) on this machine or on an RPC "
                                   "device, with inputs from a .npz or filled, and time it.")
    _add_verbose(p)
    p.add_argument("FILE", help="the package .tar")
    p.add_argument("--device", default="cpu", choices=["cpu", "cl", "cuda"], help="device to run on (default cpu)")
    p.add_argument("--rpc-key", help="run on a server of this key, handed out by --rpc-tracker")
    p.add_argument("--rpc-tracker", metavar="HOST:PORT", help="the RPC tracker, e.g. 127.0.0.1:9190")
    p.add_argument("--hostname", help="run on the RPC server at this address (with --port)")
    p.add_argument("--port", type=int, default=9090, help="the RPC server's port (default 9090)")
    p.add_argument("--inputs", metavar="IN.npz", help="input arrays, named after the model's inputs")
    p.add_argument("--fill-mode", default="random", choices=["zeros", "ones", "random"],
                   help="how to fill inputs --inputs does not give (default random)")
    p.add_argument("--outputs", metavar="OUT.npz", help="write the outputs here (output_0, output_1, ...)")
    p.add_argument("--print-time", action="store_true", help="print the execution time summary (ms)")
    p.add_argument("--print-top", type=int, metavar="N", help="print the N largest values of the first output")
    # TVM's tvmc runs the model once per repeat by default; 002 times with --print-time alone
    p.add_argument("--repeat", type=int, default=1, help="timed repeats (default 1, as TVM's tvmc)")
    p.add_argument("--number", type=int, default=1, help="runs per repeat (default 1, as TVM's tvmc)")
    p.add_argument("--end-to-end", action="store_true",
                   help="time input upload + run + output download, from here, instead of the run on the device")
    p.add_argument("--profile", action="store_true", help="print the time of every kernel")


def add_arguments(parser) -> None:
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more logging; tracebacks on errors")
    sub = parser.add_subparsers(dest="tvmc_command", metavar="{compile,tune,run}")
    _add_compile(sub)
    _add_tune(sub)
    _add_run(sub)


def _load(args):
    from .model import load
    shapes = parse_shape_string(args.input_shapes) if args.input_shapes else None
    return load(args.FILE, shape_dict=shapes, model_format=args.model_format)


def _compile(args) -> int:
    from .compiler import compile_model
    model = _load(args)
    package = compile_model(model, args.target, opt_level=args.opt_level, target_host=args.target_host,
                            tuning_records=args.tuning_records, package_path=args.output,
                            cross=args.cross_compiler, cross_options=args.cross_compiler_options,
                            dump_code=args.dump_code, pass_context_configs=parse_pass_config(args.pass_config),
                            disabled_pass=args.disabled_pass, target_options=options_from_args(args),
                            quantize=args.quantize, **transform_args(args))
    print(f"tvmc: wrote {package.package_path}")
    return 0


def _tune(args) -> int:
    from .autotuner import tune_model
    host, port = parse_host_port(args.rpc_tracker) if args.rpc_tracker else (None, 9190)
    if args.rpc_key and not args.rpc_tracker:
        raise TVMCException("--rpc-key needs --rpc-tracker HOST:PORT (the tracker that knows the key)")
    model = _load(args)
    log = tune_model(model, args.target, tuning_records=args.output, prior_records=args.tuning_records,
                     rpc_key=args.rpc_key, hostname=host, port=port, trials=args.trials,
                     early_stopping=args.early_stopping, repeat=args.repeat, number=args.number,
                     min_repeat_ms=args.min_repeat_ms, timeout=args.timeout, parallel=args.parallel,
                     tuner=args.tuner, target_host=args.target_host, target_options=options_from_args(args),
                     pick_in_model=args.pick_in_model, **transform_args(args))
    print(f"tvmc: tuning records in {log}")
    return 0


def _run(args) -> int:
    from .runner import run_module
    if args.rpc_key and args.hostname:
        raise TVMCException("give either --rpc-key with --rpc-tracker, or --hostname with --port, not both")
    if args.rpc_key and not args.rpc_tracker:
        raise TVMCException("--rpc-key needs --rpc-tracker HOST:PORT (the tracker that knows the key)")
    if args.rpc_tracker and not args.rpc_key:
        raise TVMCException("--rpc-tracker needs --rpc-key (the key of the device to run on)")
    host, port = (parse_host_port(args.rpc_tracker) if args.rpc_tracker else (args.hostname, args.port))
    result = run_module(args.FILE, device=args.device, hostname=host, port=port, rpc_key=args.rpc_key,
                        inputs=args.inputs, fill_mode=args.fill_mode, benchmark=args.print_time,
                        repeat=args.repeat, number=args.number, end_to_end=args.end_to_end, profile=args.profile)
    if args.outputs:
        result.save(args.outputs)
    if args.profile:
        print(result.format_profile())
    if args.print_top:
        print(result.format_top(args.print_top))
    if args.print_time:
        print(result.format_times())
    if not (args.outputs or args.print_top or args.print_time or args.profile):
        for name, value in result.outputs.items():
            print(f"{name}: shape {list(value.shape)} {value.dtype}\n{value}")
    return 0


COMMANDS = {"compile": _compile, "tune": _tune, "run": _run}


def run(args) -> int:
    """Run the parsed subcommand; user errors become one line and exit code 2."""
    from kiln.errors import KilnError

    if not getattr(args, "tvmc_command", None):
        print("tvmc: error: choose a subcommand: compile, tune or run (tvmc --help)", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.WARNING - 10 * min(args.verbose, 2), format="%(name)s: %(message)s")
    try:
        return COMMANDS[args.tvmc_command](args)
    except (TVMCException, KilnError, OSError, ValueError) as err:
        if args.verbose:
            traceback.print_exc()
        message = " ".join(str(err).split()) or type(err).__name__
        print(f"tvmc: error: {message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("tvmc: interrupted", file=sys.stderr)
        return 130
    except Exception as err:  # noqa: BLE001 -- the CLI edge: what a malformed input still raises is one line
        if args.verbose:
            traceback.print_exc()
        subject = f" {args.FILE}" if getattr(args, "FILE", None) else ""
        message = " ".join(str(err).split())[:300] or "no message"
        print(f"tvmc: error: {args.tvmc_command}{subject}: unexpected {type(err).__name__} ({message}); the input "
              "may be malformed -- -v shows the traceback (please report it if the input is valid)",
              file=sys.stderr)
        return 2


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="tvmc", description="Compile, tune and run models with kiln "
                                                              "(TVM's tvmc command line).")
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
