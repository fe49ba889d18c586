#!/usr/bin/env python3
"""tests/pool/region_places_cases.py: where a region keeps its contents at
sleep (region_places.cpp against the fake libcuda.so.1 with
LD_PRELOAD=libpagefast.so).

Usage: region_places_cases.py disk|release --build <build dir>

'disk' runs the program's disk subcommand in a fresh folder, then its
disk_exit subcommand, which exits asleep: the folder must be empty after
(the files deleted at exit). 'release' runs with sleep_prelock:0, so that
no buffer is page-locked ahead of it while it counts."""
import os
import sys
import tempfile

from preload_kit import check, exit_with_failures, expect_ok, run_program


def main():
    what = sys.argv[1]
    build = sys.argv[sys.argv.index("--build") + 1]
    if what == "disk":
        with tempfile.TemporaryDirectory(prefix="pagefast-disk-") as folder:
            expect_ok(run_program(build, "region_places", ["disk", folder], env={}), "disk", "disk")
            check(os.listdir(folder) == [], "files left after the disk run: %s" % os.listdir(folder))
            expect_ok(run_program(build, "region_places", ["disk_exit", folder], env={}), "disk_exit", "disk_exit")
            check(os.listdir(folder) == [], "files left after an exit asleep: %s" % os.listdir(folder))
    elif what == "release":
        r = run_program(build, "region_places", ["release"], env={"PAGEFAST_CONF": "sleep_prelock:0"})
        expect_ok(r, "release", "sleep_prelock:0")
    else:
        check(False, f"unknown case {what}")
    exit_with_failures()


if __name__ == "__main__":
    main()
