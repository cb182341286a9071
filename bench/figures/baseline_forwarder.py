# Figure 4 baseline: the simplest MicroPython asyncio TCP forwarder of
# Pinecone frames, with no routing (no handshake, no decoding beyond the
# length field, no tables, no queues): it accepts one connection, dials
# the receiver, and copies frame by frame (10-byte header, then the rest of
# the frame as the header's u16 length says) until the sender closes.
#
#   micropython bench/figures/baseline_forwarder.py LISTEN_PORT DEST_HOST DEST_PORT [--nagle]
#
# Like the node's links, the outgoing socket has TCP_NODELAY on (--nagle
# leaves Nagle's algorithm on instead).
#
# Prints "ready PORT" once listening; exits after the first connection ends.
import sys
import asyncio

done = asyncio.Event()
NODELAY = "--nagle" not in sys.argv


async def forward(reader, writer):
    host = sys.argv[2]
    port = int(sys.argv[3])
    out_r, out_w = await asyncio.open_connection(host, port)
    if NODELAY:
        # the same socket option as the node's links (docs/reference/PROTOCOL_NOTES.md: TCP_NODELAY on)
        out_w.s.setsockopt(6, 1, 1)     # IPPROTO_TCP, TCP_NODELAY
    frames = 0
    try:
        while True:
            hdr = await reader.readexactly(10)
            n = (hdr[8] << 8) | hdr[9]
            body = await reader.readexactly(n - 10)
            out_w.write(hdr)
            out_w.write(body)
            await out_w.drain()
            frames += 1
    except (EOFError, OSError):
        pass
    finally:
        out_w.close()
        writer.close()
        print("frames %d" % frames)
        done.set()


async def main():
    port = int(sys.argv[1])
    server = await asyncio.start_server(forward, "127.0.0.1", port)
    print("ready %d" % port)
    await done.wait()
    server.close()


asyncio.run(main())
