"""count_results.py counts a case as passed only when it ran and passed."""

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
        finally:
            os.unlink(xml.name)


if __name__ == "__main__":
    junit.main()
