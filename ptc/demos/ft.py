"""``ptc demo ft``: a worker SIGKILLed inside an allreduce, the others keep training, it comes back.

Four local workers (:class:`~ptc.distributed.ft.launch.LocalJob`) train the
example MLP of :mod:`ptc.demos.ft_example` through
:class:`~ptc.distributed.ft.train.Trainer` (``--sleep`` makes a step take
10-20 ms).  Worker 2 SIGKILLs itself inside an allreduce; the survivors get
a :class:`~ptc.errors.PeerFailure`, move to the next generation and go on;
the launcher restarts worker 2, which rejoins at a step boundary and takes
the group's state.  The demo prints the membership events as they happen
(times relative to the kill), a summary (detection, resume, steps lost,
rejoin, final parameters against a single-process replay). ``python -m
ptc.demos.ft --out DIR`` also draws a timeline plot (matplotlib, Agg) and keeps
it, the logs and the states in ``DIR``; ``ptc demo ft`` works in a temporary
directory that it removes.

The same module holds what ``benchmarks/ft.py`` reuses: the worker loop
(``python -m ptc.demos.ft --worker ...``), :func:`analyze` (the
metrics of one run, from the launcher's timeline and the workers' final
states) and :func:`plot_timeline`.

The worker is ``ft_example``'s loop with two differences.  It warms up what
the first training step imports lazily (the first ``torch.optim.Optimizer``
imports ``torch._dynamo``: seconds on a small machine) *before* it joins the
group, so that a joiner does not hold the whole group up while it imports;
and it can run until the group has trained ``--tail`` steps at full size
after a membership change (``--until-size``), so a restarted worker always
gets back in before the job ends, however long its process takes to start.
Every member evaluates that stop rule on the synchronised history, so all
stop at the same step.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence

WORKER_MODULE = "ptc.demos.ft"


# --- the worker ----------------------------------------------------------------


def _worker_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m ptc.demos.ft --worker")
    p.add_argument("--worker", action="store_true")
    p.add_argument("--out", required=True)
    p.add_argument("--steps", type=int, default=100, help="train at least this many steps")
    p.add_argument("--max-steps", type=int, default=None, help="never more than this many (default: --steps)")
    p.add_argument("--until-size", type=int, default=0,
                   help="after --steps, go on until the last --tail steps ran with at least this many members "
                        "in a generation after the first")  # fmt: skip
    p.add_argument("--tail", type=int, default=30)
    p.add_argument("--sleep", type=float, default=0.0, help="seconds of simulated compute per step")
    p.add_argument("--engine", default="auto")
    p.add_argument("--ddp", action="store_true")
    p.add_argument("--no-report", action="store_true", help="no commit event per step (overhead runs)")
    p.add_argument("--heartbeat-interval", type=float, default=0.1)
    p.add_argument("--faults", default=None, help="a fault plan (ft_faults.save's file): what LocalJob(faults=) passes")
    return p


def _done(trainer: Any, args: argparse.Namespace) -> bool:
    step = trainer.step
    if step >= (args.max_steps or args.steps):
        return True
    if step < args.steps:
        return False
    if not args.until_size:
        return True
    tail = trainer.history[-args.tail:]
    return len(tail) == args.tail and all(g > 1 and len(m) >= args.until_size for _, g, m in tail)


def warm_up() -> None:
    """Run once what a worker's first step would import lazily (an optimizer step, a state
    dict saved and loaded): seconds on a small machine, better spent before joining a group."""
    import io

    import torch

    warm = torch.nn.Linear(2, 1)
    torch.optim.SGD(warm.parameters(), lr=0.1).step()
    buffer = io.BytesIO()
    torch.save({"w": warm.state_dict()}, buffer)
    torch.load(io.BytesIO(buffer.getvalue()), weights_only=True)


def worker_main(argv: Optional[List[str]] = None) -> int:
    """One worker: ``ft_example``'s model and batches, warm-up first, optional adaptive end."""
    started = time.time()
    args = _worker_parser().parse_args(argv)
    import torch

    from ptc.demos.ft_example import LR, loss_of, make_model

    warm_up()  # before this process is a member
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)

    from ptc.distributed.ft import faults as ft_faults
    from ptc.distributed.ft.group import init_fault_tolerant
    from ptc.distributed.ft.train import Trainer

    joiner = "WORLD_SIZE" not in os.environ
    faults = ft_faults.load(args.faults) if args.faults else ()
    ft = init_fault_tolerant(engine=args.engine, heartbeat_interval=args.heartbeat_interval, faults=faults)
    ft.event("started", since_exec_s=round(time.time() - started, 3))
    if joiner and ft.size == 1:
        # everyone else has finished: the job is over; do not start a new one from scratch
        ft.event("nobody_left")
        ft.close()
        return 0
    trainer = Trainer(ft, model, optimizer, ddp=args.ddp, report_steps=not args.no_report)

    def compute(info: Any) -> None:
        if args.sleep:
            time.sleep(args.sleep)
        loss_of(trainer.model, info.worker_id, info.step).backward()

    step_times: List[float] = []
    step_cpu_times: List[float] = []  # this process's CPU time per step, every thread (benchmarks/ft.py)
    while not _done(trainer, args):
        t, c = time.perf_counter(), time.process_time()
        trainer.run_step(compute)
        step_times.append(time.perf_counter() - t)
        step_cpu_times.append(time.process_time() - c)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    torch.save({"worker": ft.worker_id, "rank": ft.rank, "generation": ft.generation.number,  # type: ignore[union-attr]
                "checksum": trainer.checksum(), "state": model.state_dict(), "history": trainer.history,
                "syncs": trainer.syncs, "step_times": step_times,
                "step_cpu_times": step_cpu_times}, out / f"worker{ft.worker_id}.pt")  # fmt: skip
    ft.event("done", step=trainer.step)
    ft.close()
    return 0


