"""SVG drawings of the mesh for the report, deterministic for the same data.

* `tree_svg`: the spanning tree as the nodes reported it at the end (parent
  edges), root in the middle and depth as rings, over every link of the last
  topology epoch (Wi-Fi, i.e. every TCP link, solid blue; BLE dashed purple;
  ESP-NOW dotted amber; links of unknown type grey; tree
  edges thick, the other links thin). Several trees (a partition, nodes that
  are their own root) are drawn side by side; nodes outside any tree (down,
  no state) in a row below.
* `snake_svg`: the snake as a ring in key order (lowest key at the top,
  keys rising clockwise). Each node's descending neighbour is an arrow; when
  the snake is right, every arrow goes to the next node anticlockwise (or
  jumps over nodes of other components). Wrong ones are red chords.

Node fill is the node's health (health.py): green healthy, orange degraded,
red broken, grey unknown. Labels are names (else short keys) drawn only where
they do not overlap another label or node; every node carries a tooltip with
its name, key and issues, and the SVG scales without loss when zoomed.
"""
import math
from xml.sax.saxutils import escape, quoteattr

STATUS_FILL = {"healthy": "#38a169", "degraded": "#dd6b20", "broken": "#e53e3e", "unknown": "#a0aec0"}
LINKS = {  # link name -> (colour, dash)
    "wifi": ("#3182ce", ""), "ble": ("#805ad5", "6,3"), "espnow": ("#d69e2e", "1,2"),
}
OTHER_LINK = ("#718096", "2,3")
PRIORITY = {"broken": 0, "degraded": 1, "unknown": 2, "healthy": 3}
FONT = 10


def _link_style(link):
    from host_tools.render import link_label
    return {"Wi-Fi": LINKS["wifi"], "BLE": LINKS["ble"], "ESP-NOW": LINKS["espnow"]}.get(link_label(link),
                                                                                      OTHER_LINK)


def _link_label(link):
    from host_tools.render import link_label
    return link_label(link)


def _tip(r):
    from host_tools.pipeline.health import label
    lines = ["%s  (%s)" % (label(r), r["node"]), "status: %s" % r.get("status", "unknown")]
    if r.get("depth") is not None:
        lines.append("depth %s, %s peers" % (r.get("depth"), "?" if r.get("peers") is None else r.get("peers")))
    for i in r.get("issues") or []:
        lines.append("- " + i["text"])
    return "\n".join(lines)


class _Labels(object):
    """Greedy label placement: a label is drawn only if its box hits no
    other label and no node (grid-bucketed boxes) and lies on the canvas."""
    CELL = 40.0

    def __init__(self, width=None, height=None):
        self.grid = {}
        self.width, self.height = width, height

    def _cells(self, b):
        x0, y0, x1, y1 = b
        for i in range(int(math.floor(x0 / self.CELL)), int(math.floor(x1 / self.CELL)) + 1):
            for j in range(int(math.floor(y0 / self.CELL)), int(math.floor(y1 / self.CELL)) + 1):
                yield (i, j)

    def free(self, b):
        if self.width is not None and (b[0] < 0 or b[1] < 0 or b[2] > self.width or b[3] > self.height):
            return False
        for c in self._cells(b):
            for o in self.grid.get(c, ()):
                if b[0] < o[2] and o[0] < b[2] and b[1] < o[3] and o[1] < b[3]:
                    return False
        return True

    def add(self, b):
        for c in self._cells(b):
            self.grid.setdefault(c, []).append(b)


def _short_label(r):
    """A node's label for the drawings: at most 12 characters (the tooltip
    has the full name and key)."""
    from host_tools.pipeline.health import label
    text = label(r)
    return text if len(text) <= 12 else text[:10] + "\u2026"


def _text_w(s, size=FONT):
    return 0.6 * size * len(s) + 2


# -- tree -------------------------------------------------------------------------

def _forest(rows):
    """parent map (only edges inside the node set, cycles broken), roots."""
    from host_tools.pipeline.health import has_state
    keys = set(r["node"] for r in rows)
    parent = {}
    for r in sorted(rows, key=lambda r: r["node"]):
        p = r.get("parent")
        if p and p in keys and p != r["node"] and has_state(r) and not r.get("down_at_end"):
            parent[r["node"]] = p
    for n in sorted(parent):
        seen = []
        x = n
        while x in parent:
            if x in seen:
                del parent[x]       # a parent cycle (stale reports): cut it here
                break
            seen.append(x)
            x = parent[x]
    return parent


