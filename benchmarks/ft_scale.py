"""The fault-tolerance coordinator at scale, by simulation: N protocol-level members, one process.

    python benchmarks/ft_scale.py [--n 16,64,256,1024] [--deaths 5] [--steady 8]
                                  [--plot benchmarks/ft_scale.png] [--json PATH] [--profile DIR]

The real coordinator (``python -m ptc.distributed.ft.coordinator``, its own
process, a job secret in a file, ``--log`` for its timeline) serves on
127.0.0.1; one single-threaded ``selectors`` loop here (no torch) plays N
members that speak the protocol as :class:`ptc.distributed.ft.group._Link`
does: connect, read the ``challenge``, ``hello`` with the HMAC proof
(:mod:`ptc.distributed.ft.auth`), check the ``welcome``'s proof, heartbeat
every ``heartbeat_interval`` (the default, 0.1 s; the N members' beats are
spread evenly over the period), ``ready`` as soon as a generation that names
it is announced (a real member answers at its next collective: this is the
best case), and read ``go``.  Measured, per N:

* hello -> generation: from the first member's connect to every member
  holding generation 1's ``gen`` news (and its ``go``: every member ready);
  members connect with at most ``--window`` handshakes in flight (the
  coordinator closes the oldest of more than ``MAX_PENDING`` = 64 connections
  without a hello);
* death -> generation: one member's socket is closed abruptly (what the
  kernel does for a killed process) and the clock runs until the last
  survivor has read the next generation's ``gen`` news, and its ``go``;
  ``--deaths`` times, a different member each time, median and max.  The
  coordinator's own timeline splits it: EOF seen -> news formed -> ``go``
  (the ``go`` split only where the coordinator logs ``go``), and its CPU
  between the death and the last ``go`` is read from ``/proc`` (clock ticks,
  10 ms): raw, and above what heartbeats alone cost over the same time;
* coordinator CPU (% of one core, utime + stime of every thread of the
  process from ``/proc/PID/stat``) over ``--steady`` seconds with every member
  heartbeating and nothing changing; its RSS (``VmRSS``) before any member
  connected and with N.  The heartbeats this loop actually sent over the
  window are printed too (``hb/s``): if the loop cannot keep up on a loaded
  machine, the coordinator is under less load than the nominal N / 0.1 s.

``--profile DIR`` runs the coordinator under ``cProfile`` (slower: the times
are then not the headline ones) and writes ``DIR/coordinator-N.prof`` and the
top functions to ``DIR/coordinator-N.txt``.

Membership messages are only partly decoded here (the ``gen`` number of a
``gen`` line is read from its prefix) so that the simulator's own cost stays
out of the times; one observer member decodes and checks every message fully
(:func:`ptc.distributed.ft.wire.decode`) and its generations are returned.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import secrets
import selectors
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from ptc.distributed.ft import auth, wire  # noqa: E402  (neither imports torch)

HEARTBEAT_INTERVAL = 0.1  # FaultTolerantGroup's default
HB = wire.encode({"t": "hb"})
_GEN_PREFIX = b'{"t":"gen","gen":'
_GO_PREFIX = b'{"t":"go","gen":'
_INT = re.compile(rb"\d+")
CLK_TCK = os.sysconf("SC_CLK_TCK")


def raise_fd_limit() -> int:
    """The soft limit on descriptors raised to the hard one; returns it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY:
        hard = max(soft, 1 << 16)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return hard


