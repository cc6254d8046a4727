"""Compilation targets (``tvm.target.Target``) and the seed API's helpers."""

from .target import KINDS, Target, TargetKind, adreno, arm_cpu, create, cuda, micro, opencl

__all__ = ["KINDS", "Target", "TargetKind", "adreno", "arm_cpu", "create", "cuda", "micro", "opencl"]
