"""Board lists, targets, tuning-log checks and small models (TVM 0.13: tvm.micro.testing.utils)."""

from __future__ import annotations

import json
import tarfile

from kiln.errors import KilnError

_BOARDS = {
    "crt": {"host": {"model": "host", "template": "crt"}},
    "qemu": {"mps2_an385": {"model": "mps2_an385", "template": "qemu-mps2-an385", "cpu": "cortex-m3"},
             "mps2_an386": {"model": "mps2_an386", "template": "qemu-mps2-an386", "cpu": "cortex-m4"},
             "mps2_an500": {"model": "mps2_an500", "template": "qemu-mps2-an500", "cpu": "cortex-m7"},
             "mps3_an547": {"model": "mps3_an547", "template": "qemu-mps3-an547", "cpu": "cortex-m55"}},
}


def get_supported_boards(platform: str) -> dict:
    """``{board: {"model": ..., "template": ...}}`` of a platform (``"crt"`` or ``"qemu"``)."""
    if platform not in _BOARDS:
        raise KilnError(f"micro.testing: platform {platform!r} is unknown; kiln has {', '.join(_BOARDS)} "
                        "(zephyr and arduino boards are not modelled)")
    return _BOARDS[platform]


def _board(platform: str, board: str | None) -> dict:
    boards = get_supported_boards(platform)
    if board is None and len(boards) == 1:
        return next(iter(boards.values()))
    if board not in boards:
        raise KilnError(f"micro.testing: platform {platform!r} has no board {board!r}; boards: {', '.join(boards)}")
    return boards[board]


def get_target(platform: str, board: str | None = None):
    """The C target of a board: ``get_target("crt")`` is ``micro("host")``."""
    from kiln.target.target import micro
    return micro(_board(platform, board)["model"])


def check_tune_log(log_path) -> None:
    """Every record of a tuning log parses and has a finite cost below 1e9 seconds (an error
    record's cost is 1e9); raises AssertionError naming the first bad line otherwise."""
    with open(log_path) as f:
        lines = [line for line in f if line.strip()]
    assert lines, f"{log_path}: the tuning log is empty"
    for number, line in enumerate(lines, 1):
        record = json.loads(line)
        cost = record["result"][0][0]
        assert cost < 1e9, f"{log_path}:{number}: the measurement failed (cost {cost}, error {record['result'][1]})"


def mlf_extract_workspace_size_bytes(mlf_tar_path) -> int:
    """The AOT arena size recorded in a Model Library Format tar's metadata.json."""
    with tarfile.open(mlf_tar_path) as tar:
        names = {m.name.lstrip("./"): m for m in tar.getmembers()}
        if "metadata.json" not in names:
            raise KilnError(f"{mlf_tar_path} has no metadata.json; is it a Model Library Format tar?")
        meta = json.load(tar.extractfile(names["metadata.json"]))
    if "memory" not in meta:
        raise KilnError(f"{mlf_tar_path} is a graph-executor build; only AOT builds plan a workspace")
    return int(meta["memory"]["workspace_size_bytes"])


def get_conv2d_relay_module():
    """A conv2d of int8 NCHW data (1x3x64x64) with int8 OIHW weights (8x3x5x5), int32 out, pad 2."""
    from kiln import relay
    from kiln.ir import IRModule

    data = relay.var("data", relay.TensorType((1, 3, 64, 64), "int8"))
    weight = relay.var("weight", relay.TensorType((8, 3, 5, 5), "int8"))
    y = relay.nn.conv2d(data, weight, padding=(2, 2), channels=8, kernel_size=(5, 5), data_layout="NCHW",
                        kernel_layout="OIHW", out_dtype="int32")
    return relay.transform.InferType()(IRModule.from_expr(relay.Function([data, weight], y)))
