"""``scripts/gateway``'s command line and the haproxy.cfg it writes (no process started; the
real HAProxy checks the file when it is installed). The processes: tests/e2e/test_gateway.py."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"
if str(SCRIPTS) not in sys.path:
    sys.path.insert(0, str(SCRIPTS))  # scripts/gateway runs with scripts/ on its path

import gateway  # noqa: E402

REVERSE = ["--mode", "reverse:https://api.example.com"]
WORKERS = [("127.0.0.1", 41001), ("127.0.0.1", 41002)]


def lines(cfg: str) -> list[str]:
    return [
        line.strip()
        for line in cfg.splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]


def test_the_config_balances_streams_checks_health_and_does_not_buffer() -> None:
    cfg = lines(gateway.haproxy_config("0.0.0.0", 8080, WORKERS))
    assert "mode http" in cfg
    assert "balance leastconn" in cfg
    assert "bind 0.0.0.0:8080" in cfg
    assert "option httpchk" in cfg
    assert (
        f"http-check send meth GET uri {gateway.HEALTH_PATH} ver HTTP/1.1 hdr Host localhost" in cfg
    )
    assert "http-check expect status 200" in cfg
    assert [line for line in cfg if line.startswith("server ")] == [
        "server w1 127.0.0.1:41001",
        "server w2 127.0.0.1:41002",
    ]
    assert any(line.startswith("default-server check inter 1s") for line in cfg)
    assert "timeout server 10m" in cfg and "timeout client 10m" in cfg
    assert "timeout tunnel 1h" in cfg
    assert "option http-no-delay" in cfg
    assert "retries 3" in cfg and "option redispatch 1" in cfg
    for absent in ("http-buffer-request", "forwardfor", "http-server-close", "httpclose"):
        assert not [line for line in cfg if absent in line], absent


def test_the_health_path_is_the_one_the_worker_answers() -> None:
    from addon import health

    assert gateway.HEALTH_PATH == health.PATH
    assert gateway.HEALTH_DUMPER_FILTER == health.DUMPER_FILTER


def test_ipv6_addresses_are_bracketed() -> None:
    cfg = lines(gateway.haproxy_config("::", 8443, [("::1", 41001)]))
    assert "bind [::]:8443" in cfg
    assert "server w1 [::1]:41001" in cfg


@pytest.mark.skipif(gateway.find_haproxy() is None, reason="HAProxy is not installed")
def test_haproxy_accepts_the_config(tmp_path: Path) -> None:
    path = tmp_path / "haproxy.cfg"
    path.write_text(gateway.haproxy_config("127.0.0.1", 8080, WORKERS, stats_socket=tmp_path / "s"))
    haproxy = gateway.find_haproxy()
    assert haproxy is not None
    done = subprocess.run(
        [haproxy, "-c", "-f", str(path)], capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "WARNING" not in done.stdout + done.stderr


def test_options_for_haproxy_and_for_the_workers_are_told_apart() -> None:
    opts = gateway.parse_args(
        ["--workers", "3", "--listen-port", "9000", *REVERSE, "--set", "bridge_tool_mode=invoke"]
    )
    assert (opts.workers, opts.listen_port, opts.listen_host) == (3, 9000, "127.0.0.1")
    assert opts.mitmdump == [*REVERSE, "--set", "bridge_tool_mode=invoke"]
    argv = gateway.worker_argv(opts, 41001)
    assert argv[1:5] == ["-s", str(gateway.MAIN_SCRIPT), "-s", str(gateway.HEALTH_SCRIPT)]
    assert argv[argv.index("--listen-port") + 1] == "41001"
    assert argv[argv.index("--listen-host") + 1] == "127.0.0.1"
    assert "connection_strategy=lazy" in argv
    assert f"dumper_filter={gateway.HEALTH_DUMPER_FILTER}" in argv
    assert argv[-4:] == opts.mitmdump


def test_the_workers_options_win_over_the_gateways_defaults() -> None:
    opts = gateway.parse_args(
        [*REVERSE, "--set", "connection_strategy=eager", "--set=dumper_filter=~s"]
    )
    argv = gateway.worker_argv(opts, 41001)
    assert "connection_strategy=lazy" not in argv
    assert not any(a.startswith("dumper_filter=!") for a in argv)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--workers", "0", *REVERSE], "--workers takes a number >= 1"),
        ([], "give --mode reverse:"),
        (["--mode", "regular"], "give --mode reverse:"),
        ([*REVERSE, "--set", "listen_port=9"], "the workers' addresses are the gateway's"),
        ([*REVERSE, "-p", "9"], "the workers' addresses are the gateway's"),
        (["--listen-port", "70000", *REVERSE], "--listen-port takes a port number"),
    ],
)
def test_bad_command_lines_are_refused_saying_why(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as e:
        gateway.parse_args(argv)
    assert e.value.code == 2
    assert message in capsys.readouterr().err


def test_several_workers_without_a_shared_store_are_warned_about() -> None:
    def warning(*args: str) -> str | None:
        return gateway.store_warning(gateway.parse_args([*REVERSE, *args]))

    assert warning("--workers", "1") is None
    assert "no bridge_store" in (warning("--workers", "2") or "")
    assert "a file of each machine" in (
        warning("--workers", "2", "--set", "bridge_store=/var/lib/cb.sqlite") or ""
    )
    assert warning("--workers", "2", "--set", "bridge_store=redis://10.0.0.5:6379/0") is None
    assert warning("--workers", "4", "--set=bridge_store=rediss://r.example:6380/1") is None


def test_without_haproxy_it_says_how_to_install_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(gateway, "find_haproxy", lambda: None)
    assert gateway.main(["--workers", "2", *REVERSE]) == 3
    err = capsys.readouterr().err
    assert "`apt-get install haproxy`" in err


def test_print_config_needs_no_haproxy(capsys: pytest.CaptureFixture[str]) -> None:
    assert gateway.main(["--workers", "3", "--print-config"]) == 0
    out = capsys.readouterr().out
    assert out.count("\n    server w") == 3
    assert "balance leastconn" in out


def test_each_worker_gets_its_own_metrics_port() -> None:
    """``--set bridge_metrics=HOST:PORT``: worker 1 PORT, worker 2 PORT+1, each given only its
    own (the one given is left out of its options); ``HOST:0``: a free port each."""
    opts = gateway.parse_args(
        [
            *REVERSE,
            "--workers",
            "2",
            "--set",
            "bridge_metrics=127.0.0.1:9464",
            "--set=bridge_debug=true",
        ]
    )
    first, second = gateway.worker_metrics(opts, 1), gateway.worker_metrics(opts, 2)
    assert (first, second) == ("127.0.0.1:9464", "127.0.0.1:9465")
    argv = gateway.worker_argv(opts, 8001, second)
    metrics = [a for a in argv if a.startswith("bridge_metrics=")]
    assert metrics == ["bridge_metrics=127.0.0.1:9465"]
    assert "--set=bridge_debug=true" in argv
    free = gateway.parse_args([*REVERSE, "--set", "bridge_metrics=[::1]:0"])
    ports = {gateway.worker_metrics(free, i) for i in (1, 2)}
    assert all(p.startswith("[::1]:") and not p.endswith(":0") for p in ports)
    none = gateway.parse_args([*REVERSE, "--workers", "2"])
    assert gateway.worker_metrics(none, 1) == ""
    assert not [a for a in gateway.worker_argv(none, 8001) if "bridge_metrics" in a]


@pytest.mark.parametrize(
    ("arg", "secret"),
    [
        ("bridge_store=redis://:hunter2-redis-pw@127.0.0.1:6379/0", "hunter2-redis-pw"),
        ("bridge_store=rediss://alice:hunter2-redis-pw@redis.example:6380/1", "hunter2-redis-pw"),
        ("bridge_store=redis://127.0.0.1/0?password=hunter2-redis-pw", "hunter2-redis-pw"),
        ("upstream_auth=me:hunter2-proxy-pw", "hunter2-proxy-pw"),
        ("proxyauth=me:hunter2-proxy-pw", "hunter2-proxy-pw"),
        (
            "bridge_x=sk-proj-abcdefghijklmnopqrstuvwxyz012345",
            "sk-proj-abcdefghijklmnopqrstuvwxyz012345",
        ),
    ],
)
def test_the_start_line_shows_no_secret(arg: str, secret: str) -> None:
    shown = gateway.shown_command(["--mode", "reverse:https://api.openai.com", "--set", arg])
    assert secret not in shown
    assert shown.startswith("--mode reverse:https://api.openai.com --set ")
    assert arg.partition("=")[0] in shown


def test_the_start_line_keeps_what_holds_no_secret() -> None:
    args = ["--set", "bridge_store=redis://127.0.0.1:6379/0", "--set", "confdir=/tmp/a b"]
    assert gateway.shown_command(args) == (
        "--set bridge_store=redis://127.0.0.1:6379/0 --set 'confdir=/tmp/a b'"
    )
