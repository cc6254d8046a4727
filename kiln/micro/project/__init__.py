"""Project templates: a folder per board that turns an AOT model into firmware (docs/microtvm.md).

    project = micro.project.generate_project(micro.get_microtvm_template_projects("qemu-mps2-an385"),
                                             lib, "build/kws", {"inputs": {"input": x}})
    project.build()          # arm-none-eabi-gcc for the Cortex-M3
    result = project.run()   # qemu-system-arm -M mps2-an385 -icount: outputs and board cycles
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tarfile

import numpy as np

from kiln.errors import KilnError

TEMPLATES = ("host", "qemu-mps2-an385", "qemu-mps2-an386")
_CPU = {"qemu-mps2-an385": ("cortex-m3", "mps2-an385"), "qemu-mps2-an386": ("cortex-m4", "mps2-an386"),
        "host": (None, None)}
_BASE = {"qemu-mps2-an386": "qemu-mps2-an385"}  # same board sources, other CPU
_FLAGS = {"qemu-mps2-an386": ["-mfloat-abi=hard", "-mfpu=fpv4-sp-d16"]}


def _copy_template(template_dir: str, template: str, project_dir: str) -> None:
    if os.path.exists(project_dir):
        shutil.rmtree(project_dir)
    if template in _BASE:
        shutil.copytree(os.path.join(os.path.dirname(os.path.normpath(template_dir)), _BASE[template]), project_dir)
        shutil.copytree(template_dir, project_dir, dirs_exist_ok=True)
    else:
        shutil.copytree(template_dir, project_dir)
CRT_DIR = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", "..", "..", "src", "crt"))
_CRT_FILES = ("page_allocator.c", "framing.c", "rpc_server.c")


def get_microtvm_template_projects(name: str) -> str:
    """The folder of template ``name`` (``"qemu-mps2-an385"``)."""
    if name not in TEMPLATES:
        raise KilnError(f"no micro project template {name!r}; templates: {', '.join(TEMPLATES)}")
    return os.path.join(os.path.dirname(__file__), name)


def generate_project(template_dir: str, module, project_dir: str, options: dict | None = None):
    """Copy the template to ``project_dir`` with the model's Model Library Format unpacked in it.

    ``module``: what relay.build returned with the AOT executor, or the path of its MLF tar.
    ``options``: ``inputs`` ({name: array}, baked into the firmware; zeros when missing),
    ``cflags`` (extra compiler flags), ``icount_shift`` (qemu -icount shift, default 0),
    ``host_driven`` (AOT only: firmware that serves the model to a micro.Session instead of running
    it once on baked-in inputs)."""
    from ..model_library_format import export_model_library_format

    options = dict(options or {})
    template = os.path.basename(os.path.normpath(template_dir))
    if template not in _CPU:
        raise KilnError(f"{template_dir} is not a kiln micro project template")
    _copy_template(template_dir, template, project_dir)
    if not _is_aot(module):  # a C module or graph build: the CRT's RPC server hosts its functions
        return _generate_crt(project_dir, template, module, options)
    if options.get("host_driven"):  # the AOT model served by the CRT (micro.create_local_aot_executor)
        for name, text in module.headers.items():
            with open(os.path.join(project_dir, name), "w") as f:
                f.write(text)
        source = "\n".join(module.sources.values())
        return _crt_project(project_dir, template, source, [f"{module.plan.prefix}_run_packed"], options)
    mlf = os.path.join(project_dir, "model.tar")
    if isinstance(module, (str, os.PathLike)):
        shutil.copyfile(module, mlf)
    else:
        export_model_library_format(module, mlf)
    with tarfile.open(mlf) as tar:
        tar.extractall(os.path.join(project_dir, "model"), filter="data")
    import json
    with open(os.path.join(project_dir, "model", "metadata.json")) as f:
        meta = json.load(f)
    if "aot" not in meta["executors"]:
        raise KilnError("generate_project: the firmware runs the AOT executor; build with "
                        "executor=Executor('aot', {'interface-api': 'c', 'unpacked-api': True})")
    _write_io(project_dir, meta["memory"], options.get("inputs", {}))
    return GeneratedProject(project_dir, template, meta, options)


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
    template = os.path.basename(os.path.normpath(template_dir))
    if template not in _CPU:
        raise KilnError(f"{template_dir} is not a kiln micro project template")
    _copy_template(template_dir, template, project_dir)
    return _crt_project(project_dir, template, source, names, dict(options or {}))


def _crt_project(project_dir: str, template: str, source: str, names: list, options: dict):
    with open(os.path.join(project_dir, "module.c"), "w") as f:
        f.write(source)
    table = [f"int32_t {n}(const KilnValue*, const int32_t*, int32_t);" for n in names]
    table += ["const KilnCrtFunc kiln_crt_system_lib[] = {" + ", ".join(f'{{"{n}", {n}}}' for n in names) + "};",
              f"const int32_t kiln_crt_system_lib_size = {len(names)};"]
    with open(os.path.join(project_dir, "syslib.c"), "w") as f:
        f.write('#include "crt.h"\n' + "\n".join(table) + "\n")
    return CRTProject(project_dir, template, options)


class CRTProject:
    """Firmware that serves the module's functions over RPC: ``build()``, ``flash()``, ``transport()``."""

    def __init__(self, project_dir: str, template: str, options: dict):
        self.dir, self.template, self.options = project_dir, template, options
        self.cpu, self.machine = _CPU[template]
        self.exe = os.path.join(project_dir, "build", "board.elf" if self.cpu else "board")

    def build(self) -> str:
        os.makedirs(os.path.dirname(self.exe), exist_ok=True)
        crt = [os.path.join(CRT_DIR, f) for f in _CRT_FILES]
        mine = [os.path.join(self.dir, f) for f in ("module.c", "syslib.c")]
        flags = ["-std=gnu99", "-O2", "-I", CRT_DIR, "-I", self.dir, *self.options.get("cflags", [])]
        if self.cpu is None:
            cmd = ["cc", *flags, os.path.join(self.dir, "board.c"), *crt, *mine, "-lm", "-o", self.exe]
        else:
            from ..toolchain import missing_arm_gcc
            if missing_arm_gcc():
                raise KilnError(missing_arm_gcc())
            cmd = ["arm-none-eabi-gcc", f"-mcpu={self.cpu}", "-mthumb", *_FLAGS.get(self.template, []),
                   "-ffunction-sections", "-fdata-sections",
                   *flags, os.path.join(self.dir, "board.c"), os.path.join(self.dir, "crt_main.c"), *crt, *mine,
                   "-nostartfiles", "--specs=nano.specs", "--specs=nosys.specs",
                   "-T", os.path.join(self.dir, "mps2_an385.ld"), "-Wl,--gc-sections", "-lm", "-o", self.exe]
        out = subprocess.run(cmd, capture_output=True, text=True)
        if out.returncode != 0:
            raise KilnError(f"CRT firmware build failed:\n{out.stderr[-3000:]}")
        return self.exe

    def flash(self) -> None:
        if not os.path.exists(self.exe):
            raise KilnError("flash: build the project first (project.build())")

    def transport(self):
        """A context manager for micro.Session: the board process (host) or qemu over a TCP UART."""
        from ..session import PipeTransport, SocketTransport

        self.flash()
        if self.cpu is None:
            return PipeTransport([self.exe])
        from ..toolchain import missing_qemu
        if missing_qemu():
            raise KilnError(missing_qemu())
        import socket
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        port = listener.getsockname()[1]
        cmd = ["qemu-system-arm", "-M", self.machine, "-cpu", self.cpu, "-display", "none", "-monitor", "none",
               "-serial", f"tcp:127.0.0.1:{port}", "-semihosting-config", "enable=on,target=native",
               "-icount", f"shift={self.options.get('icount_shift', 0)},align=off,sleep=off", "-kernel", self.exe]
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
        self.cpu, self.machine = _CPU[template]
        self.elf = os.path.join(project_dir, "build", "firmware.elf")

    def build(self) -> str:
        from ..toolchain import missing_arm_gcc

        if missing_arm_gcc():
            raise KilnError(missing_arm_gcc())
        os.makedirs(os.path.dirname(self.elf), exist_ok=True)
        src = os.path.join(self.dir, "model", "codegen", "host", "src")
        files = [os.path.join(self.dir, f) for f in ("board.c", "main.c", "inputs.c")]
        files += sorted(os.path.join(src, f) for f in os.listdir(src))
        cmd = ["arm-none-eabi-gcc", f"-mcpu={self.cpu}", "-mthumb", *_FLAGS.get(self.template, []), "-std=gnu99", "-O2",
               "-ffunction-sections",
               "-fdata-sections", "-I", self.dir, "-I", os.path.join(self.dir, "model", "codegen", "host", "include"),
               *self.options.get("cflags", []), *files, "-nostartfiles", "--specs=nano.specs", "--specs=nosys.specs",
               "-T", os.path.join(self.dir, "mps2_an385.ld"), "-Wl,--gc-sections", "-lm", "-o", self.elf]
        out = subprocess.run(cmd, capture_output=True, text=True)
        if out.returncode != 0:
            raise KilnError(f"firmware build failed ({' '.join(cmd[:3])} ...):\n{out.stderr[-3000:]}")
        return self.elf

    def flash(self) -> None:
        if not os.path.exists(self.elf):
            raise KilnError("flash: build the project first (project.build())")

    def sizes(self) -> dict:
        """text/data/bss bytes of the firmware (arm-none-eabi-size): flash = text + data, RAM = data + bss."""
        out = subprocess.run(["arm-none-eabi-size", self.elf], capture_output=True, text=True, check=True)
        text, data, bss = (int(x) for x in out.stdout.splitlines()[1].split()[:3])
        return {"text": text, "data": data, "bss": bss, "flash": text + data, "ram": data + bss}

    def run(self, timeout: float = 120.0) -> dict:
        """Boot the firmware in qemu; ``{"outputs": {name: array}, "cycles": int, "log": str}``."""
        from ..toolchain import missing_qemu

        if missing_qemu():
            raise KilnError(missing_qemu())
        self.flash()
        cmd = ["qemu-system-arm", "-M", self.machine, "-cpu", self.cpu, "-display", "none", "-monitor", "none",
               "-serial", "stdio", "-semihosting-config", "enable=on,target=native",
               "-icount", f"shift={self.options.get('icount_shift', 0)},align=off,sleep=off", "-kernel", self.elf]
        try:
            out = subprocess.run(cmd, capture_output=True, timeout=timeout, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            raise KilnError(f"the board did not finish within {timeout:.0f} s (qemu {self.machine})") from None
        log = out.stdout.decode(errors="replace")
        if out.returncode != 0 or "KILN-ERROR" in log:
            raise KilnError(f"the board exited with {out.returncode}: {log[-2000:]}{out.stderr.decode()[-1000:]}")
        outputs = {}
        wanted = {t["name"]: t for t in self.meta["memory"]["outputs"]}
        for name, hexdata in re.findall(r"KILN-OUTPUT (\w+) ([0-9a-f]*)", log):
            t = wanted[name]
            outputs[name] = np.frombuffer(bytes.fromhex(hexdata), t["dtype"]).reshape(t["shape"])
        cycles = re.search(r"KILN-CYCLES (\d+)", log)
        return {"outputs": outputs, "cycles": int(cycles.group(1)) if cycles else None, "log": log}