def worker_command(out: str, *options: str) -> Callable[[int], List[str]]:
    """A LocalJob ``command``: this module's worker with ``--out out`` and ``options``."""
    return lambda worker: [sys.executable, "-m", WORKER_MODULE, "--worker", "--out", str(out), *options]


# --- analysis ------------------------------------------------------------------


def _first(events: Sequence[Dict[str, Any]], pred: Callable[[Dict[str, Any]], bool]) -> Optional[Dict[str, Any]]:
    return next((e for e in events if pred(e)), None)


def load_states(out: os.PathLike) -> Dict[int, Dict[str, Any]]:
    """The final states the workers wrote (``worker<id>.pt``), by worker id."""
    import torch

    states = {}
    for path in sorted(Path(out).glob("worker*.pt")):
        state = torch.load(path, weights_only=False)
        states[int(state["worker"])] = state
    return states


def check_states(states: Dict[int, Dict[str, Any]]) -> Dict[str, Any]:
    """Final parameters equal across workers, and equal to the single-process replay of the history."""
    import torch

    from ptc.demos.ft_example import replay

    if not states:
        return {"workers": [], "params_equal": False, "replay_equal": False, "steps": 0, "history": []}
    ref = next(iter(states.values()))
    equal = all(s["checksum"] == ref["checksum"] and s["history"] == ref["history"]
                and all(torch.equal(s["state"][k], v) for k, v in ref["state"].items())
                for s in states.values())  # fmt: skip
    # the replay sums the members' gradients in rank order, gloo in its own order: equal up to rounding
    replay_diff: Optional[float] = None
    try:
        replayed = replay(ref["history"])
        replay_equal = all(torch.allclose(replayed[k], v, rtol=1e-12, atol=1e-14) for k, v in ref["state"].items())
        replay_diff = max(float((replayed[k] - v).abs().max()) for k, v in ref["state"].items())
    except ValueError:  # a step missing or duplicated in the history
        replay_equal = False
    return {"workers": sorted(states), "params_equal": bool(equal), "replay_equal": bool(replay_equal),
            "replay_max_abs_diff": replay_diff, "steps": len(ref["history"]), "history": ref["history"]}  # fmt: skip


