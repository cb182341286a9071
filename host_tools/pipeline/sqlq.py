"""Spark plans written as SQL text over DataFrames.

A plan built step by step from Column objects costs a py4j round trip per
Column and per list element passed, and an analysis of the growing plan at
every step; the same plan as one SQL query is one round trip and one
analysis. `query` binds DataFrames to names in the text as temporary views
for the time of that analysis (the DataFrame it returns holds the analyzed
plan and needs no view afterwards).
"""
import itertools
import os

_ids = itertools.count()


def query(spark, text, **frames):
    """spark.sql(text), with `{name}` in the text standing for the DataFrame
    frames[name]."""
    views = []
    try:
        for name, df in frames.items():
            view = "_snakemesh_%d_%d_%s" % (os.getpid(), next(_ids), name)
            df.createOrReplaceTempView(view)
            views.append(view)
            text = text.replace("{%s}" % name, view)
        return spark.sql(text)
    finally:
        if views:
            catalog = spark.catalog
            for view in views:
                catalog.dropTempView(view)


def double(x):
    """A Python float as an exact SQL DOUBLE literal (repr round-trips it)."""
    return "%rD" % float(x)
