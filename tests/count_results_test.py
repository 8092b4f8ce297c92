"""count_results.py counts a case as passed only when it ran and passed."""

import contextlib
import io
import json
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import count_results  # noqa: E402
import junit  # noqa: E402

# As gtest writes them: a pass, a failure, a GTEST_SKIP, a DISABLED_ case.
GTEST_XML = """<?xml version="1.0" encoding="UTF-8"?>
<testsuites tests="4" failures="1" disabled="1" errors="0" name="AllTests">
  <testsuite name="Suite" tests="4" failures="1" disabled="1" errors="0">
    <testcase name="Passes" status="run" result="completed" time="0"/>
    <testcase name="Fails" status="run" result="completed" time="0">
      <failure message="x"/>
    </testcase>
    <testcase name="Skips" status="run" result="skipped" time="0">
      <skipped message="no GPU"/>
    </testcase>
    <testcase name="DISABLED_Never" status="notrun" result="suppressed"
              time="0"/>
  </testsuite>
</testsuites>
"""


class XmlCountsTest(unittest.TestCase):

    def test_only_cases_that_ran_and_passed_are_passes(self):
        with tempfile.NamedTemporaryFile("w", suffix=".xml",
                                         delete=False) as xml:
            xml.write(GTEST_XML)
        try:
            self.assertEqual(count_results.xml_counts(xml.name), (1, 1, 2))
            self.assertEqual(count_results.skip_reasons(xml.name),
                             {"no GPU": 1, "disabled": 1})
        finally:
            os.unlink(xml.name)


def case_xml(failing):
    """A JUnit XML of one case, failing or passing."""
    failure = '<failure message="x"/>' if failing else ""
    return (f'<testsuites><testsuite name="S"><testcase name="C" '
            f'status="run" result="completed">{failure}</testcase>'
            f'</testsuite></testsuites>')


def events(label, status, xml_path):
    """A build-event file's lines for one test that ran (not cached)."""
    return "\n".join(json.dumps(event) for event in [
        {"id": {"testResult": {"label": label}},
         "testResult": {"testActionOutput": [
             {"name": "test.xml", "uri": f"file://{xml_path}"}]}},
        {"id": {"testSummary": {"label": label}},
         "testSummary": {"overallStatus": status}},
    ]) + "\n"


class PassesTest(unittest.TestCase):

    def test_each_pass_counts_its_own_results(self):
        # The second pass reruns the test and writes the same test.xml: the
        # first pass's tally still counts what the first run wrote.
        directory = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
        xml = os.path.join(directory, "test.xml")
        tallies = []
        for name, failing in (("build", False), ("cpu-only", True)):
            with open(xml, "w") as file:
                file.write(case_xml(failing))
            events_path = os.path.join(directory, f"{name}.json")
            with open(events_path, "w") as file:
                file.write(events("//t:t", "FAILED" if failing else "PASSED",
                                  xml))
            tallies.append(os.path.join(directory, f"{name}.tally"))
            count_results.tally(events_path, name != "build", tallies[-1])
        output = io.StringIO()
        with contextlib.redirect_stdout(output):
            status = count_results.total(tallies, ["format=passed"])
        self.assertEqual(status, 1)
        self.assertEqual(output.getvalue().splitlines(), [
            "build: 1 passed, 0 failed, 0 skipped",
            "cpu-only: FAILED: //t:t (FAILED)",
            "cpu-only: 0 passed, 1 failed, 0 skipped",
            "2 passed, 1 failed"])

    def test_skipped_cases_are_listed_by_reason(self):
        directory = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
        xml = os.path.join(directory, "test.xml")
        with open(xml, "w") as file:
            file.write(GTEST_XML.replace('message="x"', 'message="y"')
                       .replace('<failure message="y"/>', ""))
        events_path = os.path.join(directory, "build.json")
        with open(events_path, "w") as file:
            file.write(events("//t:gpu", "PASSED", xml))
        tally = os.path.join(directory, "build.tally")
        count_results.tally(events_path, False, tally)
        output = io.StringIO()
        with contextlib.redirect_stdout(output):
            status = count_results.total([tally], [])
        self.assertEqual(status, 0)
        self.assertEqual(output.getvalue().splitlines(), [
            "2 test cases skipped, by reason:",
            "  1 disabled (//t:gpu)",
            "  1 no GPU (//t:gpu)",
            "2 passed, 0 failed"])

    def test_a_pass_that_could_not_be_counted_is_a_failure(self):
        output = io.StringIO()
        with contextlib.redirect_stdout(output):
            status = count_results.total(["/nonexistent/build.tally"],
                                         ["format=passed"])
        self.assertEqual(status, 1)
        self.assertEqual(output.getvalue().splitlines()[-1],
                         "1 passed, 1 failed")


if __name__ == "__main__":
    junit.main()
