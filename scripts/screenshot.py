"""Render the README screenshot: a real chat with the default model, provenance and figures on.

    python scripts/screenshot.py docs/screenshot.svg

Runs headless with a throw-away data directory; needs the default model (offline). A script, not
part of the package: nothing in samchat needs it, and it loads a model from inside the TUI.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import sys
import tempfile
from pathlib import Path

PROMPTS = (
    "Fix the typos and repeat this text: The suffix automatom finds the longest "
    "match of the recent text in evrything seen so far, and proposes what came next.",
    "Now write it as a short bullet list.",
)


async def _render(out: Path, size: tuple[int, int]) -> None:
    from samchat.chat.config import Config
    from samchat.engines.costs import CostCurve
    from samchat.models import load_model
    from samchat.tui.app import SamchatApp

    lm = load_model()
    cfg = Config()
    cfg.sampling = dataclasses.replace(cfg.sampling, max_new_tokens=96)
    # The default cost curve: the picture does not need this machine timed first.
    app = SamchatApp(lm=lm, config=cfg, cost_curve=CostCurve.default(lm.device_type))
    async with app.run_test(size=size) as pilot:
        for n, prompt in enumerate(PROMPTS, start=1):
            app.chat.prompt.insert(prompt)
            await pilot.press("enter")
            while app.chat.replies_finished < n:
                await pilot.pause(0.2)
        await pilot.press("f9", "f6")
        await pilot.pause(0.5)
        out.parent.mkdir(parents=True, exist_ok=True)
        app.save_screenshot(filename=out.name, path=str(out.parent))


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    out = Path(args[0] if args else "docs/screenshot.svg").resolve()
    with tempfile.TemporaryDirectory() as home:
        for name in ("DATA", "CONFIG"):
            os.environ[f"SAMCHAT_{name}_DIR"] = str(Path(home) / name.lower())
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        asyncio.run(_render(out, (130, 40)))
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
