"""Checks that the tree's references to its own docs hold.

Every "ARCHITECTURE.md section N" (or "sections N and M") in a tracked file
must name a section "## N." of docs/ARCHITECTURE.md, and every docs/<page>.md
must exist. Prints one line per broken reference and exits 1 if there is
any.

Usage: check_references.py (from the repository root)
"""

import os
import re
import subprocess
import sys

ARCHITECTURE = "docs/ARCHITECTURE.md"
SECTIONS = re.compile(
    r"ARCHITECTURE\.md,? sections? (\d+(?:(?:, | and )\d+)*)")
DOC = re.compile(r"\bdocs/([A-Za-z0-9_-]+\.md)")
# A comment's line break and the comment marker that follows it.
COMMENT_BREAK = re.compile(r"\s*\n\s*(?://|#)?\s*")


def architecture_sections():
    with open(ARCHITECTURE, encoding="utf-8") as page:
        return {int(number) for number in
                re.findall(r"^## (\d+)\.", page.read(), re.MULTILINE)}


def broken_references(text, sections):
    """One line for each broken reference in a file's text."""
    problems = []
    # A reference may wrap onto the next line of a comment.
    flat = COMMENT_BREAK.sub(" ", text)
    for match in SECTIONS.finditer(flat):
        for number in re.findall(r"\d+", match.group(1)):
            if int(number) not in sections:
                problems.append(
                    f'"{match.group(0)}": {ARCHITECTURE} has no section '
                    f"{number}")
    for match in DOC.finditer(flat):
        if not os.path.exists(os.path.join("docs", match.group(1))):
            problems.append(f"docs/{match.group(1)} does not exist")
    return problems


def main():
    sections = architecture_sections()
    files = subprocess.run(["git", "ls-files"], check=True,
                           capture_output=True, text=True).stdout.split()
    failed = False
    for path in files:
        try:
            with open(path, encoding="utf-8") as source:
                text = source.read()
        except (UnicodeDecodeError, OSError):
            continue
        for problem in broken_references(text, sections):
            print(f"{path}: {problem}")
            failed = True
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
