"""The exceptions kiln raises. Every message names the input at fault and what to do."""


class KilnError(RuntimeError):
    """Base class of kiln's errors (also exported as ``TVMError``)."""


TVMError = KilnError


class CompileError(KilnError):
    """The program or schedule cannot be compiled as written."""


class ScheduleError(CompileError):
    """A schedule primitive was misused (names the stage and the axis)."""


class ShapeError(KilnError, ValueError):
    """A tensor's shape, dtype or rank does not match what the callee expects."""


class TargetError(KilnError, ValueError):
    """A target string cannot be parsed or is not supported by this build."""


class RPCError(KilnError):
    """A remote session failed: connection, protocol or remote exception."""


class TuningError(KilnError):
    """Auto-tuning could not proceed."""


class FileFormatError(KilnError):
    """A file from outside (model, package, parameters, graph JSON, script) is malformed: the message
    names the file, the field at fault and what to do (docs/security.md)."""


class SizeLimitError(FileFormatError):
    """A size read from a file exceeds what the file holds or a documented limit (kiln/limits.py)."""


class InternalError(KilnError):
    """A bug in kiln. Please report it with the output of KILN_DEBUG=1."""


class ScriptError(KilnError):
    """TVMScript that cannot be parsed into TIR: the message names the line, column and offending text."""

    def __init__(self, message: str, lineno: int = 0, col: int = 0, source_line: str = "", filename: str = "<script>"):
        self.message, self.lineno, self.col, self.source_line, self.filename = message, lineno, col, source_line, filename
        head = f"line {lineno}, col {col}: {message}" if lineno else message
        if source_line:
            head += f"\n    {source_line.rstrip()}\n    {' ' * max(col - 1, 0)}^"
        super().__init__(head)
