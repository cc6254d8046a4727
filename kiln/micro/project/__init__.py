"""Project templates: a folder per board that turns a Model Library Format tar into firmware."""

from __future__ import annotations

import os

from kiln.errors import KilnError

TEMPLATES = ("qemu-mps2-an385",)


def get_microtvm_template_projects(name: str) -> str:
    """The folder of template ``name`` (``"qemu-mps2-an385"``)."""
    if name not in TEMPLATES:
        raise KilnError(f"no micro project template {name!r}; templates: {', '.join(TEMPLATES)}")
    return os.path.join(os.path.dirname(__file__), name)
