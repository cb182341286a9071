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


def read_lines(spark, paths, console=()):
    console = set(console)
    parts = []
    plain = [p for p in paths if p not in console]
    cons = [p for p in paths if p in console]
    if plain:
        df = spark.read.text(plain)
        parts.append(df.select(
            F.input_file_name().alias("source"),
            F.regexp_replace(F.col("value"), r"^\s*@sm ", "").alias("value"),
            F.lit(None).cast("string").alias("ignore")))
    if cons:
        df = spark.read.text(cons)
        prefixed = F.col("value").rlike(r"^\s*@sm ")
        stripped = F.regexp_replace(F.col("value"), r"^\s*@sm ", "")
        reply = stripped.rlike(r'"re"\s*:') & ~stripped.rlike(r'"v"\s*:')
        parts.append(df.select(
            F.input_file_name().alias("source"), stripped.alias("value"),
            F.when(~prefixed, F.lit(IGNORED + "console_noise"))
             .when(reply, F.lit(IGNORED + "console_reply")).alias("ignore")))
    df = parts[0]
    for p in parts[1:]:
        df = df.unionByName(p)
    df = df.filter(F.length(F.trim(F.col("value"))) > 0)
    return df.select("source", F.monotonically_increasing_id().alias("seq"), "value", "ignore")


def parse(spark, paths, console=()):
    return schema.parse_lines(read_lines(spark, paths, console))
