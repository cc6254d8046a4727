"""``kiln rpc server|tracker|proxy|query`` and the ``python -m kiln.exec.rpc_*`` entry points.

Flags follow the documents (``--host --port --port-end --tracker --key --through-proxy
--custom-addr --load-library``), plus ``--auth-token`` (default: KILN_RPC_TOKEN).
"""

from __future__ import annotations

import argparse
import sys

from ..errors import RPCError


def _addr(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit():
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {text!r}")
    return host, int(port)


def _common(p, port: int, port_end: int | None, host: str = "0.0.0.0") -> None:
    p.add_argument("--host", default=host, help=f"address to bind (default {host})")
    p.add_argument("--port", type=int, default=port, help=f"first port to try (default {port})")
    if port_end is not None:
        p.add_argument("--port-end", type=int, default=port_end,
                       help=f"ports tried are [port, port-end) (default {port_end})")
    p.add_argument("--auth-token", default=None,
                   help="shared secret clients must prove (default: $KILN_RPC_TOKEN)")


def add_server_arguments(p) -> None:
    _common(p, 9090, 9199)
    p.add_argument("--tracker", type=_addr, help="register with the tracker at HOST:PORT")
    p.add_argument("--key", default="", help="the device key clients request from the tracker")
    p.add_argument("--through-proxy", action="store_true",
                   help="connect out to the proxy at --host:--port instead of listening")
    p.add_argument("--custom-addr", default=None, help="address the tracker tells clients to use")
    p.add_argument("--load-library", default=None, help="colon-separated shared libraries to load")


def add_tracker_arguments(p) -> None:
    _common(p, 9190, 9199)


def add_proxy_arguments(p) -> None:
    _common(p, 9090, 9199)
    p.add_argument("--tracker", type=_addr, help="register the proxied servers with the tracker at HOST:PORT")


def add_query_arguments(p) -> None:
    p.add_argument("--host", default="127.0.0.1", help="tracker address (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=9190, help="tracker port (default 9190)")
    p.add_argument("--auth-token", default=None, help="tracker token (default: $KILN_RPC_TOKEN)")


def _token(args) -> str:
    if args.auth_token is not None:
        return args.auth_token
    from .. import config
    return config.get().rpc_token


def run_server(args) -> int:
    from ..rpc import base, server
    base.setup_logging()
    if args.through_proxy and args.tracker:
        print("error: --tracker with --through-proxy: the proxy registers the servers behind it; "
              "start the proxy with --tracker instead", file=sys.stderr)
        return 2
    libs = [x for x in (args.load_library or "").split(":") if x]
    server.serve(args.host, args.port, args.port_end, args.tracker, args.key, args.through_proxy,
                 args.custom_addr, _token(args), libs)
    return 0


def run_tracker(args) -> int:
    from ..rpc import base, tracker
    base.setup_logging()
    tracker.serve(args.host, args.port, args.port_end, _token(args))
    return 0


def run_proxy(args) -> int:
    from ..rpc import base, proxy
    base.setup_logging()
    proxy.serve(args.host, args.port, args.port_end, args.tracker, _token(args))
    return 0


def run_query(args) -> int:
    from ..rpc.tracker_client import connect_tracker, format_summary
    try:
        tracker = connect_tracker(args.host, args.port, _token(args))
        print(format_summary(tracker.summary(), f"{args.host}:{args.port}"))
    except RPCError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


_SUBCOMMANDS = {
    "server": (add_server_arguments, run_server, "run an RPC server on this device"),
    "tracker": (add_tracker_arguments, run_tracker, "run an RPC tracker (queues requests per key)"),
    "proxy": (add_proxy_arguments, run_proxy, "run an RPC proxy for servers clients cannot reach"),
    "query": (add_query_arguments, run_query, "print a tracker's server list and queue status"),
}


def add_arguments(parser) -> None:
    sub = parser.add_subparsers(dest="rpc_command", metavar="{server,tracker,proxy,query}", required=True)
    for name, (add, _, help_text) in _SUBCOMMANDS.items():
        add(sub.add_parser(name, help=help_text, description=help_text))


def run(args) -> int:
    return _SUBCOMMANDS[args.rpc_command][1](args)


def main(name: str, argv=None) -> int:
    add, runner, help_text = _SUBCOMMANDS[name]
    parser = argparse.ArgumentParser(prog=f"python -m kiln.exec.{'query_rpc_tracker' if name == 'query' else 'rpc_' + name}",
                                     description=help_text)
    add(parser)
    try:
        return runner(parser.parse_args(argv))
    except RPCError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        # Ctrl-C / SIGINT before a service's own handler is in place (while it binds, or while
        # asyncio starts): a stop, not a death by signal (exit status -2).
        return 0 if name != "query" else 130
