"""``python -m kiln.exec.rpc_tracker``: see kiln/exec/rpc_cli.py and docs/rpc.md."""

import sys

from .rpc_cli import main

if __name__ == "__main__":
    sys.exit(main("tracker"))
