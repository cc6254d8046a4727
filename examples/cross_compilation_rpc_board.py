"""Document 000 (cross compilation and RPC) against a real board: ``local_demo = False``.

The kernel is cross-compiled here for a Raspberry Pi class board (armv7 + NEON), exported as
lib.tar, uploaded through the tracker to a board registered under a key, relinked there by the
board's compiler, run and timed on the board. The board runs either
``python -m kiln.exec.rpc_server --tracker HOST:9190 --key rasp`` (the runtime-only package) or
the C server ``kiln_rpc --tracker HOST:9190 --key rasp`` (no Python on the board).

    python examples/cross_compilation_rpc_board.py --tracker 10.77.1.1:9190 --key rasp

Pass ``--target "llvm -mtriple=aarch64-linux-gnu"`` for an RK3399-class board.
"""

import argparse

import numpy as np

import kiln as tvm
from kiln import te
from kiln import rpc
from kiln.contrib import utils

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--tracker", default="127.0.0.1:9190", help="the RPC tracker, HOST:PORT")
parser.add_argument("--key", default="rasp", help="the board's key at the tracker")
parser.add_argument("--target", default="llvm -mtriple=armv7l-linux-gnueabihf -mattr=+neon",
                    help="the board's target (gcc -v on the board prints its triple)")
args = parser.parse_args()

n = tvm.convert(1024)
A = te.placeholder((n,), name="A")
B = te.compute((n,), lambda i: A[i] + 1.0, name="B")
s = te.create_schedule(B.op)

local_demo = False

if local_demo:
    target = "llvm"
else:
    target = args.target

func = tvm.build(s, [A, B], target=target, name="add_one")
# save the lib at a local temp folder
temp = utils.tempdir()
path = temp.relpath("lib.tar")
func.export_library(path)

if local_demo:
    remote = rpc.LocalSession()
else:
    # The document connects to the board's address; with a tracker, ask for the board's key.
    tracker_host, tracker_port = args.tracker.rsplit(":", 1)
    tracker = rpc.connect_tracker(tracker_host, int(tracker_port))
    remote = tracker.request(args.key, priority=1, session_timeout=120)

# upload the lib to the remote device; the device's compiler relinks it
remote.upload(path)
func = remote.load_module("lib.tar")

# create arrays on the remote device
dev = remote.cpu()
a = tvm.nd.array(np.random.uniform(size=1024).astype(A.dtype), dev)
b = tvm.nd.array(np.zeros(1024, dtype=A.dtype), dev)
# the function will run on the remote device
func(a, b)
np.testing.assert_equal(b.numpy(), a.numpy() + 1)

# time_evaluator runs the function several times on the device and returns the cost per
# run measured there, without the network
time_f = func.time_evaluator(func.entry_name, dev, number=10)
cost = time_f(a, b).mean
print("%g secs/op" % cost)

# The same kernel as a shared object: ld.lld links it here, the board only loads it.
so_path = temp.relpath("lib.so")
tvm.build(s, [A, B], target=target, name="add_one").export_library(so_path)
remote.upload(so_path)
func = remote.load_module("lib.so")
func(a, b)
np.testing.assert_equal(b.numpy(), a.numpy() + 1)
print("lib.so: loaded on the board and checked")
