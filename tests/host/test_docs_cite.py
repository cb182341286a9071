"""The documentation cites only files a clone has: every repository path in
README.md and docs/ exists, and nothing (docs or code comments) points at
the coordination files outside the repository (PROTOCOL.md,
ARCHITECTURE.md, shared/..., the seed texts): the protocol the code relies
on is in docs/reference/PROTOCOL_NOTES.md."""
import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SKIP_DIRS = {".git", ".venv", "node_modules", "__pycache__", "build", "demo-out", "soak-out",
             "snakemesh.egg-info"}
REPO_DIRS = ("firmware", "host_tools", "docs", "tests", "bench", "boards", "lib", ".ci")
# cited on purpose although a clone does not have them: outputs and examples
NOT_FILES = {
    "bench/results.json",                 # written by `make bench`
    "firmware/snake/x.py",                # a file name inside an example error message
}
OUTSIDE = re.compile(r"(?<![\w/.-])(?:(?:PROTOCOL|ARCHITECTURE)\.md|(?:shared|spec|seeds)/[\w./-]+)")
PATH = re.compile(r"(?<![\w/.~:-])((?:%s)/[\w./*-]*)" % "|".join(re.escape(d) for d in REPO_DIRS))


def walk(exts):
    for d, dirs, files in os.walk(ROOT):
        # hidden folders are tools' caches (.pytest_cache has a README.md
        # once pytest ran), except .ci
        dirs[:] = [x for x in dirs if x not in SKIP_DIRS and not x.startswith("build-")
                   and (x == ".ci" or not x.startswith("."))]
        for f in files:
            if f.endswith(exts):
                yield os.path.relpath(os.path.join(d, f), ROOT)


DOCS = sorted(["README.md"] + [p for p in walk((".md",)) if p != "README.md"])


def test_docs_are_found():
    assert "docs/reference/PROTOCOL_NOTES.md" in DOCS and "docs/guides/NODE.md" in DOCS


@pytest.mark.parametrize("doc", DOCS)
def test_doc_cites_only_files_in_the_clone(doc):
    text = open(os.path.join(ROOT, doc), encoding="utf-8").read()
    bad = []
    for m in OUTSIDE.finditer(text):
        bad.append("%s (outside the repository)" % m.group(0))
    for m in PATH.finditer(text):
        p = m.group(1).rstrip(".,;:/)")
        if any(c in p for c in "*<>") or "NAME" in p or "BOARD" in p or p in NOT_FILES:
            continue
        if not os.path.exists(os.path.join(ROOT, p)):
            bad.append("%s (no such file)" % p)
    assert not bad, "%s cites: %s" % (doc, "; ".join(bad))


CODE = sorted(p for p in walk((".py",)) if p.split(os.sep)[0] in ("firmware", "lib", "host_tools", "bench", "tests"))


def test_code_comments_cite_the_notes_not_files_outside():
    bad = []
    for p in CODE:
        if p == os.path.join("tests", "host", "test_docs_cite.py"):
            continue
        for n, line in enumerate(open(os.path.join(ROOT, p), encoding="utf-8"), 1):
            for m in OUTSIDE.finditer(line):
                bad.append("%s:%d: %s" % (p, n, m.group(0)))
    assert not bad, "\n".join(bad)


DOC_PATH = re.compile(r"(?<![\w/.-])((?:docs|boards|host_tools/topologies)/[\w./-]*\.md)")
README_SECTION = re.compile(r'README(?:\.md)?,? "([^"]+)"')


def test_code_cites_docs_that_exist():
    """A comment or message that sends a reader to a page names one a clone
    has (the pages moved into docs/guides, docs/reference, docs/reports once),
    and a README section it names is a heading of README.md."""
    headings = {m.group(1).strip() for m in
                re.finditer(r"^#+ (.+)$", open(os.path.join(ROOT, "README.md"), encoding="utf-8").read(), re.M)}
    sources = CODE + sorted(p for p in walk((".json", "manifest.py")) if p.startswith("boards"))
    sources.append("Makefile")
    bad = []
    for p in sources:
        if p == os.path.join("tests", "host", "test_docs_cite.py"):
            continue
        text = open(os.path.join(ROOT, p), encoding="utf-8").read()
        for m in DOC_PATH.finditer(text):
            if not os.path.exists(os.path.join(ROOT, m.group(1))):
                bad.append("%s: %s (no such file)" % (p, m.group(1)))
        for m in README_SECTION.finditer(text):
            if m.group(1) not in headings:
                bad.append('%s: README "%s" (no such section)' % (p, m.group(1)))
    assert not bad, "\n".join(bad)


def test_protocol_notes_number_the_differences_the_code_cites():
    notes = open(os.path.join(ROOT, "docs", "reference", "PROTOCOL_NOTES.md"), encoding="utf-8").read()
    cited = set()
    for p in CODE:
        for m in re.finditer(r"PROTOCOL_NOTES\.md,? difference (\d+)", open(os.path.join(ROOT, p)).read()):
            cited.add(int(m.group(1)))
    assert cited, "the firmware comments cite the differences by number"
    for n in cited:
        assert re.search(r"^%d\. \*\*" % n, notes, re.M), "difference %d is not in the notes" % n