def _radial(root, children, order_key):
    """{node: (depth, angle)} of a leaf-weighted radial layout."""
    leaves = {}
    stack = [(root, False)]
    while stack:
        n, done = stack.pop()
        kids = children.get(n, [])
        if done or not kids:
            leaves[n] = sum(leaves[c] for c in kids) if kids else 1
        else:
            stack.append((n, True))
            stack.extend((c, False) for c in kids)
    pos = {root: (0, 0.0)}
    stack = [(root, 0, 0.0, 2 * math.pi)]
    while stack:
        n, d, a0, a1 = stack.pop()
        kids = sorted(children.get(n, []), key=order_key)
        total = float(sum(leaves[c] for c in kids)) or 1.0
        a = a0
        for c in kids:
            w = (a1 - a0) * leaves[c] / total
            pos[c] = (d + 1, a + w / 2.0)
            stack.append((c, d + 1, a, a + w))
            a += w
    return pos


def _spread(pol, gap, min_dist):
    """Push apart the nodes of each ring that the leaf-weighted wedges put
    closer than min_dist (px along the ring), keeping their order: near the
    root a wedge is short, and without this a node's children pile up on
    one spot and their labels point at the wrong circle."""
    rings = {}
    for n, (d, a) in pol.items():
        if d:
            rings.setdefault(d, []).append((a, n))
    out = dict(pol)
    for d, items in rings.items():
        items.sort()
        # cut the ring at its widest gap, so nodes either side of angle 0 count as neighbours
        gaps = [(items[(i + 1) % len(items)][0] - items[i][0]) % (2 * math.pi) for i in range(len(items))]
        cut = gaps.index(max(gaps)) + 1
        items = [(a + (2 * math.pi if i < cut else 0.0), n) for i, (a, n) in enumerate(items)]
        items = items[cut:] + items[:cut]
        sep = min_dist / float(d * gap)
        if sep * len(items) >= 2 * math.pi:
            sep = 2 * math.pi / len(items)
        # groups of nodes closer than sep, each centred on its members'
        # own angles; adjacent groups that then overlap merge (so a pile
        # spreads both ways and the rest of the ring stays where it was)
        groups = []                     # [sum of angles, count]
        for a, _n in items:
            groups.append([a, 1])
            while len(groups) > 1:
                (s0, k0), (s1, k1) = groups[-2], groups[-1]
                end0 = s0 / k0 + (k0 - 1) * sep / 2.0
                start1 = s1 / k1 - (k1 - 1) * sep / 2.0
                if start1 - end0 >= sep:
                    break
                groups[-2:] = [[s0 + s1, k0 + k1]]
        i = 0
        for total, k in groups:
            first = total / k - (k - 1) * sep / 2.0
            for j in range(k):
                out[items[i][1]] = (d, first + j * sep)
                i += 1
    return out


