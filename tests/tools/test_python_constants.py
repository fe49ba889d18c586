#!/usr/bin/env python3
"""tests/tools/test_python_constants.py: python/pagefast/_constants.py
states what the library defines (interpose/pagefast.h, policy/tags.h):
every name the library's values are printed under (library_constants.cpp)
has that value there, its tag pattern takes exactly the tags
policy::good_tag takes, and no other module of the package writes one of
those values again as a module constant.

Usage: test_python_constants.py LIBRARY_CONSTANTS SOURCE
"""
import ast
import os
import subprocess
import sys


def main(argv):
    program, source = argv[1], argv[2]
    sys.path.insert(0, os.path.join(source, "python"))
    from pagefast import _constants

    failures = []
    library = {}
    for line in subprocess.run([program], check=True, capture_output=True, text=True).stdout.splitlines():
        name, value = line.split(" ", 1)
        library[name] = value
    for name, value in sorted(library.items()):
        mine = getattr(_constants, name, None)
        if mine is None:
            failures.append("_constants.py lacks %s (the library's is %s)" % (name, value))
        elif str(mine) != value:
            failures.append("_constants.%s is %r, the library's %s" % (name, mine, value))
    stated = {n for n in vars(_constants) if n.isupper() and n != "TAG"}
    for name in sorted(stated - set(library)):
        failures.append("_constants.%s is checked against nothing (library_constants.cpp prints no %s)" % (name, name))

    limit = _constants.TAG_MAX_CHARS
    for tag, good in (("kv_cache-1.2:a", True), ("x" * limit, True), ("x" * (limit + 1), False), ("", False),
                      ("a b", False), ("a/b", False), ("é", False), ("a\n", False)):
        if bool(_constants.TAG.match(tag)) != good:
            failures.append("_constants.TAG %s %r" % ("refuses" if good else "takes", tag))

    # The package's other modules take these from _constants, never write
    # them again (a module-level NAME = literal with the same value).
    package = os.path.join(source, "python", "pagefast")
    for file in sorted(os.listdir(package)):
        if not file.endswith(".py") or file == "_constants.py":
            continue
        tree = ast.parse(open(os.path.join(package, file)).read())
        for node in tree.body:
            if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and
                    any(isinstance(t, ast.Name) and t.id.lstrip("_") in library for t in node.targets)):
                failures.append("%s:%d restates %s" % (file, node.lineno, ast.unparse(node)))

    for f in failures:
        print("FAIL " + f)
    print("%d names checked, %d failures" % (len(library), len(failures)))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
