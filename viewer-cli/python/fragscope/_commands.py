"""The console commands pip puts on PATH: each runs the program of the same name in bin/."""

import os
import sys

_BIN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin")


def _exec(name):
    path = os.path.join(_BIN, name)
    if not os.access(path, os.X_OK):
        sys.stderr.write("%s: %s is missing from the installed package; reinstall it "
                         "(pip install --force-reinstall fragscope)\n" % (name, path))
        sys.exit(3)
    os.execv(path, [path] + sys.argv[1:])


def fragscope():
    _exec("fragscope")


def collector():
    _exec("fragscope-collector")


def dump():
    _exec("fragscope-dump")
