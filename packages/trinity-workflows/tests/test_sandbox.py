"""The code sandbox runs real programs in real processes, including hostile ones.

Every hostile program must be contained, reported with a status and a reason, and leave the host
as it was: no process of the run left behind, nothing written outside the sandbox, no secret
read, no connection made, the test process (and its other children) alive and able to fork.

The bwrap tests need bubblewrap (``apt install bubblewrap``); without it they are skipped
locally and fail under CI (``CI`` set), where it must be installed.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from trinity.workflows.sandbox import (
    CodeSandbox,
    SandboxConfig,
    SandboxResult,
    SandboxUnavailableError,
)

REPO = Path(__file__).resolve().parents[3]
AS_ROOT = os.geteuid() == 0
SANDBOX_UID = 65534 if AS_ROOT else os.geteuid()
HAVE_BWRAP = shutil.which("bwrap") is not None

# Small limits keep the hostile cases fast; each test states the limit it relies on.
LIMITS = dict(
    cpu_time_s=1,
    wall_time_s=4,
    memory_mb=256,
    max_output_bytes=16 * 1024,
    max_file_bytes=2 * 1024 * 1024,
    workdir_mb=16,
    max_processes=16,
)


def _require_bwrap() -> None:
    if not HAVE_BWRAP:
        if os.environ.get("TRINITY_REQUIRE_SANDBOX") == "1":
            pytest.fail(
                "bubblewrap is required here (TRINITY_REQUIRE_SANDBOX=1) but not installed (apt install bubblewrap)"
            )
        pytest.skip("bubblewrap is not installed (apt install bubblewrap)")


@pytest.fixture(scope="module")
def box() -> CodeSandbox:
    _require_bwrap()
    return CodeSandbox(SandboxConfig(**LIMITS))


@pytest.fixture(scope="module")
def patient_box() -> CodeSandbox:
    """``box`` with a wall-clock limit far above the CPU limit: on a loaded machine a busy
    loop may get a tenth of a core, and must still reach its CPU second first."""
    _require_bwrap()
    return CodeSandbox(SandboxConfig(**{**LIMITS, "wall_time_s": 60}))


@pytest.fixture(scope="module")
def weak_box() -> CodeSandbox:
    """The weaker "process" backend (rlimits, session, scrubbed env, no namespaces)."""
    return CodeSandbox(SandboxConfig(backend="process", **LIMITS))


# ------------------------------------------------------------------------- host inspection
def _pid_ns(pid: str) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/pid")
    except OSError:
        return None


def _process_table() -> dict[str, tuple[int, str | None, str]]:
    """pid -> (uid, pid namespace, cmdline) of every process we can see."""
    table = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            uid = os.stat(f"/proc/{pid}").st_uid
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                cmd = fh.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue
        table[pid] = (uid, _pid_ns(pid), cmd or "<zombie or kernel thread>")
    return table


def _sandbox_leftovers(before: dict[str, tuple[int, str | None, str]]) -> list[str]:
    """Processes that appeared since ``before`` and belong to a sandbox: run as the sandbox
    uid (when we are root) or live in another pid namespace (bwrap)."""
    own_ns = _pid_ns("self")
    leftovers = []
    for pid, (uid, ns, cmd) in _process_table().items():
        if pid in before:
            continue
        if (AS_ROOT and uid == SANDBOX_UID) or (ns is not None and ns != own_ns):
            leftovers.append(f"{pid} uid={uid} {cmd}")
    return leftovers


def _wait_no_leftovers(before: dict, timeout: float = 0.0) -> list[str]:
    end = time.monotonic() + timeout
    while True:
        left = _sandbox_leftovers(before)
        if not left or time.monotonic() >= end:
            return left
        time.sleep(0.05)


def _assert_reported(result: SandboxResult, *statuses: str) -> None:
    assert result.status in statuses, (result.status, result.reason, result.stderr[-500:])
    assert result.reason, "every outcome carries a human-readable reason"
    assert not Path(result.workdir).exists(), "the throwaway directory must be removed"


# ------------------------------------------------------------------------- ordinary programs
def test_prints_stdout_and_reports_ok(box: CodeSandbox) -> None:
    result = box.run("print('hello sandbox')")
    assert result.ok, result.reason
    assert (result.status, result.exit_code, result.signal) == ("ok", 0, None)
    assert result.stdout == "hello sandbox\n" and result.stderr == ""
    assert 0 < result.wall_time < LIMITS["wall_time_s"]


def test_stdin_is_piped_to_the_program(box: CodeSandbox) -> None:
    result = box.run("import sys\nprint(sum(int(x) for x in sys.stdin.read().split()))", "1 2\n3\n")
    assert result.ok and result.stdout == "6\n"


def test_files_are_placed_in_the_writable_working_directory(box: CodeSandbox) -> None:
    code = (
        "import os\n"
        "data = open('data/in.txt').read()\n"
        "open('out.txt', 'w').write(data.upper())\n"
        "print(open('out.txt').read(), os.getcwd())\n"
        "import helper; print(helper.VALUE)\n"
    )
    result = box.run(code, files={"data/in.txt": "abc", "helper.py": "VALUE = 41 + 1\n"})
    assert result.ok, result.stderr
    assert result.stdout.split() == ["ABC", "/tmp/work", "42"]


def test_bad_files_are_refused_naming_the_file(box: CodeSandbox) -> None:
    for name in ("../escape.py", "/etc/passwd", "main.py"):
        with pytest.raises(ValueError, match="not allowed"):
            box.run("pass", files={name: "x"})


def test_nonzero_exit_and_exceptions_are_errors_with_the_exception_as_reason(
    box: CodeSandbox,
) -> None:
    result = box.run("import sys\nsys.exit(3)")
    _assert_reported(result, "error")
    assert result.exit_code == 3 and result.reason == "exit code 3"
    result = box.run("raise ValueError('boom')")
    _assert_reported(result, "error")
    assert result.reason == "exit code 1: ValueError: boom"
    assert "Traceback" in result.stderr


def test_workdir_is_removed_after_ok_and_after_killed_runs(box: CodeSandbox) -> None:
    ok = box.run("open('left.txt', 'w').write('x' * 1000)")
    flood = box.run("while True: print('x' * 1000)")
    for result in (ok, flood):
        assert result.workdir and not Path(result.workdir).exists()
    assert ok.ok and flood.status == "output_limit"


def test_run_async_runs_sandboxes_concurrently(box: CodeSandbox) -> None:
    async def main() -> list[SandboxResult]:
        code = "import time\ntime.sleep(0.6)\nprint('done')"
        return await asyncio.gather(*(box.run_async(code) for _ in range(4)))

    start = time.monotonic()
    results = asyncio.run(main())
    assert [r.stdout for r in results] == ["done\n"] * 4
    assert time.monotonic() - start < 4 * 0.6, "the four runs must overlap"


# ------------------------------------------------------------------------- hostile programs
def test_infinite_loop_hits_the_cpu_limit(patient_box: CodeSandbox) -> None:
    before = _process_table()
    result = patient_box.run("while True:\n    pass")
    _assert_reported(result, "cpu_limit")
    assert result.reason == "CPU time limit exceeded (1s)"
    assert result.wall_time < 60, "the CPU limit must fire before wall time"
    assert result.cpu_time >= 0.9
    assert _wait_no_leftovers(before) == []


def test_loop_that_ignores_sigxcpu_is_still_killed(patient_box: CodeSandbox) -> None:
    code = "import signal\nsignal.signal(signal.SIGXCPU, signal.SIG_IGN)\nwhile True:\n    pass"
    result = patient_box.run(code)
    _assert_reported(result, "cpu_limit")
    assert result.signal == 9  # the hard limit (soft + 1 s) sends SIGKILL


def test_sleeping_forever_hits_the_wall_time_limit() -> None:
    _require_bwrap()
    box = CodeSandbox(SandboxConfig(**{**LIMITS, "wall_time_s": 1.0}))
    before = _process_table()
    result = box.run("import time\nprint('started', flush=True)\nwhile True:\n    time.sleep(1)")
    _assert_reported(result, "timeout")
    assert result.reason == "timeout after 1s (wall-time limit)"
    assert 1.0 <= result.wall_time < 3.0
    assert result.stdout == "started\n", "output written before the kill is kept"
    assert _wait_no_leftovers(before) == []


@pytest.mark.slow
def test_fork_bomb_is_contained_and_leaves_nothing_behind(box: CodeSandbox) -> None:
    before = _process_table()
    bomb = (
        "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
    )
    outcome: dict[str, SandboxResult] = {}
    thread = threading.Thread(target=lambda: outcome.setdefault("bomb", box.run(bomb)))
    thread.start()
    time.sleep(0.5)  # the bomb is at its process limit now
    # The limit is per sandbox (its own user namespace): a concurrent run still starts and forks.
    neighbour = box.run(
        "import os\npid = os.fork()\nif pid == 0:\n    os._exit(0)\nos.wait()\nprint('ok')"
    )
    thread.join(timeout=LIMITS["wall_time_s"] + 5)
    assert not thread.is_alive()
    assert neighbour.ok and neighbour.stdout == "ok\n", neighbour.reason
    result = outcome["bomb"]
    _assert_reported(result, "timeout", "cpu_limit")
    assert result.wall_time < LIMITS["wall_time_s"] + 1
    # Every process of the bomb is gone the moment run() returns ...
    assert _sandbox_leftovers(before) == []
    # ... and the host can still create processes.
    assert subprocess.run(["true"]).returncode == 0
    pid = os.fork()
    if pid == 0:
        os._exit(7)
    assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 7


def test_daemonized_child_does_not_outlive_the_run(box: CodeSandbox) -> None:
    marker = f"{61 + int(uuid.uuid4().int % 1000) / 10000:.4f}"
    code = (
        "import os\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        f"        os.execv('/bin/sleep', ['sleep', '{marker}'])\n"
        "    os._exit(0)\n"
        "print('parent exits')\n"
    )
    before = _process_table()
    result = box.run(code)
    assert result.ok, result.reason
    survivors = [cmd for _, _, cmd in _process_table().values() if marker in cmd]
    assert survivors == []
    assert _sandbox_leftovers(before) == []


def test_huge_allocations_hit_the_memory_limit(box: CodeSandbox) -> None:
    for code in ("x = bytearray(10**10)", "xs = []\nwhile True:\n    xs.append(bytearray(10**6))"):
        result = box.run(code)
        _assert_reported(result, "memory")
        assert "MemoryError" in result.reason and "256 MB" in result.reason


def test_writes_outside_the_sandbox_do_not_reach_the_host(box: CodeSandbox) -> None:
    name = f"trinity-escape-{uuid.uuid4().hex}"
    targets = [f"/tmp/{name}", str(REPO / name), f"/etc/{name}", f"/usr/{name}", f"/{name}"]
    code = (
        "import os\n"
        f"for path in {targets!r}:\n"
        "    try:\n"
        "        with open(path, 'w') as fh:\n"
        "            fh.write('pwned')\n"
        "        print('WROTE', path)\n"
        "    except OSError as exc:\n"
        "        print('REFUSED', path, exc.strerror)\n"
        f"print('REPO VISIBLE', os.path.exists({str(REPO)!r}))\n"
    )
    result = box.run(code)
    assert result.ok, result.reason
    # /tmp inside is the sandbox's private tmpfs: the write succeeds there and vanishes.
    assert f"WROTE /tmp/{name}" in result.stdout
    for path in targets[1:]:
        assert f"REFUSED {path}" in result.stdout
    assert "REPO VISIBLE False" in result.stdout, "the repository is not even visible"
    for path in targets:
        assert not os.path.exists(path), f"{path} was created on the host"


def test_network_is_unreachable_and_the_test_server_sees_nothing(box: CodeSandbox) -> None:
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.setblocking(False)
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind(("127.0.0.1", 0))
    udp.setblocking(False)
    port, udp_port = server.getsockname()[1], udp.getsockname()[1]
    code = (
        "import socket\n"
        f"for addr in [('127.0.0.1', {port}), ('1.1.1.1', 53), ('8.8.8.8', 443)]:\n"
        "    s = socket.socket()\n"
        "    s.settimeout(2)\n"
        "    try:\n"
        "        s.connect(addr)\n"
        "        print('CONNECTED', addr)\n"
        "    except OSError as exc:\n"
        "        print('FAILED', addr, exc.strerror)\n"
        "u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
        f"u.sendto(b'leak', ('127.0.0.1', {udp_port}))\n"
    )
    try:
        result = box.run(code)
        assert result.ok, result.reason
        assert "CONNECTED" not in result.stdout
        assert f"FAILED ('127.0.0.1', {port}) Connection refused" in result.stdout
        assert "FAILED ('1.1.1.1', 53) Network is unreachable" in result.stdout
        assert "FAILED ('8.8.8.8', 443) Network is unreachable" in result.stdout
        with pytest.raises(BlockingIOError):
            server.accept()
        with pytest.raises(BlockingIOError):
            udp.recvfrom(16)
    finally:
        server.close()
        udp.close()


SECRET_PROBE = (
    "import os\n"
    "print(dict(os.environ))\n"
    "for path in ['/proc/1/environ', '/proc/self/environ', '/proc/{test_pid}/environ',\n"
    "             '/proc/{test_ppid}/environ']:\n"
    "    try:\n"
    "        print(path, open(path, 'rb').read())\n"
    "    except OSError as exc:\n"
    "        print(path, 'unreadable', exc.strerror)\n"
    "for pid in os.listdir('/proc'):\n"
    "    if pid.isdigit():\n"
    "        try:\n"
    "            print(pid, open(f'/proc/{{pid}}/environ', 'rb').read())\n"
    "        except OSError:\n"
    "            pass\n"
)


def _check_secret_hidden(box: CodeSandbox, monkeypatch: pytest.MonkeyPatch) -> SandboxResult:
    secret = f"s3cr3t-{uuid.uuid4().hex}"
    monkeypatch.setenv("TRINITY_TEST_SECRET", secret)
    result = box.run(SECRET_PROBE.format(test_pid=os.getpid(), test_ppid=os.getppid()))
    assert result.ok, result.reason
    assert "PATH" in result.stdout, "the probe did print its environment"
    assert secret not in result.stdout + result.stderr
    assert "TRINITY_TEST_SECRET" not in result.stdout + result.stderr
    return result


def test_environment_secrets_are_not_visible(
    box: CodeSandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    result = _check_secret_hidden(box, monkeypatch)
    # Its own pid namespace: the test process does not exist in there.
    assert f"/proc/{os.getpid()}/environ unreadable No such file or directory" in result.stdout


def test_program_cannot_kill_the_test_process_or_its_children(box: CodeSandbox) -> None:
    helper = subprocess.Popen(["sleep", "30"])
    try:
        code = (
            "import os, signal\n"
            f"targets = [os.getppid(), 1, {os.getpid()}, {helper.pid}, -1]\n"
            "for pid in targets:\n"
            "    try:\n"
            "        os.kill(pid, signal.SIGKILL)\n"
            "        print('SENT', pid, flush=True)\n"
            "    except OSError as exc:\n"
            "        print('FAILED', pid, exc.strerror, flush=True)\n"
            f"for pgid in [{os.getpgrp()}, {os.getpgid(helper.pid)}]:\n"
            "    try:\n"
            "        os.killpg(pgid, signal.SIGKILL)\n"
            "        print('SENT GROUP', pgid, flush=True)\n"
            "    except OSError as exc:\n"
            "        print('FAILED GROUP', pgid, exc.strerror, flush=True)\n"
            "os.killpg(0, signal.SIGKILL)\n"  # finally kills its own group: itself
        )
        result = box.run(code)
        _assert_reported(result, "killed", "error")
        assert result.signal == 9 and result.reason == "killed by signal SIGKILL"
        assert f"FAILED {os.getpid()} No such process" in result.stdout
        assert f"FAILED {helper.pid} No such process" in result.stdout
        assert helper.poll() is None, "the test's other child must survive"
    finally:
        helper.kill()
        helper.wait()


def test_output_flood_is_cut_at_the_output_limit(box: CodeSandbox) -> None:
    cap = LIMITS["max_output_bytes"]
    for code in (
        "print('x' * 10**8)",
        "while True:\n    print('y' * 100)",
        "import sys\nwhile True:\n    sys.stderr.write('e' * 100)",
    ):
        result = box.run(code)
        _assert_reported(result, "output_limit")
        assert result.truncated
        assert len(result.stdout.encode()) + len(result.stderr.encode()) <= cap
        assert result.wall_time < LIMITS["wall_time_s"]


def test_disk_filler_is_bounded_by_file_size_and_tmpfs_size(box: CodeSandbox) -> None:
    one_file = "f = open('big', 'wb')\nwhile True:\n    f.write(b'0' * 2**20)"
    result = box.run(one_file)
    _assert_reported(result, "error")
    assert "File too large" in result.reason  # RLIMIT_FSIZE = 2 MiB
    many_files = "i = 0\nwhile True:\n    open(f'f{i}', 'wb').write(b'0' * 2**20)\n    i += 1"
    result = box.run(many_files)
    _assert_reported(result, "error")
    assert "No space left on device" in result.reason  # the 16 MiB private /tmp is full
    # /dev and / are read-only mounts, so they cannot be filled instead.
    result = box.run(
        "for p in ['/dev/shm/x', '/dev/x', '/x']:\n"
        "    try:\n        open(p, 'w')\n        print('WROTE', p)\n"
        "    except OSError as e:\n        print(p, e.strerror)"
    )
    assert result.ok and "WROTE" not in result.stdout


# ------------------------------------------------------------------------- setup errors
def test_missing_bwrap_raises_with_install_hint_and_the_process_backend() -> None:
    with pytest.raises(SandboxUnavailableError) as info:
        CodeSandbox(SandboxConfig(bwrap_path="/nonexistent/bwrap"))
    message = str(info.value)
    assert "apt install bubblewrap" in message and "dnf install bubblewrap" in message
    assert '"process"' in message


def test_interpreter_the_sandbox_user_cannot_run_is_refused() -> None:
    with pytest.raises(SandboxUnavailableError, match="does not exist"):
        CodeSandbox(SandboxConfig(backend="process", python="/nonexistent/python3"))
    # An executable that is not a Python interpreter fails the start-up check.
    with pytest.raises(SandboxUnavailableError, match="cannot run /usr/bin/false"):
        CodeSandbox(SandboxConfig(backend="process", python="/usr/bin/false"))


@pytest.mark.skipif(not AS_ROOT, reason="needs root: checks the drop to an unprivileged uid")
def test_interpreter_under_root_home_is_refused_as_root() -> None:
    real = os.path.realpath(sys.executable)
    home = os.path.realpath(os.path.expanduser("~"))
    if not real.startswith(home + os.sep) or os.stat(home).st_mode & 0o001:
        pytest.skip("the test interpreter is not under a home directory others cannot enter")
    with pytest.raises(SandboxUnavailableError, match="uid 65534"):
        CodeSandbox(SandboxConfig(backend="process", python=real))


def test_config_errors_name_the_field_and_what_is_allowed() -> None:
    with pytest.raises(ValueError, match="backend must be one of 'bwrap', 'process'"):
        SandboxConfig(backend="docker")
    with pytest.raises(ValueError, match="wall_time_s must be a number > 0"):
        SandboxConfig(wall_time_s=0)
    with pytest.raises(ValueError, match="uid must be an integer >= 1"):
        SandboxConfig(uid=0)
    with pytest.raises(
        ValueError, match="unknown sandbox setting.*timeout_s.*allowed:.*wall_time_s"
    ):
        SandboxConfig.from_mapping({"timeout_s": 3})


# ------------------------------------------------------------------------- the process backend
# Weaker by design: no namespaces, so only what rlimits, a session and a scrubbed environment
# can contain is tested here.
def test_process_backend_runs_programs_as_the_unprivileged_user(weak_box: CodeSandbox) -> None:
    result = weak_box.run("import os\nprint(os.getuid(), input())", stdin="hi\n")
    assert result.ok, result.reason
    assert result.stdout.split() == [str(SANDBOX_UID), "hi"]


def test_process_backend_contains_loops_memory_and_output_floods(weak_box: CodeSandbox) -> None:
    cases = {
        "x = bytearray(10**10)": "memory",
        "print('x' * 10**8)": "output_limit",
    }
    for code, status in cases.items():
        _assert_reported(weak_box.run(code), status)
    # the CPU limit: with a wall-clock limit far above it, so a loaded machine (the loop getting
    # a tenth of a core) still reaches the CPU second first
    patient = CodeSandbox(SandboxConfig(backend="process", **{**LIMITS, "wall_time_s": 60}))
    _assert_reported(patient.run("while True:\n    pass"), "cpu_limit")


def test_process_backend_hides_environment_secrets(
    weak_box: CodeSandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    _check_secret_hidden(weak_box, monkeypatch)


def test_process_backend_kills_the_session_and_marked_escapees(weak_box: CodeSandbox) -> None:
    marker = f"{71 + int(uuid.uuid4().int % 1000) / 10000:.4f}"
    code = (
        "import os\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        f"        os.execv('/bin/sleep', ['sleep', '{marker}'])\n"
        "    os._exit(0)\n"
        "if os.fork() == 0:\n"
        f"    os.execv('/bin/sleep', ['sleep', '{marker}1'])\n"
    )
    result = weak_box.run(code)
    assert result.ok, result.reason
    assert [c for _, _, c in _process_table().values() if marker in c] == []
