"""Drivers above the whole stack: the tvmc command line and its Python API (``tvm.build`` and
``tvm.lower`` sit lower, in kiln/build_module.py, below relay)."""
