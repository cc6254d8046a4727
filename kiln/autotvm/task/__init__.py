"""Tasks: ``create``, ``Task``, templates, and extraction from a relay program."""

from .task import (TEMPLATES, Task, create, get_config, serialize_args, deserialize_args, template,  # noqa: F401
                   register_input_values)
from .topi_integration import register_topi_compute, register_topi_schedule  # noqa: F401
from .relay_integration import extract_from_program  # noqa: F401
