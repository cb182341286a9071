"""PySpark telemetry pipeline: `snakemesh analyze` and `snakemesh report`.

    from host_tools.pipeline import analyze, render_report
    summary = analyze(["run.jsonl"], "out")        # Parquet tables + out/summary.json
    index_html = render_report("out")              # out/report/index.html + PNGs

See docs/guides/PIPELINE.md for the outputs and the rules behind each figure.
"""


def analyze(*args, **kwargs):
    from host_tools.pipeline.analysis import analyze as _analyze
    return _analyze(*args, **kwargs)


def render_report(*args, **kwargs):
    from host_tools.pipeline.report import render as _render
    return _render(*args, **kwargs)
