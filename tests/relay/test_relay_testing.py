"""relay.testing workloads: every network type-checks at its real size; small versions run."""

import numpy as np
import pytest

import kiln as tvm
from kiln import relay
from kiln.relay import reference
from kiln.relay import transform as T

FULL = [
    ("resnet-18", lambda: relay.testing.resnet.get_workload(num_layers=18, batch_size=1, dtype="float32")),
    ("resnet-34", lambda: relay.testing.resnet.get_workload(num_layers=34, batch_size=1, dtype="float32")),
    ("resnet-50", lambda: relay.testing.resnet.get_workload(num_layers=50, batch_size=1, dtype="float32")),
    ("vgg-11", lambda: relay.testing.vgg.get_workload(num_layers=11, batch_size=1, dtype="float32")),
    ("vgg-13", lambda: relay.testing.vgg.get_workload(num_layers=13, batch_size=1, dtype="float32")),
    ("vgg-16", lambda: relay.testing.vgg.get_workload(num_layers=16, batch_size=1, dtype="float32")),
    ("vgg-19", lambda: relay.testing.vgg.get_workload(num_layers=19, batch_size=1, dtype="float32")),
    ("mobilenet", lambda: relay.testing.mobilenet.get_workload(batch_size=1, dtype="float32")),
    ("squeezenet_v1.0", lambda: relay.testing.squeezenet.get_workload(batch_size=1, version="1.0", dtype="float32")),
    ("squeezenet_v1.1", lambda: relay.testing.squeezenet.get_workload(batch_size=1, version="1.1", dtype="float32")),
    ("inception_v3", lambda: relay.testing.inception_v3.get_workload(batch_size=1, dtype="float32")),
]


@pytest.mark.parametrize("name, make", FULL, ids=[n for n, _ in FULL])
def test_workload_type_checks_with_initialized_params(name, make):
    mod, params = make()
    func = mod["main"]
    assert func.checked_type.ret_type == relay.TensorType((1, 1000), "float32")
    size = 299 if name == "inception_v3" else 224
    assert func.params[0].name_hint == "data"
    assert func.params[0].type_annotation.shape == (1, 3, size, size)
    assert set(params) == {p.name_hint for p in func.params[1:]}
    for p in func.params[1:]:
        assert params[p.name_hint].shape == p.type_annotation.shape
        assert np.isfinite(params[p.name_hint].numpy()).all()


def test_params_are_deterministic():
    _, a = relay.testing.mobilenet.get_workload(image_shape=(3, 32, 32))
    _, b = relay.testing.mobilenet.get_workload(image_shape=(3, 32, 32))
    assert all(np.array_equal(a[k].numpy(), b[k].numpy()) for k in a)


def test_params_are_ndarrays_as_in_tvm():
    # TVM 0.13 scripts read the weights with .numpy() or .asnumpy() and pass them to relay.build
    import kiln as tvm
    mod, params = relay.testing.resnet.get_workload(num_layers=18, image_shape=(3, 32, 32), num_classes=10)
    w = params["fc1_weight"]
    assert isinstance(w, tvm.nd.NDArray) and w.shape == (10, 512) and w.dtype == "float32"
    assert np.array_equal(w.numpy(), w.asnumpy()) and np.abs(w.numpy()).max() > 0
    with tvm.transform.PassContext(opt_level=3):
        lib = relay.build(mod, target="llvm", params=params)
    assert np.array_equal(lib.get_params()["p0"].numpy(), lib.get_params()["p0"].asnumpy())


SMALL = [
    ("resnet-18", lambda: relay.testing.resnet.get_workload(num_layers=18, image_shape=(3, 64, 64)), 64),
    ("resnet-50", lambda: relay.testing.resnet.get_workload(num_layers=50, image_shape=(3, 64, 64)), 64),
    ("vgg-11", lambda: relay.testing.vgg.get_workload(num_layers=11, image_shape=(3, 32, 32), batch_norm=True), 32),
    ("mobilenet", lambda: relay.testing.mobilenet.get_workload(image_shape=(3, 64, 64)), 64),
    ("squeezenet_v1.0", lambda: relay.testing.squeezenet.get_workload(version="1.0", image_shape=(3, 64, 64)), 64),
    ("squeezenet_v1.1", lambda: relay.testing.squeezenet.get_workload(version="1.1", image_shape=(3, 64, 64)), 64),
    ("inception_v3", lambda: relay.testing.inception_v3.get_workload(), 299),
]


@pytest.mark.parametrize("name, make, size", SMALL, ids=[n for n, _, _ in SMALL])
def test_workload_runs_and_optimizes_consistently(name, make, size):
    mod, params = make()
    data = np.random.default_rng(0).standard_normal((1, 3, size, size)).astype("float32")
    out = reference.run(mod, {"data": data}, params)
    assert out.shape == (1, 1000) and np.isfinite(out).all()
    np.testing.assert_allclose(out.sum(), 1.0, rtol=1e-4)  # softmax output
    with tvm.transform.PassContext(opt_level=3):
        opt = T.optimize_sequence()(T.BindParams(params)(mod))
    np.testing.assert_allclose(reference.run(opt, {"data": data}), out, rtol=1e-4, atol=1e-7)


def test_create_workload_from_an_expression():
    x = relay.var("data", shape=(1, 8))
    w = relay.var("fc_weight", shape=(4, 8))
    mod, params = relay.testing.create_workload(relay.nn.dense(x, w))
    assert list(params) == ["fc_weight"] and params["fc_weight"].numpy().std() > 0
