"""Topology arguments: a path, or the name of a shipped topology
(host_tools/topologies/NAME.txt, given as NAME or NAME.txt)."""
import os

from host_tools.errors import InputError

TOPOLOGY_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "topologies")


def shipped():
    """Names of the shipped topologies (without .txt), sorted."""
    try:
        return sorted(f[:-4] for f in os.listdir(TOPOLOGY_DIR) if f.endswith(".txt"))
    except OSError:
        return []


def resolve(arg, option="--topology"):
    """The path of topology `arg`: an existing file as given, else a shipped
    topology of that name. InputError (one line, the shipped names) else."""
    if arg is None:
        return None
    if os.path.isfile(arg):
        return arg
    if os.path.isdir(arg):
        raise InputError("%s %s is a folder, not a topology file" % (option, arg))
    if os.sep in arg or "/" in arg:
        raise InputError("cannot read topology %s: No such file or directory" % arg)
    name = arg[:-4] if arg.endswith(".txt") else arg
    cand = os.path.join(TOPOLOGY_DIR, name + ".txt")
    if os.path.isfile(cand):
        return cand
    raise InputError("no such topology: %s (not a file, and not one of the shipped topologies: %s)"
                     % (arg, ", ".join(shipped()) or "none"))
