"""The telemetry record schema (docs/reference/INTERFACES.md, "Telemetry records") as an
explicit Spark schema, plus the validation rules that decide which lines are
rejected and why.

Every line is parsed with `from_json` into RECORD_SCHEMA (typed, PERMISSIVE
with `_corrupt_record`); a line that parse flags is parsed again into a map
of raw JSON texts. A field that is present in the raw map but null after
typed parsing has the wrong type. The first failing rule gives the line's `reason`; a null reason
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
    """lines: DataFrame with `value` (one input line, prefix already removed,
    no line that is not telemetry at all), `source` and `seq`. Returns the
    rows with every typed field, `reason` (null = valid), `raw` (the line,
    kept only for rejected rows).

    Three projections: the typed parse; the other JSON parses (the raw map
    that explains a suspicious line, a peers record's list), which have no
    generated code; then everything else, read straight from the typed
    struct, in one projection with generated code (fused with the write).
    Each projection that carries the wide row copies it and has code of its
    own to compile, so there are no more of them than the JSON parses need."""
    opts = {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT}
    df = lines.select("source", "seq", "value", F.from_json("value", RECORD_SCHEMA, opts).alias("r"))
    # The rules are built as SQL text: one py4j call for the whole
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

    def first(*whens):
        return "coalesce(%s)" % ", ".join(whens) if len(whens) > 1 else whens[0]

    # Lines the typed parser flagged: why, from the raw map `m` (bound once
    # by a one-element transform: the map is parsed once per such line).
    # The first field (in TYPED_FIELDS order) that the raw map has and the
    # typed struct has not has the wrong type: one lambda over the names of
    # the struct's null fields, not a map lookup per field.
    null_fields = "array(%s)" % ", ".join("CASE WHEN %s IS NULL THEN %s END" % (rf(n), q(n))
                                          for n, _t in TYPED_FIELDS[2:])
    bad = first(when("m IS NULL", "malformed_json"),
                when("r.v IS NULL AND m['v'] IS NULL", "missing_field:v"),
                when("r.v IS NULL OR r.v != %d" % SCHEMA_VERSION, "unknown_version"),
                when("%s IS NULL AND m['kind'] IS NULL" % kind, "missing_field:kind"),
                when("%s IS NULL OR NOT %s IN %s" % (kind, kind, kinds), "unknown_kind"),
                "concat('wrong_type:', try_element_at(filter(%s, f -> f IS NOT NULL AND m[f] IS NOT NULL), 1))"
                % null_fields,
                # a line the typed parser flagged but no field-level rule explains
                q("malformed_json"))
    bad = ("CASE WHEN %s THEN transform(array(from_json(value, 'map<string,string>')), m -> %s)[0] END"
           % (suspicious, bad))
    r = F.col("r")
    df = df.select("source", "seq", "value", "r", F.expr(bad).alias("bad"),
                   F.when(r["kind"] == "peers", F.from_json(r["peers"], PEER_LIST_SCHEMA)).alias("peer_list"))

    def is_key(col):
        # 64 hex digits, either case: cheaper than a regex on every key
        return "(octet_length(%s) = 64 AND unhex(%s) IS NOT NULL)" % (col, col)

    peers_n = "CASE WHEN %s = 'state' THEN try_cast(r.peers AS BIGINT) END" % kind
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
    by_kind["state"].append(when("r.peers IS NOT NULL AND (%s) IS NULL" % peers_n, "wrong_type:peers"))
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
    reason = ("CASE WHEN NOT startswith(value, '{') AND NOT startswith(ltrim(value), '{') THEN 'not_json'"
              " WHEN bad IS NOT NULL THEN bad ELSE coalesce(%s, %s) END" % (first(*common), per_kind))

    keep = [name for name, _t in TYPED_FIELDS if name != "peers"]
    # Keys in lower case (the format check above takes either case). A
    # probe's `path` is kept as sent (a per-element lower() is a per-row
    # lambda and costs more than the rest of the validation).
    lowered = ("node", "root", "parent", "desc", "src", "dst")

    def out_col(n):
        if n in lowered:
            return "lower(%s) AS `%s`" % (rf(n), n)
        return "%s AS `%s`" % (rf(n), n)

    df = df.selectExpr("source", "seq", "value", "%s AS reason" % reason, *[out_col(n) for n in keep],
                       "%s AS peers_n" % peers_n, "peer_list")
    return df.selectExpr(
        "source", "seq", "reason", "CASE WHEN reason IS NOT NULL THEN value END AS raw",
        *["`%s`" % n for n in keep], "peers_n", "peer_list")
