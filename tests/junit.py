"""unittest.main for Bazel: also writes the results as JUnit XML to
$XML_OUTPUT_FILE, so that tests/run.sh counts every test case (Bazel would
otherwise record one case per test target)."""

import os
import sys
import time
import unittest
import xml.etree.ElementTree as ElementTree


class _RecordingResult(unittest.TextTestResult):

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.cases = []  # (name, seconds, outcome, detail)
        self._started = 0.0

    def startTest(self, test):
        self._started = time.monotonic()
        super().startTest(test)

    def _record(self, test, outcome, detail=""):
        self.cases.append((test.id(), time.monotonic() - self._started,
                           outcome, detail))

    def addSuccess(self, test):
        super().addSuccess(test)
        self._record(test, "passed")

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self._record(test, "failure", self._exc_info_to_string(err, test))

    def addError(self, test, err):
        super().addError(test, err)
        self._record(test, "error", self._exc_info_to_string(err, test))

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        self._record(test, "skipped", reason)


def _write_xml(path, cases):
    suite = ElementTree.Element("testsuite", tests=str(len(cases)))
    for name, seconds, outcome, detail in cases:
        classname, _, method = name.rpartition(".")
        case = ElementTree.SubElement(suite, "testcase", classname=classname,
                                      name=method, time=f"{seconds:.3f}")
        if outcome in ("failure", "error"):
            ElementTree.SubElement(case, outcome, message=outcome).text = detail
        elif outcome == "skipped":
            ElementTree.SubElement(case, "skipped", message=detail)
    ElementTree.ElementTree(suite).write(path, encoding="unicode")


def _cases(suite):
    for item in suite:
        if isinstance(item, unittest.TestSuite):
            yield from _cases(item)
        else:
            yield item


def main():
    """Runs the __main__ module's tests, or with `bazel test --test_filter=X`
    only those whose id contains X; exits non-zero on any failure, and on a
    filter that selects nothing."""
    suite = unittest.defaultTestLoader.loadTestsFromModule(
        sys.modules["__main__"])
    only = os.environ.get("TESTBRIDGE_TEST_ONLY")
    if only:
        suite = unittest.TestSuite(
            case for case in _cases(suite) if only in case.id())
        if suite.countTestCases() == 0:
            sys.exit(f"--test_filter={only}: no test's id contains it")
    runner = unittest.TextTestRunner(resultclass=_RecordingResult,
                                     verbosity=2)
    result = runner.run(suite)
    path = os.environ.get("XML_OUTPUT_FILE")
    if path:
        _write_xml(path, result.cases)
    sys.exit(0 if result.wasSuccessful() else 1)
