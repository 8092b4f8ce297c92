"""docs/SCALE.md holds what the planner says now.

- Each results table follows the `bazel run //plan:scale_report [-- FLAGS]`
  that prints it, and is what that command prints today, row for row.
- Every token count (724k, 1.87M) and ratio (12.6x) its prose quotes is in
  a cell of one of its tables, so the prose cannot keep a figure the
  tables have replaced.

Usage (Bazel runs it, see BUILD): scale_doc_test.py SCALE_REPORT SCALE_MD
"""

import re
import shlex
import subprocess
import sys
import unittest

sys.path.insert(0, __file__.rsplit("/", 1)[0])
import junit  # noqa: E402

SCALE_REPORT = None
SCALE_MD = None
COMMAND = re.compile(r"`bazel run //plan:scale_report(?: -- ([^`]*))?`")
FIGURE = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?(?:k|M|x))(?![\w])")


def read_doc():
    with open(SCALE_MD, encoding="utf-8") as page:
        return page.read()


def commanded_tables(text):
    """(flags, rows) for each table that follows a scale_report command."""
    lines = text.splitlines()
    found = []
    for index, line in enumerate(lines):
        command = COMMAND.search(line)
        if not command:
            continue
        rows, at = [], index + 1
        while at < len(lines) and not lines[at].startswith("|"):
            if COMMAND.search(lines[at]) or lines[at].startswith("#"):
                break
            at += 1
        while at < len(lines) and lines[at].startswith("|"):
            rows.append(lines[at])
            at += 1
        if rows:
            found.append((command.group(1) or "", rows))
    return found


def prose_and_cells(text):
    """The doc's prose (no tables, no code) and every table cell."""
    prose, cells, in_code = [], set(), False
    for line in text.splitlines():
        if line.startswith("```"):
            in_code = not in_code
        elif in_code:
            continue
        elif line.lstrip().startswith("|"):
            cells.update(cell.strip() for cell in line.strip("| ").split("|"))
        else:
            prose.append(line)
    return "\n".join(prose), cells


class ScaleDocTest(unittest.TestCase):

    def test_the_tables_are_what_scale_report_prints(self):
        tables = commanded_tables(read_doc())
        self.assertGreaterEqual(len(tables), 3, "the results tables")
        for flags, rows in tables:
            with self.subTest(flags=flags):
                printed = subprocess.run(
                    [SCALE_REPORT, *shlex.split(flags)], check=True,
                    capture_output=True, text=True).stdout.splitlines()
                self.assertEqual(rows, printed)

    def test_the_prose_quotes_only_figures_in_the_tables(self):
        prose, cells = prose_and_cells(read_doc())
        words = set()
        for cell in cells:
            words.update(FIGURE.findall(cell))
        quoted = FIGURE.findall(prose)
        self.assertTrue(quoted, "the prose quotes figures")
        missing = sorted(set(quoted) - words)
        self.assertEqual(missing, [], "figures in the prose but no table")


if __name__ == "__main__":
    SCALE_REPORT = sys.argv.pop(1)
    SCALE_MD = sys.argv.pop(1)
    junit.main()
