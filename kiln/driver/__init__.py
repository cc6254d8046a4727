"""Drivers: ``tvm.build`` / ``tvm.lower`` (build_module) and, later, the tvmc command line."""
