"""Where the ``autotvm`` logger's records go when the program configured no logging.

Document 004's tip, ``logging.getLogger('autotvm').setLevel(logging.DEBUG)``, must print every
measurement (``No: 5  GFLOPS: ...  result: ...``). With no handler anywhere Python prints only
warnings (its last-resort handler), so that line alone would print nothing. The handler here
writes to stderr only while the root logger has no handlers: a program that configured logging
(``logging.basicConfig``, tvmc's ``-v``) gets each record once, through its own handlers.
"""

from __future__ import annotations

import logging
import sys


class _ConsoleUnlessConfigured(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        if logging.getLogger().handlers:
            return  # propagation delivers it to the program's handlers
        try:
            sys.stderr.write(self.format(record) + "\n")
            sys.stderr.flush()
        except Exception:  # noqa: BLE001 -- logging must never break tuning
            self.handleError(record)


def install(name: str = "autotvm") -> None:
    """Attach the handler to logger ``name`` once (idempotent across reloads)."""
    logger = logging.getLogger(name)
    if not any(isinstance(h, _ConsoleUnlessConfigured) or type(h).__name__ == "_ConsoleUnlessConfigured"
               for h in logger.handlers):
        handler = _ConsoleUnlessConfigured()
        handler.setFormatter(logging.Formatter("%(message)s"))
        logger.addHandler(handler)
