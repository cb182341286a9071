"""Read telemetry lines into a parsed, validated DataFrame.

Console captures carry telemetry as `@sm {json}`; the prefix is removed.
In a file that is a console capture (a line starting with `@sm ` within its
first 8 KB), lines without the prefix (REPL banner, logs) and console replies
(`@sm {"re": ...}` without `v`) are not telemetry: they are ignored, counted
apart and not rejected. Blank lines are skipped. Every other line becomes one
row with a `reason` (null = valid record).
"""
from pyspark.sql import functions as F

from host_tools.pipeline import schema

CONSOLE_PREFIX = "@sm "
IGNORED = "ignored:"
IGNORED_KINDS = ("console_noise", "console_reply")


def source_col():
    """The input file as Spark names it (`file:///a/b%20c.jsonl` for local
    files); local_path() turns it into a path where one is shown."""
    return F.input_file_name().alias("source")


def local_path(col):
    """A Spark file URI column as a local path (used on the few rejected
    lines only; the driver uses inputs.source_path)."""
    f = F.col(col)
    local = F.when(f.startswith("file:///"), F.substring(f, 8, 1 << 20)) \
             .when(f.startswith("file:/"), F.substring(f, 6, 1 << 20))
    decoded = F.when(local.contains("%"), F.try_url_decode(local)).otherwise(local)
    return F.coalesce(decoded, f)


def read_lines(spark, paths, console=()):
    console = set(console)
    parts = []
    plain = [p for p in paths if p not in console]
    cons = [p for p in paths if p in console]
    if plain:
        df = spark.read.text(plain)
        v = F.col("value")
        maybe = v.startswith("@") | v.startswith(" ") | v.startswith("\t")  # cheaper than a regex on every line
        parts.append(df.select(
            source_col(),
            F.when(maybe, F.regexp_replace(v, r"^\s*@sm ", "")).otherwise(v).alias("value"),
            F.lit(None).cast("string").alias("ignore")))
    if cons:
        df = spark.read.text(cons)
        prefixed = F.col("value").rlike(r"^\s*@sm ")
        stripped = F.regexp_replace(F.col("value"), r"^\s*@sm ", "")
        reply = stripped.rlike(r'"re"\s*:') & ~stripped.rlike(r'"v"\s*:')
        parts.append(df.select(
            source_col(), stripped.alias("value"),
            F.when(~prefixed, F.lit(IGNORED + "console_noise"))
             .when(reply, F.lit(IGNORED + "console_reply")).alias("ignore")))
    df = parts[0]
    for p in parts[1:]:
        df = df.unionByName(p)
    v = F.col("value")
    df = df.filter(v.startswith("{") | (F.length(F.trim(v)) > 0))   # blank lines are skipped
    return df.select("source", F.monotonically_increasing_id().alias("seq"), "value", "ignore")


def parse(spark, paths, console=(), observation=None):
    """The parsed, validated rows of every telemetry line (schema.parse_lines).
    Lines that are not telemetry at all (`ignore`) are counted per kind in
    `observation` (a pyspark Observation; IGNORED_KINDS) and left out before
    parsing: their JSON is never read."""
    lines = read_lines(spark, paths, console)
    ign = F.col("ignore")
    if observation is not None:
        lines = lines.observe(observation, *[F.sum(F.when(ign == IGNORED + k, 1).otherwise(0)).alias(k)
                                             for k in IGNORED_KINDS])
    return schema.parse_lines(lines.where(ign.isNull()).select("source", "seq", "value"))
