"""A short, bounded run of every libFuzzer target in fuzz/ (the C parsers: .npz and DEFLATE, the
shared-object checks, graph JSON and parameters, module metadata, module archives, offloaded-subgraph
lists, RPC frame bodies, the CRT request handler) under AddressSanitizer and UBSan, from the committed seed corpora. `make fuzz` runs them
for long; this keeps every target building and every seed clean in `make test` (about 2 minutes
with the sanitizer builds)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
FUZZ = os.path.join(ROOT, "fuzz")
TARGETS = ["npz", "inflate", "elf", "graph", "metadata", "rpc_value", "crt_request", "tar", "json_external"]
SECONDS = 8


def _clang() -> str | None:
    for name in ["clang", *(f"clang-{v}" for v in range(19, 13, -1))]:
        if shutil.which(name):
            return name
    return None


@pytest.fixture(scope="module")
def build(tmp_path_factory):
    clang = _clang()
    if clang is None:
        pytest.skip("no clang: install the Debian packages clang and libclang-rt-14-dev (make system-packages) "
                    "to build the fuzz targets")
    probe = subprocess.run([clang, "-fsanitize=fuzzer,address,undefined", "-x", "c", "-", "-o", os.devnull],
                           input="#include <stdint.h>\n#include <stddef.h>\n"
                                 "int LLVMFuzzerTestOneInput(const uint8_t* d, size_t n) { return 0; }\n",
                           capture_output=True, text=True)
    if probe.returncode:
        pytest.skip(f"{clang} cannot link libFuzzer (install libclang-rt-14-dev or your clang's compiler-rt): "
                    f"{probe.stderr.strip().splitlines()[-1] if probe.stderr.strip() else ''}")
    out = str(tmp_path_factory.mktemp("fuzz"))
    result = subprocess.run(["make", "-s", "-j2", "-C", FUZZ, f"OUT={out}", f"CLANG={clang}"],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return out


@pytest.mark.parametrize("target", TARGETS)
def test_target_runs_clean(build, target, tmp_path):
    seeds = os.path.join(FUZZ, "corpus", target)
    assert os.listdir(seeds), f"fuzz/corpus/{target} is empty: run fuzz/make_corpus.py"
    found = tmp_path / "corpus"
    found.mkdir()
    result = subprocess.run([os.path.join(build, target), "-max_total_time=%d" % SECONDS, "-rss_limit_mb=2048",
                             "-malloc_limit_mb=512", "-timeout=10", "-print_final_stats=1",
                             f"-artifact_prefix={tmp_path}/", str(found), seeds],
                            capture_output=True, text=True, cwd=tmp_path,
                            env={**os.environ, "KILN_LOAD_LIMIT": "256M"}, timeout=SECONDS + 60)
    crashes = [f for f in os.listdir(tmp_path) if f.startswith(("crash-", "leak-", "oom-", "timeout-"))]
    assert result.returncode == 0 and not crashes, f"{target}: {crashes}\n{result.stderr[-4000:]}"
    runs = int(re.search(r"stat::number_of_executed_units: (\d+)", result.stderr).group(1))
    assert runs > len(os.listdir(seeds)) * 10, result.stderr[-2000:]  # it fuzzed, not just loaded the seeds
