"""``tvm.topi``: operator computes (``topi.nn``, ``topi.add``, ...) and CPU schedules (``topi.x86``)."""

from . import nn, testing, utils, x86  # noqa: F401
