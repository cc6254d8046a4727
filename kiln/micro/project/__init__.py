"""Project templates: a folder per board that turns a model into firmware (docs/microtvm.md).

    project = micro.generate_project(micro.get_microtvm_template_projects("crt"), lib, "build/kws")
    project.build(); project.flash()
    with micro.Session(project.transport()) as session:      # host-driven: the model served by the CRT
        m = micro.create_local_aot_executor(session)
        m.set_input("input", x); m.run(); m.get_output(0).numpy()

    project = micro.generate_project(micro.get_microtvm_template_projects("qemu-mps2-an385"), lib,
                                     "build/kws", {"inputs": {"input": x}})   # standalone firmware
    result = project.run()   # qemu-system-arm -M mps2-an385 -icount: outputs and board cycles

Which one ``generate_project`` makes for an AOT build: host-driven when ``project_type`` is
``"host_driven"`` (or ``host_driven`` is true), when the template is ``crt``/``host`` (a process has
no standalone main), or when the build's runtime is ``Runtime("crt", {"system-lib": True})``;
standalone otherwise (``project_type="aot_standalone_demo"`` asks for it).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tarfile
from dataclasses import dataclass

import numpy as np

from kiln.errors import KilnError


@dataclass(frozen=True)
class Board:
    """How one template's firmware is built and booted."""
    cpu: str | None          # -mcpu for arm-none-eabi-gcc and qemu's -cpu; None: a host process
    machine: str | None      # qemu-system-arm -M
    flags: tuple = ()        # float ABI and FPU
    base: str | None = None  # the template whose board sources this one reuses
    ld: str = "mps2_an385.ld"
    defines: tuple = ()      # board.c / crt_main.c settings (UART base, core clock)


BOARDS = {
    "host": Board(None, None),
    "qemu-mps2-an385": Board("cortex-m3", "mps2-an385"),
    "qemu-mps2-an386": Board("cortex-m4", "mps2-an386", ("-mfloat-abi=hard", "-mfpu=fpv4-sp-d16"),
                             base="qemu-mps2-an385"),
    "qemu-mps2-an500": Board("cortex-m7", "mps2-an500", ("-mfloat-abi=hard", "-mfpu=fpv5-d16"),
                             base="qemu-mps2-an385"),
    "qemu-mps3-an547": Board("cortex-m55", "mps3-an547", ("-mfloat-abi=hard",), base="qemu-mps2-an385",
                             ld="mps3_an547.ld",
                             defines=("-DKILN_UART0_BASE=0x49303000u", "-DKILN_UART0_IRQ=33", "-DKILN_CORE_HZ=32000000u")),
}
TEMPLATES = tuple(BOARDS)
# TVM's names for the same templates: "crt" is TVM 0.13's host-process template.
ALIASES = {"crt": "host", "mps2-an385": "qemu-mps2-an385", "mps2-an386": "qemu-mps2-an386",
           "mps2-an500": "qemu-mps2-an500", "mps3-an547": "qemu-mps3-an547"}
CRT_DIR = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", "..", "..", "src", "crt"))
_CRT_FILES = ("page_allocator.c", "framing.c", "rpc_server.c")
CONFIG_FUNC = "kiln_aot_executor_config"  # the firmware's copy of the AOT interface (create_local_aot_executor)


def get_microtvm_template_projects(name: str) -> str:
    """The folder of template ``name``: ``"crt"`` (alias ``"host"``), ``"qemu-mps2-an385"`` (Cortex-M3),
    ``"qemu-mps2-an386"`` (M4F), ``"qemu-mps2-an500"`` (M7), ``"qemu-mps3-an547"`` (M55)."""
    template = ALIASES.get(name, name)
    if template not in BOARDS:
        raise KilnError(f"no micro project template {name!r}; templates: crt, {', '.join(TEMPLATES)}")
    return os.path.join(os.path.dirname(__file__), template)


def get_standalone_crt_dir() -> str:
    """The C runtime's sources (src/crt: page allocator, framing, RPC server, crt.h)."""
    return CRT_DIR


