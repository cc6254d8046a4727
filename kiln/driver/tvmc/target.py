"""tvmc's target strings: ``"llvm"``, ``"opencl, llvm"``, ``"opencl -device=adreno, llvm"``, plus
the ``--target-<kind>-<option>`` flags that add options to one kind of the list.

A comma separates targets only where the next piece starts with a kind name, so
``"llvm -mattr=+neon,+dotprod"`` stays one target. The CPU target of a list becomes the host of
the GPU one; without a GPU kind, the CPU target is the target.
"""

from __future__ import annotations

from kiln.errors import TargetError

from .common import TVMCException

CPU_KINDS = ("llvm", "c")
GPU_KINDS = ("opencl", "cuda")
# Options tvmc offers as --target-<kind>-<option>: kind -> option names.
TARGET_OPTIONS = {"llvm": ("mtriple", "mcpu", "mattr", "mabi"), "opencl": ("device", "model"), "cuda": ("arch",)}
# BYOC names TVM users write in the list (002: "opencl, clml, llvm"). PARTITIONED ones are offloaded
# with relay.op.contrib.<name>.partition_for_<name> (docs/byoc.md); the others are not implemented.
BYOC = ("clml", "dnnl", "cublas", "cudnn", "ethos-n", "cmsis-nn")
PARTITIONED = ("dnnl", "clml", "cublas", "cudnn")
NEEDS_CUDA = ("cublas", "cudnn")  # NVIDIA libraries: their subgraphs run on the CUDA target's device


def byoc_from_cli(text) -> list[str]:
    """The offload names of a target string, in order: ``"dnnl, llvm"`` -> ``["dnnl"]`` (none for a Target)."""
    if not isinstance(text, str):
        return []
    return [p.split(" ", 1)[0] for p in split_targets(text) if p.split(" ", 1)[0] in PARTITIONED]


def _as_text(target, what: str) -> str | None:
    """A target string for ``target``: a string as it is; a ``Target`` as the string that parses back
    to it, a GPU target's host as the CPU target of the list (``"opencl -device=adreno, llvm ..."``)."""
    from kiln.target import Target

    if target is None or isinstance(target, str):
        return target
    if isinstance(target, Target):
        if target.host is not None and target.kind.name in GPU_KINDS:
            return f"{target}, {target.host}"
        return str(target)
    raise TVMCException(f"{what} must be a target string or a kiln.target.Target, not {type(target).__name__} "
                        f"{target!r}; e.g. \"llvm\" or tvm.target.Target(\"llvm -mcpu=skylake\")")


def split_targets(text: str) -> list[str]:
    """``"opencl -device=adreno, llvm -mattr=+a,+b"`` -> ``["opencl -device=adreno", "llvm -mattr=+a,+b"]``."""
    pieces: list[str] = []
    for raw in (text or "").split(","):
        piece = raw.strip()
        head = piece.split(" ", 1)[0]
        if pieces and head not in CPU_KINDS + GPU_KINDS + BYOC:
            pieces[-1] += "," + raw  # a comma inside an option value
        else:
            pieces.append(piece)
    return [p.strip() for p in pieces if p.strip()]


def _with_options(text: str, kind: str, options: dict) -> str:
    extra = [f"-{name}={value}" for name, value in options.items()
             if value not in (None, "") and f"-{name}=" not in text]
    return " ".join([text, *extra])


def target_from_cli(text, target_host=None, options: dict | None = None):
    """The kiln Target for a tvmc target string (or a ``Target``; ``target_host`` too). ``options``:
    ``{kind: {option: value}}`` from the ``--target-<kind>-<option>`` flags
    (``{"llvm": {"mtriple": "aarch64-linux-gnu"}}``)."""
    from kiln.target import Target

    text, target_host = _as_text(text, "target"), _as_text(target_host, "target_host")
    if not text or not text.strip():
        raise TVMCException("--target is empty; pass e.g. --target llvm or --target \"opencl, llvm\"")
    options = options or {}
    unknown = set(options) - set(TARGET_OPTIONS)
    if unknown:
        raise TVMCException(f"target options for {sorted(unknown)}: tvmc knows --target-<kind>-<option> for "
                            f"{', '.join(TARGET_OPTIONS)}")
    cpu, gpu = None, None
    kinds = [piece.split(" ", 1)[0] for piece in split_targets(text)]
    for lib in NEEDS_CUDA:
        if lib in kinds and "cuda" not in kinds:
            raise TVMCException(f"target {lib!r} offloads to an NVIDIA library that runs on the CUDA device; add "
                                f"cuda to the list, e.g. --target \"{lib}, cuda, llvm\"")
    for piece in split_targets(text):
        kind = piece.split(" ", 1)[0]
        if kind in PARTITIONED:
            continue  # offloaded by compile_model before relay.build (byoc_from_cli)
        if kind in BYOC:
            raise TVMCException(f"target {kind!r} (a vendor library offload) is not supported yet; drop it "
                                f"from --target, e.g. --target \"{text.replace(kind + ',', '').strip()}\"")
        piece = _with_options(piece, kind, options.get(kind, {}))
        try:
            parsed = Target(piece)
        except TargetError as err:
            raise TVMCException(f"--target {text!r} does not parse: {err}") from None
        slot = "cpu" if parsed.kind.name in CPU_KINDS else "gpu"
        if (cpu if slot == "cpu" else gpu) is not None:
            raise TVMCException(f"--target {text!r} names two {slot.upper()} targets; give one GPU target "
                                "and at most one CPU target, e.g. \"opencl, llvm\"")
        cpu, gpu = (parsed, gpu) if slot == "cpu" else (cpu, parsed)
    if target_host:
        try:
            host = Target(_with_options(target_host, "llvm", options.get("llvm", {})))
        except TargetError as err:
            raise TVMCException(f"--target-host {target_host!r} does not parse: {err}") from None
        if gpu is None:
            return cpu  # a CPU target is its own host
        return Target(gpu, host=host)
    if gpu is None:
        if cpu is None:
            raise TVMCException(f"--target {text!r} names no target; pass e.g. --target llvm")
        return cpu
    host = cpu or Target(_with_options("llvm", "llvm", options.get("llvm", {})))
    return Target(gpu, host=host)


def options_from_args(args) -> dict:
    """``{kind: {option: value}}`` from an argparse namespace's ``target_<kind>_<option>`` fields."""
    out: dict = {}
    for kind, names in TARGET_OPTIONS.items():
        for name in names:
            value = getattr(args, f"target_{kind}_{name}", None)
            if value:
                out.setdefault(kind, {})[name] = value
    return out


def add_target_arguments(parser) -> None:
    parser.add_argument("--target", required=True,
                        help='compilation target: "llvm", "llvm -mtriple=aarch64-linux-gnu", "opencl, llvm", '
                             '"opencl -device=adreno, llvm" (the CPU target is the GPU target\'s host)')
    for kind, names in TARGET_OPTIONS.items():
        for name in names:
            parser.add_argument(f"--target-{kind}-{name}", metavar=name.upper(),
                                help=f"add -{name}=VALUE to the {kind} target (e.g. --target-llvm-mtriple "
                                     "aarch64-linux-gnu)" if (kind, name) == ("llvm", "mtriple") else
                                f"add -{name}=VALUE to the {kind} target")
