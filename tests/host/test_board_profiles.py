"""Every shipped board profile loads, and every place that lists the board
profiles lists the same ones: the folders under boards/, the tables in
README.md and boards/README.md, the boards `snakemesh flash/deploy/build-mpy
--board` take (host_tools.boards.BOARDS, docs/guides/HOST_TOOLS.md's table) and the
profiles the simulator and the process mesh name (host_tools.sim.profiles).

A profile that fails Profile.check() fails every node that runs it at start
(GATEWAY once asked for 512 transmit buffers, over the pools' 255), and a
profile missing from a table or from --board choices is one a user cannot
find or deploy."""
import json
import os
import re

import pytest

from host_tools import BOARDS_DIR, boards
from host_tools.sim import profiles as sim_profiles
from snake.profile import Profile

ROOT = os.path.dirname(BOARDS_DIR)
FOLDERS = sorted(d for d in os.listdir(BOARDS_DIR) if os.path.isdir(os.path.join(BOARDS_DIR, d)))


def table_boards(path, header="| board |"):
    """Board names in the first column of the board table of a markdown file
    ("ESP32_GENERIC, _S3" names ESP32_GENERIC and ESP32_GENERIC_S3)."""
    names = []
    with open(path) as f:
        lines = f.read().splitlines()
    start = None
    for i, line in enumerate(lines):
        if line.startswith(header):
            start = i + 2
            break
    assert start is not None, "no board table in %s" % path
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        cell = line.split("|")[1].strip().strip("`")
        cell = re.sub(r"\s*\(.*\)$", "", cell)   # "NAME (a note)"
        base = None
        for part in cell.split(","):
            part = part.strip()
            if part.startswith("_") and base:
                names.append(base + part)
            else:
                base = part
                names.append(part)
    return sorted(names)


@pytest.mark.parametrize("name", FOLDERS)
def test_board_profile_loads_and_is_named_after_its_folder(name):
    path = os.path.join(BOARDS_DIR, name, "profile.json")
    p = Profile.load(path)
    assert p.name == name
    # a tree announcement as deep as the profile stores fits the buffers
    # that take any frame (up to 54 + 99 bytes a hop; docs/reports/CAPACITY.md),
    # whatever frame_max (every other frame's limit) says
    assert p.large == max(p.frame_max, 54 + 99 * p.max_hops), (p.max_hops, p.frame_max, p.large)
    # a first message (SNEK) may climb to the root and come down again: the
    # hop limit of traffic we originate covers twice the depth we store
    assert p.traffic_hop_limit >= 2 * p.max_hops + 1, (p.traffic_hop_limit, p.max_hops)


def test_every_list_of_board_profiles_is_complete():
    assert table_boards(os.path.join(ROOT, "README.md")) == FOLDERS
    assert table_boards(os.path.join(BOARDS_DIR, "README.md")) == FOLDERS
    assert sim_profiles._boards() == FOLDERS
    # --board of flash / deploy / build-mpy: every profile for a board (not a host)
    with_arch = {}
    for name in FOLDERS:
        with open(os.path.join(BOARDS_DIR, name, "profile.json")) as f:
            with_arch[name] = json.load(f)["arch"]
    assert boards.board_names() == sorted(n for n, a in with_arch.items() if a != "x64")
    assert table_boards(os.path.join(ROOT, "docs", "guides", "HOST_TOOLS.md"), "| board | esptool chip") == \
        boards.board_names()
    for name in boards.board_names():
        b = boards.get_board(name)
        assert b.mpy_arch == with_arch[name]
        # the image it runs is a MicroPython board with a firmware manifest here
        assert os.path.isfile(os.path.join(BOARDS_DIR, b.image, "manifest.py")), b.image
        assert boards.get_board(b.image).chip == b.chip
