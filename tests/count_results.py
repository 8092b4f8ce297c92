"""Counts test cases from a Bazel build-event file and the tests' JUnit XML.

Prints per-target problems, then the closing line "N passed, N failed".
A target that failed without a failing test case in its XML (it did not
build, crashed, or timed out) counts as one failure. Skipped cases count in
neither column. Checks run outside Bazel are given as NAME=passed|failed and
count as one case each. Exit status 1 when anything failed.

Usage: count_results.py BUILD_EVENTS_JSON [NAME=passed|failed ...]
"""

import json
import os
import sys
import urllib.parse
import xml.etree.ElementTree as ElementTree


def xml_counts(path):
    """(passed, failed, skipped) test cases of one test.xml."""
    passed = failed = skipped = 0
    for case in ElementTree.parse(path).iter("testcase"):
        if case.find("failure") is not None or case.find("error") is not None:
            failed += 1
        elif case.find("skipped") is not None or case.get("result") == "skipped":
            skipped += 1
        else:
            passed += 1
    return passed, failed, skipped


def main():
    events_path, checks = sys.argv[1], sys.argv[2:]
    statuses = {}  # label -> overall status
    xml_paths = {}  # label -> test.xml of the last attempt
    broken = []  # targets that did not build
    with open(events_path) as events:
        for line in events:
            event = json.loads(line)
            key = event.get("id", {})
            if "testSummary" in key:
                label = key["testSummary"]["label"]
                statuses[label] = event.get("testSummary", {}).get(
                    "overallStatus", "NO_STATUS")
            elif "testResult" in key and "testResult" in event:
                label = key["testResult"]["label"]
                for output in event["testResult"].get("testActionOutput", []):
                    if output.get("name") == "test.xml":
                        uri = output.get("uri", "")
                        xml_paths[label] = urllib.parse.unquote(
                            urllib.parse.urlparse(uri).path)
            elif "targetCompleted" in key:
                # Proto3 JSON omits false, so a failed target has no
                # "success"; an aborted one has "aborted" instead of
                # "completed".
                if not event.get("completed", {}).get("success", False):
                    broken.append(key["targetCompleted"]["label"])

    passed = failed = skipped = 0
    for label, status in sorted(statuses.items()):
        target_passed = target_failed = target_skipped = 0
        path = xml_paths.get(label)
        if path and os.path.exists(path):
            target_passed, target_failed, target_skipped = xml_counts(path)
        if status != "PASSED" and target_failed == 0:
            target_failed = 1
        if status == "PASSED" and target_passed + target_failed == 0:
            target_passed = 1
        if target_failed:
            print(f"FAILED: {label} ({status})")
        passed += target_passed
        failed += target_failed
        skipped += target_skipped
    for label in sorted(set(broken)):
        if label not in statuses:
            print(f"FAILED: {label} (did not build)")
            failed += 1
    for check in checks:
        name, _, outcome = check.partition("=")
        if outcome == "passed":
            passed += 1
        else:
            print(f"FAILED: {name}")
            failed += 1
    if skipped:
        print(f"{skipped} test cases skipped (need hardware this machine lacks)")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed or not passed else 0


if __name__ == "__main__":
    sys.exit(main())
