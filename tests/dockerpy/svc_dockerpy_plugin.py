"""pytest plugin for docker-py 1.10.6's own integration suite, run unmodified against svc.

Loaded by tests/dockerpy/run.py as ``-p svc_dockerpy_plugin`` into the suite's own venv
(Python 3.6, pytest 2.9.1), so it is written for Python 3.6. It:

- sets ``docker.constants.DEFAULT_DOCKER_API_VERSION`` from ``SVC_DOCKERPY_API_VERSION``
  when it is imported, which is before the suite's modules are: their
  ``requires_api_version`` marks and every ``docker.Client()`` they make read it;
- skips the tests named in ``skip.txt`` and marks those named in ``xfail.txt`` as strict
  expected failures (an entry that names no collected test stops the run);
- fails a test that runs longer than ``SVC_DOCKERPY_TEST_TIMEOUT`` seconds;
- writes every test's outcome, with a one-line reason, to ``SVC_DOCKERPY_REPORT`` (JSON).

Nothing here pulls, patches the client or touches the daemon: the runner loads the
suite's images (``busybox:buildroot-2014.02``, ``busybox:latest``) before pytest starts, so
the suite's session fixture finds them with ``inspect_image`` and never pulls.
"""

import json
import os
import re
import signal

import docker.constants
import pytest

API_VERSION = os.environ["SVC_DOCKERPY_API_VERSION"]
docker.constants.DEFAULT_DOCKER_API_VERSION = API_VERSION

HERE = os.path.dirname(os.path.abspath(__file__))
TEST_TIMEOUT = int(os.environ.get("SVC_DOCKERPY_TEST_TIMEOUT", "120"))
CAPABILITY = re.compile(r"^[a-z]+: \S")
OUTCOMES = {}  # node id -> {"outcome", "reason", "duration"}


def read_list(name):
    """``(entry, reason)`` pairs of a list file: one test id (or a file or class id, which
    covers every test below it) and its reason per line; ``#`` starts a comment line."""
    entries = []
    with open(os.path.join(HERE, name), encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            parts = line.split(None, 1)
            if len(parts) != 2:
                raise pytest.UsageError(f"{name}:{number}: no reason given")
            entries.append((parts[0], parts[1]))
    return entries


def covers(entry, nodeid):
    return nodeid == entry or nodeid.startswith(entry + "::")


def pytest_report_header(config):
    api = docker.constants.DEFAULT_DOCKER_API_VERSION
    return f"svc: docker-py {docker.version}, DEFAULT_DOCKER_API_VERSION = {api}"


@pytest.hookimpl(tryfirst=True)  # before -k and -m deselect anything
def pytest_collection_modifyitems(session, config, items):
    skips = read_list("skip.txt")
    xfails = read_list("xfail.txt")
    for entry, reason in xfails:
        if not CAPABILITY.match(reason):
            raise pytest.UsageError(
                f"xfail.txt: {entry}: the reason must start with its capability ('build: ')")
    used = set()
    for item in items:
        for entry, reason in skips:
            if covers(entry, item.nodeid):
                item.add_marker(pytest.mark.skip(reason=reason))
                used.add(entry)
        for entry, reason in xfails:
            if covers(entry, item.nodeid):
                item.add_marker(pytest.mark.xfail(reason=reason, strict=True, run=True))
                used.add(entry)
    both = {e for e, _ in skips} & {e for e, _ in xfails}
    files = {item.nodeid.split("::")[0] for item in items}  # a run of a few files
    stale = [e for e, _ in skips + xfails if e not in used and e.split("::")[0] in files]
    if both or stale:
        raise pytest.UsageError(
            "tests/dockerpy lists: in both lists: {}; naming no collected test: {}"
            .format(sorted(both) or "none", stale or "none"))


@pytest.hookimpl(hookwrapper=True, tryfirst=True)  # around the skipping plugin's wrapper
def pytest_runtest_makereport(item, call):
    """Make an unexpected pass of an xfail.txt test fail the run. pytest 2.9.1 applies
    ``strict`` to plain test functions only: for the suite's unittest.TestCase tests it
    reports an XPASS (a "failed" report carrying ``wasxfail``) that does not fail the run."""
    outcome = yield
    report = outcome.get_result()
    if report.when == "call" and report.failed and hasattr(report, "wasxfail"):
        reason = report.wasxfail
        del report.wasxfail
        report.longrepr = f"[XPASS(strict)] {reason}"


class TestTimeout(Exception):
    pass


def _alarm(signum, frame):
    raise TestTimeout(f"the test ran longer than {TEST_TIMEOUT} s")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    """A hung request fails its test instead of the whole run (the runner has a backstop)."""
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(TEST_TIMEOUT)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def one_line(text, limit=400):
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def reason_of(report):
    longrepr = report.longrepr
    if isinstance(longrepr, tuple):  # a skip: (path, line, "Skipped: reason")
        return one_line(longrepr[2])
    crash = getattr(longrepr, "reprcrash", None)
    if crash is not None:
        return one_line(crash.message)
    lines = [line for line in str(longrepr).splitlines() if line.strip()]
    return one_line(lines[-1] if lines else "")


def pytest_runtest_logreport(report):
    outcomes = OUTCOMES
    wasxfail = getattr(report, "wasxfail", None)
    if report.when == "call" or report.failed or report.skipped:
        if report.passed:
            outcome, reason = ("xpassed", wasxfail) if wasxfail is not None else ("passed", "")
        elif report.skipped:
            if wasxfail is not None:
                outcome, reason = "xfailed", wasxfail
            else:
                outcome, reason = "skipped", reason_of(report)
        elif report.when == "call":
            outcome, reason = "failed", reason_of(report)
        else:
            outcome, reason = "error", f"in {report.when}: {reason_of(report)}"
        if report.nodeid in outcomes and outcomes[report.nodeid]["outcome"] != "passed":
            return  # keep the first bad outcome (a failed call, then a failed teardown)
        outcomes[report.nodeid] = {"outcome": outcome, "reason": reason,
                                   "duration": round(report.duration, 3)}


def pytest_sessionfinish(session, exitstatus):
    path = os.environ.get("SVC_DOCKERPY_REPORT")
    if path:
        with open(path, "w", encoding="utf-8") as f:
            json.dump({"api": API_VERSION, "exitstatus": int(exitstatus),
                       "tests": OUTCOMES}, f, indent=1, sort_keys=True)
