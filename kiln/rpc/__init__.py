"""``tvm.rpc``: run and measure compiled code on remote devices.

>>> from kiln import rpc
>>> remote = rpc.connect("127.0.0.1", 9090)                     # one server
>>> remote = rpc.connect_tracker("127.0.0.1", 9190).request("rk3399")   # a fleet
>>> remote = rpc.LocalSession()                                  # this process, no network

The wire protocol is in docs/rpc-protocol.md, the user guide in docs/rpc.md.
"""

from .local import LocalSession
from .session import RemoteFunction, RemoteModule, RemoteNDArray, RPCSession, connect
from .tracker_client import TrackerSession, connect_tracker

__all__ = ["connect", "connect_tracker", "LocalSession", "RPCSession", "TrackerSession",
           "RemoteNDArray", "RemoteModule", "RemoteFunction"]
