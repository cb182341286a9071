"""Entry point for `python -m host_tools.pipeline ...` and for spark-submit:

    spark-submit --master spark://HOST:7077 --py-files dist/snakemesh-0.1.0-py3-none-any.whl \
        host_tools/pipeline/__main__.py analyze INPUT... --out DIR

Arguments are those of the `snakemesh` CLI (analyze / report)."""
import os
import sys

if __name__ == "__main__":
    here = os.path.dirname(os.path.abspath(__file__))
    # run as a script, this folder would shadow top-level module names
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    try:
        import host_tools  # noqa: F401
    except ImportError:
        sys.path.insert(0, os.path.dirname(os.path.dirname(here)))
    from host_tools.cli import main
    sys.exit(main(sys.argv[1:]))