def analyze(events: Sequence[Dict[str, Any]], states: Optional[Dict[int, Dict[str, Any]]] = None, *,
            fault_index: int = 0) -> Dict[str, Any]:  # fmt: skip
    """Metrics of one run, from the launcher's timeline (and the workers' final states).

    Times are in ms after the first fault event (``fault_kill``/``fault_stop``;
    the victim announces it just before the signal), or after the first
    joiner's spawn when there is no fault.  ``detect``: first sign of the
    failure anywhere (coordinator sees the EOF, or a survivor's collective
    fails); ``released``: the last survivor got its PeerFailure; ``resume``:
    every survivor committed a step in a newer generation (the last one's
    first commit); ``lost``: committed steps (commit events) that are not in
    the final history; rejoins: spawn -> hello (process up) -> admitted
    (generation naming it as joined) -> first commit.  With several faults
    in one run, ``fault_index`` picks the one measured: its window ends at
    the next fault, and only the processes spawned in it count as rejoins.
    """
    events = sorted(events, key=lambda e: e["time"])
    t0 = events[0]["time"] if events else 0.0
    faults = [e for e in events if e["event"] in ("fault_kill", "fault_stop")]
    spawns = [e for e in events if e["event"] == "spawn" and e.get("kind") != "initial"]
    window_end = float("inf")
    if fault_index:
        if fault_index >= len(faults):
            raise IndexError(f"fault_index = {fault_index}: the run has {len(faults)} fault(s)")
        faults = faults[fault_index:]
    if len(faults) > 1 and faults[1]["time"] - faults[0]["time"] > 1.0:  # a separate failure: not ours to measure
        window_end = faults[1]["time"]
        faults = faults[:1]
    if faults:
        spawns = [e for e in spawns if faults[0]["time"] <= e["time"] < window_end]
    result: Dict[str, Any] = {"faults": [{"event": f["event"], "worker": f.get("worker"), "point": f.get("point"),
                                          "at": f.get("at")} for f in faults]}  # fmt: skip
    if faults:
        tk = faults[0]["time"]
    elif spawns:
        tk = spawns[0]["time"]
    else:
        tk = t0
    result["t_ref"] = tk
    ms = lambda t: None if t is None else round((t - tk) * 1000, 1)  # noqa: E731
    result["kill_at_s"] = round(tk - t0, 3)
    if faults:
        gen_ev = [e for e in events if e["event"] == "generation" and e["time"] <= tk]
        g0 = gen_ev[-1]["gen"] if gen_ev else 0
        members = list(gen_ev[-1]["members"]) if gen_ev else []
        victims = {f["worker"] for f in faults}
        survivors = [w for w in members if w not in victims]
        after = [e for e in events if tk <= e["time"] < window_end]
        first_err = _first(after, lambda e: e["event"] in ("worker_failed", "peer_failure", "collective_failed"))
        result["detect_ms"] = ms(first_err["time"]) if first_err else None
        newgen = _first(after, lambda e: e["event"] == "generation" and e["gen"] > g0)
        result["new_generation_ms"] = ms(newgen["time"]) if newgen else None
        released, resumed, reconf = [], [], []
        for w in survivors:
            pf = _first(after, lambda e: e["event"] == "peer_failure" and e.get("worker") == w)
            released.append(pf["time"] if pf else None)
            c = _first(after, lambda e: e["event"] == "commit" and e.get("worker") == w and e["gen"] > g0)
            resumed.append(c["time"] if c else None)
            reconf += [e["dt_ms"] for e in after if e["event"] == "reconfigured" and e.get("worker") == w
                       and (c is None or e["time"] <= c["time"])]  # fmt: skip
        result["survivors"] = survivors
        result["released_ms"] = ms(max(released)) if released and None not in released else None
        result["resume_ms"] = ms(max(resumed)) if resumed and None not in resumed else None
        result["reconfigure_max_ms"] = max(reconf) if reconf else None
        result["generation_at_kill"] = g0
    rejoins = []
    for sp in spawns:
        w = sp["worker"]
        later = [e for e in events if e["time"] >= sp["time"] and e.get("worker") == w]
        hello = _first(later, lambda e: e["event"] == "hello")
        adm = None
        if hello is not None:
            adm = _first(events, lambda e: e["event"] == "generation" and e["time"] >= hello["time"] and w in e["joined"])
        started = _first(later, lambda e: e["event"] == "started")
        commit = _first(later, lambda e: e["event"] == "commit")
        nobody = _first(later, lambda e: e["event"] == "nobody_left")
        rt = lambda e: None if e is None else round((e["time"] - sp["time"]) * 1000, 1)  # noqa: E731
        rejoins.append({"worker": w, "kind": sp.get("kind"), "spawn_ms": ms(sp["time"]), "hello": rt(hello),
                        "admitted": rt(adm), "started": rt(started), "first_commit": rt(commit),
                        "protocol_ms": None if hello is None or commit is None else round((commit["time"] - hello["time"]) * 1000, 1),
                        "nobody_left": nobody is not None,
                        "sync_bytes": next((e.get("bytes") for e in later if e["event"] == "state_synced"), None)})  # fmt: skip
    # zombies: stopped workers fenced and readmitted (no new process)
    result["faults_in_run"] = sum(1 for e in events if e["event"] in ("fault_kill", "fault_stop"))
    for f in (f for f in faults if f["event"] == "fault_stop"):
        w = f["worker"]
        cont = _first(events, lambda e: e["event"] == "sigcont" and e["time"] >= f["time"])
        if cont is None:
            continue
        adm = _first(events, lambda e: e["event"] == "generation" and e["time"] >= cont["time"] and w in e["joined"])
        commit = None if adm is None else _first(events, lambda e: e["event"] == "commit" and e.get("worker") == w
                                                 and e["time"] >= adm["time"])  # fmt: skip
        rt = lambda e: None if e is None else round((e["time"] - cont["time"]) * 1000, 1)  # noqa: E731
        rejoins.append({"worker": w, "kind": "zombie", "spawn_ms": ms(cont["time"]), "hello": None,
                        "admitted": rt(adm), "started": None, "first_commit": rt(commit),
                        "protocol_ms": rt(commit), "nobody_left": False, "sync_bytes": None})  # fmt: skip
    result["rejoins"] = rejoins
    commits = {(e["step"], e["gen"]) for e in events if e["event"] == "commit"}
    result["commit_events"] = sum(1 for e in events if e["event"] == "commit")
    if states:
        check = check_states(states)
        history = check.pop("history")
        result.update(check)
        gens = {i + 1: g for i, (_, g, _m) in enumerate(history)}
        result["lost"] = sum(1 for s, g in commits if gens.get(s) != g)
    return result


