"""`samchat serve`'s command line before any model loads: one-line errors and the warning for
a non-loopback address."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

from serve_process import home_env


def serve(home: Path, *args: str, code: str = "pass") -> subprocess.CompletedProcess[str]:
    """`samchat serve ARGS` in a fresh interpreter; `code` runs first (to hide a package)."""
    run = f"{code}; import sys; from samchat.cli import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.run(
        [sys.executable, "-c", run, "serve", *args],
        capture_output=True,
        text=True,
        env=home_env(home),
        timeout=300,
    )


def error_line(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    [line] = [x for x in result.stderr.splitlines() if x.startswith("error:")]
    return line


def test_without_the_serve_extra_it_names_the_install_command(tmp_path: Path) -> None:
    result = serve(tmp_path, code="import sys; sys.modules['starlette'] = None")
    assert "pip install 'samchat[serve]'" in error_line(result)


def test_a_busy_port_is_one_line_before_the_model_loads(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = serve(tmp_path, "--port", str(port), "--model", "/no/such/model")
    line = error_line(result)
    assert f"127.0.0.1:{port}" in line and "--port" in line


def test_listening_beyond_loopback_warns(tmp_path: Path) -> None:
    result = serve(tmp_path, "--host", "0.0.0.0", "--port", "0", "--model", "/no/such/model")
    warning = [x for x in result.stderr.splitlines() if x.startswith("warning:")]
    assert len(warning) == 1 and "0.0.0.0" in warning[0] and "--api-key" in warning[0]
    assert "does not exist" in error_line(result)


def test_loopback_needs_no_warning_and_bad_ports_are_refused(tmp_path: Path) -> None:
    result = serve(tmp_path, "--port", "0", "--model", "/no/such/model")
    assert "warning:" not in result.stderr
    assert "does not exist" in error_line(result)
    refused = serve(tmp_path, "--port", "70000")
    assert refused.returncode == 2 and "--port: must be a port number" in refused.stderr