def proc_cpu_s(pid: int) -> float:
    """utime + stime of every thread of ``pid``, in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # fields 14 and 15 of proc(5)


def proc_rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def _own_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


# --- the coordinator --------------------------------------------------------------


class CoordinatorProcess:
    """``python -m ptc.distributed.ft.coordinator`` with a job secret in a file and a timeline."""

    def __init__(self, world_size: int, workdir: Path, *, job: str = "scale", profile: Optional[Path] = None,
                 python: str = sys.executable) -> None:  # fmt: skip
        self.secret = secrets.token_hex(32).encode()
        secret_file = workdir / "secret"
        secret_file.write_bytes(self.secret)
        secret_file.chmod(0o600)
        self.job = job
        self.log = workdir / "coordinator.jsonl"
        module = ["-m", "ptc.distributed.ft.coordinator"]
        if profile is not None:
            module = ["-m", "cProfile", "-o", str(profile)] + module
        args = [python, *module, "--world-size", str(world_size), "--job", job, "--secret-file", str(secret_file),
                "--log", str(self.log), "--print-address"]  # fmt: skip
        env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join(
            [str(ROOT)] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else []))}  # fmt: skip
        env.pop(auth.ENV_SECRET, None)
        env.pop(auth.ENV_SECRET_FILE, None)
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, env=env,
                                     preexec_fn=raise_fd_limit)  # fmt: skip
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().decode().strip()
        if not line:
            self.proc.wait(timeout=10)
            raise RuntimeError(f"the coordinator did not start (exit status {self.proc.returncode})")
        self.address = line
        host, port = wire.parse_address(line)
        self.host, self.port = host, port

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def events(self) -> List[Dict[str, Any]]:
        with open(self.log) as f:
            return [json.loads(line) for line in f if line.strip()]

    def stop(self) -> Optional[int]:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)  # the coordinator exits cleanly on it (cProfile writes)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        return self.proc.returncode


# --- the crowd --------------------------------------------------------------------


class Member:
    __slots__ = ("worker", "sock", "reader", "state", "nonce", "challenge", "gen_at", "go_at", "fenced",
                 "refused", "lost", "decoded")  # fmt: skip

    def __init__(self, worker: int) -> None:
        self.worker = worker
        self.sock: Optional[socket.socket] = None
        self.reader = wire.LineReader(wire.MAX_NEWS_LINE)
        self.state = "new"  # new -> challenged -> welcomed (heartbeating) -> dead
        self.nonce = auth.new_nonce()
        self.challenge: Optional[str] = None
        self.gen_at: Dict[int, float] = {}  # generation -> when its news was read here
        self.go_at: Dict[int, float] = {}
        self.fenced: Optional[str] = None
        self.refused: Optional[str] = None
        self.lost = False  # the coordinator closed the connection
        self.decoded: List[Dict[str, Any]] = []  # every message, fully decoded (the observer only)


class Crowd:
    """N members on one ``selectors`` loop, heartbeating at ``interval``."""

    def __init__(self, coordinator: CoordinatorProcess, n: int, *, interval: float = HEARTBEAT_INTERVAL,
                 handle: str = "") -> None:  # fmt: skip
        self.coord = coordinator
        self.n = n
        self.interval = interval
        self.handle = handle
        self.members = [Member(w) for w in range(n)]
        self.by_fd: Dict[int, Member] = {}
        self.sel = selectors.DefaultSelector()
        self.observer = n - 1  # decodes everything (the last worker never dies here)
        self.beat_k = 0  # the k-th beat overall is due at beat_t0 + k * interval / n, to member k % n
        self.beat_t0: Optional[float] = None
        self.beats_sent = 0
        self.beats_dropped = 0  # a full send buffer (never expected)
        self.protocol_errors: List[str] = []

    # connecting

    def _open(self, m: Member) -> None:
        sock = socket.create_connection((self.coord.host, self.coord.port), timeout=10)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.setblocking(False)
        m.sock = sock
        self.by_fd[sock.fileno()] = m
        self.sel.register(sock, selectors.EVENT_READ, m)

    def connect_all(self, window: int, timeout: float) -> float:
        """Connect every member, at most ``window`` handshakes in flight; returns when the first connected."""
        t_first = time.time()
        deadline = time.monotonic() + timeout
        next_up = 0
        opened: List[Member] = []
        while True:
            opened = [m for m in opened if m.state in ("new", "challenged")]
            in_flight = len(opened)
            while next_up < self.n and in_flight < window:
                self._open(self.members[next_up])
                opened.append(self.members[next_up])
                next_up += 1
                in_flight += 1
            if next_up == self.n and in_flight == 0:
                return t_first
            if time.monotonic() > deadline:
                raise TimeoutError(f"{next_up} of {self.n} connected, {in_flight} handshakes unanswered")
            self.poll(0.01)

    # the loop

    def poll(self, timeout: float) -> None:
        """One round: read whatever arrived, send the heartbeats due."""
        wait = timeout
        if self.beat_t0 is not None:
            due = self.beat_t0 + self.beat_k * self.interval / self.n
            wait = max(0.0, min(timeout, due - time.monotonic()))
        for key, _ in self.sel.select(wait):
            self._read(key.data)
        self._beat()

    def run_for(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while True:
            left = end - time.monotonic()
            if left <= 0:
                return
            self.poll(left)

    def run_until(self, done, timeout: float, what: str) -> None:
        end = time.monotonic() + timeout
        while not done():
            left = end - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"{what}: not within {timeout:g} s")
            if not self.coord.alive():
                raise RuntimeError(f"{what}: the coordinator exited ({self.coord.proc.returncode})")
            self.poll(min(left, 0.05))

    def _beat(self) -> None:
        if self.beat_t0 is None:
            return
        now = time.monotonic()
        step = self.interval / self.n
        members, n = self.members, self.n
        while self.beat_t0 + self.beat_k * step <= now:
            m = members[self.beat_k % n]
            self.beat_k += 1
            if m.state == "welcomed":
                try:
                    m.sock.send(HB)
                    self.beats_sent += 1
                except BlockingIOError:
                    self.beats_dropped += 1
                except OSError:
                    pass
        if self.beat_k > 10 * n:  # keep the products small
            self.beat_t0 += (self.beat_k // n) * self.interval
            self.beat_k %= n

    def _read(self, m: Member) -> None:
        try:
            data = m.sock.recv(1 << 20)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        now = time.time()
        if not data:
            self._gone(m)
            return
        m.reader.feed(data)
        while True:
            line = m.reader.pop()
            if line is None:
                return
            self._line(m, line, now)

    def _line(self, m: Member, line: bytes, now: float) -> None:
        if m.worker == self.observer:
            try:
                m.decoded.append(wire.decode(line, wire.TO_WORKER))
            except wire.ProtocolError as exc:
                self.protocol_errors.append(f"worker {m.worker}: {exc}")
        if line.startswith(_GEN_PREFIX):
            gen = int(_INT.match(line, len(_GEN_PREFIX)).group())
            m.gen_at[gen] = now
            # a real member answers news at its next collective; it is ready at once here
            try:
                m.sock.send(wire.encode({"t": "ready", "gen": gen, "handle": self.handle}))
            except OSError:
                pass  # (its end of file follows)
        elif line.startswith(_GO_PREFIX):
            m.go_at[int(_INT.match(line, len(_GO_PREFIX)).group())] = now
        elif line.startswith(b'{"t":"join_pending"'):
            pass
        else:
            message = wire.decode(line, wire.TO_WORKER)
            kind = message["t"]
            if kind == "challenge":
                m.challenge = message["nonce"]
                m.state = "challenged"
                proof = auth.hello_proof(self.coord.secret, m.challenge, self.coord.job, m.worker)
                m.sock.send(wire.encode({"t": "hello", "worker": m.worker, "pid": os.getpid(), "world": self.n,
                                         "job": self.coord.job, "nonce": m.nonce, "proof": proof}))  # fmt: skip
            elif kind == "welcome":
                expected = auth.welcome_proof(self.coord.secret, m.nonce, m.challenge, self.coord.job, m.worker)
                if not auth.matches(expected, message["proof"]):
                    raise RuntimeError(f"worker {m.worker}: the welcome does not prove the secret")
                m.state = "welcomed"
                try:
                    m.sock.send(HB)  # a real link beats at once, then every interval
                except OSError:
                    pass
                if self.beat_t0 is None:
                    self.beat_t0 = time.monotonic()
            elif kind == "refused":
                m.refused = message["error"]
            elif kind == "fenced":
                m.fenced = message["reason"]

    def _gone(self, m: Member) -> None:
        m.lost = m.state != "dead"
        self._close(m)

    def _close(self, m: Member) -> None:
        if m.sock is None:
            return
        self.sel.unregister(m.sock)
        self.by_fd.pop(m.sock.fileno(), None)
        m.sock.close()
        m.sock = None
        if m.state != "dead":
            m.state = "closed"

    def kill(self, worker: int) -> float:
        """Close ``worker``'s connection as its process dying would; returns when."""
        m = self.members[worker]
        m.state = "dead"
        t = time.time()
        self._close(m)
        return t

    def live(self) -> List[Member]:
        return [m for m in self.members if m.state == "welcomed"]

    def close_all(self) -> None:
        for m in self.members:
            self._close(m)
        self.sel.close()


