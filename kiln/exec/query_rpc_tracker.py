"""``python -m kiln.exec.query_rpc_tracker``: print a tracker's server list and queue status."""

import sys

from .rpc_cli import main

if __name__ == "__main__":
    sys.exit(main("query"))
