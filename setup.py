"""Build hook: mypyc compiles the suffix-automaton core (samchat/sam/automaton.py).

Everything else is plain Python. The extension is optional: when it cannot be built (no C
compiler, SAMCHAT_NO_MYPYC=1), the same source runs interpreted and `samchat doctor` says so.
"""

import os

from setuptools import setup

ext_modules = []
if os.environ.get("SAMCHAT_NO_MYPYC", "") in ("", "0"):
    from mypyc.build import mypycify

    ext_modules = mypycify(["samchat/sam/automaton.py"], opt_level="3")
    for ext in ext_modules:
        ext.optional = True  # a failed C build leaves the pure-Python fallback

setup(ext_modules=ext_modules)
