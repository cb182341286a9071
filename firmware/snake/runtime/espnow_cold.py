# ESP-NOW (snake/runtime/espnow_port.py's cold half): building the manager, bringing
# the radio up next to Wi-Fi, shutting it down, the state snapshot. Each runs
# once at boot or never while the node runs, so EspNowManager loads this
# module for the call and drops it again on MicroPython.
import asyncio

from snake.platform import const
from snake import platform
from snake.runtime.espnow_port import Slot, _BCAST

# the names of EspNowManager.stats, in espnow_port's _S_* order
STAT_NAMES = ("beacons_in", "opens_out", "opens_in", "open_fail", "links_up", "disconnects",
              "dead", "refused_full", "peer_full", "bad_msg", "no_link", "retransmits",
              "resumes", "rx_dropped", "tx_busy", "bytes_in", "bytes_out", "table_cleared", "oom")

_MIN_RING = const(250)


def init(m, profile, public_key, on_link, e, settings):
    m.profile = profile
    m.key = bytes(public_key)
    m.on_link = on_link
    m.e = e
    m.settings = settings
    m.nslots = profile.espnow_links
    ring = profile.espnow_ring
    if ring < _MIN_RING:
        ring = _MIN_RING
    m.slots = [Slot(ring) for _ in range(m.nslots)]
    m.stats = [0] * len(STAT_NAMES)
    m.dbuf = bytearray(250)
    m.dmv = memoryview(m.dbuf)
    m.cbuf = bytearray(6)
    m.cmv = memoryview(m.cbuf)
    b = bytearray(36)
    b[0] = 0xE1
    b[1] = 1
    b[4:36] = m.key
    m.beacon = b
    m.pending = None
    m.bo_mac = bytearray(24)
    m.bo_until = [0, 0, 0, 0]
    m.bo_used = bytearray(4)
    m.bo_next = 0
    m.flag = platform.irq_flag()
    m.running = False
    m.t_beacon = 0
    m.t_tick = 0
    m.mac = bytes(6)
    m.ptable = None
    m.channel = 0
    m.notes = []


def _wlan(m, e):
    """The Wi-Fi side ESP-NOW needs: the station interface active, power
    saving off, the access point's channel when on one (else the configured
    channel), long-range mode when asked. Returns our MAC."""
    st = m.settings
    ch = getattr(st, "espnow_channel", 0) or 0
    lr = getattr(st, "espnow_lr", False)
    network = platform.try_import("network")
    W = getattr(network, "WLAN", None) if network is not None else None
    if W is None:
        # host: the emulated radio stands in for the interface
        if ch and hasattr(e, "_set_channel"):
            e._set_channel(ch)
        m.channel = ch or 1
        if lr:
            m.notes.append("long-range mode has no emulation: ignored")
        f = getattr(e, "_wlan_mac", None)
        return f() if f is not None else bytes(6)
    sta = W(getattr(W, "IF_STA", getattr(network, "STA_IF", 0)))
    if not sta.active():
        sta.active(True)
    try:
        # with power saving the radio sleeps between beacons of the AP and
        # misses ESP-NOW frames (MicroPython docs, "ESPNow and Wifi Operation")
        sta.config(pm=getattr(W, "PM_NONE", 0))
    except (OSError, ValueError, AttributeError) as ex:
        m.notes.append("cannot turn power saving off: %s" % (ex,))
    on_ap = sta.isconnected()
    if on_ap:
        m.channel = sta.config("channel")
        if ch and ch != m.channel:
            m.notes.append("espnow_channel %d ignored: on the access point's channel %d" % (ch, m.channel))
    else:
        if ch:
            try:
                sta.config(channel=ch)
            except (OSError, ValueError) as ex:
                m.notes.append("cannot set channel %d: %s" % (ch, ex))
        try:
            m.channel = sta.config("channel")
        except (OSError, ValueError):
            m.channel = ch
    if lr:
        proto = getattr(W, "PROTOCOL_LR", None)
        if proto is None:
            proto = getattr(network, "MODE_LR", None)
        if proto is None:
            m.notes.append("long-range mode needs MicroPython >= 1.27 (WLAN.PROTOCOL_LR): off")
        else:
            try:
                # on an AP keep the 802.11 b/g/n modes it needs, LR beside them
                sta.config(protocol=(sta.config("protocol") | proto) if on_ap else proto)
            except (OSError, ValueError) as ex:
                m.notes.append("cannot set long-range mode: %s" % (ex,))
    return bytes(sta.config("mac"))


def start(m):
    e = m.e
    if e is None:
        import espnow
        e = m.e = espnow.ESPNow()
    e.active(True)
    m.mac = _wlan(m, e)
    try:
        e.add_peer(_BCAST)
    except OSError as ex:
        if not (len(ex.args) > 1 and ex.args[1] == "ESP_ERR_ESPNOW_EXIST"):
            raise
    m.ptable = getattr(e, "peers_table", None)
    try:
        e.irq(m._irq)
    except (AttributeError, TypeError):
        pass        # no callbacks: the clock task's flag polls the radio every tick
    m.running = True
    m.task = asyncio.create_task(m._run())
    m.clock = asyncio.create_task(m._clock())
    return m.task


def stop(m):
    m.running = False
    now = 0
    for s in m.slots:
        if s.state != 0:
            m._free(s, now)
    try:
        m.e.irq(None)
    except (AttributeError, TypeError, OSError):
        pass
    m.flag.set()


def snapshot(m):
    links = []
    for s in m.slots:
        if s.state == 0:
            continue
        a = s.mac
        links.append({"mac": "%02x:%02x:%02x:%02x:%02x:%02x" % (a[0], a[1], a[2], a[3], a[4], a[5]),
                      "state": ("free", "opening", "up")[s.state], "sid": s.sid,
                      "outbound": s.outbound, "rx_held": s.rn, "tx_held": s.tn, "unacked": s.ts})
    a = m.mac
    return {"mac": "%02x:%02x:%02x:%02x:%02x:%02x" % (a[0], a[1], a[2], a[3], a[4], a[5]),
            "channel": m.channel, "links": links, "notes": list(m.notes or ()),
            "counters": dict(zip(STAT_NAMES, m.stats))}