def _template_of(template_dir) -> str:
    template = os.path.basename(os.path.normpath(os.fspath(template_dir)))
    template = ALIASES.get(template, template)
    if template not in BOARDS:
        raise KilnError(f"{template_dir} is not a kiln micro project template; use "
                        "micro.get_microtvm_template_projects(NAME)")
    return template


def _copy_template(template: str, project_dir: str) -> None:
    project_dir = os.fspath(project_dir)
    if os.path.exists(project_dir):
        shutil.rmtree(project_dir)
    here = os.path.dirname(__file__)
    base = BOARDS[template].base
    if base:
        shutil.copytree(os.path.join(here, base), project_dir)
        shutil.copytree(os.path.join(here, template), project_dir, dirs_exist_ok=True)
    else:
        shutil.copytree(os.path.join(here, template), project_dir)


def generate_project(template_dir, module, project_dir, options: dict | None = None):
    """Copy the template to ``project_dir`` with the model in it; returns the project.

    ``module``: what relay.build returned (AOT or graph executor, target ``c``), a C module
    (``tvm.build(..., target="c")``), or the path of an AOT build's Model Library Format tar.
    ``options``: ``project_type`` (``"host_driven"`` or ``"aot_standalone_demo"``; see the module
    docstring for the default), ``inputs`` ({name: array}, baked into standalone firmware; zeros
    when missing), ``cflags`` (extra compiler flags), ``icount_shift`` (qemu -icount shift, default 0), ``profile`` (time each kernel call: run() returns ``layers``, [(kernel, ticks)]).
    TVM's other options (``verbose``, ``<platform>_board``, ...) are accepted and ignored."""
    options = dict(options or {})
    template = _template_of(template_dir)
    project_dir = os.fspath(project_dir)
    _copy_template(template, project_dir)
    if not _is_aot(module):  # a C module or graph build: the CRT's RPC server hosts its functions
        return _generate_crt(project_dir, template, module, options)
    if _host_driven(template, module, options):  # the AOT model served by the CRT
        sources, headers, config = _aot_parts(module, project_dir)
        for name, text in headers.items():
            with open(os.path.join(project_dir, name), "w") as f:
                f.write(text)
        return _crt_project(project_dir, template, "\n".join(sources), [f"{config['prefix']}_run_packed"],
                            options, config)
    mlf = os.path.join(project_dir, "model.tar")
    if isinstance(module, (str, os.PathLike)):
        shutil.copyfile(module, mlf)
    else:
        from ..model_library_format import export_model_library_format
        export_model_library_format(module, mlf)
    with tarfile.open(mlf) as tar:
        tar.extractall(os.path.join(project_dir, "model"), filter="data")
    with open(os.path.join(project_dir, "model", "metadata.json")) as f:
        meta = json.load(f)
    if "aot" not in meta["executors"]:
        raise KilnError("generate_project: the firmware runs the AOT executor; build with "
                        "executor=Executor('aot', {'interface-api': 'c', 'unpacked-api': True})")
    _write_io(project_dir, meta["memory"], options.get("inputs", {}))
    if options.get("profile"):
        _instrument_run(os.path.join(project_dir, "model", "codegen", "host", "src"), meta["memory"]["prefix"])
    if BOARDS[template].cpu is None:  # a standalone program here: the MPS2 main.c over stdio (standalone.c)
        for name in ("main.c", "board.h"):
            shutil.copyfile(os.path.join(os.path.dirname(__file__), "qemu-mps2-an385", name),
                            os.path.join(project_dir, name))
    return GeneratedProject(project_dir, template, meta, options)


def generate_project_from_mlf(template_project_dir, project_dir, mlf_path, options: dict | None = None):
    """``generate_project`` from an AOT build's Model Library Format tar (TVM 0.13's argument order)."""
    return generate_project(template_project_dir, os.fspath(mlf_path), project_dir, options)


