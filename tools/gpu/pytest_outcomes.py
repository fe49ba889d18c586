"""tools/gpu/pytest_outcomes.py: the pytest plugin of tools/gpu/third-party-tests.

It writes one JSON object a line to the file named by PF_OUTCOMES, flushed
as it goes, so that a run which crashes or is killed still tells which
tests finished and which one was running: the node ids collected, each
test's start, each phase's report (setup, call, teardown) with the first
lines of a failure or the reason of a skip, and collection errors. When
PF_SELECT names a file of node ids (one a line), only those tests run: the
runner uses it to resume after a crash and to run differing tests again.

Loaded with `-p pytest_outcomes`; it imports nothing from pytest, so its
hooks can be driven without pytest too (tests/tools/test_third_party_tests.py).
"""
import json
import os

_out = None


def _emit(event):
    global _out
    path = os.environ.get("PF_OUTCOMES")
    if not path:
        return
    if _out is None:
        _out = open(path, "a", buffering=1)
    _out.write(json.dumps(event) + "\n")
    _out.flush()


def _text(report):
    """What a reader needs of a report: the reason of a skip, or a failure's
    'E ' lines (the assertion and the exception), else its last lines."""
    longrepr = getattr(report, "longrepr", None)
    if report.outcome == "skipped" and isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2])
    text = getattr(report, "longreprtext", "") or (str(longrepr) if longrepr is not None else "")
    lines = text.splitlines()
    errors = [l for l in lines if l.startswith("E ")]
    return "\n".join((errors or lines[-6:])[:12])


def pytest_collection_modifyitems(session, config, items):
    select = os.environ.get("PF_SELECT")
    if not select:
        return
    with open(select) as f:
        wanted = {line.rstrip("\n") for line in f if line.strip()}
    kept = [i for i in items if i.nodeid in wanted]
    dropped = [i for i in items if i.nodeid not in wanted]
    items[:] = kept
    if dropped and hasattr(config, "hook"):
        config.hook.pytest_deselected(items=dropped)


def pytest_collection_finish(session):
    _emit({"event": "collected", "nodeids": [i.nodeid for i in session.items]})


def pytest_collectreport(report):
    if report.outcome == "failed":
        _emit({"event": "collect_error", "nodeid": report.nodeid, "text": _text(report)})


def pytest_runtest_logstart(nodeid, location):
    _emit({"event": "start", "nodeid": nodeid})


def pytest_runtest_logreport(report):
    _emit({"event": "report", "nodeid": report.nodeid, "when": report.when, "outcome": report.outcome,
           "xfail": hasattr(report, "wasxfail"),
           "text": _text(report) if report.outcome != "passed" else ""})
