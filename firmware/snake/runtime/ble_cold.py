# Bluetooth LE (snake/runtime/ble.py's cold half): building the manager, bringing
# the radio up, shutting it down, the state snapshot.
#
# Each runs once at boot or never while the node runs (stop: shutdown;
# snapshot: tests and diagnostics), so BleManager loads this module for the
# call and drops it again on MicroPython (platform.cold): the running node's heap
# does not hold this code. Loaded at boot (construction, start), so its
# qstrs are interned then, not later (stream.py, "Nothing new after boot").
import asyncio

from snake.platform import const
from snake.runtime.ble import MTU, SVC_UUID_STR, Slot

# the characteristics of ble.py's service (header there)
RX_UUID_STR = "a3c8f4e0-6b1d-4e52-9c7a-0d5e2f8b1a61"
TX_UUID_STR = "a3c8f4e0-6b1d-4e52-9c7a-0d5e2f8b1a62"

# the names of BleManager.stats' counters, in ble.py's _S_* order (snapshot)
STAT_NAMES = ("connects_out", "connects_in", "connect_fail", "setup_fail", "links_up",
              "disconnects", "refused_full", "overflow", "send_stall", "adv_errors",
              "scan_errors", "duplicate", "bytes_in", "bytes_out", "retries", "oom")

# the same values as in ble.py (const(): not importable from there)
_N_CANDIDATES = const(8)
_FREE = const(0)
_CENTRAL = const(0)

_FLAG_READ = const(0x0002)
_FLAG_WRITE_NO_RESPONSE = const(0x0004)
_FLAG_WRITE = const(0x0008)
_FLAG_NOTIFY = const(0x0010)


def init(m, profile, public_key, on_link, ble, gap_name):
    # BleManager.__init__
    m.profile = profile
    m.key = bytes(public_key)
    m.on_link = on_link
    m.ble = ble
    # the GAP name: kept only when given (else start makes "sm-" + the
    # key's first 4 bytes in hex), the task start makes not at all, the
    # UUIDs as one tuple: the manager's attributes fit a 29-slot table (a
    # MicroPython instance's table takes 2, 4, 6, 8, 10, 12, 17, 23, 29, 37
    # ... entries; with 32 it took 37: 64 B more)
    if gap_name:
        m.gap_name = gap_name
    m.nslots = profile.ble_links
    ring = getattr(profile, "ble_ring", 0) or profile.ble_queue * profile.frame_max
    if ring < 2 * MTU:
        ring = 2 * MTU
    m.slots = [Slot(i, ring) for i in range(m.nslots)]
    # candidates heard while scanning (preallocated; filled in the IRQ)
    # (byte arrays where a byte holds the value: less heap than lists)
    m.c_addr = bytearray(6 * _N_CANDIDATES)   # candidate i at 6*i
    m.c_type = bytearray(_N_CANDIDATES)
    m.c_seen = [0] * _N_CANDIDATES
    m.c_used = bytearray(_N_CANDIDATES)
    m.c_wait = [0] * _N_CANDIDATES     # ticks before which we do not try
    m.c_fails = bytearray(_N_CANDIDATES)
    m.stats = [0] * len(STAT_NAMES)
    m.rx_handle = 0
    m.tx_handle = 0
    m.addr = bytes(6)
    m.advertising = False
    m.adv_free = -1
    m.scanning = False
    m.running = False
    # the one outstanding gap_connect (central role)
    m.p_active = False
    m.p_addr = bytearray(6)
    m.p_type = 0
    m.p_t0 = 0
    m.p_cancel = False
    m.p_fail = False
    m.p_ci = -1


def start(m):
    # BleManager.start: the radio up, the GATT service registered, the
    # manager task started (returned)
    if m.ble is None:
        import bluetooth
        m.ble = bluetooth.BLE()
    ble = m.ble
    import bluetooth as bt
    ble.active(True)
    try:
        ble.config(mtu=MTU)
    except (OSError, ValueError):
        pass
    try:
        ble.config(gap_name=getattr(m, "gap_name", None)
                   or ("sm-%02x%02x%02x%02x" % (m.key[0], m.key[1], m.key[2], m.key[3])))
    except (OSError, ValueError):
        pass
    ble.irq(m._irq)
    svc = (bt.UUID(SVC_UUID_STR), (
        (bt.UUID(RX_UUID_STR), _FLAG_WRITE | _FLAG_WRITE_NO_RESPONSE),
        (bt.UUID(TX_UUID_STR), _FLAG_READ | _FLAG_NOTIFY),
    ))
    m._uuids = (svc[0], svc[1][0][0], svc[1][1][0])     # service, rx, tx
    ((m.rx_handle, m.tx_handle),) = ble.gatts_register_services((svc,))
    # a write carries up to MTU-3 bytes; default buffer is 20
    ble.gatts_set_buffer(m.rx_handle, MTU, False)
    try:
        m.addr = bytes(ble.config("mac")[1])
    except (OSError, ValueError, TypeError, IndexError):
        m.addr = bytes(6)
    m.running = True
    # the task is asyncio's to keep (not an attribute: the table above)
    return asyncio.create_task(m._run())


def stop(m):
    # BleManager.stop: every link closed, advertising and scanning off
    m.running = False
    ble = m.ble
    for s in m.slots:
        if s.link is not None:
            s.link.close()
        if s.conn >= 0:
            try:
                ble.gap_disconnect(s.conn)
            except OSError:
                pass
    try:
        ble.gap_advertise(None)
        ble.gap_scan(None)
    except OSError:
        pass
    m.advertising = False
    m.scanning = False


def snapshot(m):
    # BleManager.snapshot: links and counters (tests, diagnostics)
    links = []
    for s in m.slots:
        if s.state == _FREE:
            continue
        a = s.addr
        links.append({"addr": "%02x:%02x:%02x:%02x:%02x:%02x" % (a[0], a[1], a[2], a[3], a[4], a[5]),
                      "role": "central" if s.role == _CENTRAL else "peripheral",
                      "state": s.state, "mtu": s.mtu, "conn": s.conn})
    d = {"links": links, "limit": m.nslots, "advertising": m.advertising,
         "scanning": m.scanning}
    for i in range(len(STAT_NAMES)):
        d[STAT_NAMES[i]] = m.stats[i]
    return d
