"""tests/casekit.py: the harness of the Python integration cases
(tests/interpose/cases.py, trace_cases.py, tests/live/cases.py): one check()
that records failures, and the `SCRIPT CASE --build DIR` entry point that
runs the module's case_<CASE>() with ARGS set."""
import argparse

FAILURES = []


def check(condition, what):
    if not condition:
        FAILURES.append(what)
        print("FAIL:", what)
    else:
        print("ok:", what)


def main(cases):
    """Runs case_<CASE> from `cases` (the calling module's globals()), after
    setting cases["ARGS"] to the parsed arguments. Returns the exit status:
    0 when every check passed, 1 when one failed, 2 for an unknown case."""
    parser = argparse.ArgumentParser()
    parser.add_argument("case")
    parser.add_argument("--build", required=True)
    args = parser.parse_args()
    cases["ARGS"] = args
    fn = cases.get("case_" + args.case)
    if not fn:
        print("unknown case", args.case)
        return 2
    fn()
    print(f"{args.case}: {len(FAILURES)} failed checks")
    return 1 if FAILURES else 0