_CALL = re.compile(r"^(\s*)if \((\w+)_unpacked\((.*)\) != 0\) return -1;$")


def _instrument_run(src_dir: str, prefix: str) -> None:
    """``profile`` option: each kernel call of the AOT run function is timed with the board's
    SysTick and printed as ``KILN-LAYER <index> <kernel> <ticks>`` (run() returns them as
    ``layers``). The printing is outside the timed calls, inside the run's total."""
    for name in sorted(os.listdir(src_dir)):
        path = os.path.join(src_dir, name)
        with open(path) as f:
            lines = f.read().split("\n")
        if not any(line.startswith(f"int32_t {prefix}_run(") for line in lines):
            continue
        out, index = ['#include "board.h"',
                      "static void kiln_layer(int32_t i, const char* name, uint64_t ticks) {",
                      '  uart_puts("KILN-LAYER "); uart_put_u64((uint64_t)i); uart_putc(\' \'); uart_puts(name);',
                      "  uart_putc(' '); uart_put_u64(ticks); uart_putc('\\n');", "}"], 0
        for line in lines:
            m = _CALL.match(line)
            if m:
                pad, fn, args = m.groups()
                short = fn[len(prefix) + 1:] if fn.startswith(prefix + "_") else fn
                line = (f"{pad}{{ uint64_t t0 = board_ticks(); if ({fn}_unpacked({args}) != 0) return -1; "
                        f'kiln_layer({index}, "{short}", board_ticks() - t0); }}')
                index += 1
            out.append(line)
        with open(path, "w") as f:
            f.write("\n".join(out))


_PROJECT_TYPES = ("host_driven", "aot_standalone_demo", "standalone")


def _host_driven(template: str, module, options: dict) -> bool:
    kind = options.get("project_type")
    if kind is not None and kind not in _PROJECT_TYPES:
        raise KilnError(f"generate_project: project_type {kind!r} is unknown; use 'host_driven' (a micro.Session "
                        "runs the model) or 'aot_standalone_demo' (firmware that runs it once)")
    if kind is not None:
        host = kind == "host_driven"
    elif "host_driven" in options:
        host = bool(options["host_driven"])
    elif BOARDS[template].cpu is None:
        host = True
    elif isinstance(module, (str, os.PathLike)):
        host = False
    else:
        host = module.runtime.name == "crt" and bool(module.runtime.get("system-lib", False))
    return host


def _aot_parts(module, project_dir: str):
    """(C sources, {header name: text}, executor config) of an AOT build or its MLF tar."""
    if not isinstance(module, (str, os.PathLike)):
        return list(module.sources.values()), dict(module.headers), module.get_executor_config()
    where = os.path.join(project_dir, "model")
    with tarfile.open(module) as tar:
        tar.extractall(where, filter="data")
    src, inc = os.path.join(where, "codegen", "host", "src"), os.path.join(where, "codegen", "host", "include")
    sources = [open(os.path.join(src, f)).read() for f in sorted(os.listdir(src))]
    headers = {f: open(os.path.join(inc, f)).read() for f in sorted(os.listdir(inc))}
    with open(os.path.join(where, "metadata.json")) as f:
        return sources, headers, json.load(f)["memory"]


def _is_aot(module) -> bool:
    from kiln.relay.backend.aot import AOTExecutorFactoryModule
    return isinstance(module, (str, os.PathLike, AOTExecutorFactoryModule))


def _generate_crt(project_dir: str, template: str, module, options: dict):
    lib = module.get_lib() if hasattr(module, "get_lib") else module
    if "c" not in getattr(lib, "sources", {}):
        raise KilnError("generate_project: the module has no C source; build it with target 'c'")
    return _crt_project(project_dir, template, lib.get_source("c"), [fn["name"] for fn in lib.metadata["functions"]],
                        options)


def generate_crt_project(template_dir: str, source: str, names: list, project_dir: str, options: dict | None = None):
    """A CRT project over C source (the C target's) whose packed functions ``names`` the host may call."""
    template = _template_of(template_dir)
    _copy_template(template, project_dir)
    return _crt_project(os.fspath(project_dir), template, source, names, dict(options or {}))


