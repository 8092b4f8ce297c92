"""Counts test cases from a Bazel build-event file and the tests' JUnit XML.

Prints per-target problems, then the closing line "N passed, N failed".
A target that failed without a failing test case in its XML (it did not
build, crashed, or timed out) counts as one failure, and so does one that
passed without running a single case. Skipped cases, and cases that never
ran (gtest's DISABLED_ ones), count in neither column. Checks run outside
Bazel are given as NAME=passed|failed and count as one case each. Exit status 1 when anything failed.

Several passes over the tree (tests/run.sh's build, then its CPU-only
build) are each tallied as soon as they end, named by their build-event
file's name, since a later pass that runs a test again overwrites its
test.xml; a later pass (--skip-cached) counts only the tests it ran again,
not the results it took from the cache of an earlier one.

Usage: count_results.py tally [--skip-cached] BUILD_EVENTS_JSON TALLY_JSON
       count_results.py total TALLY_JSON [TALLY_JSON ...]
                              [NAME=passed|failed ...]
"""

import json
import os
import sys
import urllib.parse
import xml.etree.ElementTree as ElementTree


def case_outcomes(path):
    """(outcome, skip reason) of each test case of one test.xml: "failed",
    "passed" or "skipped" (also a case that never ran, such as a DISABLED_
    one), the reason being the last line of the skip's message (gtest puts
    the file and line first), "disabled", or None for a case not skipped."""
    for case in ElementTree.parse(path).iter("testcase"):
        skipped = case.find("skipped")
        if case.find("failure") is not None or case.find("error") is not None:
            yield "failed", None
        elif skipped is not None:
            lines = [line.strip() for line in
                     (skipped.get("message") or skipped.text or "")
                     .splitlines() if line.strip()]
            yield "skipped", lines[-1] if lines else "no reason given"
        elif (case.get("result") == "suppressed" or
              case.get("status") == "notrun"):
            yield "skipped", "disabled"
        elif case.get("result") == "skipped":
            yield "skipped", "no reason given"
        else:
            yield "passed", None


def xml_counts(path):
    """(passed, failed, skipped) test cases of one test.xml."""
    outcomes = [outcome for outcome, _ in case_outcomes(path)]
    return (outcomes.count("passed"), outcomes.count("failed"),
            outcomes.count("skipped"))


def skip_reasons(path):
    """{reason: cases} of one test.xml's skipped cases (case_outcomes)."""
    reasons = {}
    for outcome, reason in case_outcomes(path):
        if outcome == "skipped":
            reasons[reason] = reasons.get(reason, 0) + 1
    return reasons


def read_events(events_path, skip_cached):
    """(statuses, xml_paths, broken) of one pass: label -> overall status,
    label -> test.xml of its last attempt, and targets that did not build.
    skip_cached leaves out tests whose every result came from the cache."""
    statuses = {}
    xml_paths = {}
    ran = set()  # labels with a result not taken from the cache
    broken = []
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
                if not event["testResult"].get("cachedLocally", False):
                    ran.add(label)
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
    if skip_cached:
        statuses = {label: status for label, status in statuses.items()
                    if label in ran or status != "PASSED"}
    return statuses, xml_paths, broken


def count_pass(statuses, xml_paths, broken, name, skips=None):
    """((passed, failed, skipped), failure lines) of one pass; into skips,
    if given, {reason: {"cases": n, "targets": [labels]}}."""
    prefix = f"{name}: "
    passed = failed = skipped = 0
    failures = []
    for label, status in sorted(statuses.items()):
        target_passed = target_failed = target_skipped = 0
        path = xml_paths.get(label)
        if path and os.path.exists(path):
            target_passed, target_failed, target_skipped = xml_counts(path)
            if skips is not None and target_skipped:
                for reason, cases in skip_reasons(path).items():
                    entry = skips.setdefault(reason,
                                             {"cases": 0, "targets": []})
                    entry["cases"] += cases
                    entry["targets"].append(label)
        if status != "PASSED" and target_failed == 0:
            target_failed = 1
            failures.append(f"{prefix}FAILED: {label} ({status})")
        elif target_failed:
            failures.append(f"{prefix}FAILED: {label} ({status})")
        elif target_passed + target_skipped == 0:
            # A test binary that ran no case (a filter that matched nothing,
            # a suite with no tests, no test.xml) proves nothing.
            target_failed = 1
            failures.append(f"{prefix}FAILED: {label} (ran no test case)")
        passed += target_passed
        failed += target_failed
        skipped += target_skipped
    for label in sorted(set(broken)):
        if label not in statuses:
            failures.append(f"{prefix}FAILED: {label} (did not build)")
            failed += 1
    return (passed, failed, skipped), failures


def tally(events_path, skip_cached, tally_path):
    """Counts one pass into tally_path (JSON) while its test.xml files are
    still its own: a later pass that runs a test again writes the same
    path."""
    statuses, xml_paths, broken = read_events(events_path, skip_cached)
    # A pass is named by its file: cpu-only.json -> "cpu-only".
    name = os.path.splitext(os.path.basename(events_path))[0]
    skips = {}
    (passed, failed, skipped), failures = count_pass(
        statuses, xml_paths, broken, name, skips)
    with open(tally_path, "w") as file:
        json.dump({"name": name, "passed": passed, "failed": failed,
                   "skipped": skipped, "failures": failures,
                   "skips": skips}, file)


def total(tally_paths, checks):
    """Prints every pass's failures and counts, then the closing line;
    returns the exit status. A missing tally (its pass could not be
    counted) is a failure."""
    passed = failed = skipped = 0
    skips = {}  # reason -> [cases, targets]
    for path in tally_paths:
        try:
            with open(path) as file:
                counts = json.load(file)
        except (OSError, ValueError) as error:
            print(f"FAILED: the results of {path} ({error})")
            failed += 1
            continue
        for line in counts["failures"]:
            print(line)
        if len(tally_paths) > 1:
            print(f"{counts['name']}: {counts['passed']} passed, "
                  f"{counts['failed']} failed, {counts['skipped']} skipped")
        passed += counts["passed"]
        failed += counts["failed"]
        skipped += counts["skipped"]
        for reason, entry in counts.get("skips", {}).items():
            merged = skips.setdefault(reason, [0, []])
            merged[0] += entry["cases"]
            merged[1] += [label for label in entry["targets"]
                          if label not in merged[1]]
    for check in checks:
        name, _, outcome = check.partition("=")
        if outcome == "passed":
            passed += 1
        else:
            print(f"FAILED: {name}")
            failed += 1
    if skipped:
        print(f"{skipped} test cases skipped, by reason:")
        for reason, (cases, targets) in sorted(
                skips.items(), key=lambda item: (-item[1][0], item[0])):
            more = (f" and {len(targets) - 1} more" if len(targets) > 1
                    else "")
            print(f"  {cases} {reason} ({targets[0]}{more})")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed or not passed else 0


def main():
    arguments = sys.argv[1:]
    if arguments[:1] == ["tally"]:
        skip_cached = "--skip-cached" in arguments
        paths = [arg for arg in arguments[1:] if arg != "--skip-cached"]
        if len(paths) == 2:
            tally(paths[0], skip_cached, paths[1])
            return 0
    elif arguments[:1] == ["total"]:
        return total([arg for arg in arguments[1:] if "=" not in arg],
                     [arg for arg in arguments[1:] if "=" in arg])
    print(__doc__.split("Usage: ")[1], file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
