"""`samchat serve`: an OpenAI-compatible server, so other clients get samchat's decoding."""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from functools import partial

from samchat import interrupts, paths
from samchat.cli_options import (
    add_data_dir_option,
    add_model_options,
    spec_from_args,
    store_path,
)
from samchat.decoding.knobs import knob_of
from samchat.decoding.params import DecodingConfig
from samchat.errors import SamchatError

EXTRA = "pip install 'samchat[serve]'"


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"must be a port number 0-65535, got {text!r}")
    return port


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser("serve", help="serve the model over an OpenAI-compatible HTTP API")
    parser.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to listen on (default: 127.0.0.1, this machine only)",
    )
    parser.add_argument("--port", type=_port, default=8000, help="default: 8000 (0: any free)")
    parser.add_argument(
        "--api-key",
        default=os.environ.get("SAMCHAT_API_KEY"),
        help="require 'Authorization: Bearer KEY' (env SAMCHAT_API_KEY)",
    )
    parser.add_argument("--save", action="store_true", help="save the conversations in the history")
    method = knob_of(DecodingConfig, "method")
    parser.add_argument(
        "--method",
        choices=method.choices,
        default=None,
        help=f"{method.help} (default: config.toml's, else {method.default})",
    )
    add_model_options(parser)
    add_data_dir_option(parser)
    parser.set_defaults(func=run)


def _require_extra() -> None:
    try:
        import sse_starlette  # noqa: F401
        import starlette  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as exc:
        raise SamchatError(f"samchat serve needs {exc.name or 'its web server'}: {EXTRA}") from None


def run(args: argparse.Namespace) -> int:
    _require_extra()
    from samchat.chat.config import load_config
    from samchat.engines.engine_thread import ENGINE_THREAD
    from samchat.models import load_model
    from samchat.models.catalog import recent_file
    from samchat.models.engine_choice import preferred, why
    from samchat.models.engine_trial import Trial
    from samchat.serve.server import ServeOptions, bind, is_loopback, serve
    from samchat.store import Store

    if not is_loopback(args.host):
        print(
            f"warning: listening on {args.host}: other machines can reach this server"
            + ("" if args.api_key else "; set --api-key to keep them out"),
            file=sys.stderr,
        )
    config = load_config()
    decoding = config.decoding
    if args.method:
        decoding = dataclasses.replace(decoding, method=args.method)
    sock = bind(args.host, args.port)  # before the model: a busy port fails at once
    try:
        with Store.open(store_path(args)) as store:  # created or migrated now
            db_path = store.path
        # The engine and format measured fastest here, where left to auto; with no record yet,
        # measured between requests after the first answer (server.Answering).
        named = spec_from_args(args, config)
        spec = preferred(named, paths.cache_dir())
        # Loaded, and later decoded, on one engine thread (engine_thread.py says why). A Ctrl-C
        # meanwhile ends the process at once: the load goes on in C on that thread.
        ENGINE_THREAD.start()
        try:
            lm = ENGINE_THREAD.run(
                partial(
                    load_model,
                    spec,
                    progress=lambda msg: print(f"[{msg}]", file=sys.stderr),
                    recent=recent_file(db_path.parent),
                )
            )
        except KeyboardInterrupt:
            interrupts.say_cancelled()
            interrupts.exit_now(interrupts.EXIT_INTERRUPTED)
            raise
        lm.engine_note = why(named, lm.engine, paths.cache_dir())
        lm.trial = Trial.owed(named, paths.cache_dir(), lm)
        print(f"[engine {lm.engine}: {lm.engine_note}]", file=sys.stderr, flush=True)
        options = ServeOptions(args.host, args.port, args.api_key, args.save, decoding)
        stopped = serve(lm, sock, options, db_path, paths.cache_dir())
    finally:
        sock.close()
    if not stopped:  # freeing the model under the engine's step would crash the interpreter
        interrupts.exit_now(0)
    return 0