def _config_function(config: dict) -> list:
    """C of a packed function that copies the AOT interface (JSON) into a uint8 tensor:
    4 bytes of length, then as many bytes as fit. The host reads the model's names, shapes and
    dtypes from the board, as TVM reads its metadata module."""
    text = json.dumps(config, separators=(",", ":")).encode()
    body = ", ".join(str(b) for b in text)
    return [f"static const uint8_t kiln_aot_config_json[{len(text)}] = {{{body}}};",
            f"int32_t {CONFIG_FUNC}(const KilnValue* args, const int32_t* type_codes, int32_t num_args) {{",
            "  (void)type_codes;",
            "  if (num_args != 1) return -1;",
            "  DLTensor* t = (DLTensor*)args[0].v_handle;",
            "  uint8_t* out = (uint8_t*)t->data;",
            "  int64_t cap = 1;",
            "  for (int32_t i = 0; i < t->ndim; ++i) cap *= t->shape[i];",
            "  uint32_t n = (uint32_t)sizeof(kiln_aot_config_json);",
            "  if (cap < 4) return -1;",
            "  memcpy(out, &n, 4);",
            "  memcpy(out + 4, kiln_aot_config_json, (size_t)(cap - 4) < n ? (size_t)(cap - 4) : n);",
            "  return 0;", "}"]


def _crt_project(project_dir: str, template: str, source: str, names: list, options: dict, config: dict | None = None):
    with open(os.path.join(project_dir, "module.c"), "w") as f:
        f.write(source)
    table = [f"int32_t {n}(const KilnValue*, const int32_t*, int32_t);" for n in names]
    if config is not None:
        table += _config_function(config)
        names = [*names, CONFIG_FUNC]
    table += ["const KilnCrtFunc kiln_crt_system_lib[] = {" + ", ".join(f'{{"{n}", {n}}}' for n in names) + "};",
              f"const int32_t kiln_crt_system_lib_size = {len(names)};"]
    with open(os.path.join(project_dir, "syslib.c"), "w") as f:
        f.write('#include <string.h>\n#include "crt.h"\n' + "\n".join(table) + "\n")
    return CRTProject(project_dir, template, options, config)


def _gcc(board: Board) -> list:
    from ..toolchain import missing_arm_gcc
    if missing_arm_gcc():
        raise KilnError(missing_arm_gcc())
    return ["arm-none-eabi-gcc", f"-mcpu={board.cpu}", "-mthumb", *board.flags, *board.defines,
            "-ffunction-sections", "-fdata-sections"]


def _link(project_dir: str, board: Board) -> list:
    return ["-nostartfiles", "--specs=nano.specs", "--specs=nosys.specs", "-T", os.path.join(project_dir, board.ld),
            "-Wl,--gc-sections", "-lm"]


def _qemu(board: Board, options: dict, serial: str, elf: str) -> list:
    from ..toolchain import missing_qemu
    if missing_qemu():
        raise KilnError(missing_qemu())
    return ["qemu-system-arm", "-M", board.machine, "-cpu", board.cpu, "-display", "none", "-monitor", "none",
            "-serial", serial + (",nodelay=on" if serial.startswith("tcp:") else ""), "-semihosting-config", "enable=on,target=native",
            "-icount", f"shift={options.get('icount_shift', 0)},align=off,sleep=off", "-kernel", elf]


def _board_memory(project_dir: str, board: Board) -> dict:
    """{"FLASH": bytes, "RAM": bytes} from the project's linker script."""
    with open(os.path.join(project_dir, board.ld)) as f:
        text = f.read()
    out = {}
    for name, size, unit in re.findall(r"(\w+)\s*\([^)]*\)\s*:\s*ORIGIN\s*=\s*\w+\s*,\s*LENGTH\s*=\s*(\d+)\s*([KM]?)", text):
        out[name] = int(size) * {"": 1, "K": 1024, "M": 1024 * 1024}[unit]
    return out


