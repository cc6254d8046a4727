"""tvm.transform: PassContext scoping, opt-level gating, Sequential, pass decorators."""

import threading

import pytest

import kiln as tvm
from kiln.ir.module import IRModule
from kiln.transform import PassContext, Sequential, function_pass, module_pass


def _tagging_pass(tag, opt_level=0):
    @module_pass(opt_level=opt_level, name=f"tag_{tag}")
    def tag_pass(mod, ctx):
        out = mod.with_functions(dict(mod.items()))
        out.attrs["tags"] = mod.attrs.get("tags", []) + [tag]
        return out
    return tag_pass


def test_default_context_and_nesting():
    assert PassContext.current().opt_level == 2
    with tvm.transform.PassContext(opt_level=3) as outer:
        assert PassContext.current() is outer
        with PassContext(opt_level=0, config={"relay.FuseOps.max_depth": 8}) as inner:
            assert PassContext.current() is inner
            assert inner.config["relay.FuseOps.max_depth"] == 8
        assert PassContext.current() is outer
    assert PassContext.current().opt_level == 2


def test_opt_level_required_and_disabled_gate_passes():
    seq = Sequential([_tagging_pass("a", 1), _tagging_pass("b", 3), _tagging_pass("c", 0)])
    with PassContext(opt_level=2):
        assert seq(IRModule()).attrs["tags"] == ["a", "c"]
    with PassContext(opt_level=2, required_pass=["tag_b"], disabled_pass=["tag_c"]):
        assert seq(IRModule()).attrs["tags"] == ["a", "b"]


def test_context_is_per_thread():
    seen = {}

    def worker():
        seen["level"] = PassContext.current().opt_level

    with PassContext(opt_level=4):
        t = threading.Thread(target=worker)
        t.start()
        t.join()
    assert seen["level"] == 2  # a new thread starts from the default context


def test_function_pass_skips_primitive_functions():
    from kiln import relay
    x = relay.var("x", shape=(2,))
    prim = relay.Function([x], relay.exp(x)).with_attr("Primitive", 1)
    main = relay.Function([x], relay.exp(x))
    visited = []

    @function_pass(opt_level=0)
    def record(func, mod, ctx):
        visited.append(func)
        return func

    record(IRModule({"main": main, "fused": prim}))
    assert visited == [main]


def test_bad_opt_level():
    with pytest.raises(ValueError, match="opt_level"):
        PassContext(opt_level=7)
