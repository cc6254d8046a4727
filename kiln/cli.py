"""The ``kiln`` command line. Each subcommand lives in its own module and is imported on use.

Add a subcommand by adding a row to COMMANDS: ``name -> (module, help)``. The module exposes
``add_arguments(parser)`` and ``run(args) -> int``.
"""

from __future__ import annotations

import argparse
import importlib
import sys

COMMANDS = {
    "rpc": ("kiln.exec.rpc_cli", "run RPC services: server, tracker, proxy, query"),
    "config": ("kiln.exec.config_cli", "list the environment settings kiln reads"),
    "cache": ("kiln.exec.cache_cli", "show (info) or empty (clear) the build cache of relay.build"),
    "tune": ("kiln.exec.tune_cli", "summarize a tuning log; plot best GFLOPS vs trials (--plot)"),
    "tvmc": ("kiln.driver.tvmc.main", "compile, tune and run models (TVM's tvmc: tvmc compile/tune/run)"),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="kiln", description="kiln: a deep-learning compiler stack.")
    parser.add_argument("--version", action="version", version=f"kiln {importlib.import_module('kiln').__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    argv = sys.argv[1:] if argv is None else argv
    # Only the chosen subcommand's module is imported, so `kiln rpc server` stays light.
    chosen = next((a for a in argv if not a.startswith("-")), None)
    for name, (module, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        if name == chosen:
            importlib.import_module(module).add_arguments(p)
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 1
    return importlib.import_module(COMMANDS[args.command][0]).run(args)


if __name__ == "__main__":
    sys.exit(main())