# --- one N ------------------------------------------------------------------------


def _ms(seconds: float) -> float:
    return round(seconds * 1000, 2)


def measure(n: int, *, deaths: int = 5, steady: float = 8.0, window: int = 32, settle: float = 1.0,
            interval: float = HEARTBEAT_INTERVAL, timeout: float = 60.0, profile: Optional[Path] = None,
            python: str = sys.executable, log=print) -> Dict[str, Any]:  # fmt: skip
    """Everything for one N (see the module docstring); a dict of the figures."""
    raise_fd_limit()
    result: Dict[str, Any] = {"n": n, "heartbeat_interval": interval, "window": window}
    with tempfile.TemporaryDirectory(prefix="ptc-ft-scale-") as tmp:
        coord = CoordinatorProcess(n, Path(tmp), profile=profile, python=python)
        crowd = Crowd(coord, n, interval=interval)
        try:
            time.sleep(0.3)
            result["rss_idle_mb"] = round(proc_rss_mb(coord.pid), 1)
            cpu0 = proc_cpu_s(coord.pid)

            # hello -> generation 1
            t_first = crowd.connect_all(window, timeout)
            crowd.run_until(lambda: all(1 in m.gen_at for m in crowd.members), timeout, "generation 1 news")
            crowd.run_until(lambda: all(1 in m.go_at for m in crowd.members), timeout, "generation 1 go")
            result["hello_to_gen_ms"] = _ms(max(m.gen_at[1] for m in crowd.members) - t_first)
            result["hello_to_go_ms"] = _ms(max(m.go_at[1] for m in crowd.members) - t_first)
            result["startup_cpu_s"] = round(proc_cpu_s(coord.pid) - cpu0, 3)

            # steady state: heartbeats only
            crowd.run_for(settle)
            c0, own0, b0, t0 = proc_cpu_s(coord.pid), _own_cpu_s(), crowd.beats_sent, time.monotonic()
            crowd.run_for(steady)
            c1, own1, b1, t1 = proc_cpu_s(coord.pid), _own_cpu_s(), crowd.beats_sent, time.monotonic()
            result["coordinator_cpu_pct"] = round(100 * (c1 - c0) / (t1 - t0), 1)
            result["simulator_cpu_pct"] = round(100 * (own1 - own0) / (t1 - t0), 1)
            result["hb_per_s"] = round((b1 - b0) / (t1 - t0))
            result["hb_nominal_per_s"] = round(n / interval)
            result["rss_mb"] = round(proc_rss_mb(coord.pid), 1)
            rate = (c1 - c0) / (t1 - t0)

            # deaths
            gen = 1
            runs: List[Dict[str, float]] = []
            for i in range(deaths):
                victim = (i * 7919 + n // 3) % (n - 1) if n > 1 else 0
                while crowd.members[victim].state != "welcomed":
                    victim = (victim + 1) % (n - 1)
                survivors = [m for m in crowd.live() if m.worker != victim]
                c_before = proc_cpu_s(coord.pid)
                t_kill = crowd.kill(victim)
                gen += 1
                g = gen
                crowd.run_until(lambda: all(g in m.gen_at for m in survivors), timeout, f"generation {g} news")
                crowd.run_until(lambda: all(g in m.go_at for m in survivors), timeout, f"generation {g} go")
                t_news = max(m.gen_at[g] for m in survivors)
                t_go = max(m.go_at[g] for m in survivors)
                raw = proc_cpu_s(coord.pid) - c_before  # clock ticks: 10 ms resolution
                busy = raw - rate * (t_go - t_kill)
                runs.append({"victim": victim, "news_ms": _ms(t_news - t_kill), "go_ms": _ms(t_go - t_kill),
                             "first_news_ms": _ms(min(m.gen_at[g] for m in survivors) - t_kill),
                             "cpu_ms": _ms(max(0.0, busy)), "cpu_raw_ms": _ms(raw), "t_kill": t_kill})  # fmt: skip
                crowd.run_for(0.3)
            if not coord.alive():
                raise RuntimeError("the coordinator exited")
            result["alive"] = True
            result["members_final"] = len(crowd.live())
            result["lost"] = sum(m.lost for m in crowd.members)
            result["fenced"] = sum(m.fenced is not None for m in crowd.members)
            result["refused"] = sum(m.refused is not None for m in crowd.members)
            result["beats_dropped"] = crowd.beats_dropped
            result["protocol_errors"] = crowd.protocol_errors[:5]
            observer = crowd.members[crowd.observer]
            result["observed_generations"] = [{"gen": d["gen"], "members": len(d["members"]), "failed": d["failed"]}
                                              for d in observer.decoded if d["t"] == "gen"]  # fmt: skip

            # the coordinator's side of each death: EOF seen -> news formed (logged before the fan-out) -> go
            events = coord.events()
            for run in runs:
                failed = next(e for e in events if e["event"] == "worker_failed" and e["worker"] == run["victim"])
                formed = next(e for e in events if e["event"] == "generation" and e["time"] >= failed["time"])
                # (a coordinator that does not log "go" leaves that split out)
                go = next((e for e in events if e["event"] == "go" and e.get("gen") == formed["gen"]), None)
                run["coord_detect_ms"] = _ms(failed["time"] - run["t_kill"])
                run["coord_form_ms"] = _ms(formed["time"] - failed["time"])
                run["coord_go_ms"] = None if go is None else _ms(go["time"] - run["t_kill"])
                del run["t_kill"]
            result["deaths"] = runs
            if runs:
                for key in ("news_ms", "go_ms", "coord_detect_ms", "coord_go_ms", "cpu_ms", "cpu_raw_ms"):
                    values = [r[key] for r in runs if r[key] is not None]
                    if not values:
                        continue
                    result[f"death_{key}_median"] = round(statistics.median(values), 2)
                    result[f"death_{key}_max"] = round(max(values), 2)
        finally:
            crowd.close_all()
            rc = coord.stop()
            result["coordinator_exit"] = rc
        if profile is not None and profile.exists():
            import io
            import pstats

            out = io.StringIO()
            pstats.Stats(str(profile), stream=out).sort_stats("tottime").print_stats(25)
            profile.with_suffix(".txt").write_text(out.getvalue())
    log(f"  n={n}: done")
    return result


# --- the table and the plot -------------------------------------------------------

COLUMNS = [
    ("N", "n", "{}"),
    ("hello->gen ms", "hello_to_gen_ms", "{:.0f}"),
    ("hello->go ms", "hello_to_go_ms", "{:.0f}"),
    ("death->news ms med/max", ("death_news_ms_median", "death_news_ms_max"), "{:.1f}/{:.1f}"),
    ("death->go ms med/max", ("death_go_ms_median", "death_go_ms_max"), "{:.1f}/{:.1f}"),
    ("coord: EOF seen ms", "death_coord_detect_ms_median", "{:.1f}"),
    ("coord CPU ms/death over hb", "death_cpu_ms_median", "{:.1f}"),
    ("coord CPU %", "coordinator_cpu_pct", "{:.1f}"),
    ("hb/s sent (nominal)", ("hb_per_s", "hb_nominal_per_s"), "{} ({})"),
    ("sim CPU %", "simulator_cpu_pct", "{:.0f}"),
    ("RSS MB idle/N", ("rss_idle_mb", "rss_mb"), "{:.0f}/{:.0f}"),
]


def table(results: List[Dict[str, Any]]) -> str:
    rows = [[title for title, _, _ in COLUMNS]]
    for r in results:
        row = []
        for _, key, fmt in COLUMNS:
            keys = key if isinstance(key, tuple) else (key,)
            try:
                row.append(fmt.format(*(r[k] for k in keys)))
            except KeyError:
                row.append("-")
        rows.append(row)
    widths = [max(len(row[i]) for row in rows) for i in range(len(COLUMNS))]
    lines = ["| " + " | ".join(cell.rjust(w) for cell, w in zip(row, widths)) + " |" for row in rows]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)