# --- the plot ------------------------------------------------------------------


def plot_timeline(events: Sequence[Dict[str, Any]], path: os.PathLike, *, title: str = "",
                  zoom: Optional[tuple] = (-0.15, 0.35)) -> Path:  # fmt: skip
    """A PNG: workers by time, committed steps as ticks coloured by generation,
    failures, reconfigurations and rejoins marked (top: the whole run; bottom:
    around the first fault).  Times in s after the first fault (or the start)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    events = sorted(events, key=lambda e: e["time"])
    info = analyze(events)
    tk = info["t_ref"]
    t = lambda e: e["time"] - tk  # noqa: E731
    workers = sorted({e["worker"] for e in events if isinstance(e.get("worker"), int)})
    has_fault = bool(info["faults"])
    panels = 2 if (has_fault and zoom) else 1
    first_gen = _first(events, lambda e: e["event"] == "generation")
    start = (first_gen["time"] - tk - 0.3) if first_gen else None
    fig, axes = plt.subplots(panels, 1, figsize=(11, 2.2 + 1.6 * panels + 0.25 * len(workers) * panels), squeeze=False)
    cmap = plt.get_cmap("tab10")
    for i, ax in enumerate(axes[:, 0]):
        commits = [e for e in events if e["event"] == "commit"]
        ax.scatter([t(e) for e in commits], [e["worker"] for e in commits], marker="|", s=120, linewidths=1.0,
                   c=[cmap((e["gen"] - 1) % 10) for e in commits], label="committed step (colour: generation)")  # fmt: skip
        gens = [e for e in events if e["event"] == "generation"]
        for g in gens:
            ax.axvline(t(g), color="0.55", ls=":", lw=1)
            ax.text(t(g), min(workers) - 0.5, f" gen {g['gen']}: {len(g['members'])} workers", fontsize=7,
                    va="top", ha="left", color="0.35", clip_on=True)  # fmt: skip
        marks = [("fault_kill", "X", "red", 140, "SIGKILL"), ("fault_stop", "s", "red", 90, "SIGSTOP"),
                 ("peer_failure", "v", "darkorange", 50, "PeerFailure"), ("reconfigured", "D", "royalblue", 35, "reconfigured"),
                 ("state_synced", "o", "purple", 25, "state synced"), ("spawn", ">", "green", 60, "process spawned"),
                 ("hello", "^", "green", 60, "connected (hello)"), ("sigcont", "P", "red", 80, "SIGCONT")]  # fmt: skip
        for name, marker, colour, size, label in marks:
            es = [e for e in events if e["event"] == name and isinstance(e.get("worker"), int)]
            if name == "spawn":
                es = [e for e in es if e.get("kind") != "initial"]
            if name == "sigcont":
                pids = {f.get("pid"): f.get("worker") for f in events if f["event"] == "fault_stop"}
                es = [dict(e, worker=pids.get(e.get("pid"))) for e in events if e["event"] == "sigcont"]
                es = [e for e in es if e["worker"] is not None]
            if es:
                ax.scatter([t(e) for e in es], [e["worker"] for e in es], marker=marker, s=size, color=colour,
                           label=label, zorder=3, edgecolors="none")  # fmt: skip
        for e in (e for e in events if e["event"] == "worker_failed"):
            ax.axvline(t(e), color="red", ls="--", lw=1)
        ax.set_yticks(workers)
        ax.set_yticklabels([f"worker {w}" for w in workers])
        ax.set_ylim(min(workers) - 0.75, max(workers) + 0.5)
        ax.invert_yaxis()
        ax.grid(axis="x", alpha=0.3)
        if i == 0 and start is not None:
            ax.set_xlim(left=start)
        if i == 0 and panels == 2:
            ax.set_title(title or "fault-tolerant training timeline", fontsize=10)
            ax.axvspan(zoom[0], zoom[1], color="0.9", zorder=0)
        elif panels == 1:
            ax.set_title(title or "fault-tolerant training timeline", fontsize=10)
        if i == panels - 1 and panels == 2:
            ax.set_xlim(*zoom)
            ax.set_title("zoom on the failure (kill at 0)", fontsize=9)
        ax.set_xlabel("seconds after the first fault" if has_fault else "seconds after the first joiner's spawn")
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=5, fontsize=7, frameon=False)
    fig.tight_layout(rect=(0, 0.08, 1, 1), h_pad=1.5)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


# --- the demo ------------------------------------------------------------------


class _Printer:
    """Live, compact progress from the launcher's events."""

    def __init__(self, every: int, write: Callable[[str], None]) -> None:
        self.every = every
        self.write = write
        self.t0 = time.time()
        self.tk: Optional[float] = None
        self.printed_steps: set = set()
        self.resumed: set = set()

    def when(self, e: Dict[str, Any]) -> str:
        if self.tk is None:
            return f"t={e['time'] - self.t0:6.2f}s   "
        return f"kill{(e['time'] - self.tk) * 1000:+8.1f} ms"

    def __call__(self, e: Dict[str, Any]) -> None:
        name, w = e["event"], e.get("worker")
        say = lambda text: self.write(f"  {self.when(e)}  {text}")  # noqa: E731
        if name == "commit":
            key = (e["step"], e["gen"])
            first_after = self.tk is not None and e["time"] > self.tk and (w, e["gen"]) not in self.resumed
            if first_after and e["gen"] > 1:
                self.resumed.add((w, e["gen"]))
                say(f"worker {w}: first committed step in generation {e['gen']} (step {e['step']}, {e['size']} members)")
            elif e["step"] % self.every == 0 and key not in self.printed_steps:
                self.printed_steps.add(key)
                say(f"step {e['step']:4d}   generation {e['gen']}   {e['size']} members")
        elif name == "fault_kill":
            self.tk = e["time"]
            say(f"worker {w} SIGKILLs itself inside its collective #{e['at']} (pid {e['pid']})")
        elif name == "fault_stop":
            self.tk = self.tk or e["time"]
            say(f"worker {w} SIGSTOPs itself at step {e['at']}")
        elif name == "generation":
            why = e["reason"] if len(e["reason"]) < 60 else e["reason"][:57] + "..."
            say(f"coordinator: generation {e['gen']} = workers {e['members']}  ({why})")
        elif name == "worker_failed":
            say(f"coordinator: worker {w} failed ({e['why']})")
        elif name == "peer_failure":
            say(f"worker {w}: PeerFailure in generation {e['gen']}, failed ranks {e['failed_ranks']}")
        elif name == "reconfigured" and self.tk is not None:
            say(f"worker {w}: connected generation {e['gen']} as rank {e['rank']} of {e['size']} "
                f"({e['engine']}, {e['dt_ms']:.1f} ms)")  # fmt: skip
        elif name == "state_synced" and self.tk is not None:
            say(f"worker {w}: state synced at step {e['step']} ({e['bytes']} bytes moved)")
        elif name == "spawn" and e.get("kind") != "initial":
            say(f"launcher: {e['kind']} of worker {w} spawned (pid {e['pid']})")
        elif name == "hello" and self.tk is not None:
            say(f"worker {w}: process up, connected to the coordinator; waits to be admitted")
        elif name == "started" and self.tk is None and w == 0:
            say("workers connected: training starts")


