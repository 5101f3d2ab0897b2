"""Copy the tables of the generated result files into the docs that quote them.

A doc marks a generated table with two comment lines:

    <!-- results: bench.md#vLLM request queues -->
    | ... the table, replaced on every run ... |
    <!-- /results -->

``FILE`` is relative to ``docs/results/``; ``#HEADING`` (optional) picks the
first table after the first ``#`` heading of FILE whose text starts with
HEADING, else the file's first table is used. Run by ``regenerate.sh`` after
the results are rewritten; ``--check`` exits 1 if a doc is out of date.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

RESULTS = Path(__file__).resolve().parent
DOCS = RESULTS.parent
BEGIN = re.compile(r"^<!-- results: (?P<file>[^#>]+?)(?:#(?P<heading>[^>]+?))? -->$")
END = "<!-- /results -->"


def table(file: str, heading: str | None) -> list[str]:
    lines = (RESULTS / file).read_text().splitlines()
    start = 0
    if heading is not None:
        for i, line in enumerate(lines):
            if line.startswith("#") and line.lstrip("#").strip().startswith(heading):
                start = i + 1
                break
        else:
            raise SystemExit(f"{file}: no heading starting with {heading!r}")
    rows: list[str] = []
    for line in lines[start:]:
        if line.startswith("|"):
            rows.append(line)
        elif rows:
            break
    if not rows:
        raise SystemExit(f"{file}: no table after {heading!r}")
    return rows


def splice(text: str) -> str:
    out: list[str] = []
    lines = iter(text.splitlines())
    for line in lines:
        out.append(line)
        m = BEGIN.match(line)
        if m is None:
            continue
        for skipped in lines:
            if skipped == END:
                break
        else:
            raise SystemExit(f"unterminated {line}")
        out.extend(table(m["file"].strip(), m["heading"]))
        out.append(END)
    return "\n".join(out) + "\n"


def main(argv: list[str]) -> int:
    check = "--check" in argv
    stale = []
    for doc in sorted(DOCS.glob("*.md")):
        old = doc.read_text()
        new = splice(old)
        if new != old:
            stale.append(doc.name)
            if not check:
                doc.write_text(new)
    verb = "out of date" if check else "updated"
    for name in stale:
        print(f"docs/{name}: {verb}")
    return 1 if check and stale else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
