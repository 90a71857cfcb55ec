"""Who may talk to the explorer: tokens off loopback, loopback Host names on it; the server plan
and the `trnscope view` command; and that viewing never imports torch."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

import pytest
from starlette.testclient import TestClient

from trnscope.explorer import create_app
from trnscope.explorer.security import COOKIE, is_loopback
from trnscope.explorer.server import plan


@pytest.fixture()
def root(tmp_path):
    (tmp_path / "a.pt.trace.json").write_text('{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "aten::add", '
                                              '"pid": 1, "tid": 1, "ts": 1, "dur": 5}]}')
    return tmp_path


def test_token_is_required_on_every_request(root):
    app = create_app([root], token="s3cret-token-0123456789")
    with TestClient(app) as client:
        for path in ("/", "/api/entries", "/static/js/main.js", "/raw/0/a.pt.trace.json"):
            response = client.get(path)
            assert response.status_code == 401, path
            assert "token" in response.text
        assert client.get("/api/entries", params={"token": "wrong"}).status_code == 401
        assert client.get("/api/entries", headers={"authorization": "Bearer wrong"}).status_code == 401
        assert client.get("/api/entries", headers={"authorization": "Bearer s3cret-token-0123456789"}).status_code == 200
    with TestClient(app) as client:
        first = client.get("/", params={"token": "s3cret-token-0123456789"})
        assert first.status_code == 200
        cookie = first.headers["set-cookie"]
        assert cookie.startswith(f"{COOKIE}=s3cret-token-0123456789") and "HttpOnly" in cookie and "SameSite=Strict" in cookie
        # the page's own requests carry the cookie
        assert client.get("/api/entries").status_code == 200
        client.cookies.clear()
        assert client.get("/api/entries").status_code == 401


def test_loopback_server_refuses_foreign_host_headers(root):
    app = create_app([root], loopback_only=True)
    with TestClient(app, base_url="http://127.0.0.1:8080") as client:
        assert client.get("/api/entries").status_code == 200
        assert client.get("/api/entries", headers={"host": "localhost:8080"}).status_code == 200
        assert client.get("/api/entries", headers={"host": "[::1]:8080"}).status_code == 200
        rebound = client.get("/api/entries", headers={"host": "attacker.example:8080"})
        assert rebound.status_code == 403


def test_plan_requires_a_token_off_loopback():
    local = plan("127.0.0.1", 8123)
    assert local.token is None and local.url == "http://127.0.0.1:8123/"
    public = plan("0.0.0.0", 8123)
    assert public.token and len(public.token) >= 24 and public.url.endswith(f"?token={public.token}")
    assert plan("0.0.0.0", 8123).token != public.token  # fresh every time
    assert plan("10.0.0.5", 8123, token="given").token == "given"
    assert plan("127.0.0.1", 0).port > 0
    assert is_loopback("::1") and is_loopback("localhost") and not is_loopback("0.0.0.0")


def test_view_command_arguments(tmp_path):
    from trnscope.cli.main import UsageError
    from trnscope.cli.view_cmd import ViewCommand

    command = ViewCommand()
    parser = argparse.ArgumentParser()
    command.add_arguments(parser)
    args = parser.parse_args([str(tmp_path), "--port", "0", "--host", "0.0.0.0"])
    assert args.dirs == [str(tmp_path)] and args.port == 0 and args.token is None and not args.no_cache
    with pytest.raises(UsageError):
        command.run(parser.parse_args([str(tmp_path / "missing")]), console=None)


def test_viewing_never_imports_torch(root):
    code = (
        "import sys\n"
        "from starlette.testclient import TestClient\n"
        "from trnscope.explorer import create_app\n"
        "import trnscope.analysis, trnscope.cli.view_cmd\n"
        f"client = TestClient(create_app([{str(root)!r}]))\n"
        "entry = client.get('/api/entries').json()['entries'][0]['id']\n"
        "assert client.get(f'/api/entries/{entry}/summary').status_code == 200\n"
        "print('torch' in sys.modules)\n"
    )
    env = {**os.environ, "TRNSCOPE_NO_DEVICE": "1"}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"


def test_security_headers(root):
    with TestClient(create_app([root])) as client:
        headers = client.get("/").headers
        assert "default-src 'self'" in headers["content-security-policy"]
        assert headers["referrer-policy"] == "no-referrer" and headers["x-content-type-options"] == "nosniff"