def _link_failed(stderr: str, project_dir: str, template: str, board: Board, what: str,
                 detail: str = "") -> KilnError:
    """One line for a firmware that does not fit its board (the linker's region overflow), else the log."""
    over = dict((region, int(n)) for region, n in re.findall(r"region `(\w+)' overflowed by (\d+) bytes", stderr))
    if not over:
        return KilnError(f"{what} build failed ({template}):\n{stderr[-3000:]}")
    have = _board_memory(project_dir, board)
    parts = [f"{have[r] + n:,} bytes of {r.lower()} (the board has {have[r]:,})" for r, n in sorted(over.items())]
    return KilnError(f"the {what} does not fit the {template} board: it needs {' and '.join(parts)}{detail}; make the model "
                     "smaller (fewer or int8 weights, smaller inputs) or use a board with more memory")


def _sizes(elf: str) -> dict:
    out = subprocess.run(["arm-none-eabi-size", elf], capture_output=True, text=True, check=True)
    text, data, bss = (int(x) for x in out.stdout.splitlines()[1].split()[:3])
    return {"text": text, "data": data, "bss": bss, "flash": text + data, "ram": data + bss}


class CRTProject:
    """Firmware that serves functions over RPC: ``build()``, ``flash()``, ``transport()``.
    ``aot_config``: the AOT interface, when the firmware serves an AOT model (host-driven)."""

    def __init__(self, project_dir: str, template: str, options: dict, aot_config: dict | None = None):
        self.dir, self.template, self.options, self.aot_config = project_dir, template, options, aot_config
        self.board = BOARDS[template]
        self.cpu, self.machine = self.board.cpu, self.board.machine
        self.exe = os.path.join(project_dir, "build", "board.elf" if self.cpu else "board")

    def build(self) -> str:
        os.makedirs(os.path.dirname(self.exe), exist_ok=True)
        crt = [os.path.join(CRT_DIR, f) for f in _CRT_FILES]
        mine = [os.path.join(self.dir, f) for f in ("module.c", "syslib.c")]
        flags = ["-std=gnu99", "-O2", "-I", CRT_DIR, "-I", self.dir, *self.options.get("cflags", [])]
        if self.aot_config is not None and not any("KILN_CRT_ARENA_BYTES" in f for f in flags):
            flags.append(f"-DKILN_CRT_ARENA_BYTES={self.arena_bytes()}")
        if self.cpu is None:
            cmd = ["cc", *flags, os.path.join(self.dir, "board.c"), *crt, *mine, "-lm", "-o", self.exe]
        else:
            cmd = [*_gcc(self.board), *flags, os.path.join(self.dir, "board.c"), os.path.join(self.dir, "crt_main.c"),
                   *crt, *mine, *_link(self.dir, self.board), "-o", self.exe]
        out = subprocess.run(cmd, capture_output=True, text=True)
        if out.returncode != 0:
            detail = "" if self.aot_config is None else \
                (f" (the model's AOT arena {self.aot_config['workspace_size_bytes']:,} B, constants "
                 f"{self.aot_config['constant_size_bytes']:,} B, the CRT arena {self.arena_bytes():,} B with its inputs "
                 "and outputs)")
            raise _link_failed(out.stderr, self.dir, self.template, self.board, "CRT firmware", detail)
        return self.exe

    def arena_bytes(self) -> int:
        """The CRT's page arena: its default 256 KiB (kernel scratch, uploads) plus, for an AOT model,
        room for its inputs and outputs, which the host allocates there."""
        io = sum(-(-t["size_bytes"] // 64) * 64 for t in self.aot_config["inputs"] + self.aot_config["outputs"])
        return 256 * 1024 + io

    def flash(self) -> None:
        if not os.path.exists(self.exe):
            raise KilnError("flash: build the project first (project.build())")

    def sizes(self) -> dict:
        """text/data/bss bytes of the firmware (arm-none-eabi-size); flash = text + data, RAM = data + bss."""
        if self.cpu is None:
            raise KilnError("sizes: the host template is a process, not firmware; use a board template")
        self.flash()
        return _sizes(self.exe)

    def transport(self):
        """A context manager for micro.Session: the board process (host) or qemu over a TCP UART."""
        from ..session import PipeTransport, SocketTransport

        self.flash()
        if self.cpu is None:
            return PipeTransport([self.exe])
        import socket
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        port = listener.getsockname()[1]
        cmd = _qemu(self.board, self.options, f"tcp:127.0.0.1:{port}", self.exe)
        return SocketTransport(listener, lambda: subprocess.Popen(cmd, stdin=subprocess.DEVNULL,
                                                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))


_NP_C = {"float32": "float", "int8": "int8_t", "uint8": "uint8_t", "int32": "int32_t", "int16": "int16_t"}


def _write_io(project_dir: str, memory: dict, inputs: dict) -> None:
    prefix = memory["prefix"]
    lines = ['#include "inputs.h"', f'#include "{prefix}.h"', '#include "board.h"', ""]
    for t in memory["inputs"]:
        arr = np.zeros(t["shape"], t["dtype"]) if t["name"] not in inputs else \
            np.ascontiguousarray(inputs[t["name"]], dtype=t["dtype"])
        if list(arr.shape) != t["shape"]:
            raise KilnError(f"generate_project: input {t['name']} has shape {list(arr.shape)}, the model wants {t['shape']}")
        words = arr.view(np.uint8).reshape(-1)
        body = ", ".join(str(int(b)) for b in words)
        lines.append(f"static uint8_t in_{t['name']}[{t['size_bytes']}] __attribute__((aligned(16))) = {{{body}}};")
    for t in memory["outputs"]:
        lines.append(f"static uint8_t out_{t['name']}[{t['size_bytes']}] __attribute__((aligned(16)));")
    ins = ", ".join(f".{t['name']} = in_{t['name']}" for t in memory["inputs"])
    outs = ", ".join(f".{t['name']} = out_{t['name']}" for t in memory["outputs"])
    lines += ["", "int32_t kiln_run_model(void) {",
              f"  struct {prefix}_inputs in = {{{ins}}};", f"  struct {prefix}_outputs out = {{{outs}}};",
              f"  return {prefix}_run(&in, &out);", "}", "", "void kiln_print_outputs(void) {"]
    for t in memory["outputs"]:
        lines += [f'  uart_puts("KILN-OUTPUT {t["name"]} ");', f"  uart_put_hex(out_{t['name']}, sizeof out_{t['name']});",
                  "  uart_putc('\\n');"]
    lines += ["}", ""]
    with open(os.path.join(project_dir, "inputs.c"), "w") as f:
        f.write("\n".join(lines))
    with open(os.path.join(project_dir, "inputs.h"), "w") as f:
        f.write("#include <stdint.h>\nint32_t kiln_run_model(void);\nvoid kiln_print_outputs(void);\n")


class GeneratedProject:
    """``build()``, ``flash()`` (nothing to do: qemu loads the ELF), ``run()``, ``sizes()``."""

    def __init__(self, project_dir: str, template: str, meta: dict, options: dict):
        self.dir = project_dir
        self.template = template
        self.meta = meta
        self.options = options
        self.board = BOARDS[template]
        self.cpu, self.machine = self.board.cpu, self.board.machine
        self.elf = os.path.join(project_dir, "build", "firmware.elf" if self.cpu else "firmware")

    def build(self) -> str:
        os.makedirs(os.path.dirname(self.elf), exist_ok=True)
        src = os.path.join(self.dir, "model", "codegen", "host", "src")
        board = "board.c" if self.cpu else "standalone.c"
        files = [os.path.join(self.dir, f) for f in (board, "main.c", "inputs.c")]
        files += sorted(os.path.join(src, f) for f in os.listdir(src))
        flags = ["-std=gnu99", "-O2", "-I", self.dir, "-I", os.path.join(self.dir, "model", "codegen", "host", "include"),
                 *self.options.get("cflags", [])]
        if self.cpu is None:
            cmd = ["cc", *flags, *files, "-lm", "-o", self.elf]
        else:
            cmd = [*_gcc(self.board), *flags, *files, *_link(self.dir, self.board), "-o", self.elf]
        out = subprocess.run(cmd, capture_output=True, text=True)
        if out.returncode != 0:
            if self.cpu is None:
                raise KilnError(f"program build failed ({' '.join(cmd[:3])} ...):\n{out.stderr[-3000:]}")
            mem = self.meta["memory"]
            raise _link_failed(out.stderr, self.dir, self.template, self.board, "firmware",
                               f" (the model's AOT arena {mem['workspace_size_bytes']:,} B, constants "
                               f"{mem['constant_size_bytes']:,} B)")
        return self.elf

    def flash(self) -> None:
        if not os.path.exists(self.elf):
            raise KilnError("flash: build the project first (project.build())")

    def transport(self):
        raise KilnError("transport: this is standalone firmware, which runs the model once (project.run()); for a "
                        "micro.Session generate the project with {'project_type': 'host_driven'} or build with "
                        "Runtime('crt', {'system-lib': True})")

    def sizes(self) -> dict:
        """text/data/bss bytes of the firmware (arm-none-eabi-size): flash = text + data, RAM = data + bss;
        ``kernels`` and ``constants``: the flash bytes of the model's kernels and weights (their
        symbols, arm-none-eabi-nm), ``glue``: the rest of the flash (start-up, UART, the AOT run
        function, libc pieces, the baked inputs)."""
        if self.cpu is None:
            raise KilnError("sizes: the host template builds a program, not firmware; use a board template")
        self.flash()
        out = _sizes(self.elf)
        prefix = self.meta["memory"]["prefix"]
        nm = subprocess.run(["arm-none-eabi-nm", "-S", self.elf], capture_output=True, text=True, check=True).stdout
        kernels = constants = 0
        for line in nm.splitlines():
            parts = line.split()
            if len(parts) != 4 or parts[2] in "bBvV":  # RAM (bss) symbols are not flash
                continue
            size, name = int(parts[1], 16), parts[3]
            if name.startswith(f"{prefix}_fused_") or name.startswith(f"{prefix}_const_"):
                if name.startswith(f"{prefix}_const_"):
                    constants += size
                else:
                    kernels += size
        out.update(kernels=kernels, constants=constants, glue=out["flash"] - kernels - constants)
        return out

    def run(self, timeout: float = 120.0) -> dict:
        """Boot the firmware in qemu (or run the host program); ``{"outputs": {name: array}, "cycles":
        int (board ticks; nanoseconds on the host), "log": str}``."""
        self.flash()
        cmd = _qemu(self.board, self.options, "stdio", self.elf) if self.cpu else [self.elf]
        try:
            out = subprocess.run(cmd, capture_output=True, timeout=timeout, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            raise KilnError(f"the board did not finish within {timeout:.0f} s ({self.machine or 'host program'})") from None
        log = out.stdout.decode(errors="replace")
        if out.returncode != 0 or "KILN-ERROR" in log:
            raise KilnError(f"the board exited with {out.returncode}: {log[-2000:]}{out.stderr.decode()[-1000:]}")
        outputs = {}
        wanted = {t["name"]: t for t in self.meta["memory"]["outputs"]}
        for name, hexdata in re.findall(r"KILN-OUTPUT (\w+) ([0-9a-f]*)", log):
            t = wanted[name]
            outputs[name] = np.frombuffer(bytes.fromhex(hexdata), t["dtype"]).reshape(t["shape"])
        cycles = re.search(r"KILN-CYCLES (\d+)", log)
        layers = [(name, int(t)) for _, name, t in re.findall(r"KILN-LAYER (\d+) (\w+) (\d+)", log)]
        return {"outputs": outputs, "cycles": int(cycles.group(1)) if cycles else None, "log": log,
                "layers": layers}