def run(out: Optional[os.PathLike] = None, *, world: int = 4, engine: str = "auto", sleep: float = 0.01,
        kill_at: int = 60, steps: int = 150, tail: int = 40, max_steps: int = 1500, every: int = 50,
        heartbeat_timeout: float = 3.0, timeout: float = 120.0,
        write: Callable[[str], None] = print) -> Dict[str, Any]:  # fmt: skip
    """Run the demo; print as it goes; return the summary (see :func:`analyze`).

    With ``out``, the logs, the workers' states, the timeline (``timeline.jsonl``)
    and its plot (``ft_timeline.png``, the summary's ``png``) stay in that
    directory. Without it they go to a temporary directory, removed before
    returning, and no plot is drawn (``png`` is None)."""
    if out is not None:
        return _run(Path(out), True, world=world, engine=engine, sleep=sleep, kill_at=kill_at, steps=steps,
                    tail=tail, max_steps=max_steps, every=every, heartbeat_timeout=heartbeat_timeout,
                    timeout=timeout, write=write)  # fmt: skip
    tmp = Path(tempfile.mkdtemp(prefix="ptc-ft-demo-"))
    try:
        return _run(tmp, False, world=world, engine=engine, sleep=sleep, kill_at=kill_at, steps=steps, tail=tail,
                    max_steps=max_steps, every=every, heartbeat_timeout=heartbeat_timeout, timeout=timeout,
                    write=write)  # fmt: skip
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _run(out: Path, keep: bool, *, world: int, engine: str, sleep: float, kill_at: int, steps: int, tail: int,
         max_steps: int, every: int, heartbeat_timeout: float, timeout: float,
         write: Callable[[str], None]) -> Dict[str, Any]:  # fmt: skip
    import torch

    from ptc import _compat
    from ptc.distributed.ft import faults as F
    from ptc.distributed.ft.launch import LocalJob

    out.mkdir(parents=True, exist_ok=True)
    states_dir = out / "states"
    for old in states_dir.glob("worker*.pt"):
        old.unlink()
    victim = 2 if world > 2 else world - 1
    engine_name = ("native" if _compat.GLOO_RECONFIGURE else "rebuild") if engine == "auto" else engine
    write(f"{world} workers on 127.0.0.1 (torch {torch.__version__}, engine {engine_name}) train ft_example's MLP, "
          f"~{sleep * 1000:.0f} ms of compute per step;")
    write(f"worker {victim} SIGKILLs itself inside its collective #{kill_at}; the launcher restarts it at once and it "
          f"rejoins at a step boundary.")  # fmt: skip
    write(f"starting the {world} worker processes; training begins once each has imported torch and joined "
          "the coordinator ...")  # fmt: skip
    printer = _Printer(every, write)
    command = worker_command(str(states_dir), "--steps", str(steps), "--max-steps", str(max_steps), "--until-size",
                             str(world), "--tail", str(tail), "--sleep", str(sleep), "--engine", engine)  # fmt: skip
    job = LocalJob(command, world, faults=[F.kill_in_collective(kill_at, worker=victim)], restart_after=0.0,
                   heartbeat_timeout=heartbeat_timeout, log_dir=out / "logs", on_event=printer)  # fmt: skip
    result = job.run(timeout=timeout)
    states = load_states(states_dir)
    with open(out / "timeline.jsonl", "w") as f:
        import json

        for e in result.events:
            f.write(json.dumps(e) + "\n")
    summary = analyze(result.events, states)
    summary["timed_out"] = result.timed_out
    summary["elapsed_s"] = round(result.elapsed, 2)
    summary["out"] = str(out) if keep else None
    summary["png"] = None
    if keep:
        png = plot_timeline(result.events, out / "ft_timeline.png",
                            title=f"ptc fault tolerance: {world} workers, worker {victim} SIGKILLed in an allreduce, "
                                  f"restarted (torch {torch.__version__}, {engine_name})")  # fmt: skip
        summary["png"] = str(png)
    write("")
    for line in format_summary(summary, world):
        write(line)
    if result.timed_out or not summary.get("params_equal"):
        where = f"worker logs: {out / 'logs'}" if keep else "python -m ptc.demos.ft --out DIR keeps the worker logs"
        write(f"\nsomething went wrong; {where}")
        write(result.describe()[-4000:])
    return summary


