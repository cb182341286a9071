"""The telemetry record schema (docs/reference/INTERFACES.md, "Telemetry records") as an
explicit Spark schema, plus the validation rules that decide which lines are
rejected and why.

Every line is parsed twice with `from_json`: once into RECORD_SCHEMA (typed,
PERMISSIVE with `_corrupt_record`) and once into a map of raw JSON texts. A
field that is present in the raw map but null after typed parsing has the
wrong type. The first failing rule gives the line's `reason`; a null reason
means the record is valid.
"""
from pyspark.sql import functions as F
from pyspark.sql import types as T

SCHEMA_VERSION = 1
KINDS = ("state", "peers", "counters", "probe", "event", "topology")
from snake.telemetry import LINK_NAMES  # noqa: E402,F401  (the firmware's names)
CORRUPT = "_corrupt_record"
KEY_RE = "^[0-9a-f]{64}$"

_L = T.LongType()
_S = T.StringType()
_D = T.DoubleType()


def _f(name, typ):
    return T.StructField(name, typ, True)


# Field order matters: the first field with a wrong type names the reason.
TYPED_FIELDS = [
    ("v", _L), ("kind", _S), ("t", _D), ("node", _S),
    # state
    ("root", _S), ("root_seq", _L), ("parent", _S), ("coords", T.ArrayType(_L)),
    ("depth", _L), ("desc", _S), ("routes", _L), ("profile", _S),
    # `peers` is an int in `state` and a list in `peers` records: kept as the
    # raw JSON text here and parsed per kind (PEER_LIST_SCHEMA).
    ("peers", _S),
    # counters
    ("rx", T.MapType(_S, _L)), ("tx", T.MapType(_S, _L)), ("drops", T.MapType(_S, _L)),
    ("verify_done", _L), ("verify_skipped", _L), ("verify_cached", _L),
    ("evictions", T.MapType(_S, _L)), ("occupancy", T.MapType(_S, T.ArrayType(_L))),
    ("mem_free", _L),
    ("tx_bytes", T.MapType(_S, _L)), ("tx_link", T.MapType(_S, _L)), ("tx_bytes_link", T.MapType(_S, _L)),
    ("capacity", T.MapType(_S, T.ArrayType(_L))),
    # the node's defences against hostile peers (console `stats` "defence")
    ("defence", T.MapType(_S, _L)),
    # probe (`id` is kept as text: producers may use ints or strings)
    ("probe", _S), ("id", _S), ("src", _S), ("dst", _S), ("ok", T.BooleanType()),
    ("rtt_ms", _D), ("hops", _L), ("path", T.ArrayType(_S)),
    # event
    ("event", _S), ("detail", _S),
    # topology
    ("edges", T.ArrayType(T.ArrayType(_S))), ("names", T.MapType(_S, _S)),
    # added by `snakemesh monitor`: the console the record came from
    ("port", _S),
]

RECORD_SCHEMA = T.StructType([_f(n, t) for n, t in TYPED_FIELDS] + [_f(CORRUPT, _S)])
RAW_SCHEMA = T.MapType(_S, _S)
PEER_LIST_SCHEMA = T.ArrayType(T.StructType([
    _f("port", _L), _f("key", _S), _f("link", _S), _f("root", _S), _f("root_seq", _L)]))

# Fields that must be present (non-null) for each kind, besides v/kind/t/node.
REQUIRED = {
    "state": ("root", "root_seq"),
    "peers": ("peers",),
    "counters": (),
    "probe": ("probe", "id", "src", "dst", "ok"),
    "event": ("event",),
    "topology": ("edges",),
}
# Fields whose key must be present for the kind even though null is allowed.
REQUIRED_KEYS = {"state": ("desc",)}
COUNTER_FIELDS = ("rx", "tx", "drops", "verify_done", "verify_skipped", "verify_cached",
                  "evictions", "occupancy", "mem_free", "tx_bytes", "tx_link", "tx_bytes_link",
                  "capacity", "defence")
# Key-valued fields checked for format when present (kind, field).
KEY_FIELDS = (("state", "root"), ("state", "parent"), ("state", "desc"),
              ("probe", "src"), ("probe", "dst"))

# Reasons a line can be rejected with (documented in docs/guides/PIPELINE.md).
REASONS = (
    "not_json", "malformed_json", "missing_field:<f>", "unknown_version",
    "unknown_kind", "wrong_type:<f>", "bad_value:<f>", "bad_key:<f>",
)


