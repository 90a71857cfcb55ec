"""Issue 19's attack set against the explorer, on its ASGI app: traversal, hidden files, pages that
would run script in the explorer's origin, FIFOs, overflowing parameters, long paths, short tokens.
Every attack must fail; every answer (401/403 included) carries the security headers."""

from __future__ import annotations

import os
import threading

import orjson
import pytest
from starlette.testclient import TestClient

from trnscope.explorer import create_app

TRACE = orjson.dumps({"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1,
                                       "ts": 1, "dur": 5}]})
SECRET = "do-not-serve-this"


@pytest.fixture()
def root(tmp_path):
    served = tmp_path / "served"
    (served / "run").mkdir(parents=True)
    (served / "run" / "a.pt.trace.json").write_bytes(TRACE)
    (served / ".secret").write_text(SECRET)
    (served / ".git").mkdir()
    (served / ".git" / "config").write_text(SECRET)
    (served / "run" / ".hidden.pt.trace.json").write_bytes(TRACE)
    (served / "page.html").write_text(f"<script>fetch('/api/entries')</script>{SECRET}")
    (served / "image.svg").write_text(f'<svg xmlns="http://www.w3.org/2000/svg"><script>{SECRET}</script></svg>')
    (served / "notes.txt").write_text(SECRET)
    os.mkfifo(served / "pipe.pt.trace.json")  # opening it would block until a writer comes
    (tmp_path / "outside.pt.trace.json").write_bytes(TRACE)
    (served / "link.pt.trace.json").symlink_to(tmp_path / "outside.pt.trace.json")
    return served


def _check_headers(response) -> None:
    assert "default-src" in response.headers.get("content-security-policy", ""), response.request.url
    assert response.headers.get("x-content-type-options") == "nosniff"
    assert response.headers.get("referrer-policy") == "no-referrer"


def _client(root, raise_server_exceptions: bool = True, **kwargs) -> TestClient:
    return TestClient(create_app([root], **kwargs), base_url="http://127.0.0.1:8080",
                      raise_server_exceptions=raise_server_exceptions)


def _run_with_deadline(fn, seconds: float = 60.0):
    """Run ``fn`` in a thread; a hang (a FIFO opened) fails the test instead of blocking the suite."""
    box = {}

    def run():
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the test's thread
            box["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), "the explorer hung"
    if "error" in box:
        raise box["error"]
    return box["value"]


def test_listing_skips_fifos_hidden_files_and_non_traces(root):
    with _client(root, loopback_only=True) as client:
        listing = _run_with_deadline(lambda: client.get("/api/entries"))
    assert listing.status_code == 200
    _check_headers(listing)
    assert [e["relpath"] for e in listing.json()["entries"]] == ["run/a.pt.trace.json"]


ATTACKS = [
    "/raw/0/.secret", "/raw/0/.git/config", "/raw/0/run/.hidden.pt.trace.json", "/raw/0/page.html",
    "/raw/0/image.svg", "/raw/0/notes.txt", "/raw/0/pipe.pt.trace.json", "/raw/0/link.pt.trace.json",
    "/raw/0/../outside.pt.trace.json", "/raw/0/%2e%2e/outside.pt.trace.json", "/raw/0/..%2Foutside.pt.trace.json",
    "/raw/0//etc/passwd", "/raw/0/run/%00a.pt.trace.json", "/raw/1/run/a.pt.trace.json",
    "/raw/0/" + "a" * 5000, "/raw/0/" + "/".join(["d" * 250] * 20),
]


@pytest.mark.parametrize("path", ATTACKS)
def test_raw_serves_only_listed_files(root, path):
    with _client(root, loopback_only=True) as client:
        response = _run_with_deadline(lambda: client.get(path))
    assert response.status_code in (403, 404), (path, response.status_code)
    assert SECRET not in response.text and "<script" not in response.text
    assert str(root) not in response.text and str(root.parent) not in response.text
    _check_headers(response)


def test_a_listed_trace_is_sent_as_a_download(root):
    with _client(root, loopback_only=True) as client:
        response = client.get("/raw/0/run/a.pt.trace.json")
    assert response.status_code == 200 and response.content == TRACE
    assert response.headers["content-type"] == "application/octet-stream"
    assert response.headers["content-disposition"].startswith("attachment")
    assert "sandbox" in response.headers["content-security-policy"]


@pytest.mark.parametrize("query", [
    "t0=0&t1=1e300&px=100", "t0=-1e300&t1=1e300&px=100", "t0=9223372036854775808&t1=18446744073709551616&px=100",
    "t0=0&t1=10&px=99999999999999999999999", "t0=0&t1=10&px=-1", "t0=nan&t1=1&px=10", "t0=0&t1=1&px=1e3",
])
@pytest.mark.parametrize("endpoint", ["lod", "select"])
def test_parameters_beyond_int64_are_answered_not_crashed(root, endpoint, query):
    with _client(root, loopback_only=True) as client:
        entry = client.get("/api/entries").json()["entries"][0]["id"]
        response = client.get(f"/api/entries/{entry}/{endpoint}?{query}")
    assert response.status_code in (200, 400), (response.status_code, response.text)
    assert str(root) not in response.text
    _check_headers(response)


def test_error_answers_never_carry_absolute_paths(root, monkeypatch):
    from trnscope.explorer import app as app_module

    def crash(self, *args, **kwargs):
        raise OSError(f"[Errno 36] File name too long: '{root}/x'")

    monkeypatch.setattr(app_module.TimelineView, "describe", crash)
    with _client(root, raise_server_exceptions=False, loopback_only=True) as client:
        entry = client.get("/api/entries").json()["entries"][0]["id"]
        response = client.get(f"/api/entries/{entry}/timeline")
    assert response.status_code == 500 and str(root) not in response.text and "OSError" in response.text
    _check_headers(response)


def test_refusals_carry_the_security_headers(root):
    token = "t" * 24
    with _client(root, token=token) as client:
        refused = client.get("/api/entries")
        assert refused.status_code == 401
        _check_headers(refused)
        assert client.get("/api/entries", params={"token": token}).status_code == 200
    with _client(root, loopback_only=True) as client:
        rebound = client.get("/api/entries", headers={"host": "attacker.example"})
        assert rebound.status_code == 403
        _check_headers(rebound)


@pytest.mark.parametrize("token", ["a", "short-token", "x" * 15, "has space in it ok", "a&b=c-0123456789"])
def test_weak_tokens_are_refused(root, token):
    with pytest.raises(ValueError, match="token"):
        create_app([root], token=token)


def test_view_command_refuses_a_short_token(root):
    import argparse

    from trnscope.cli.main import UsageError
    from trnscope.cli.view_cmd import ViewCommand

    command = ViewCommand()
    parser = argparse.ArgumentParser()
    command.add_arguments(parser)
    with pytest.raises(UsageError, match="at least 16"):
        command.run(parser.parse_args([str(root), "--token", "a", "--port", "0"]), console=None)


def test_a_fifo_named_like_a_trace_is_a_clean_error_when_opened_directly(root):
    from trnscope.trace import TraceFormatError, read_kineto

    with pytest.raises(TraceFormatError, match="not a regular file"):
        _run_with_deadline(lambda: read_kineto(root / "pipe.pt.trace.json"))
