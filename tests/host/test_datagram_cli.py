"""`snakemesh send`/`recv` formatting and argument checks without a node:
the recv line and JSON formats exactly as docs/guides/DATAGRAMS.md says,
service numbers, the stats table's datagram section."""
import json
import subprocess
import sys

import pytest

from host_tools.commands.datagram import format_json, format_line
from host_tools.errors import InputError
from host_tools.meshclient import Datagram, parse_service
from host_tools.names import Names
from host_tools.render import render_stats

SRC = "ab" * 32


def test_recv_line_text_and_binary():
    names = Names([("alpha", SRC)])
    assert format_line(Datagram(SRC, 7, 3, b"hi there"), Names()) == '%s 7 8 "hi there"' % SRC[:16]
    assert format_line(Datagram(SRC, 7, 3, b"hi"), names) == 'alpha 7 2 "hi"'
    assert format_line(Datagram(SRC, 9, 0, b"\xff\x00"), Names()) == "%s 9 2 hex:ff00" % SRC[:16]


def test_recv_json_fields():
    assert json.loads(format_json(Datagram(SRC, 7, 3, b"hi"))) == {
        "src": SRC, "service": 7, "len": 2, "data_hex": "6869", "text": "hi"}
    assert json.loads(format_json(Datagram(SRC, 7, 3, b"\xff"))) == {
        "src": SRC, "service": 7, "len": 1, "data_hex": "ff"}


@pytest.mark.parametrize("bad", ["-1", "65536", "seven", "", "1.5", None])
def test_bad_service_numbers(bad):
    with pytest.raises(InputError) as e:
        parse_service(bad)
    assert "0..65535" in e.value.message and e.value.exit_code == 2


def test_good_service_numbers():
    assert [parse_service(s) for s in ("0", "7", "65535", 12)] == [0, 7, 65535, 12]


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "host_tools.cli"] + list(args), capture_output=True,
                          text=True, timeout=60)


def test_bad_arguments_fail_before_any_port_is_opened(tmp_path):
    for args in (["send", SRC, "x", "--port", "/nonexistent", "--service", "99999"],
                 ["send", "zz", "x", "--port", "/nonexistent"],
                 ["send", SRC, "x", "--file", str(tmp_path / "f"), "--port", "/nonexistent"],
                 ["recv", "--port", "/nonexistent", "--count", "0"],
                 ["recv", "--port", "/nonexistent", "--service", "x"]):
        r = _cli(*args)
        lines = r.stderr.strip().splitlines()
        assert r.returncode not in (0, 3) and len(lines) == 1 and "/nonexistent" not in lines[0], (args, r.stderr)


def test_stats_table_has_a_datagram_section():
    out = render_stats({"datagrams": {"sent": 3, "delivered": 2, "failed_timeout": 1, "failed_busy": 0,
                                      "received": 4, "pending": 0, "retries": 6, "duplicates": 1,
                                      "reasm_refused": 2}})
    sec = out.split("application datagrams\n", 1)[1].split("\n\n", 1)[0]
    assert "failed: timeout 1" in sec and "reasm_refused  2" in sec and "retries    6" in sec
    assert "none yet" in render_stats({"datagrams": None})