def parse_lines(lines):
    """lines: DataFrame with `value` (one input line, prefix already removed),
    `source`, `seq` and `ignore` (a reason starting with "ignored:" for lines
    that are not telemetry at all). Returns the rows with every typed field,
    `reason` (null = valid), `raw` (the line, kept only for rejected rows)."""
    opts = {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT}
    df = lines.select("source", "seq", "value", "ignore",
                      F.from_json("value", RECORD_SCHEMA, opts).alias("r"))
    # The rules are built as one SQL text: one py4j call for the whole
    # expression instead of one per Column object (~5,000 of them here).
    kind = "r.kind"

    def rf(name):
        return "r.`%s`" % name

    def q(text):
        return "'%s'" % text.replace("\\", "\\\\").replace("'", "\\'")

    def when(cond, value):
        return "CASE WHEN %s THEN %s END" % (cond, q(value))

    kinds = "(%s)" % ", ".join(q(k) for k in KINDS)
    # The raw map (a second JSON parse) is only needed to explain a line
    # that is already known to be bad, so it is computed for those only.
    suspicious = ("(%s IS NOT NULL OR r.v IS NULL OR r.v != %d OR %s IS NULL OR NOT %s IN %s)"
                  % (rf(CORRUPT), SCHEMA_VERSION, kind, kind, kinds))
    # The other JSON parses (the raw map, a peers record's list) in a
    # projection of their own: from_json has no generated code, and a
    # projection holding one runs interpreted. Everything below (the rules,
    # the typed columns) is then one projection with generated code.
    r = F.col("r")
    df = df.select("source", "seq", "value", "ignore", "r",
                   F.when(F.expr(suspicious), F.from_json("value", RAW_SCHEMA)).alias("m"),
                   F.when(r["kind"] == "peers", F.from_json(r["peers"], PEER_LIST_SCHEMA)).alias("peer_list"))

    def m(name):
        return "m[%s]" % q(name)

    def is_key(col):
        # 64 hex digits, either case: cheaper than a regex on every key
        return "(octet_length(%s) = 64 AND unhex(%s) IS NOT NULL)" % (col, col)

    def first(*whens):
        return "coalesce(%s)" % ", ".join(whens) if len(whens) > 1 else whens[0]

    # Lines the typed parser already flagged: find out why (raw map needed).
    bad = [when("m IS NULL", "malformed_json"),
           when("r.v IS NULL AND %s IS NULL" % m("v"), "missing_field:v"),
           when("r.v IS NULL OR r.v != %d" % SCHEMA_VERSION, "unknown_version"),
           when("%s IS NULL AND %s IS NULL" % (kind, m("kind")), "missing_field:kind"),
           when("%s IS NULL OR NOT %s IN %s" % (kind, kind, kinds), "unknown_kind")]
    for name, _typ in TYPED_FIELDS[2:]:
        bad.append(when("%s IS NULL AND %s IS NOT NULL" % (rf(name), m(name)), "wrong_type:" + name))
    # A line the typed parser flagged but no field-level rule explains.
    bad.append(q("malformed_json"))

    # Well-formed lines: common rules, then the rules of their kind. A
    # `topology` record describes the whole mesh: its `node` (whoever emitted
    # it) may be anything and does not join the node set.
    per_node = "%s != 'topology'" % kind
    common = [when("r.t IS NULL", "missing_field:t"),
              when("%s AND r.node IS NULL" % per_node, "missing_field:node"),
              when("isnan(r.t) OR abs(r.t) = double('Infinity')", "bad_value:t"),
              when("%s AND NOT %s" % (per_node, is_key("r.node")), "bad_key:node")]
    by_kind = dict((k, []) for k in KINDS)
    for k, fields in REQUIRED.items():
        for name in fields:
            by_kind[k].append(when("%s IS NULL" % rf(name), "missing_field:" + name))
    for k, fields in REQUIRED_KEYS.items():
        for name in fields:
            # the key may hold null, so its presence is read from the text
            by_kind[k].append(when("%s IS NULL AND NOT contains(value, %s)" % (rf(name), q('"%s"' % name)),
                                   "missing_field:" + name))
    # `peers` is an int in state records and a list in peers records
    by_kind["state"].append(when("r.peers IS NOT NULL AND peers_n IS NULL", "wrong_type:peers"))
    by_kind["peers"].append(when("peer_list IS NULL", "wrong_type:peers"))
    any_counter = " OR ".join("%s IS NOT NULL" % rf(n) for n in COUNTER_FIELDS)
    by_kind["counters"].append(when("NOT (%s)" % any_counter, "missing_field:counters"))
    for k, name in KEY_FIELDS:
        by_kind[k].append(when("%s IS NOT NULL AND NOT %s" % (rf(name), is_key(rf(name))), "bad_key:" + name))
    by_kind["probe"].append(when("NOT r.probe IN ('ping', 'trace', 'datagram')", "bad_value:probe"))
    by_kind["probe"].append(when("r.hops < 0", "bad_value:hops"))
    by_kind["probe"].append(when("r.rtt_ms < 0", "bad_value:rtt_ms"))
    per_kind = "CASE %s END" % " ".join("WHEN %s = %s THEN %s" % (kind, q(k), first(*by_kind[k]))
                                        for k in KINDS if by_kind[k])
    reason = F.expr(
        "CASE WHEN ignore IS NOT NULL THEN ignore"
        " WHEN NOT startswith(value, '{') AND NOT startswith(ltrim(value), '{') THEN 'not_json'"
        " WHEN %s THEN %s ELSE coalesce(%s, %s) END" % (suspicious, first(*bad), first(*common), per_kind))

    typed = ["r.`%s` AS `%s`" % (name, name) for name, _t in TYPED_FIELDS if name != "peers"]
    df = df.selectExpr(
        "source", "seq", "value", "ignore", "r", "m", *typed,
        "CASE WHEN r.kind = 'state' THEN try_cast(r.peers AS BIGINT) END AS peers_n", "peer_list")
    df = df.withColumn("reason", reason)
    keep = [name for name, _t in TYPED_FIELDS if name != "peers"]
    # Keys in lower case (the format check above takes either case), in the
    # same projection: every extra select copies the whole wide row again.
    # A probe's `path` is kept as sent (a per-element lower() is a per-row
    # lambda and costs more than the rest of the validation).
    lowered = ("node", "root", "parent", "desc", "src", "dst")

    def out_col(n):
        if n in lowered:
            return "lower(`%s`) AS `%s`" % (n, n)
        return "`%s`" % n

    return df.selectExpr(
        "source", "seq", "reason", "CASE WHEN reason IS NOT NULL THEN value END AS raw",
        *[out_col(n) for n in keep], "peers_n", "peer_list")
