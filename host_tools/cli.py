"""`snakemesh`: one CLI for flashing, deploying, inspecting, simulating and
analysing snakemesh meshes. Subcommands live in host_tools/commands/."""
import argparse
import importlib
import sys

from host_tools import __version__
from host_tools.commands import COMMAND_MODULES
from host_tools.errors import CliError


def build_parser():
    p = argparse.ArgumentParser(
        prog="snakemesh",
        description="Flash, deploy, inspect and simulate snakemesh ESP32 meshes.")
    p.add_argument("--version", action="version", version="snakemesh " + __version__)
    p.add_argument("-v", "--verbose", action="store_true", help="show details (and tracebacks) on errors")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        try:
            mod = importlib.import_module("host_tools.commands." + name)
        except ModuleNotFoundError as e:
            if e.name == "host_tools.commands." + name:
                continue
            raise
        mod.register(sub)
    return p


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        rc = args.func(args)
        return 0 if rc is None else rc
    except CliError as e:
        print("snakemesh: error: " + e.message, file=sys.stderr)
        if args.verbose and e.detail:
            print(e.detail, file=sys.stderr)
        if args.verbose and e.__cause__ is not None:
            import traceback
            traceback.print_exception(e.__cause__, file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("snakemesh: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except Exception as e:  # unexpected: a bug, reported as one line unless --verbose
        if args.verbose:
            raise
        print("snakemesh: internal error: %s: %s (run with --verbose for details)"
              % (type(e).__name__, e), file=sys.stderr)
        return 70


if __name__ == "__main__":
    sys.exit(main())