def tree_svg(rows, edges, width=1100):
    """rows: judged node rows (health.py); edges: [(a, b, link)] of the last
    topology epoch. Returns SVG text."""
    from host_tools.pipeline.health import label
    by = dict((r["node"], r) for r in rows)
    parent = _forest(rows)
    children = {}
    for c, p in parent.items():
        children.setdefault(p, []).append(c)
    placed_in_tree = set(parent) | set(parent.values())
    order_key = lambda n: (label(by[n]).lower(), n)  # noqa: E731
    roots = sorted((n for n in placed_in_tree if n not in parent), key=lambda n: (-_size(n, children), n))
    loose = sorted((r["node"] for r in rows if r["node"] not in placed_in_tree),
                   key=lambda n: (PRIORITY.get(by[n].get("status"), 3), order_key(n)))
    n_total = max(1, len(rows))
    node_r = 7.0 if n_total <= 30 else (5.0 if n_total <= 120 else 4.0)

    # lay out each tree in its own box, then shelf-pack the boxes
    boxes = []
    main = _size(roots[0], children) if roots else 1
    for root in roots:
        size = _size(root, children)
        pol = _radial(root, children, order_key)
        maxd = max(d for d, _a in pol.values()) or 1
        big_r = (width / 2.0 - 70) * math.sqrt(size / float(main))
        big_r = max(big_r, min(width / 2.0 - 70, 40.0 * maxd))
        gap = min(big_r / maxd, 90.0)
        # a ring must have room for its nodes side by side: a crowded one
        # widens the rings (the drawing grows; the page scales it)
        per_ring = {}
        for d, _a in pol.values():
            per_ring[d] = per_ring.get(d, 0) + 1
        gap = max([gap] + [k * (2 * node_r + 3) / (2 * math.pi * d) for d, k in per_ring.items() if d])
        big_r = gap * maxd
        pol = _spread(pol, gap, 2 * node_r + 3)
        pts = dict((n, (d * gap * math.sin(a), -d * gap * math.cos(a))) for n, (d, a) in pol.items())
        half = max(big_r, gap) + 40
        boxes.append((root, pts, 2 * half, 2 * half, gap))
    pos = {}
    rings = []
    x = y = 0.0
    shelf_h = 0.0
    canvas_w = float(width)     # wider when one tree needs more room than `width`
    for root, pts, w, h, gap in boxes:
        if x > 0 and x + w > width:
            x, y, shelf_h = 0.0, y + shelf_h, 0.0
        cx, cy = x + w / 2.0, y + h / 2.0
        for n, (px, py) in pts.items():
            pos[n] = (cx + px, cy + py)
        maxd = int(round(max(math.hypot(px, py) for px, py in pts.values()) / gap)) if gap else 0
        rings.append((cx, cy, gap, maxd))
        x += w
        canvas_w = max(canvas_w, x)
        shelf_h = max(shelf_h, h)
    y += shelf_h
    loose_y = None
    if loose:
        loose_y = y + 30
        step = 110.0
        per_row = max(1, int(width // step))
        for i, n in enumerate(loose):
            pos[n] = (step / 2 + (i % per_row) * step, loose_y + 20 + (i // per_row) * 40)
        y = loose_y + 20 + ((len(loose) - 1) // per_row + 1) * 40
    height = max(y + 10, 200)

    tree_edges = set(tuple(sorted((c, p))) for c, p in parent.items())
    link_of = {}
    for a, b, link in edges:
        link_of[tuple(sorted((a, b)))] = link
    out = [_svg_head(canvas_w, height)]
    # depth rings
    for cx, cy, gap, maxd in rings:
        for d in range(1, maxd + 1):
            out.append('<circle cx="%.1f" cy="%.1f" r="%.1f" fill="none" stroke="#edf2f7" stroke-width="1"/>'
                       % (cx, cy, d * gap))
    # links that are not tree edges: thin
    out.append('<g stroke-width="0.8" opacity="0.45" fill="none">')
    for (a, b), link in sorted(link_of.items()):
        if (a, b) in tree_edges or a not in pos or b not in pos:
            continue
        col, dash = _link_style(link)
        out.append('<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s"%s/>' % (
            pos[a][0], pos[a][1], pos[b][0], pos[b][1], col, ' stroke-dasharray="%s"' % dash if dash else ""))
    out.append('</g>')
    # tree edges: thick, towards the parent
    out.append('<g stroke-width="2.4" fill="none">')
    for c, p in sorted(parent.items()):
        link = link_of.get(tuple(sorted((c, p))))
        col, dash = _link_style(link)
        out.append('<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s"%s><title>%s</title></line>' % (
            pos[c][0], pos[c][1], pos[p][0], pos[p][1], col, ' stroke-dasharray="%s"' % dash if dash else "",
            escape("%s -> parent %s (%s link)" % (label(by[c]), label(by[p]), _link_label(link)))))
    out.append('</g>')
    if loose:
        out.append('<text x="4" y="%.1f" font-size="12" fill="#4a5568">Not in a tree at the end '
                   '(down, no state record, or alone):</text>' % (loose_y + 2))
    out.extend(_nodes_and_labels(rows, pos, node_r, roots, radial_center=None, size=(canvas_w, height)))
    out.append("</svg>")
    return "\n".join(out)


def _size(root, children):
    n, stack = 0, [root]
    while stack:
        x = stack.pop()
        n += 1
        stack.extend(children.get(x, []))
    return n


def _svg_head(width, height):
    return ('<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 %d %d" width="%d" height="%d" '
            'font-family="DejaVu Sans, Arial, sans-serif" font-size="%d" style="max-width:100%%;height:auto">'
            '<defs>'
            '<marker id="ah-ok" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="6" markerHeight="6" '
            'orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="#2f855a"/></marker>'
            '<marker id="ah-bad" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" '
            'orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="#e53e3e"/></marker>'
            '<marker id="ah-exp" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="6" markerHeight="6" '
            'orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="#a0aec0"/></marker>'
            '</defs><rect width="100%%" height="100%%" fill="white"/>' % (
                int(math.ceil(width)), int(math.ceil(height)), int(math.ceil(width)), int(math.ceil(height)), FONT))


def _nodes_and_labels(rows, pos, node_r, roots, radial_center, size=(None, None)):
    """Node circles with tooltips, then labels where they fit. With
    radial_center, labels are written outward along the radius (ring)."""
    from host_tools.pipeline.health import label
    out = []
    lab = _Labels(*size)
    for r in rows:
        if r["node"] in pos:
            x, y = pos[r["node"]]
            rr = node_r * (1.8 if r["node"] in roots else 1.0)
            lab.add((x - rr, y - rr, x + rr, y + rr))
    root_set = set(roots)
    for r in sorted(rows, key=lambda r: (PRIORITY.get(r.get("status"), 3) == 3, r["node"])):
        n = r["node"]
        if n not in pos:
            continue
        x, y = pos[n]
        fill = STATUS_FILL.get(r.get("status"), STATUS_FILL["unknown"])
        out.append('<g><title>%s</title>' % escape(_tip(r)))
        if n in root_set:
            out.append('<circle cx="%.1f" cy="%.1f" r="%.1f" fill="white" stroke="#1a202c" stroke-width="2"/>'
                       % (x, y, node_r * 1.8))
        out.append('<circle cx="%.1f" cy="%.1f" r="%.1f" fill="%s" stroke="#1a202c" stroke-width="0.8"/></g>'
                   % (x, y, node_r, fill))
    order = sorted(rows, key=lambda r: (r["node"] not in root_set, PRIORITY.get(r.get("status"), 3),
                                        label(r).lower(), r["node"]))
    for r in order:
        n = r["node"]
        if n not in pos:
            continue
        x, y = pos[n]
        text = _short_label(r) + (" (root)" if n in root_set and radial_center is None else "")
        w = _text_w(text)
        bold = r.get("status") in ("broken", "degraded") or n in root_set
        weight = ' font-weight="bold"' if bold else ""
        colour = "#c53030" if r.get("status") == "broken" else "#1a202c"
        if radial_center is not None:
            cx, cy = radial_center
            a = math.atan2(y - cy, x - cx)
            deg = math.degrees(a)
            gap = node_r + 4
            if -90 <= deg <= 90:
                tx, ty = x + gap * math.cos(a), y + gap * math.sin(a)
                out.append('<text x="%.1f" y="%.1f" transform="rotate(%.1f %.1f %.1f)" dominant-baseline="middle"'
                           ' fill="%s"%s>%s</text>' % (tx, ty, deg, tx, ty, colour, weight, escape(text)))
            else:
                tx, ty = x + gap * math.cos(a), y + gap * math.sin(a)
                out.append('<text x="%.1f" y="%.1f" transform="rotate(%.1f %.1f %.1f)" text-anchor="end" '
                           'dominant-baseline="middle" fill="%s"%s>%s</text>'
                           % (tx, ty, deg + 180, tx, ty, colour, weight, escape(text)))
            continue
        placed = False
        off = node_r * (1.8 if n in root_set else 1.0) + 3
        for dx, anchor in ((off, "start"), (-off, "end")):
            for dy in (0, -(FONT + 1), FONT + 1):
                x0 = x + dx if anchor == "start" else x + dx - w
                box = (x0, y + dy - FONT * 0.6, x0 + w, y + dy + FONT * 0.6)
                if lab.free(box):
                    lab.add(box)
                    out.append('<text x="%.1f" y="%.1f" text-anchor="%s" dominant-baseline="middle" fill="%s"'
                               ' stroke="white" stroke-width="3" paint-order="stroke"%s>%s</text>'
                               % (x + dx, y + dy, anchor, colour, weight, escape(text)))
                    placed = True
                    break
            if placed:
                break
    return out


# -- snake ------------------------------------------------------------------------

def snake_svg(rows, width=1100):
    """The snake as a ring in key order with each node's final descending
    neighbour as an arrow. Returns SVG text."""
    from host_tools.pipeline.health import label
    nodes = sorted(rows, key=lambda r: r["node"])
    n = len(nodes)
    if not n:
        return _svg_head(width, 60) + '<text x="10" y="30">no nodes</text></svg>'
    longest = max(_text_w(_short_label(r)) for r in nodes)
    ring = max(120.0, n * (FONT + 3) / (2 * math.pi))
    half = ring + longest + 20
    size = 2 * half
    cx = cy = half
    pos = {}
    for i, r in enumerate(nodes):
        a = -math.pi / 2 + 2 * math.pi * i / n
        pos[r["node"]] = (cx + ring * math.cos(a), cy + ring * math.sin(a))
    node_r = 6.0 if n <= 30 else (4.0 if n <= 120 else 3.0)
    idx = dict((r["node"], i) for i, r in enumerate(nodes))
    by = dict((r["node"], r) for r in nodes)
    wrong = [r for r in nodes if r.get("snake_ok") is False]
    out = [_svg_head(size, size)]
    out.append('<circle cx="%.1f" cy="%.1f" r="%.1f" fill="none" stroke="#edf2f7" stroke-width="1"/>' % (cx, cy, ring))
    out.append('<text x="%.1f" y="%.1f" text-anchor="middle" fill="#4a5568" font-size="12">keys rise clockwise '
               'from the top</text>' % (cx, cy - 8))
    out.append('<text x="%.1f" y="%.1f" text-anchor="middle" fill="#4a5568" font-size="12">%d of %d '
               'descending links right</text>' % (cx, cy + 10, sum(1 for r in nodes if r.get("snake_ok")), n))
    for r in nodes:
        d = r.get("desc")
        a, ok = r["node"], r.get("snake_ok")
        if d and d in pos:
            out.append(_arrow(pos[a], pos[d], (cx, cy), ring, idx[a], idx[d], n,
                              "bad" if ok is False else "ok", "%s -> %s%s" % (
                                  label(r), label(by[d]),
                                  " (wrong)" if ok is False else "")))
        if ok is False and len(wrong) <= 40:
            e = r.get("expected_desc")
            if e and e in pos:
                out.append(_arrow(pos[a], pos[e], (cx, cy), ring, idx[a], idx[e], n, "exp",
                                  "%s should point to %s" % (label(r), label(by[e]))))
    out.extend(_nodes_and_labels(nodes, pos, node_r, [], radial_center=(cx, cy)))
    out.append("</svg>")
    return "\n".join(out)


def _arrow(p, q, c, ring, i, j, n, kind, tip):
    """Adjacent nodes: a short arc just inside the ring; others: a chord
    bent towards the centre."""
    colour = {"ok": "#2f855a", "bad": "#e53e3e", "exp": "#a0aec0"}[kind]
    dash = ' stroke-dasharray="4,3"' if kind == "exp" else ""
    width = 1.6 if kind == "bad" else 1.1
    steps = min((i - j) % n, (j - i) % n)
    # shorten both ends so the head does not hide under the node
    dx, dy = q[0] - p[0], q[1] - p[1]
    dist = math.hypot(dx, dy) or 1.0
    cut = min(5.0, dist / 4.0)
    p2 = (p[0] + dx * cut / dist, p[1] + dy * cut / dist)
    q2 = (q[0] - dx * cut / dist, q[1] - dy * cut / dist)
    mx, my = (p2[0] + q2[0]) / 2.0, (p2[1] + q2[1]) / 2.0
    # control point: pulled towards the centre by a share of the chord's
    # length, so neighbours get a shallow arc and far jumps a deep bow
    to_c = math.hypot(c[0] - mx, c[1] - my) or 1.0
    bend = min(to_c, dist * (0.25 if steps <= 1 else 0.35))
    kx, ky = mx + (c[0] - mx) * bend / to_c, my + (c[1] - my) * bend / to_c
    return ('<path d="M%.1f,%.1f Q%.1f,%.1f %.1f,%.1f" fill="none" stroke="%s" stroke-width="%.1f"%s '
            'marker-end="url(#ah-%s)"><title>%s</title></path>' % (
                p2[0], p2[1], kx, ky, q2[0], q2[1], colour, width, dash, kind, escape(tip)))


def legend_html():
    """An HTML legend shared by both drawings."""
    items = []
    for status in ("healthy", "degraded", "broken", "unknown"):
        items.append('<span class="lg"><svg width="14" height="14"><circle cx="7" cy="7" r="5" fill="%s" '
                     'stroke="#1a202c" stroke-width="0.8"/></svg> %s</span>' % (STATUS_FILL[status], status))
    for name, (col, dash) in (("Wi-Fi link (TCP)", LINKS["wifi"]), ("BLE link", LINKS["ble"]),
                              ("ESP-NOW link", LINKS["espnow"]), ("link of unknown type", OTHER_LINK)):
        items.append('<span class="lg"><svg width="34" height="10"><line x1="1" y1="5" x2="33" y2="5" stroke="%s" '
                     'stroke-width="2.4"%s/></svg> %s</span>' % (col, ' stroke-dasharray=%s' % quoteattr(dash)
                                                              if dash else "", name))
    items.append('<span class="lg"><svg width="18" height="18"><circle cx="9" cy="9" r="7" fill="white" '
                 'stroke="#1a202c" stroke-width="2"/><circle cx="9" cy="9" r="4" fill="#38a169"/></svg> root</span>')
    return " ".join(items)
