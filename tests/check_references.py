"""Checks that the tree's references to its own docs and benchmarks hold.

- Every "ARCHITECTURE.md section N" (or "sections N and M") in a tracked
  file names a section "## N." of docs/ARCHITECTURE.md.
- Every docs/<page>.md exists.
- Every section a file cites by its quoted title, as `docs/<page>.md,
  "Title"` (also `docs/<page>.md ("Title")`, and `"A" and "B"` for two), is
  a heading of that page: its text, without a leading "N." and without a
  trailing "(...)".
- Every benchmark a file names (`<name>_bench`, or a `//tests/bench:` or
  `//tests/gpu:` label) is a target of tests/bench/BUILD or tests/gpu/BUILD,
  or a script in tests/bench/.

Prints one line per broken reference and exits 1 if there is any.

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
# A doc and the titles quoted right after it (see the docstring).
TITLED = re.compile(
    r'\bdocs/([A-Za-z0-9_-]+\.md),? \(?"([^"\n]+)"(?: and "([^"\n]+)")?')
HEADING = re.compile(r"^#+ (.+?)\s*$", re.MULTILINE)
BENCH_NAME = re.compile(r"\b([a-z0-9_]+_bench)\b")
BENCH_LABEL = re.compile(r"//tests/(bench|gpu):([A-Za-z0-9_]+)")
# Labels that name no one target.
PACKAGE_LABELS = {"all", "__pkg__", "__subpackages__"}
TARGET = re.compile(r'^\s*name = "([A-Za-z0-9_]+)"', re.MULTILINE)
BENCH_PACKAGES = ("tests/bench", "tests/gpu")
# A comment's line break and the comment marker that follows it.
COMMENT_BREAK = re.compile(r"\s*\n\s*(?://|#)?\s*")


def architecture_sections():
    with open(ARCHITECTURE, encoding="utf-8") as page:
        return {int(number) for number in
                re.findall(r"^## (\d+)\.", page.read(), re.MULTILINE)}


def titles_of(heading):
    """A heading as citations quote it: without its "N.", with or without a
    "(...)" after."""
    title = re.sub(r"^\d+\.\s+", "", heading)
    return {title, re.sub(r"\s+\([^()]*\)$", "", title)}


def doc_titles():
    """Each docs/ page's citable titles."""
    titles = {}
    for name in os.listdir("docs"):
        if name.endswith(".md"):
            with open(os.path.join("docs", name), encoding="utf-8") as page:
                titles[name] = set().union(
                    *map(titles_of, HEADING.findall(page.read())))
    return titles


def bench_targets():
    """The benchmark targets and scripts a file may name."""
    names = set()
    for package in BENCH_PACKAGES:
        with open(os.path.join(package, "BUILD"), encoding="utf-8") as build:
            names.update(TARGET.findall(build.read()))
        for entry in os.listdir(package):
            stem, extension = os.path.splitext(entry)
            if extension in (".py", ".sh"):
                names.add(stem)
    return names


def broken_references(text, sections, titles, benches):
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
    for match in TITLED.finditer(flat):
        page = match.group(1)
        for title in filter(None, match.groups()[1:]):
            if page in titles and title not in titles[page]:
                problems.append(f'docs/{page} has no section "{title}"')
    named = set(BENCH_NAME.findall(text))
    named.update(label for _, label in BENCH_LABEL.findall(text)
                 if label not in PACKAGE_LABELS)
    for name in sorted(named - benches):
        problems.append(f"no benchmark {name} in " +
                        " or ".join(BENCH_PACKAGES))
    return problems


def main():
    sections = architecture_sections()
    titles = doc_titles()
    benches = bench_targets()
    files = subprocess.run(["git", "ls-files"], check=True,
                           capture_output=True, text=True).stdout.split()
    failed = False
    for path in files:
        try:
            with open(path, encoding="utf-8") as source:
                text = source.read()
        except (UnicodeDecodeError, OSError):
            continue
        for problem in broken_references(text, sections, titles, benches):
            print(f"{path}: {problem}")
            failed = True
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