def plot(results: List[Dict[str, Any]], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ns = [r["n"] for r in results]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    left.plot(ns, [r["hello_to_go_ms"] for r in results], "o-", label="hello -> generation 1 (all ready, go)")
    left.plot(ns, [r["death_news_ms_median"] for r in results], "s-", label="death -> news at every survivor (median)")
    left.plot(ns, [r["death_go_ms_median"] for r in results], "^-", label="death -> go at every survivor (median)")
    left.errorbar(ns, [r["death_go_ms_median"] for r in results],
                  yerr=[[0] * len(ns), [r["death_go_ms_max"] - r["death_go_ms_median"] for r in results]],
                  fmt="none", ecolor="gray", capsize=3)  # fmt: skip
    left.axhline(100, color="red", ls=":", lw=1, label="goal at N = 1024: 100 ms")
    left.set_xscale("log", base=2)
    left.set_yscale("log")
    left.set_xlabel("members N")
    left.set_ylabel("ms")
    left.set_title("membership latency (one host, loopback)")
    left.legend(fontsize=8)
    left.grid(True, which="both", alpha=0.3)
    right.plot(ns, [r["coordinator_cpu_pct"] for r in results], "o-", label="coordinator (heartbeats only)")
    right.plot(ns, [r["simulator_cpu_pct"] for r in results], "x--", color="gray", label="the simulator (N members)")
    right.axhline(25, color="red", ls=":", lw=1, label="goal at N = 1024: 25 %")
    right.set_xscale("log", base=2)
    right.set_xlabel("members N")
    right.set_ylabel("% of one core")
    right.set_title(f"CPU at the default heartbeat ({HEARTBEAT_INTERVAL:g} s)")
    right.legend(fontsize=8)
    right.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", default="16,64,256,1024", help="comma-separated member counts")
    parser.add_argument("--deaths", type=int, default=5)
    parser.add_argument("--steady", type=float, default=8.0, help="seconds of the CPU window")
    parser.add_argument("--window", type=int, default=32, help="handshakes in flight while connecting")
    parser.add_argument("--interval", type=float, default=HEARTBEAT_INTERVAL, help="heartbeat interval, s")
    parser.add_argument("--plot", default=None, help="write a PNG here")
    parser.add_argument("--json", default=None, help="write the results here")
    parser.add_argument("--profile", default=None, help="run the coordinator under cProfile; a directory")
    args = parser.parse_args(argv)
    print(f"fd limit: {raise_fd_limit()}", flush=True)
    results = []
    for n in (int(x) for x in args.n.split(",")):
        profile = None
        if args.profile:
            Path(args.profile).mkdir(parents=True, exist_ok=True)
            profile = Path(args.profile) / f"coordinator-{n}.prof"
        results.append(measure(n, deaths=args.deaths, steady=args.steady, window=args.window,
                               interval=args.interval, profile=profile))  # fmt: skip
        r = results[-1]
        print(f"  n={n}: deaths (ms) " + "; ".join(f"news {d['news_ms']} go {d['go_ms']} (coord EOF {d['coord_detect_ms']}, "
              f"form {d['coord_form_ms']}, go {d['coord_go_ms']}, cpu {d['cpu_ms']})" for d in r["deaths"]), flush=True)  # fmt: skip
    print(table(results))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    if args.plot:
        plot(results, args.plot)
        print(f"plot: {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
