"""tvmc: compile, tune and run models from the command line or from Python.

>>> from kiln.driver import tvmc
>>> model = tvmc.load("resnet50.onnx", shape_dict={"data": [1, 3, 224, 224]})
>>> tvmc.tune(model, target="llvm", tuning_records="resnet50.log", rpc_key="android",
...           hostname="127.0.0.1", port=9190, trials=64)
>>> package = tvmc.compile(model, target="llvm", tuning_records="resnet50.log", package_path="resnet50.tar")
>>> result = tvmc.run(package, device="cpu", rpc_key="android", hostname="127.0.0.1", port=9190)
>>> print(result.format_times())

The command line is ``python -m kiln.driver.tvmc`` (``tvmc``, ``kiln tvmc``); docs/tvmc.md is the guide.
"""

from .autotuner import tune_model as tune
from .common import TVMCException
from .compiler import TVMCPackage
from .compiler import compile_model as compile  # noqa: A001 - the seed API's name
from .model import TVMCModel, load
from .runner import TVMCResult
from .runner import run_module as run

__all__ = ["load", "tune", "compile", "run", "TVMCModel", "TVMCPackage", "TVMCResult", "TVMCException"]
