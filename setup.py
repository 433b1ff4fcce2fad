"""Build hook: mypyc compiles the suffix-automaton core (samchat/sam/automaton.py).

Everything else is plain Python. The extension is optional: when it cannot be built (no C
compiler, SAMCHAT_NO_MYPYC=1), the same source runs interpreted and `samchat doctor` says so.
SAMCHAT_REQUIRE_MYPYC=1 makes a failed build an error instead (the binary wheels,
packaging/cibuildwheel.toml: a platform wheel must carry its compiled core).

Next to the extension the build writes samchat/sam/_core_build.sha256 (`sha256sum -c` format):
the hashes of the automaton.py it compiled and of the extension files. samchat.sam checks them
and ignores a stale or damaged extension. Hashes, not mtimes: git sets mtimes to checkout time.
"""

import hashlib
import os
from pathlib import Path
from typing import Any

from setuptools import setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
CORE = Path("samchat", "sam", "automaton.py")
RECORD = CORE.with_name("_core_build.sha256")
# Hashed before mypyc reads the source, so the record names what was really compiled.
DIGEST = hashlib.sha256((HERE / CORE).read_bytes()).hexdigest()


class BuildExtWithRecord(build_ext):
    """build_ext that records which automaton.py, and which extension files, it built."""

    def initialize_options(self) -> None:
        super().initialize_options()
        self._built: set[str] = set()

    def run(self) -> None:
        super().run()  # in editable mode this also copies the extensions into the source tree
        self._write_record(Path(self.build_lib, RECORD))
        if self.inplace or getattr(self, "editable_mode", False):
            self._write_record(HERE / RECORD)

    def build_extension(self, ext: Any) -> None:
        super().build_extension(ext)  # raises (and is reported as optional) when it fails
        self._built.add(ext.name)

    def _write_record(self, record: Path) -> None:
        names = [
            Path(self.get_ext_filename(self.get_ext_fullname(ext.name))).name
            for ext in self.extensions
        ]
        complete = {ext.name for ext in self.extensions} <= self._built
        if not complete or not all((record.parent / name).is_file() for name in names):
            # An optional extension failed: vouch for nothing, so a left-over one is not used.
            record.unlink(missing_ok=True)
            return
        lines = [f"{DIGEST}  {CORE.name}"]
        for name in names:
            lines.append(
                f"{hashlib.sha256((record.parent / name).read_bytes()).hexdigest()}  {name}"
            )
        record.write_text("\n".join(lines) + "\n")


# The samchat-docs corpus pack is the project's own documentation, copied in at build time
# (never by hand, so it cannot drift): source -> name in samchat/corpora/samchat-docs/.
DOCS_PACK = Path("samchat", "corpora", "samchat-docs")
DOCS = {Path("README.md"): "README.md", Path("docs", "ARCHITECTURE.md"): "ARCHITECTURE.md"}


class BuildPyWithDocs(build_py):
    """build_py that first copies the documentation into the samchat-docs corpus pack (in the
    source tree, so editable installs and wheels both carry it; the copies are git-ignored)."""

    def run(self) -> None:
        for source, name in DOCS.items():
            if (HERE / source).is_file():
                (HERE / DOCS_PACK / name).write_bytes((HERE / source).read_bytes())
        super().run()


ext_modules = []
if os.environ.get("SAMCHAT_NO_MYPYC", "") in ("", "0"):
    from mypyc.build import mypycify

    ext_modules = mypycify(["samchat/sam/automaton.py"], opt_level="3")
    required = os.environ.get("SAMCHAT_REQUIRE_MYPYC", "") not in ("", "0")
    for ext in ext_modules:
        ext.optional = not required  # a failed C build leaves the pure-Python fallback

setup(
    ext_modules=ext_modules,
    cmdclass={"build_ext": BuildExtWithRecord, "build_py": BuildPyWithDocs},
)
