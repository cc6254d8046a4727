"""``AotModule(executor)``: TVM's wrapper around an AOT executor, as its tutorials write

    aot = tvm.runtime.executor.aot_executor.AotModule(session.create_aot_executor())

kiln's AOT executors (``micro.create_local_aot_executor``, ``session.create_aot_executor()``)
already have AotModule's methods (set_input, get_input, run, get_output, get_num_inputs,
get_num_outputs, get_input_index, ``module.time_evaluator("run", ...)``); this forwards to them.
Imports nothing (the device runtime stays free of the compiler)."""


class AotModule:
    def __init__(self, module):
        if isinstance(module, AotModule):
            module = module._executor
        for name in ("set_input", "run", "get_output"):
            if not callable(getattr(module, name, None)):
                raise TypeError(f"AotModule: {type(module).__name__} is not an AOT executor (it has no {name}); "
                                "pass session.create_aot_executor() or micro.create_local_aot_executor(session)")
        self._executor = module

    def __getattr__(self, name):
        return getattr(self._executor, name)
