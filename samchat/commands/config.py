"""`samchat config path|show`: where config.toml is, and the settings in effect."""

from __future__ import annotations

import argparse

import tomlkit

from samchat.chat.config import config_path, load_config


def run(args: argparse.Namespace) -> int:
    if args.action == "path":
        print(config_path())
        return 0
    # show: the file's settings with every default filled in (a bad file is one error line)
    cfg = load_config()
    tables = cfg.to_toml_dict()
    data: dict[str, object] = dict(tables)
    data["sampling"] = {
        k: list(v) if isinstance(v, tuple) else v for k, v in tables["sampling"].items()
    }
    if cfg.endpoints:  # a key written in the file is not echoed
        endpoints = tomlkit.table(is_super_table=True)
        for name, e in cfg.endpoints.items():
            table = {"url": e.url, "timeout": e.timeout_s, "context": e.context}
            if e.api_key_env:
                table["api_key_env"] = e.api_key_env
            if e.api_key:
                table["api_key"] = "(set in the file)"
            endpoints[name] = table
        data["endpoints"] = endpoints
    print(f"# {config_path()} with every default filled in")
    print(tomlkit.dumps(data), end="")
    return 0


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "config", help="config.toml: path (where it is) | show (the settings in effect, as TOML)"
    )
    p.add_argument("action", choices=("path", "show"))
    p.set_defaults(func=run)
