"""Soak: run a config for many steps and watch every process of the run for growth.

    .venv/bin/python benchmarks/soak.py [--steps 2000] [--interval 5] [--burst 1] [--out DIR]
        [--strict] [--config examples/quickstart.yaml] [--model DIR] [KEY=VALUE ...]
    .venv/bin/python benchmarks/soak.py --steps 16 --interval 1    # smoke size (CI)

A leak that costs 0.2 MB a step is invisible in a 150-step quickstart and fatal in a week-long
run, so this bench runs a config (the quickstart in mode ``both`` by default, on the tiny model
built locally: ``trinity.launcher.tiny_model --preset arithmetic``, reused with ``--model``) for
``--steps`` steps as a ``trinity-launch`` subprocess and, every ``--interval`` seconds, samples
each process of the run from this process (so the sampling itself is not measured):

* the process tree of the launch (the driver, which in mode ``both`` also holds the trainer;
  Ray's GCS, raylet, agents and monitors; the worker processes: the engine actor, the
  workflow runners, trainer ranks when they are actors, and their children), plus any process
  whose command line names the run's own Ray session directory (``TRINITY_RAY_TMPDIR``, a
  fresh one per soak) and their descendants, in case Ray did not start them as descendants;
* per process: RSS, open file descriptors, threads and direct children; for the run: the disk
  use of its run directory (by top-level entry) and the step, read from its ``metrics.jsonl``.

A process is named by its role, from its command line or its Ray proctitle (``ray::Class`` or
``ray::Class.method``): ``driver``, ``engine``, ``runner``, ``trainer``, ``gcs``, ``raylet``,
``ray-agent``, ``ray-monitor``... with ``#k`` when a role has several processes.

At the end it prints, per process and for the sums, the value at the end of warm-up (the
median of the first samples at or after ``--warmup``, default 20 % of the steps and at least
50, at most half the run), the value at the end (the median of the last samples before the
run's final step), the growth per 1,000 steps (least-squares slope over the samples in
between) in MB and in % of the warm-up value, the growth of each sample's low (``low``: the
least RSS over ``--burst`` seconds of readings, default 1; a process's RSS swings within a step,
and the low is what it keeps between steps), the same growth of the process's own memory
(``anon``: RSS less the shared pages it touched, such as Ray's object store, which a worker
reading each step's weights from it touches at new places for a long while), and the change
in open files and threads. Rows
whose low grows more than ``--target`` % (default 1) per 1,000 steps (their RSS, with
``--burst 0``), or ending with more files or threads than they started with, are flagged. The raw samples go to ``--out`` as
``samples.json`` and ``samples.csv``, the table to ``summary.json``.

The disk use is reported, not judged: the buffer's SQLite tables, the metrics and the monitor's
event files grow with the steps by design (the soak keeps at most 2 checkpoints,
``trainer.max_checkpoints_to_keep=2``, so checkpoints do not count against it).

Exit status: 0 when the run completed its steps, 1 when it failed; with ``--strict`` also 1 when
a row is flagged. On a shared machine the table measures the load as well: the CI smoke test
checks only that the soak completes and reports.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import psutil

REPO = Path(__file__).resolve().parents[1]
QUICKSTART = REPO / "examples" / "quickstart.yaml"
MB = 1 << 20
#: samples whose median gives the value at warm-up end and at the end (noise of single samples)
EDGE_SAMPLES = 3

#: ``ray::Class`` proctitles and the role they play in a run
_ACTOR_ROLES: tuple[tuple[str, str], ...] = (
    (r"Engine$", "engine"),
    (r"^WorkflowRunner$", "runner"),
    (r"^TrainerWorker$|^WorkerDict$", "trainer"),
    (r"^QueueActor$", "queue"),
    (r"^(DashboardAgent|RuntimeEnvAgent)$", "ray-agent"),
    (r"^IDLE$", "ray-idle"),
)
#: Ray's helper processes, by their binary or Python script (the end of its path)
_RAY_HELPERS: tuple[tuple[str, str], ...] = (
    ("gcs_server", "gcs"),
    ("raylet", "raylet"),
    ("log_monitor.py", "ray-log-monitor"),
    ("autoscaler/_private/monitor.py", "ray-monitor"),
    ("dashboard/dashboard.py", "ray-dashboard"),
    ("dashboard/agent.py", "ray-agent"),
    ("runtime_env/agent/main.py", "ray-agent"),
    ("default_worker.py", "ray-idle"),  # a worker before it sets its ``ray::`` title
)
#: roles a process may leave for a more specific one as it starts (never the other way)
_PROVISIONAL = ("ray-idle", "other:")


def provisional(role: str) -> bool:
    """Whether ``role`` may still give way to a more specific one: an idle Ray worker, an
    unknown process, or a ``*-child``: a process forked and not yet exec'd shows its parent's
    command line (a raylet sampled in that instant looked like the driver's child)."""
    return role.startswith(_PROVISIONAL) or role.endswith("-child")


def role_of(pid: int, root: int, name: str, cmdline: Sequence[str], parent_role: str) -> str:
    """The role of a process of the run, from what ``ps`` shows of it.

    Ray sets an actor process's title to ``ray::Class`` (idle) or ``ray::Class.method``
    (running a method), so the class names the role whichever method runs at sampling time.
    """
    if pid == root:
        return "driver"
    title = " ".join(cmdline) if cmdline else name
    if title.startswith("ray::"):
        cls = title[5:].split(".", 1)[0].split()[0] if title[5:].strip() else "IDLE"
        for pattern, role in _ACTOR_ROLES:
            if re.search(pattern, cls):
                return role
        return f"actor:{cls}"
    if "EngineCore" in title or "EngineCore" in name:
        return "engine-core"
    program = [arg for arg in cmdline[:3] if not arg.startswith("-")]
    for marker, role in _RAY_HELPERS:
        if any(arg == marker or arg.endswith("/" + marker) for arg in program):
            return role
    if parent_role in ("engine", "engine-core", "runner", "trainer", "driver"):
        return f"{parent_role}-child"
    return f"other:{name}"


@dataclass
class Tracked:
    """A process seen during the soak: its label stays fixed once its role is known (an
    ``ray::IDLE`` worker that becomes an actor takes the actor's role)."""

    pid: int
    role: str
    label: str = ""


@dataclass
class Sampler:
    """Samples the processes of one run and its run directory."""

    root: int
    session_dir: str
    run_root: Path
    tracked: dict[int, Tracked] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    step: int = -1
    metrics_path: Optional[Path] = None
    _metrics_offset: int = 0
    _create_times: dict[int, float] = field(default_factory=dict)

    def processes(self) -> list[psutil.Process]:
        """The run's processes: the launch's tree plus the Ray session's, each once."""
        found: dict[int, psutil.Process] = {}
        try:
            root = psutil.Process(self.root)
            for proc in [root, *root.children(recursive=True)]:
                found[proc.pid] = proc
        except psutil.NoSuchProcess:
            return []
        for proc in psutil.process_iter(["cmdline"]):
            cmdline = proc.info.get("cmdline") or []
            if proc.pid not in found and any(self.session_dir in arg for arg in cmdline):
                try:
                    for p in [proc, *proc.children(recursive=True)]:
                        found.setdefault(p.pid, p)
                except psutil.NoSuchProcess:
                    continue
        return list(found.values())

    def _label(self, proc: psutil.Process, name: str, cmdline: list[str]) -> str:
        try:
            parent = proc.ppid()
        except psutil.NoSuchProcess:
            parent = 0
        parent_role = self.tracked[parent].role if parent in self.tracked else ""
        role = role_of(proc.pid, self.root, name, cmdline, parent_role)
        known = self.tracked.get(proc.pid)
        if known is None or (provisional(known.role) and not provisional(role)):
            index = self.counts.get(role, 0)
            self.counts[role] = index + 1
            known = Tracked(proc.pid, role, f"{role}#{index}")
            self.tracked[proc.pid] = known
        return known.label

    def read_step(self) -> int:
        """The highest step in ``metrics.jsonl`` so far (complete lines only, read on from
        where the previous sample stopped)."""
        if self.metrics_path is None:
            hits = sorted(self.run_root.rglob("metrics.jsonl")) if self.run_root.exists() else []
            if not hits:
                return self.step
            self.metrics_path = hits[0]
        with open(self.metrics_path, "rb") as fh:
            fh.seek(self._metrics_offset)
            data = fh.read()
        end = data.rfind(b"\n") + 1
        self._metrics_offset += end
        for line in data[:end].splitlines():
            try:
                self.step = max(self.step, int(json.loads(line).get("step", -1)))
            except (ValueError, TypeError, AttributeError):
                continue
        return self.step

    def disk(self) -> dict[str, int]:
        """Bytes under the run directory, by top-level entry (``checkpoints`` for every
        ``global_step_*``)."""
        usage: dict[str, int] = {}
        base = self.metrics_path.parent if self.metrics_path else self.run_root
        if not base.exists():
            return usage
        for entry in base.iterdir():
            key = "checkpoints" if entry.name.startswith("global_step_") else entry.name
            usage[key] = usage.get(key, 0) + _du(entry)
        return usage

    def sample(self, t0: float, burst: float = 0.0) -> dict[str, Any]:
        """One sample of every process; with ``burst`` > 0 also each one's lowest RSS over
        ``burst`` seconds of readings (``rss_low``, see :func:`lowest_rss`)."""
        procs: dict[str, dict[str, Any]] = {}
        for proc in self.processes():
            try:
                with proc.oneshot():
                    name = proc.name()
                    cmdline = proc.cmdline()
                    created = proc.create_time()
                    if self._create_times.setdefault(proc.pid, created) != created:
                        self.tracked.pop(proc.pid, None)  # the pid was reused
                        self._create_times[proc.pid] = created
                    label = self._label(proc, name, cmdline)
                    procs[label] = {
                        "pid": proc.pid,
                        "rss": proc.memory_info().rss,
                        "anon": _anon_rss(proc.pid),
                        "fds": proc.num_fds(),
                        "threads": proc.num_threads(),
                        "children": len(proc.children()),
                    }
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue
        if burst > 0:
            low = lowest_rss([p["pid"] for p in procs.values()], burst)
            for values in procs.values():
                values["rss_low"] = min(values["rss"], low.get(values["pid"], values["rss"]))
        disk = self.disk()
        return {
            "t": round(time.monotonic() - t0, 3),
            "step": self.read_step(),
            "disk": sum(disk.values()),
            "disk_by_entry": disk,
            "procs": procs,
        }


def lowest_rss(pids: Sequence[int], seconds: float, every: float = 0.01) -> dict[int, int]:
    """Each process's lowest RSS over ``seconds`` of readings of ``/proc/PID/statm``.

    A process's RSS swings within a step: the driver of a mode-``both`` run holds the train
    step's activations and gradients (~40 MB on the quickstart) for part of each step, so one
    reading lands anywhere in that swing and the slope of single readings is noise of that
    size. The low point over a burst longer than a step is what the process keeps between
    steps: memory it retains, which is what a leak grows. Off Linux: empty.
    """
    page = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
    low: dict[int, int] = {}
    end = time.monotonic() + seconds
    while True:
        for pid in pids:
            try:
                with open(f"/proc/{pid}/statm", "rb") as fh:
                    rss = int(fh.read().split()[1]) * page
            except (OSError, ValueError, IndexError):
                continue
            low[pid] = min(rss, low.get(pid, rss))
        if time.monotonic() >= end:
            return low
        time.sleep(every)


def _anon_rss(pid: int) -> Optional[int]:
    """The process's own (anonymous) resident memory, ``RssAnon`` of ``/proc/PID/status``.

    RSS also counts the shared pages a process has touched: Ray's object store (a shared
    memory file that every worker maps) and file mappings. A worker that reads each step's
    weights from the store touches pages at new places in it until it has touched all of it,
    which looks like growth in RSS but is not its own memory. ``None`` off Linux.
    """
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("RssAnon:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _du(path: Path) -> int:
    if path.is_file():
        try:
            return path.stat().st_size
        except OSError:
            return 0
    total = 0
    for dirpath, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(dirpath, name)).st_size
            except OSError:
                continue
    return total


def slope(points: Iterable[tuple[float, float]]) -> float:
    """Least-squares slope of y over x (0 when x does not vary): growth per step, robust to
    the noise of single samples that a two-point difference would take at face value."""
    pts = list(points)
    if len(pts) < 2:
        return 0.0
    mx = statistics.fmean(x for x, _ in pts)
    my = statistics.fmean(y for _, y in pts)
    sxx = sum((x - mx) ** 2 for x, _ in pts)
    if sxx == 0:
        return 0.0
    return sum((x - mx) * (y - my) for x, y in pts) / sxx


def summarize(
    samples: list[dict[str, Any]], warmup: int, last_step: int, target: float
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """One row per process label (and the sums, and the disk) over the steady window: the
    samples from step ``warmup`` up to the last one before ``last_step`` (the run's shut-down
    changes every process and is not growth)."""
    window = [s for s in samples if warmup <= s["step"] < last_step] or [
        s for s in samples if s["step"] >= warmup
    ]
    info = {
        "warmup_step": warmup,
        "window_steps": [window[0]["step"], window[-1]["step"]] if window else None,
        "window_samples": len(window),
    }
    if len(window) < 2:
        return [], info
    labels = sorted({label for s in window for label in s["procs"]}, key=_label_order)
    rows = []
    for label in labels:
        series = [(s["step"], s["procs"][label]) for s in window if label in s["procs"]]
        if len(series) < 2:
            continue
        rows.append(_row(label, series, target))
    totals = [(s["step"], _sums(s["procs"].values())) for s in window]
    rows.append(_row("TOTAL (sum)", totals, target))
    disk = [(s["step"], {"rss": s["disk"], "fds": 0, "threads": 0, "children": 0}) for s in window]
    disk_row = _row("run dir (disk)", disk, target)
    disk_row["flag"] = ""  # grows by design (buffer, metrics, events): reported, not judged
    rows.append(disk_row)
    return rows, info


def _sums(procs: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """One sample's values summed over its processes (``anon`` only when every one has it)."""
    procs = list(procs)
    out: dict[str, Any] = {k: sum(p[k] for p in procs) for k in ("rss", "fds", "threads")}
    anon = [p.get("anon") for p in procs]
    out["anon"] = sum(anon) if None not in anon else None  # type: ignore[arg-type]
    low = [p.get("rss_low") for p in procs]
    out["rss_low"] = sum(low) if None not in low else None  # type: ignore[arg-type]
    out["children"] = len(procs)
    return out


def _label_order(label: str) -> tuple[int, str]:
    order = ["driver", "engine", "engine-core", "runner", "trainer", "queue", "gcs", "raylet"]
    role = label.split("#")[0]
    return (order.index(role) if role in order else len(order), label)


def _edge(values: list[float], first: bool) -> float:
    part = values[:EDGE_SAMPLES] if first else values[-EDGE_SAMPLES:]
    return statistics.median(part)


def _ceiling(values: list[float], first: bool) -> float:
    """The upper quartile of the first (last) third of a window's values, at least
    ``EDGE_SAMPLES``.

    Open files and threads come and go within a run (a checkpoint's files while it is written,
    a reward thread that exits when idle), so two edge readings differ by what happened to be
    open, and one reading can catch two such moments at once; a leak raises the level they
    keep coming back to, which the upper quartile of many readings follows and a single
    reading does not move."""
    k = max(EDGE_SAMPLES, len(values) // 3)
    part = sorted(values[:k] if first else values[-k:])
    return part[int(0.75 * (len(part) - 1))]


def _row(label: str, series: list[tuple[int, dict[str, Any]]], target: float) -> dict[str, Any]:
    rss = [float(v["rss"]) for _, v in series]
    start, end = _edge(rss, True), _edge(rss, False)
    per_k = slope((step, v["rss"]) for step, v in series) * 1000
    pct = 100.0 * per_k / start if start else 0.0
    anon = [(step, v["anon"]) for step, v in series if v.get("anon") is not None]
    anon_per_k = slope(anon) * 1000 if len(anon) == len(series) else None
    low = [(step, v["rss_low"]) for step, v in series if v.get("rss_low") is not None]
    low_per_k = slope(low) * 1000 if low and len(low) == len(series) else None
    low_pct = 100.0 * low_per_k / start if low_per_k is not None and start else None
    judged = low_pct if low_pct is not None else pct
    fds = _ceiling([v["fds"] for _, v in series], False) - _ceiling(
        [v["fds"] for _, v in series], True
    )
    threads = _ceiling([v["threads"] for _, v in series], False) - _ceiling(
        [v["threads"] for _, v in series], True
    )
    flags = []
    if judged > target:
        flags.append(f"{'low' if low_pct is not None else 'RSS'}>{target:g}%")
    if fds > 0:
        flags.append("fds+")
    if threads > 0:
        flags.append("threads+")
    return {
        "label": label,
        "pid": series[-1][1].get("pid"),
        "start_mb": start / MB,
        "end_mb": end / MB,
        "growth_mb_per_1k": per_k / MB,
        "growth_pct_per_1k": pct,
        "anon_mb_per_1k": anon_per_k / MB if anon_per_k is not None else None,
        "low_mb_per_1k": low_per_k / MB if low_per_k is not None else None,
        "low_pct_per_1k": low_pct,
        "fds_start": _ceiling([v["fds"] for _, v in series], True),
        "fds_delta": fds,
        "threads_start": _ceiling([v["threads"] for _, v in series], True),
        "threads_delta": threads,
        "children": series[-1][1]["children"],
        "flag": " ".join(flags),
    }


def print_table(rows: list[dict[str, Any]], info: dict[str, Any]) -> None:
    print(
        f"\nsteady window: steps {info['window_steps']} ({info['window_samples']} samples), "
        f"warm-up ends at step {info['warmup_step']}"
    )
    head = (
        f"{'process':<22} {'pid':>7} {'MB@warmup':>10} {'MB@end':>9} {'MB/1k':>8} "
        f"{'%/1k':>7} {'low/1k':>7} {'low%':>6} {'anon/1k':>8} {'fds':>5} {'Δfds':>5} {'thr':>5} {'Δthr':>5} {'kids':>5}  flag"
    )
    print(head)
    print("-" * len(head))
    for r in rows:
        anon = f"{r['anon_mb_per_1k']:.2f}" if r["anon_mb_per_1k"] is not None else "-"
        low = "-" if r.get("low_mb_per_1k") is None else f"{r['low_mb_per_1k']:.2f}"
        low_pct = "-" if r.get("low_pct_per_1k") is None else f"{r['low_pct_per_1k']:.2f}%"
        print(
            f"{r['label']:<22} {r['pid'] or '':>7} {r['start_mb']:>10.1f} {r['end_mb']:>9.1f} "
            f"{r['growth_mb_per_1k']:>8.2f} {r['growth_pct_per_1k']:>6.2f}% {low:>7} {low_pct:>6} "
            f"{anon:>8} "
            f"{r['fds_start']:>5.0f} {r['fds_delta']:>+5.0f} {r['threads_start']:>5.0f} "
            f"{r['threads_delta']:>+5.0f} {r['children']:>5}  {r['flag']}"
        )


def write_raw(out: Path, samples: list[dict[str, Any]], summary: dict[str, Any]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "samples.json").write_text(json.dumps(samples))
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    with open(out / "samples.csv", "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(
            ["t", "step", "disk", "label", "pid", "rss", "rss_low", "anon"]
            + ["fds", "threads", "children"]
        )
        for s in samples:
            for label, p in s["procs"].items():
                writer.writerow(
                    [s["t"], s["step"], s["disk"], label, p["pid"], p["rss"], p.get("rss_low")]
                    + [p.get("anon")]
                    + [p["fds"], p["threads"], p["children"]]
                )


def default_warmup(steps: int) -> int:
    """20 % of the run, at least 50 steps (start-up, the first checkpoints, allocator
    arenas filling), but never past half the run, so a short soak still has a window."""
    return min(max(50, steps // 5), steps // 2)


def launch(
    args: argparse.Namespace, workdir: Path, model: Optional[Path], session_dir: str
) -> subprocess.Popen:
    overrides = [
        f"buffer.total_steps={args.steps}",
        f"checkpoint_root_dir={workdir / 'ckpt'}",
        "trainer.max_checkpoints_to_keep=2",
        *args.overrides,
    ]
    env = dict(os.environ, TRINITY_RAY_TMPDIR=session_dir, PYTHONUNBUFFERED="1")
    env.pop("RAY_ADDRESS", None)  # a Ray of the soak's own, whose processes are all the run's
    if model is not None:
        env["TRINITY_QUICKSTART_MODEL"] = str(model)
    cmd = [sys.executable, "-m", "trinity.launcher.cli", "run", "--config", str(args.config)]
    log = open(workdir / "launch.log", "w")  # noqa: SIM115 - closed with the process
    return subprocess.Popen(
        cmd + overrides,
        cwd=REPO,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # its own process group: stopped as one on Ctrl-C
    )


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=2000, help="train steps of the run (2000)")
    parser.add_argument("--interval", type=float, default=5.0, help="seconds between samples")
    parser.add_argument("--warmup", type=int, default=None, help="step where warm-up ends")
    parser.add_argument(
        "--burst", type=float, default=1.0, help="seconds of RSS readings for each sample's low"
    )
    parser.add_argument("--config", type=Path, default=QUICKSTART, help="the run's config")
    parser.add_argument("--model", type=Path, default=None, help="reuse this quickstart model")
    parser.add_argument("--target", type=float, default=1.0, help="%% RSS growth per 1k steps")
    parser.add_argument("--out", type=Path, default=None, help="directory for the raw samples")
    parser.add_argument("--workdir", type=Path, default=None, help="keep the run here")
    parser.add_argument("--strict", action="store_true", help="exit 1 when a row is flagged")
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="config overrides")
    args = parser.parse_args(argv)
    warmup = args.warmup if args.warmup is not None else default_warmup(args.steps)

    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="trinity-soak-"))
    workdir.mkdir(parents=True, exist_ok=True)
    out = args.out or Path(tempfile.mkdtemp(prefix="trinity-soak-out-"))
    session_dir = tempfile.mkdtemp(prefix="tr-ray-")  # short: Ray's socket paths must fit
    model = args.model
    if model is None and args.config.resolve() == QUICKSTART:
        model = workdir / "tiny-model"
        if not (model / "config.json").exists():
            from trinity.launcher.tiny_model import PRESETS, build_tiny_model

            build_tiny_model(model, PRESETS["arithmetic"])

    print(
        f"soak: {args.config} for {args.steps} steps, sampling every {args.interval:g} s",
        flush=True,
    )
    t0 = time.monotonic()
    proc = launch(args, workdir, model, session_dir)
    sampler = Sampler(proc.pid, session_dir, workdir / "ckpt")
    samples: list[dict[str, Any]] = []
    try:
        while proc.poll() is None:
            s = sampler.sample(t0, burst=args.burst)
            if s["procs"]:
                samples.append(s)
                if len(samples) % max(1, int(60 / args.interval)) == 0:
                    total = sum(p["rss"] for p in s["procs"].values()) / MB
                    print(
                        f"  {s['t']:7.0f} s  step {s['step']:5d}  tree RSS {total:8.1f} MB",
                        flush=True,
                    )
            deadline = time.monotonic() + args.interval
            while proc.poll() is None and time.monotonic() < deadline:
                time.sleep(min(0.2, args.interval))
    except KeyboardInterrupt:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait()
        raise
    finally:
        shutil.rmtree(session_dir, ignore_errors=True)
    wall = time.monotonic() - t0
    final_step = sampler.read_step()
    completed = proc.returncode == 0 and final_step >= args.steps

    rows, info = summarize(samples, warmup, args.steps, args.target)
    info.update(
        steps=args.steps,
        final_step=final_step,
        returncode=proc.returncode,
        wall_s=round(wall, 1),
        samples=len(samples),
        disk_by_entry_end=samples[-1]["disk_by_entry"] if samples else {},
        config=str(args.config),
        overrides=args.overrides,
    )
    write_raw(out, samples, {"info": info, "rows": rows})
    print(
        f"\nrun {'completed' if completed else 'FAILED'}: step {final_step} of {args.steps}, "
        f"exit {proc.returncode}, {wall:.0f} s, {len(samples)} samples"
    )
    if rows:
        print_table(rows, info)
    else:
        print("too few samples after warm-up for a table (raise --steps or lower --interval)")
    print(f"\nraw samples: {out / 'samples.json'}, {out / 'samples.csv'}, {out / 'summary.json'}")
    if not completed or args.workdir is not None:
        print(f"run log: {workdir / 'launch.log'}")
    if not completed:
        tail = (workdir / "launch.log").read_text(errors="replace")[-3000:]
        print(tail, file=sys.stderr)
        return 1
    if args.workdir is None:
        shutil.rmtree(workdir, ignore_errors=True)
    if args.strict and any(r["flag"] for r in rows):
        print("flagged rows above target (--strict)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
