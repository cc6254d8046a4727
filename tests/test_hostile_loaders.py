"""Property tests: every Python loader, fed hypothesis mutations of valid files, ends in a return or
one kiln error; never another exception, never an allocation beyond the limits (each case runs in a
forked child under RLIMIT_AS: tests/helpers/hostile.py), never a file left behind.

Run longer with KILN_HOSTILE_EXAMPLES=2000 (the CI default is small: about a minute for all)."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
WORKER = os.path.join(HERE, "helpers", "hostile.py")
EXAMPLES = {"onnx": 150, "tflite": 60, "keras": 80, "params": 150, "graph": 150, "tar": 25, "script": 150,
            # structure-aware mutations of the quantized, recurrent, transformer, bfloat16 and
            # data-dependent converters (hostile_seeds._onnx_op_seeds, _tflite_quant_specs)
            "onnx_ops": 120, "tflite_quant": 150}


@pytest.fixture(scope="module")
def fixtures(tmp_path_factory):
    """A kernel library + graph JSON (for graph) and module archives (for tar), made by the compiler."""
    import kiln as tvm
    from kiln import relay, te

    folder = tmp_path_factory.mktemp("hostile-fixtures")
    x = relay.var("x", shape=(1, 8), dtype="float32")
    w = relay.const(np.arange(32, dtype="float32").reshape(4, 8))
    func = relay.Function([x], relay.nn.relu(relay.nn.dense(x, w)))
    lib = relay.build(tvm.IRModule.from_expr(func), target="llvm")
    lib.export_library(str(folder / "graph_lib.so"))
    (folder / "graph.json").write_text(lib.get_graph_json())
    a = te.placeholder((16,), name="a")
    b = te.compute((16,), lambda i: a[i] * 2.0, name="b")
    tvm.build(te.create_schedule(b.op), [a, b], target="llvm", name="double").export_library(str(folder / "double.tar"))
    from test_hostile_regressions import _sparse_tar
    _sparse_tar(str(folder / "sparse.tar"))
    return str(folder)


@pytest.mark.parametrize("loader", sorted(EXAMPLES))
def test_loader_gives_one_kiln_error_within_limits(loader, fixtures, tmp_path):
    n = int(os.environ.get("KILN_HOSTILE_EXAMPLES", EXAMPLES[loader]))
    env = {**os.environ, "KILN_HOSTILE_FIXTURES": fixtures}
    proc = subprocess.run([sys.executable, WORKER, loader, str(n), str(tmp_path)], capture_output=True, text=True,
                          env=env, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    stats = json.loads(proc.stdout.strip().splitlines()[-1])
    print(f"{loader}: {stats['cases']} cases {stats['outcomes']} peak RSS growth {stats['peak_rss'] >> 20} MiB "
          f"in {stats['seconds']} s")
    assert stats["cases"] >= min(n, 20)
    assert stats["failures"] == [], json.dumps(stats["failures"][:5], indent=1)
    assert stats["outcomes"].get("kiln", 0) > 0  # the mutations reached the checks
    assert os.listdir(tmp_path) == []
