"""Expected failures of the host tools.

Every expected failure (no such port, permission denied, timeout, board busy,
garbage on the line, bad key format, bad input file) is raised as CliError
and printed by the CLI as one line with a non-zero exit code; tracebacks are
only shown with --verbose.
"""


class CliError(Exception):
    """An expected failure: `message` is shown to the user as one line."""

    exit_code = 1

    def __init__(self, message, exit_code=None, detail=None):
        super().__init__(message)
        self.message = message
        if exit_code is not None:
            self.exit_code = exit_code
        self.detail = detail


class UsageError(CliError):
    exit_code = 2


class DeviceError(CliError):
    """The board or serial port failed (missing, busy, unplugged, garbage)."""
    exit_code = 3


class TimeoutError_(DeviceError):
    exit_code = 4


class InputError(CliError):
    """A file or folder given on the command line is missing or unusable."""
    exit_code = 5


class EngineError(CliError):
    """The analysis engine failed for lack of resources: Spark's JVM ran out
    of memory or died (killed, crashed) during `snakemesh analyze`."""
    exit_code = 6
