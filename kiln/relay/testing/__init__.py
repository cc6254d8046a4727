"""``relay.testing``: standard networks with initialized weights, as ``(mod, params)``.

>>> mod, params = relay.testing.resnet.get_workload(num_layers=18, batch_size=1, dtype="float32")
"""

from . import inception_v3, mobilenet, resnet, squeezenet, vgg
from .init import create_workload, init_value

__all__ = ["resnet", "vgg", "mobilenet", "squeezenet", "inception_v3", "create_workload", "init_value"]
