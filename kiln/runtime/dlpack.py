"""DLPack structures (v0.8 and the versioned v1 header) and the PyCapsule plumbing.

``DLTensor`` here is the struct kernels receive (docs/abi.md). The capsule functions let
NDArray export itself to numpy/torch without a copy and import their tensors the same way.
"""

from __future__ import annotations

import ctypes

import numpy as np


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class DLManagedTensor(ctypes.Structure):
    pass


_Deleter = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
DLManagedTensor._fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p),
                            ("deleter", _Deleter)]


class DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32),
                ("manager_ctx", ctypes.c_void_p), ("deleter", _Deleter),
                ("flags", ctypes.c_uint64), ("dl_tensor", DLTensor)]


FLAG_READ_ONLY = 1

# dtype name <-> (DLPack type code, bits). bool is one byte per element, as numpy stores it.
_INT, _UINT, _FLOAT, _BOOL = 0, 1, 2, 6
DTYPES = {
    "int8": (_INT, 8), "int16": (_INT, 16), "int32": (_INT, 32), "int64": (_INT, 64),
    "uint8": (_UINT, 8), "uint16": (_UINT, 16), "uint32": (_UINT, 32), "uint64": (_UINT, 64),
    "float16": (_FLOAT, 16), "float32": (_FLOAT, 32), "float64": (_FLOAT, 64),
    "bool": (_BOOL, 8),
}
_CODES = {v: k for k, v in DTYPES.items()}


def dtype_name(dtype) -> str:
    """Canonical name ('float32') for a name, numpy dtype or Python type; clear error otherwise."""
    if isinstance(dtype, str) and dtype in DTYPES:
        return dtype
    try:
        name = np.dtype(dtype).name
    except TypeError:
        name = None
    if name not in DTYPES:
        raise ValueError(f"dtype {dtype!r} is not supported by kiln arrays; "
                         f"use one of {', '.join(DTYPES)}")
    return name


def dtype_from_dl(dt: DLDataType) -> str:
    name = _CODES.get((dt.code, dt.bits))
    if name is None or dt.lanes != 1:
        raise ValueError(f"DLPack dtype (code={dt.code}, bits={dt.bits}, lanes={dt.lanes}) "
                         f"is not supported; kiln arrays hold {', '.join(DTYPES)}")
    return name


# --- PyCapsule access through the C API (ctypes.pythonapi keeps the GIL held) ----------------

_api = ctypes.pythonapi
_CapsuleDestructor = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_api.PyCapsule_New.restype = ctypes.py_object
_api.PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, _CapsuleDestructor]
_api.PyCapsule_GetPointer.restype = ctypes.c_void_p
_api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_api.PyCapsule_SetName.restype = ctypes.c_int
_api.PyCapsule_SetName.argtypes = [ctypes.py_object, ctypes.c_char_p]
_api.PyCapsule_IsValid.restype = ctypes.c_int
_api.PyCapsule_IsValid.argtypes = [ctypes.py_object, ctypes.c_char_p]
# The destructor gets a capsule whose refcount is already 0: it must not become a py_object.
_raw_is_valid = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p)(
    ("PyCapsule_IsValid", _api))
_raw_get_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", _api))

# Exported tensors stay alive here until their consumer calls the deleter.
_exported: dict[int, tuple] = {}


@_Deleter
def _delete_exported(address):
    _exported.pop(address, None)


@_CapsuleDestructor
def _capsule_destructor(capsule):
    # A consumer renames the capsule to "used_..." and owns the deleter from then on;
    # a capsule that was never consumed must release the tensor itself.
    for name in (b"dltensor", b"dltensor_versioned"):
        if _raw_is_valid(capsule, name):
            _exported.pop(_raw_get_pointer(capsule, name), None)


def export_capsule(tensor: DLTensor, owner, versioned: bool = False) -> object:
    """A DLPack capsule viewing ``tensor``'s memory; ``owner`` stays alive until released.

    ``versioned`` makes a DLPack 1.0 "dltensor_versioned" capsule: consumers (numpy >= 2)
    treat unversioned capsules as read-only, but a versioned one says it is writable.
    """
    if versioned:
        managed = DLManagedTensorVersioned()
        managed.major, managed.minor = 1, 0
        name = b"dltensor_versioned"
    else:
        managed = DLManagedTensor()
        name = b"dltensor"
    ctypes.memmove(ctypes.addressof(managed.dl_tensor), ctypes.addressof(tensor),
                   ctypes.sizeof(DLTensor))
    managed.deleter = _delete_exported
    address = ctypes.addressof(managed)
    _exported[address] = (managed, owner)
    return _api.PyCapsule_New(address, name, _capsule_destructor)


class _Imported:
    """Owns a consumed DLPack tensor: calls its producer's deleter when collected."""

    __slots__ = ("_managed", "tensor", "read_only")

    def __init__(self, capsule):
        if _api.PyCapsule_IsValid(capsule, b"dltensor_versioned"):
            managed = DLManagedTensorVersioned.from_address(
                _api.PyCapsule_GetPointer(capsule, b"dltensor_versioned"))
            _api.PyCapsule_SetName(capsule, b"used_dltensor_versioned")
            self.read_only = bool(managed.flags & FLAG_READ_ONLY)
        elif _api.PyCapsule_IsValid(capsule, b"dltensor"):
            managed = DLManagedTensor.from_address(_api.PyCapsule_GetPointer(capsule, b"dltensor"))
            _api.PyCapsule_SetName(capsule, b"used_dltensor")
            self.read_only = False
        else:
            raise ValueError("from_dlpack: the object's __dlpack__() did not return a DLPack "
                             "capsule (or it was already consumed)")
        self._managed = managed
        self.tensor = managed.dl_tensor

    def __del__(self):
        if self._managed.deleter:
            self._managed.deleter(ctypes.addressof(self._managed))


def import_capsule(capsule) -> _Imported:
    return _Imported(capsule)
