"""``relay.ext.clml``: Qualcomm's OpenCLML needs its SDK and an Adreno GPU; kiln has neither."""

from kiln.errors import CompileError


def clml_codegen(func):
    raise CompileError(f"{func.attrs.get('global_symbol', 'a clml function')}: the 'clml' target needs "
                       "Qualcomm's OpenCLML SDK (ADRENO_OPENCL) and an Adreno GPU, which this kiln cannot "
                       "use; drop 'clml' from the target to run these ops on kiln's OpenCL kernels")
