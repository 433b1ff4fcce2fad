"""Fault-injection campaign: kills, corruption, a full disk and concurrent writers, in figures.

    python scripts/faults.py --kills 240 --corruptions 240 --real-asks 5 --markdown

Every scenario counts the faults it injected and the committed rows it lost (must be 0). A row
is committed once the process that wrote it said so: the child processes print `ack KIND ID
HASH` after each commit, the campaign records every line it read before the kill, and after the
kill checks each one is in the database with the same text. Corruptions are checked for
detection (opening and reading everything through samchat, then `samchat db check`) and for
what `samchat db recover` saves. See docs/reliability.md for the figures and what they mean.

A script, not part of the package: the default test run exercises it in a small version
(tests/store/test_faults_smoke.py); `make faults` runs the full campaign. The scenarios live in
scripts/fault_campaign/ (its __init__ says which module holds what), the child programs in
scripts/fault_campaign/children/.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parent
# Run as a file or loaded by path (the smoke test): samchat and the campaign's package import.
for _path in (SCRIPTS.parent, SCRIPTS):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from fault_campaign.campaign import campaign  # noqa: E402
from fault_campaign.figures import Figures, markdown  # noqa: E402

__all__ = ["Figures", "campaign", "main", "markdown"]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--kills", type=int, default=240, help="SIGKILLs over the four write paths")
    p.add_argument("--corruptions", type=int, default=240, help="2/3 database, 1/3 index")
    p.add_argument("--real-asks", type=int, default=5, help="kills of a real `samchat ask`")
    p.add_argument("--disk-runs", type=int, default=6, help="runs on a full disk")
    p.add_argument("--writer-rounds", type=int, default=3, help="rounds of 2 and of 4 writers")
    p.add_argument("--seed", type=int, default=2026)
    p.add_argument("--json", type=Path, help="write the figures here")
    p.add_argument("--markdown", action="store_true", help="print the figures as a table")
    p.add_argument("--keep", action="store_true", help="keep the work directory")
    args = p.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="samchat-faults-"))
    start = time.monotonic()
    try:
        figures = campaign(
            kills=args.kills,
            corruptions=args.corruptions,
            real_asks=args.real_asks,
            disk_runs=args.disk_runs,
            writer_rounds=args.writer_rounds,
            seed=args.seed,
            work=work,
            log=lambda s: print(s, file=sys.stderr, flush=True),
        )
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    if args.json:
        args.json.write_text(json.dumps([asdict(f) for f in figures], indent=1))
    if args.markdown:
        print(markdown(figures))
    for f in figures:
        for problem in f.problems:
            print(f"{f.scenario}: {problem}", file=sys.stderr)
    lost = sum(f.lost for f in figures)
    print(
        f"{sum(f.injected for f in figures)} faults in {time.monotonic() - start:.0f}s; "
        f"committed rows lost: {lost}",
        file=sys.stderr,
    )
    return 1 if lost or any(f.silent or f.over_page_bound for f in figures) else 0


if __name__ == "__main__":
    sys.exit(main())
