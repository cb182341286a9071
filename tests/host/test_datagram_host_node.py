"""`snakemesh node` as this machine's own node for datagrams (issue 25):
the host runs a node joined to a board-like node (a unix-port process), a
script sends and receives through the host node's socket:// console with
host_tools.meshclient, and the other node runs the echo example given by
`--app` (as a board would from its config.json)."""
import os

from host_tools import FIRMWARE_DIR
from host_tools.meshclient import MeshClient
from host_tools.procmesh.nodeproc import NodeProcess, free_port
from ptyproc import snakemesh as at_terminal

SEED_H = "c1" * 32


def test_host_node_console_socket_send_and_recv_with_an_app_on_the_peer():
    port = free_port()
    echo = os.path.join(FIRMWARE_DIR, "examples", "echo.py")
    with NodeProcess(seed=bytes([0xd2]) * 32, listen=("127.0.0.1", port), multicast=False,
                     extra_args=["--app", echo]) as board:
        with at_terminal("node", "--seed", SEED_H, "--connect", "127.0.0.1:%d" % port, "--no-multicast",
                         "--console-port", "0") as h:
            url = h.expect(r"console (socket://127\.0\.0\.1:\d+)\n").group(1)
            h.expect(r"peer up ", 30)
            with MeshClient(url, timeout=10) as mc:
                mc.listen(0)
                r = mc.send(board.pubkey[:10], b"over the host node", service=7, ack=True)
                assert r.state == "delivered" and r.dst == board.pubkey
                got = list(mc.recv(0, count=1, timeout=20))
                assert [(d.src, d.service, d.src_service, d.data) for d in got] == \
                    [(board.pubkey, 0, 7, b"over the host node")]
            h.interrupt()
            assert h.wait() == 0
