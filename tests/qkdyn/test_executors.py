"""The executors' checks before any run: an unreachable Ray cluster is one line and exit 2, fast, and nothing is
created (ray.init itself retries such an address for many minutes behind the progress bars)."""
import socket
import time

import pytest

from qkdyn.cli import main
from qkdyn.errors import InputError
from qkdyn.executors import check_ray


def _closed_port() -> int:
    """A port on 127.0.0.1 that nothing listens on (bound to learn a free one, then closed)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _tree(root):
    return sorted(str(path.relative_to(root)) for path in root.rglob("*"))


@pytest.mark.parametrize("command", [
    ["verify", "--quick", "--skip-empirical", "--figures", "{tmp}/fig", "--runs", "{tmp}/runs"],
    ["compare-coupled", "--train", "--budget", "quick", "--out", "{tmp}/fig", "--runs", "{tmp}/runs"],
])
def test_an_unreachable_ray_address_is_one_line_before_anything_is_created(command, tmp_path, capsys, monkeypatch):
    pytest.importorskip("ray")
    monkeypatch.setenv("QKDYN_CACHE", str(tmp_path / "cache"))
    address = f"127.0.0.1:{_closed_port()}"
    start = time.perf_counter()
    argv = [part.replace("{tmp}", str(tmp_path)) for part in command]
    assert main([*argv, "--executor", "ray", "--ray-address", address]) == 2
    assert time.perf_counter() - start < 20
    err = capsys.readouterr().err
    assert err.startswith(f"qkdyn {command[0]}: error: cannot reach the Ray cluster at {address} within 15 s (")
    assert err.count("\n") == 1 and "%|" not in err  # one line, no progress bar
    assert _tree(tmp_path) == []


def test_a_silent_address_is_given_up_after_the_timeout(monkeypatch):
    """An address that neither answers nor refuses (a firewalled host) costs the timeout, then one line."""
    pytest.importorskip("ray")

    def silent(address, timeout):
        raise TimeoutError("timed out")

    monkeypatch.setattr(socket, "create_connection", silent)
    with pytest.raises(InputError, match=r"cannot reach the Ray cluster at 10\.0\.0\.1:6379 within 0\.5 s \(no answer"):
        check_ray("10.0.0.1:6379", timeout=0.5)


def test_the_address_of_ray_address_and_the_default_ports(monkeypatch):
    pytest.importorskip("ray")
    probed = []
    monkeypatch.setattr(socket, "create_connection", lambda address, timeout: probed.append(address) or socket.socket())
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    check_ray(None)  # a local cluster: nothing to probe
    check_ray("auto")  # resolved by Ray
    check_ray("head.example:6380")
    check_ray("ray://head.example")
    check_ray("[::1]:7000")
    monkeypatch.setenv("RAY_ADDRESS", "from-env:6379")
    check_ray(None)
    assert probed == [("head.example", 6380), ("head.example", 10001), ("::1", 7000), ("from-env", 6379)]


@pytest.mark.parametrize("address", ["head:port", "ray://", ":6379", "head:99999"])
def test_an_unreadable_address_names_the_flag(address):
    pytest.importorskip("ray")
    with pytest.raises(InputError, match="must be HOST:PORT or ray://HOST:PORT") as info:
        check_ray(address)
    assert info.value.cli_message().startswith("--ray-address must be")


def test_an_unreachable_ray_address_from_the_environment_says_so(monkeypatch):
    pytest.importorskip("ray")
    monkeypatch.setenv("RAY_ADDRESS", f"127.0.0.1:{_closed_port()}")
    with pytest.raises(InputError, match="connection refused; .* or leave out RAY_ADDRESS for a local one"):
        check_ray(None)


def test_without_ray_the_ray_executor_is_one_line(monkeypatch):
    import importlib.util

    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(InputError) as info:
        check_ray("127.0.0.1:6379")
    assert info.value.cli_message() == "--executor ray needs Ray: pip install 'qkdyn[ray]'"


class _Busy:
    """A study whose runs spend ``spec.name`` milliseconds of CPU (a busy loop) and record nothing."""

    name = "busy"

    def cost(self, spec):
        return float(spec.name)

    def run(self, spec, runs_dir):
        from pathlib import Path

        from qkdyn.studies import Record

        start = time.process_time()
        while time.process_time() - start < int(spec.name) / 1000:
            pass
        return Record(spec, {}, Path(runs_dir))


def test_each_run_s_cpu_seconds_are_collected_beside_its_record(tmp_path):
    from qkdyn.executors import execute_all
    from qkdyn.studies import RunSpec

    specs = [RunSpec.make("busy", str(ms)) for ms in (30, 300)]
    cpu: dict = {}
    done = [record.spec for _, record in execute_all([(_Busy(), specs)], tmp_path, "local", workers=1, cpu=cpu)]
    assert done == specs[::-1] and set(cpu) == set(specs)  # the longest first; every run timed
    assert 0.03 <= cpu[specs[0]] < 0.3 <= cpu[specs[1]] < 3.0  # its own CPU seconds, not the other's
    assert list(execute_all([(_Busy(), specs)], tmp_path, "local", workers=1)) != []  # cpu is optional


def test_runs_are_made_as_the_consumer_asks_for_them_and_no_more(tmp_path):
    from qkdyn.executors import execute_all
    from qkdyn.studies import RunSpec

    study = _Busy()
    ran = []
    study.run = lambda spec, runs_dir, run=study.run: ran.append(spec.name) or run(spec, runs_dir)
    runs = execute_all([(study, [RunSpec.make("busy", str(ms)) for ms in (1, 2, 3)])], tmp_path, "local", workers=1)
    next(runs)
    runs.close()
    assert ran == ["3"]  # nothing more runs once the consumer is gone
