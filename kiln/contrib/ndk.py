"""Link modules for Android with the NDK's clang: ``export_library("lib.so", fcompile=ndk.create_shared)``.

The compiler is ``TVM_NDK_CC`` (read through kiln.config), e.g.
``$ANDROID_NDK_HOME/toolchains/llvm/prebuilt/linux-x86_64/bin/aarch64-linux-android28-clang``.
Build the module with a matching target, ``llvm -mtriple=aarch64-linux-android``.
"""

from __future__ import annotations

import os
import shutil

from .. import config
from ..errors import KilnError
from . import cc as _cc

_INSTALL_HINT = (
    "install the Android NDK (https://developer.android.com/ndk, or `sdkmanager ndk;26.1.10909125`) and "
    "set TVM_NDK_CC to its clang for your ABI and API level, e.g. "
    "$ANDROID_NDK_HOME/toolchains/llvm/prebuilt/linux-x86_64/bin/aarch64-linux-android28-clang. "
    "Without an NDK, export_library('lib.so') links Android modules with ld.lld")


def ndk_compiler() -> str:
    """The NDK compiler named by TVM_NDK_CC; KilnError saying what to install when absent."""
    compiler = config.get().ndk_cc
    if not compiler:
        raise KilnError(f"contrib.ndk needs an NDK compiler but TVM_NDK_CC is not set: {_INSTALL_HINT}")
    if shutil.which(compiler) is None and not os.access(compiler, os.X_OK):
        raise KilnError(f"TVM_NDK_CC={compiler!r} is not an executable compiler: {_INSTALL_HINT}")
    return compiler


def create_shared(output: str, objects, options=None) -> None:
    """Link ``objects`` into the Android shared library ``output`` with the NDK's clang.

    >>> lib.export_library("lib.so", fcompile=ndk.create_shared)
    """
    # The NDK clang brings its own sysroot and bionic libc; modules need nothing else.
    _cc.create_shared(output, objects, list(options or []), cc=ndk_compiler())


create_shared.output_format = "so"