def _fmt_ms(value: Optional[float]) -> str:
    return "n/a" if value is None else (f"{value:.0f} ms" if value < 10000 else f"{value / 1000:.1f} s")


def format_summary(s: Dict[str, Any], world: int) -> List[str]:
    lines = ["summary (times after the kill):"]
    lines.append(f"  kill -> first error seen              {_fmt_ms(s.get('detect_ms'))}")
    lines.append(f"  kill -> survivors released (all)      {_fmt_ms(s.get('released_ms'))}")
    lines.append(f"  kill -> all {len(s.get('survivors', []))} survivors resumed         {_fmt_ms(s.get('resume_ms'))}"
                 f"   (first commit in the new generation on every survivor)")  # fmt: skip
    lines.append(f"  slowest reconfigure call              {s.get('reconfigure_max_ms')} ms")
    lost = s.get("lost")
    lines.append(f"  committed steps lost                  {lost}   ({s.get('commit_events', 0)} commit events checked "
                 f"against the final history of {s.get('steps', 0)} steps)")  # fmt: skip
    for r in s.get("rejoins", []):
        if r["nobody_left"]:
            lines.append(f"  rejoin of worker {r['worker']}: the job had ended before it was up")
            continue
        lines.append(f"  rejoin of worker {r['worker']} ({r['kind']}): spawn -> process up (hello) {_fmt_ms(r['hello'])}"
                     f" -> admitted {_fmt_ms(r['admitted'])} -> first step {_fmt_ms(r['first_commit'])}"
                     f"   (protocol, hello -> first step: {_fmt_ms(r['protocol_ms'])}; state received: "
                     f"{r['sync_bytes']} bytes)")  # fmt: skip
    eq = "params equal" if s.get("params_equal") else "PARAMS DIFFER"
    diff = s.get("replay_max_abs_diff")
    lines.append(f"  final parameters: {eq} (bit-identical) on workers {s.get('workers')}")
    lines.append(f"  single-process replay of the {s.get('steps', 0)} committed steps: "
                 f"{'equal' if s.get('replay_equal') else 'DIFFERENT'} (max |diff| "
                 f"{'n/a' if diff is None else f'{diff:.1e}'}; gloo sums in another order than the replay)")  # fmt: skip
    if s.get("png"):
        lines.append(f"  timeline plot: {s['png']}")
    else:
        lines.append("  timeline plot, logs and states: python -m ptc.demos.ft --out DIR keeps them in DIR")
    return lines


def main() -> None:
    """``ptc demo ft``."""
    run()
    sys.stdout.flush()


if __name__ == "__main__":
    if "--worker" in sys.argv[1:]:
        raise SystemExit(worker_main(sys.argv[1:]))
    _p = argparse.ArgumentParser(prog="python -m ptc.demos.ft", description="ptc demo ft, with options")
    _p.add_argument("--out", default=None, help="directory for the plot, logs and states (default: a temp dir)")
    _p.add_argument("--engine", default="auto", choices=["auto", "native", "rebuild"])
    _p.add_argument("--world", type=int, default=4)
    _a = _p.parse_args()
    _s = run(_a.out, world=_a.world, engine=_a.engine)
    raise SystemExit(0 if _s.get("params_equal") and _s.get("replay_equal") and not _s.get("timed_out") else 1)
