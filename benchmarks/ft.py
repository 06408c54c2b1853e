"""Fault-tolerant training (issue 9): ptc against torchrun's restart-the-world, in one run.

    python benchmarks/ft.py [--quick] [--json PATH] [--reps 4] [--tail 50] [--sizes 4,8,16] [--engines native,rebuild]

For the running torch, on 127.0.0.1 with gloo, ``ft_example``'s MLP (float64)
through :class:`ptc.distributed.Trainer`, workers started by
:class:`~ptc.distributed.ft.launch.LocalJob` (the demo's worker:
``python -m ptc.demos.ft --worker``), faults from
:mod:`~ptc.distributed.ft.faults`.  Every time is read from the launcher's
timeline (one clock) relative to the fault (the victim announces it just
before the signal):

* detect: first sign of the failure (the coordinator sees the EOF, or a
  survivor's collective fails); resume: every survivor has committed a step
  in the new generation (the last one's first commit); lost: committed steps
  (commit events) missing from the final history; final parameters compared
  across workers (bit-identical) and with a single-process replay;
* rejoin: spawn -> process up (hello: exec, ``import torch``, warm-up) and
  protocol (hello -> the joiner's first committed step: admission at a step
  boundary, reconfigure, state transfer, one step);
* steady-state step time (sleep 0, N workers) against plain torch DDP on
  gloo (``benchmarks/ft_torchrun_worker.py`` started with the same number
  of processes), runs interleaved, median step time of worker 0;
* the same three inside the same processes (``benchmarks/ft_paired_worker.py``):
  alternating blocks of steps, each compared with the plain-DDP block beside
  it, for ft_example's MLP and for a float32 model of 1.6M parameters (where
  the gradients' bytes count); much steadier than separate jobs on 2 cores;
  with DDP with torch's own Python allreduce hook (no fault tolerance): what a
  communication hook written in Python costs by itself, and ptc's ``ddp=True``
  with its C++ hook (built first; the Python one when it cannot be built) and
  with its Python hook;
* how kill-to-resume and rejoin grow with the world size;
* tail latency (``--tail N``, default 50): N kills inside the gradient
  allreduce in one job of 4 workers (``benchmarks/ft_tail_worker.py``: worker
  ids take turns, each victim is restarted at once and the next kill waits
  until it is back and 30 steps ran at full size); per kill, every phase
  (detect, new generation, released, reconfigured, state synced, resume) of
  the last survivor; count, p50, p90, p99, max of each; goals: resume p50 <
  100 ms, p99 < 300 ms;
* torchrun ``--max-restarts 1`` with ``TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1``
  and a checkpoint every 20 steps: kill -> first step after the restart,
  steps redone;
* torchft 0.2.0 only if ``import torchft`` works (``PTC_TORCHFT_PATH`` first on sys.path):
  4 replica groups of 1 process (``benchmarks/ft_torchft_worker.py``), replica 2
  SIGKILLed between steps (by this script) and inside the gradient allreduce
  (by itself) at step 50: resume, lost steps, survivors crashed.

Goals (issue 9): kill-to-resume median under 100 ms with 4 workers, no lost
committed step, step-time overhead under 5 %.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from ptc import _compat  # noqa: E402
from ptc.demos import ft as ft_demo  # noqa: E402
from ptc.distributed.ft import faults as F  # noqa: E402
from ptc.distributed.ft.launch import LocalJob  # noqa: E402

SLEEP = 0.01  # simulated compute per step in the failure scenarios
QUICK_SCENARIOS = ("kill in collective", "SIGSTOP, SIGCONT 2 s", "joiner (new worker)")
KILL_COLLECTIVE = 44  # 4 collectives of the first state sync, then one per step: step 39's gradient allreduce


def _med(values: List[Optional[float]]) -> Optional[float]:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def _rng(values: List[Optional[float]]) -> str:
    values = [v for v in values if v is not None]
    if not values:
        return "n/a"
    if len(values) == 1:
        return f"{values[0]:.0f}"
    return f"{statistics.median(values):.0f} [{min(values):.0f}-{max(values):.0f}]"


# --- ptc scenarios ----------------------------------------------------------------


def scenarios(world: int) -> Dict[str, Dict[str, Any]]:
    """name -> LocalJob arguments and worker options."""
    adaptive = ["--steps", "80", "--max-steps", "3000", "--until-size", str(world), "--tail", "20"]
    fixed = ["--steps", "120"]
    return {
        "kill in collective": dict(faults=[F.kill_in_collective(KILL_COLLECTIVE, worker=2)], restart_after=0.0,
                                   options=adaptive),  # fmt: skip
        "kill between steps": dict(faults=[F.kill_between_steps(40, worker=2)], options=fixed),
        "kill rank 0": dict(faults=[F.kill_in_collective(KILL_COLLECTIVE, rank=0)], options=fixed),
        "SIGSTOP, SIGCONT 2 s": dict(faults=[F.stop_at_step(40, worker=2, cont_after=2.0)], heartbeat_timeout=1.0,
                                     options=adaptive),  # fmt: skip
        "two in a row": dict(faults=[F.kill_in_collective(KILL_COLLECTIVE, worker=2), F.kill_during_reconfigure(2, worker=1)],
                             options=fixed),  # fmt: skip
        "joiner (new worker)": dict(joins=[(40, world)], options=["--steps", "80", "--max-steps", "3000", "--until-size",
                                                                   str(world + 1), "--tail", "20"]),  # fmt: skip
    }


def run_ptc(world: int, engine: str, spec: Dict[str, Any], *, timeout: float, sleep: float = SLEEP) -> Dict[str, Any]:
    out = Path(tempfile.mkdtemp(prefix="ptc-ft-bench-"))
    command = ft_demo.worker_command(str(out / "states"), *spec["options"], "--sleep", str(sleep), "--engine", engine)
    job = LocalJob(command, world, faults=spec.get("faults", ()), joins=spec.get("joins", ()),
                   restart_after=spec.get("restart_after"), heartbeat_timeout=spec.get("heartbeat_timeout", 3.0),
                   log_dir=out / "logs")  # fmt: skip
    result = job.run(timeout=timeout)
    states = ft_demo.load_states(out / "states")
    (out / "timeline.jsonl").write_text("".join(json.dumps(e) + "\n" for e in result.events))
    info = ft_demo.analyze(result.events, states)
    info["timed_out"] = result.timed_out
    info["elapsed_s"] = round(result.elapsed, 1)
    info["out"] = str(out)
    info["returncodes"] = [(r.worker, r.kind, r.returncode) for r in result.runs]
    info["_events"], info["_states"] = result.events, states
    if result.timed_out or not info.get("params_equal"):
        print(f"    !! run in {out} timed out or diverged; logs: {out / 'logs'}", flush=True)
    return info


def run_ptc_repeated(world: int, engine: str, kills: int, *, spacing: int = 700, timeout: float = 240) -> List[Dict[str, Any]]:
    """``kills`` repetitions of "kill in collective" in one job (starting 4 processes
    costs more than the measurement): initial workers 2, 1, 3, 0, ... SIGKILL
    themselves ``spacing`` collectives apart, each is restarted at once and
    rejoins before the next kill (checked: ``survivors`` says who was there)."""
    order = [2, 1, 3, 0] + list(range(4, world))
    victims = [v for v in order if v < world][:kills]
    faults = [F.kill_in_collective(KILL_COLLECTIVE + i * spacing, worker=v) for i, v in enumerate(victims)]
    last = KILL_COLLECTIVE + (len(victims) - 1) * spacing
    spec = dict(faults=faults, restart_after=0.0,
                options=["--steps", str(last + 40), "--max-steps", str(last + 3000), "--until-size", str(world),
                         "--tail", "20"])  # fmt: skip
    first = run_ptc(world, engine, spec, timeout=timeout)
    events = first.pop("_events")
    states = first.pop("_states")
    infos = [first]
    for i in range(1, len(victims)):
        info = ft_demo.analyze(events, states, fault_index=i)
        info.update(timed_out=first["timed_out"], elapsed_s=first["elapsed_s"], out=first["out"])
        infos.append(info)
    return infos


def _rejoin(info: Dict[str, Any], key: str) -> Optional[float]:
    values = [r[key] for r in info.get("rejoins", []) if r.get(key) is not None and not r.get("nobody_left")]
    return values[0] if values else None


def _row(name: str, runs: List[Dict[str, Any]]) -> Dict[str, Any]:
    return {
        "scenario": name,
        "runs": len(runs),
        "detect_ms": [r.get("detect_ms") for r in runs],
        "released_ms": [r.get("released_ms") for r in runs],
        "resume_ms": [r.get("resume_ms") for r in runs],
        "reconfigure_max_ms": [r.get("reconfigure_max_ms") for r in runs],
        "lost": [r.get("lost") for r in runs],
        "rejoin_process_ms": [_rejoin(r, "hello") for r in runs],
        "rejoin_started_ms": [_rejoin(r, "started") for r in runs],
        "rejoin_protocol_ms": [_rejoin(r, "protocol_ms") for r in runs],
        "params_equal": all(r.get("params_equal") for r in runs),
        "replay_equal": all(r.get("replay_equal") for r in runs),
        "timed_out": any(r.get("timed_out") for r in runs),
    }


def print_rows(title: str, rows: List[Dict[str, Any]]) -> None:
    print(f"\n{title}  (ms after the fault; median [min-max] over runs)")
    header = f"{'scenario':24} {'runs':>4} {'detect':>14} {'resume':>16} {'reconf':>7} {'lost':>5} " \
             f"{'rejoin: proc start':>19} {'protocol':>13} {'params':>7}"  # fmt: skip
    print(header)
    print("-" * len(header))
    for r in rows:
        lost = [x for x in r["lost"] if x is not None]
        ok = "equal" if r["params_equal"] and r["replay_equal"] and not r["timed_out"] else "FAIL"
        print(f"{r['scenario']:24} {r['runs']:>4} {_rng(r['detect_ms']):>14} {_rng(r['resume_ms']):>16} "
              f"{_med(r['reconfigure_max_ms']) or float('nan'):>7.1f} {max(lost) if lost else 'n/a':>5} "
              f"{_rng(r['rejoin_process_ms']):>19} {_rng(r['rejoin_protocol_ms']):>13} {ok:>7}")  # fmt: skip


# --- tail latency: many kills inside the allreduce in one job ------------------------

TAIL_GOALS = {"p50": 100.0, "p99": 300.0}  # ms, kill -> every survivor committed a step in the new generation
TAIL_PHASES = ("detect_ms", "new_generation_ms", "released_ms", "reconfigured_ms", "synced_ms", "resume_ms")


def percentile(values: List[float], q: float) -> Optional[float]:
    """The ``q``-th percentile (0..100) with linear interpolation between closest ranks (numpy's default)."""
    xs = sorted(values)
    if not xs:
        return None
    pos = (len(xs) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def tail_stats(values: List[Optional[float]]) -> Dict[str, Any]:
    """count, p50, p90, p99 and max of the values that are not None (``missing``: how many were)."""
    xs = [v for v in values if v is not None]
    out: Dict[str, Any] = {"count": len(xs), "missing": len(values) - len(xs)}
    for name, q in (("p50", 50), ("p90", 90), ("p99", 99)):
        out[name] = None if not xs else round(percentile(xs, q), 1)  # type: ignore[arg-type]
    out["max"] = max(xs) if xs else None
    return out


def _last_after(events: List[Dict[str, Any]], name: str, workers: List[int], tk: float, end: float,
                until: Dict[int, float]) -> Optional[float]:  # fmt: skip
    """The time the last of ``workers`` logged ``name`` after ``tk`` (each one's first, not after its ``until``)."""
    times = []
    for w in workers:
        t = next((e["time"] for e in events if e["event"] == name and e.get("worker") == w
                  and tk <= e["time"] < end and e["time"] <= until.get(w, end)), None)  # fmt: skip
        if t is None:
            return None
        times.append(t)
    return max(times) if times else None


def tail_injections(events: List[Dict[str, Any]], world: int) -> List[Dict[str, Any]]:
    """Per ``fault_kill`` of the timeline: the phases in ms after it (:func:`ptc.demos.ft.analyze`'s
    detect, new generation, released and resume; plus the last survivor's ``reconfigured`` and
    ``state_synced`` events before its first commit) and whether the group was at full size then."""
    events = sorted(events, key=lambda e: e["time"])
    kills = [e for e in events if e["event"] in ("fault_kill", "fault_stop")]
    out = []
    for i, kill in enumerate(kills):
        info = ft_demo.analyze(events, fault_index=i)
        tk = kill["time"]
        end = kills[i + 1]["time"] if i + 1 < len(kills) else float("inf")
        survivors = list(info.get("survivors") or [])
        g0 = info.get("generation_at_kill", 0)
        first_commit = {}
        for w in survivors:
            c = next((e for e in events if e["event"] == "commit" and e.get("worker") == w and tk <= e["time"] < end
                      and e["gen"] > g0), None)  # fmt: skip
            if c is not None:
                first_commit[w] = c["time"]
        ms = lambda t: None if t is None else round((t - tk) * 1000, 1)  # noqa: E731
        row = {k: info.get(k) for k in ("detect_ms", "new_generation_ms", "released_ms", "resume_ms", "reconfigure_max_ms")}
        row["reconfigured_ms"] = ms(_last_after(events, "reconfigured", survivors, tk, end, first_commit))
        row["synced_ms"] = ms(_last_after(events, "state_synced", survivors, tk, end, first_commit))
        row.update(worker=kill.get("worker"), point=kill.get("point"), survivors=len(survivors),
                   full_size=len(survivors) == world - 1, kill_at_s=info.get("kill_at_s"))  # fmt: skip
        out.append(row)
    return out


def run_tail(world: int, engine: str, injections: int, *, gap: int = 30, sleep: float = SLEEP,
             timeout: Optional[float] = None) -> Dict[str, Any]:  # fmt: skip
    """``injections`` kills inside the allreduce in one job (``benchmarks/ft_tail_worker.py``)."""
    out = Path(tempfile.mkdtemp(prefix="ptc-ft-tail-"))
    argv = [sys.executable, str(ROOT / "benchmarks" / "ft_tail_worker.py"), "--out", str(out / "states"), "--world",
            str(world), "--injections", str(injections), "--gap", str(gap), "--sleep", str(sleep), "--engine", engine]  # fmt: skip
    job = LocalJob(lambda worker: argv, world, restart_after=0.0, heartbeat_timeout=3.0, log_dir=out / "logs")
    result = job.run(timeout=timeout or 90 + 10 * injections)
    (out / "timeline.jsonl").write_text("".join(json.dumps(e) + "\n" for e in result.events))
    states = ft_demo.load_states(out / "states")
    check = ft_demo.check_states(states)
    history = check.pop("history")
    gens = {i + 1: g for i, (_s, g, _m) in enumerate(history)}
    commits = {(e["step"], e["gen"]) for e in result.events if e["event"] == "commit"}
    rows = tail_injections(result.events, world)
    full = [r for r in rows if r["full_size"] and r["point"] == "collective"]
    info: Dict[str, Any] = {
        "engine": engine, "world": world, "requested": injections, "injections": len(rows),
        "at_full_size": len(full), "steps": check["steps"], "lost": sum(1 for s, g in commits if gens.get(s) != g),
        "params_equal": check["params_equal"], "replay_equal": check["replay_equal"],
        "timed_out": result.timed_out, "elapsed_s": round(result.elapsed, 1), "out": str(out),
        "phases": {k: tail_stats([r[k] for r in full]) for k in TAIL_PHASES},
        "detail": rows,
    }  # fmt: skip
    res = info["phases"]["resume_ms"]
    info["goals"] = {name: (res[name] is not None and res[name] < limit) for name, limit in TAIL_GOALS.items()}
    info["goals_met"] = all(info["goals"].values()) and res["missing"] == 0 and len(full) >= injections
    if result.timed_out or not check["params_equal"]:
        print(f"    !! tail run in {out} timed out or diverged; logs: {out / 'logs'}", flush=True)
    return info


def print_tail(info: Dict[str, Any]) -> None:
    res = info["phases"]["resume_ms"]
    print(f"\ntail latency, {info['world']} workers, engine {info['engine']}: {info['injections']} kills inside the "
          f"gradient allreduce in one job ({info['at_full_size']} at full size; {info['steps']} steps, "
          f"{info['elapsed_s']:.0f} s), ms after the kill")  # fmt: skip
    header = f"  {'phase (last survivor)':28} {'count':>5} {'p50':>7} {'p90':>7} {'p99':>7} {'max':>7}"
    print(header)
    labels = {"detect_ms": "detect (first sign)", "new_generation_ms": "new generation (coordinator)",
              "released_ms": "released (PeerFailure)", "reconfigured_ms": "reconfigured",
              "synced_ms": "state synced", "resume_ms": "resume (committed next step)"}  # fmt: skip
    f = lambda v: "n/a" if v is None else f"{v:.1f}"  # noqa: E731
    for key in TAIL_PHASES:
        s = info["phases"][key]
        print(f"  {labels[key]:28} {s['count']:>5} {f(s['p50']):>7} {f(s['p90']):>7} {f(s['p99']):>7} {f(s['max']):>7}")
    goals = ", ".join(f"{k} < {v:.0f} ms: {'met' if info['goals'][k] else 'NOT met'}" for k, v in TAIL_GOALS.items())
    enough = "" if info["at_full_size"] >= info["requested"] else f" (only {info['at_full_size']} of {info['requested']} kills)"
    print(f"  goals (resume): {goals}{enough}; missing resumes {res['missing']}; lost {info['lost']}; params equal "
          f"{info['params_equal']}, replay equal {info['replay_equal']}, timed out {info['timed_out']}  ({info['out']})")  # fmt: skip


# --- torchrun baseline -------------------------------------------------------------


def _events(path: Path) -> List[Dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def run_torchrun(world: int, *, kill_at: int = 50, steps: int = 150, timeout: float = 180.0) -> Dict[str, Any]:
    out = Path(tempfile.mkdtemp(prefix="ptc-ft-torchrun-"))
    log = out / "events.jsonl"
    torchrun = Path(sys.executable).with_name("torchrun")
    cmd = [str(torchrun), "--standalone", "--nproc-per-node", str(world), "--max-restarts", "1", "--monitor-interval",
           "0.1", str(ROOT / "benchmarks" / "ft_torchrun_worker.py"), "--steps", str(steps), "--ckpt-every", "20",
           "--ckpt", str(out / "ckpt.pt"), "--kill-at", str(kill_at), "--victim", "2", "--sleep", str(SLEEP),
           "--events", str(log)]  # fmt: skip
    env = {**os.environ, "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1", "OMP_NUM_THREADS": "1",
           "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}  # fmt: skip
    with open(out / "torchrun.log", "wb") as sink:
        proc = subprocess.Popen(cmd, stdout=sink, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                start_new_session=True)  # fmt: skip
        deadline, done_at = time.monotonic() + timeout, None
        while proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
            if done_at is None and sum(1 for e in _events(log) if e["event"] == "done") >= world:
                done_at = time.monotonic()
            if done_at is not None and time.monotonic() - done_at > 20:
                break  # every rank finished, torchrun did not exit (seen on 2.13): do not wait for the timeout
        timed_out = proc.poll() is None
        if timed_out:
            os.killpg(proc.pid, signal.SIGKILL)  # the session this script created for torchrun
        rc = proc.wait()
    # torchrun puts each worker in a session of its own: stop the ones it left behind, by PID
    for e in _events(log):
        pid = e.get("pid") if e["event"] == "start" else None
        try:
            if pid and "ft_torchrun_worker" in Path(f"/proc/{pid}/cmdline").read_text(errors="replace"):
                os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    ev = _events(log)
    kill = next((e for e in ev if e["event"] == "kill"), None)
    info: Dict[str, Any] = {"returncode": rc, "timed_out": timed_out, "out": str(out)}
    if kill is None:
        return info
    tk = kill["time"]
    ms = lambda t: round((t - tk) * 1000, 1)  # noqa: E731
    errors = [e["time"] for e in ev if e["event"] == "step_error" and e["time"] >= tk]
    starts = [e["time"] for e in ev if e["event"] == "start" and e["attempt"] == 1]
    inits = [e["time"] for e in ev if e["event"] == "init_pg" and e["attempt"] == 1]
    firsts = [e["time"] for e in ev if e["event"] == "first_step" and e["attempt"] == 1]
    restored = [e["step"] for e in ev if e["event"] == "restored" and e["attempt"] == 1]
    done = [e for e in ev if e["event"] == "done"]
    info.update({
        "detect_ms": ms(min(errors)) if errors else None,  # a survivor's gloo error (the agent may stop it first)
        "restart_first_start_ms": ms(min(starts)) if starts else None,
        "restart_pg_ms": ms(max(inits)) if inits and len(inits) == world else None,
        "resume_ms": ms(max(firsts)) if len(firsts) == world else None,
        "steps_redone": kill["step"] - restored[0] if restored else None,
        "params_equal": len(done) == world and len({d["w0"] for d in done}) == 1,
        "hung_after_done": timed_out and len(done) == world,
    })
    return info


# --- steady-state overhead --------------------------------------------------------------


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_plain_ddp(world: int, steps: int, timeout: float = 180.0) -> Dict[str, List[float]]:
    """Worker 0's per-step wall and CPU times (``{"wall": [...], "cpu": [...]}``, seconds)."""
    out = Path(tempfile.mkdtemp(prefix="ptc-ft-plain-"))
    port = _free_port()
    procs = []
    for rank in range(world):
        env = {**os.environ, "RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(world),
               "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "OMP_NUM_THREADS": "1",
               "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}  # fmt: skip
        cmd = [sys.executable, str(ROOT / "benchmarks" / "ft_torchrun_worker.py"), "--steps", str(steps),
               "--events", str(out / "events.jsonl"), "--times", str(out / "times.json")]  # fmt: skip
        procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=open(out / f"err{rank}", "wb")))
    from ptc.distributed.processes import wait_then_kill

    wait_then_kill(procs, timeout)
    path = out / "times.json"
    return json.loads(path.read_text()) if path.exists() else {"wall": [], "cpu": []}


def run_ptc_steady(world: int, steps: int, engine: str, ddp: bool, timeout: float = 180.0) -> Dict[str, List[float]]:
    """Worker 0's per-step wall and CPU times, as :func:`run_plain_ddp`."""
    out = Path(tempfile.mkdtemp(prefix="ptc-ft-steady-"))
    options = ["--steps", str(steps), "--no-report", "--engine", engine] + (["--ddp"] if ddp else [])
    job = LocalJob(ft_demo.worker_command(str(out / "states"), *options), world, heartbeat_timeout=5.0, log_dir=out / "logs")
    job.run(timeout=timeout)
    states = ft_demo.load_states(out / "states")
    if 0 not in states:
        return {"wall": [], "cpu": []}
    return {"wall": list(states[0]["step_times"]), "cpu": list(states[0]["step_cpu_times"])}


def overhead(world: int, steps: int, rounds: int, engine: str) -> Dict[str, Any]:
    """Median step time of worker 0 per run (wall), and its process's CPU time per step (cpu).

    On a machine with fewer cores than workers the wall time of a step is set
    by the scheduler as much as by the step's own work (single rounds swing by
    +-15 % on 2 cores); the CPU time a worker spends per step is what ptc adds
    to the machine's load. Both are compared per round (interleaved runs, same
    machine state) with plain DDP. Measured on 2 cores the CPU figure swung as
    much as the wall one (whole rounds +30 %, then -5 %: contention shows in CPU
    time too), so neither settles a few per cent there.
    """
    skip = 30
    names = ("plain DDP (gloo)", "ptc Trainer", "ptc Trainer, ddp=True")
    wall: Dict[str, List[Optional[float]]] = {name: [] for name in names}
    cpu: Dict[str, List[Optional[float]]] = {name: [] for name in names}
    for _ in range(rounds):
        for name in names:
            if name.startswith("plain"):
                times = run_plain_ddp(world, steps)
            else:
                times = run_ptc_steady(world, steps, engine, ddp=name.endswith("True"))
            ok = len(times["wall"]) > skip
            wall[name].append(statistics.median(times["wall"][skip:]) * 1000 if ok else None)
            cpu[name].append(statistics.median(times["cpu"][skip:]) * 1000 if len(times["cpu"]) > skip else None)
    result = {}
    for name in names:
        r = result[name] = {"median_ms_per_run": wall[name], "median_ms": _med(wall[name]),
                            "cpu_ms_per_run": cpu[name], "cpu_ms": _med(cpu[name])}  # fmt: skip
        for key, runs in (("", wall), ("cpu_", cpu)):
            # paired: each run against the plain-DDP run of the same round (interleaved, same machine state)
            pairs = [t / b - 1 for t, b in zip(runs[name], runs[names[0]]) if t and b]
            r[f"{key}overhead_pct"] = None if not pairs else round(_med(pairs) * 100, 1)
            r[f"{key}overhead_pct_per_round"] = [round(x * 100, 1) for x in pairs]
    return result


def paired_overhead(world: int, blocks: int, block_steps: int, engine: str, model: str = "mlp",
                    timeout: float = 600.0) -> Dict[str, Any]:
    """Plain DDP, the Trainer and ``ddp=True`` in alternating blocks inside the same worker processes
    (``benchmarks/ft_paired_worker.py``); per variant the median over blocks of its ratio to the
    plain-DDP block next to it, with the middle half of those ratios (interquartile range)."""
    out = Path(tempfile.mkdtemp(prefix="ptc-ft-paired-"))
    command = [sys.executable, str(ROOT / "benchmarks" / "ft_paired_worker.py"), "--plain-port", str(_free_port()),
               "--blocks", str(blocks), "--block-steps", str(block_steps), "--engine", engine, "--model", model,
               "--out", str(out / "blocks.json")]  # fmt: skip
    job = LocalJob(lambda worker: command, world, heartbeat_timeout=5.0, log_dir=out / "logs",
                   env={"PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")})  # fmt: skip
    job.run(timeout=timeout)
    path = out / "blocks.json"
    if not path.exists():
        return {"error": f"no result (worker logs in {out / 'logs'})"}
    data = json.loads(path.read_text())
    rows = data["blocks"]
    result: Dict[str, Any] = {"blocks": len(rows), "block_steps": block_steps, "generation": data["generation"],
                              "ddp_hook": data.get("ddp_hook")}  # fmt: skip
    for name in ("plain", "hooked", "trainer", "ddp", "ddp_python"):
        r = result[name] = {}
        for key in ("wall_ms", "cpu_ms"):
            r[key] = statistics.median(row[name][key] for row in rows)
            if name != "plain":
                ratios = sorted(row[name][key] / row["plain"][key] - 1 for row in rows)
                q = statistics.quantiles(ratios, n=4) if len(ratios) >= 2 else ratios * 3
                r[f"{key}_overhead_pct"] = round(statistics.median(ratios) * 100, 1)
                r[f"{key}_overhead_iqr_pct"] = [round(q[0] * 100, 1), round(q[-1] * 100, 1)]
    return result


# --- torchft 0.2.0 ------------------------------------------------------------------------

TORCHFT_SCENARIOS = ("kill between steps", "kill in allreduce")


def torchft_importable() -> str:
    """'' when ``import torchft`` works (``PTC_TORCHFT_PATH`` first on sys.path), else why not."""
    path = os.environ.get("PTC_TORCHFT_PATH")
    if path and path not in sys.path:
        sys.path.insert(0, path)
    os.environ.setdefault("TORCHFT_USE_OTEL", "false")
    try:
        import torchft  # noqa: F401
    except Exception as exc:  # ImportError, or a dependency that fails to load
        return f"{type(exc).__name__}: {exc}"
    return ""


def run_torchft(world: int, scenario: str, *, kill_at: int = 50, steps: int = 150, timeout: float = 90.0) -> Dict[str, Any]:
    """One torchft job: ``world`` replica groups of one process (``ft_torchft_worker.py``), the
    lighthouse in this process; replica 2 fails at step ``kill_at`` (``scenario``)."""
    import select

    out = Path(tempfile.mkdtemp(prefix="ptc-ft-torchft-"))
    victim = 2
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TORCHFT_USE_OTEL": "false",
           "PYTHONPATH": os.pathsep.join(filter(None, [os.environ.get("PTC_TORCHFT_PATH"), str(ROOT),
                                                       os.environ.get("PYTHONPATH")]))}  # fmt: skip
    # the lighthouse in a child of its own (its Rust log goes to a file); it stops when its stdin closes
    code = ("import sys; from torchft._torchft import LighthouseServer as L; l = L(bind='127.0.0.1:0', min_replicas=1, "
            "quorum_tick_ms=20, heartbeat_timeout_ms=500, join_timeout_ms=1000); print(l.address(), flush=True); "
            "sys.stdin.read(); l.shutdown()")  # fmt: skip
    with open(out / "lighthouse.log", "wb") as err:
        lighthouse = subprocess.Popen([sys.executable, "-c", code], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      stderr=err)  # fmt: skip
    procs: List[subprocess.Popen] = []
    kill_time, started, timed_out = None, time.monotonic(), False
    deadline = started + timeout
    events = lambda: [e for r in range(world) for e in _events(out / f"events-{r}.jsonl")]  # noqa: E731
    try:
        assert lighthouse.stdout is not None and lighthouse.stdin is not None
        if not select.select([lighthouse.stdout], [], [], 60)[0]:
            raise RuntimeError(f"the torchft lighthouse did not start in 60 s (log: {out / 'lighthouse.log'})")
        line = lighthouse.stdout.readline().decode().strip()
        if not line:
            raise RuntimeError(f"the torchft lighthouse exited (log: {out / 'lighthouse.log'})")
        address = "http://127.0.0.1:" + line.rsplit(":", 1)[1]  # address() names the host name
        for r in range(world):
            cmd = [sys.executable, str(ROOT / "benchmarks" / "ft_torchft_worker.py"), "--replica", str(r), "--lighthouse",
                   address, "--events", str(out / f"events-{r}.jsonl"), "--go", str(out / "go"), "--steps", str(steps),
                   "--sleep", str(SLEEP)]  # fmt: skip
            if r == victim:
                cmd += ["--pause-at" if scenario == "kill between steps" else "--selfkill-at", str(kill_at)]
            with open(out / f"err{r}", "wb") as err:
                procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=err, stdin=subprocess.DEVNULL))
        while time.monotonic() < deadline and sum(e["event"] == "ready" for e in events()) < world:
            if any(p.poll() is not None for p in procs):
                break
            time.sleep(0.05)
        (out / "go").write_text("")  # every replica heartbeats: the first quorum takes them all
        pause = out / f"events-{victim}.jsonl"
        while time.monotonic() < deadline and any(p.poll() is None for p in procs):
            if kill_time is None and scenario == "kill between steps" and any(e["event"] == "fault" for e in _events(pause)):
                procs[victim].kill()  # SIGKILL, by PID (our child)
                kill_time = time.time()
            time.sleep(0.005 if kill_time is None else 0.05)
        timed_out = any(p.poll() is None for p in procs)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait()
        try:
            lighthouse.stdin.close()  # type: ignore[union-attr]
            lighthouse.wait(timeout=5)
        except (OSError, subprocess.TimeoutExpired):
            lighthouse.kill()
            lighthouse.wait()
    ev = sorted(events(), key=lambda e: e["time"])
    (out / "timeline.jsonl").write_text("".join(json.dumps(e) + "\n" for e in ev))
    info: Dict[str, Any] = {"scenario": scenario, "replicas": world, "out": str(out),
                            "timed_out": timed_out,
                            "returncodes": [p.returncode for p in procs]}  # fmt: skip
    fault = next((e for e in ev if e["event"] == "fault"), None)
    if fault is None:
        return info
    tk = kill_time or fault["time"]  # between steps: the parent's SIGKILL; in the allreduce: the victim's own
    ms = lambda t: None if t is None else round((t - tk) * 1000, 1)  # noqa: E731
    survivors = [r for r in range(world) if r != victim]
    resumed, lost, crashed, failed_commits, errors = [], 0, [], 0, {}
    for r in survivors:
        mine = [e for e in ev if e.get("replica") == r and e["event"] == "commit"]
        before = [e for e in mine if e["time"] < tk]
        # resume: the first commit without the victim (one right after the fault may still include its gradient)
        c = next((e for e in mine if e["time"] >= tk and e["committed"] and e["participants"] < world), None)
        resumed.append(c["time"] if c else None)
        failed_commits += sum(1 for e in mine if e["time"] >= tk and not e["committed"])
        steps_done = sorted(e["step"] for e in mine if e["committed"])
        if steps_done:
            lost += len(set(range(steps_done[0], steps_done[-1] + 1)) - set(steps_done))
        info.setdefault("participants_before", []).append(before[-1]["participants"] if before else None)
        if not any(e["event"] == "done" and e.get("replica") == r for e in ev):
            crashed.append(r)
            tail = [ln.strip() for ln in (out / f"err{r}").read_text(errors="replace").splitlines() if ln.strip()]
            where = [ln for ln in tail if ln.startswith("File ")]
            died = next((e for e in ev if e["event"] == "crash" and e.get("replica") == r), None)
            errors[r] = {"exit": procs[r].returncode, "crash_ms": ms(died["time"]) if died else None,
                         "error": (tail[-1][:160] if tail else "") + (f" ({where[-1][:160]})" if where else "")}  # fmt: skip
    done = [e for e in ev if e["event"] == "done"]
    info.update({
        "fault_step": fault["step"], "fault_to_kill_ms": None if kill_time is None else round((kill_time - fault["time"]) * 1000, 1),
        "resume_ms": ms(max(resumed)) if resumed and None not in resumed else None,
        "first_resume_ms": ms(min(t for t in resumed if t is not None)) if any(t is not None for t in resumed) else None,
        "lost": None if crashed else lost, "failed_commits_after_fault": failed_commits,  # lost: n/a when training died
        "survivors": len(survivors), "survivors_crashed": len(crashed), "crash_errors": errors,
        "params_equal": len(done) == len(survivors) and len({(d["w0"], d["b"]) for d in done}) == 1,
    })  # fmt: skip
    return info


def torchft_bench(runs: int = 2, world: int = 4) -> Dict[str, Any]:
    result: Dict[str, Any] = {"version": "", "replica_groups": world, "processes_per_group": 1, "scenarios": {}}
    try:
        from importlib.metadata import version

        result["version"] = version("torchft")
    except Exception:
        pass
    print(f"\ntorchft {result['version']}: {world} replica groups of 1 process, lighthouse (quorum tick 20 ms, heartbeat "
          f"timeout 500 ms, join timeout 1000 ms), ProcessGroupGloo (5 s), PGTransport, torchft DDP + Optimizer, "
          f"float64 nn.Linear, {SLEEP * 1000:.0f} ms sleep per step, replica 2 fails at step 50 of 150", flush=True)  # fmt: skip
    for name in TORCHFT_SCENARIOS:
        infos = []
        for _ in range(runs):
            info = run_torchft(world, name)
            infos.append(info)
            errs = (info.get("crash_errors") or {}).values()
            crash_at = ", ".join("n/a" if e["crash_ms"] is None else f"+{e['crash_ms']:.0f}" for e in errs)
            crash = "" if not errs else f" ({'; '.join(sorted({e['error'] for e in errs}))}; at {crash_at} ms)"
            print(f"  [torchft] {name}: resume {info.get('resume_ms')} ms, lost {info.get('lost')}, failed commits "
                  f"{info.get('failed_commits_after_fault')}, survivors crashed {info.get('survivors_crashed')}/"
                  f"{info.get('survivors')}{crash}, participants before {info.get('participants_before')}, params "
                  f"equal {info.get('params_equal')}, timed out {info.get('timed_out')}  ({info['out']})", flush=True)  # fmt: skip
        crashed = sum(i.get("survivors_crashed") or 0 for i in infos)
        total = sum(i.get("survivors") or 0 for i in infos)
        lost = [i["lost"] for i in infos if i.get("lost") is not None]
        result["scenarios"][name] = {"runs": len(infos), "resume_ms": [i.get("resume_ms") for i in infos],
                                     "failed_commits": [i.get("failed_commits_after_fault") for i in infos],
                                     "median_resume_ms": _med([i.get("resume_ms") for i in infos]),
                                     "lost_max": max(lost) if lost else None,
                                     "survivors_crashed": f"{crashed}/{total}", "detail": infos}  # fmt: skip
    print(f"\ntorchft, {world} replica groups  (ms after the fault; median [min-max] over runs)")
    print(f"{'scenario':24} {'runs':>4} {'resume':>16} {'lost':>5} {'failed commits':>15} {'survivors crashed':>18}")
    for name, r in result["scenarios"].items():
        failed = ",".join("n/a" if x is None else str(x) for x in r["failed_commits"])
        print(f"{name:24} {r['runs']:>4} {_rng(r['resume_ms']):>16} {r['lost_max'] if r['lost_max'] is not None else 'n/a':>5} "
              f"{failed:>15} {r['survivors_crashed']:>18}")  # fmt: skip
    return result


# --- main -----------------------------------------------------------------------------


def run_coordinator_kill(reps: int, steps: int = 300, kill_at: int = 30) -> Dict[str, Any]:
    """SIGKILL the coordinator (``LocalJob(coordinator_process=True)``) at step ``kill_at`` of a
    3-worker job; it is started again at the same address 0.5 s later. Per run: steps committed
    while no coordinator served (the members' own histories: commit events sent meanwhile are
    dropped), steps lost (each of ``steps`` committed exactly once, by every worker), the time
    from the kill until a coordinator serves the job again (its ``adopted`` event), whether it
    resumed the generation as it was, and whether the final states agree."""
    from ptc.distributed.ft.launch import python_module

    runs = []
    for _ in range(reps):
        with tempfile.TemporaryDirectory(prefix="ptc-ft-coordinator-kill-") as tmp:
            out = Path(tmp) / "out"
            job = LocalJob(python_module("ptc.demos.ft_example", "--steps", str(steps), "--out", str(out),
                                         "--sleep", "0.02"), 3,
                           heartbeat_timeout=3.0, log_dir=Path(tmp) / "logs", coordinator_process=True,
                           coordinator_restart_after=0.5, kill_coordinator_at=[kill_at])  # fmt: skip
            result = job.run(timeout=180)
            finals = [torch.load(p, weights_only=False) for p in sorted(out.glob("worker*.pt"))]
            killed = result.of("coordinator_killed")
            adopted = result.of("adopted")
            row: Dict[str, Any] = {"workers_done": len(finals), "exit_codes": [r.returncode for r in result.runs]}
            if killed and adopted and finals:
                t_kill, t_back = killed[0]["time"], adopted[0]["time"]
                commits = [e for e in result.events if e["event"] == "commit"]
                before = max((e["step"] for e in commits if e["time"] <= t_kill), default=-1)
                after = min((e["step"] for e in commits if e["time"] >= t_back), default=None)
                histories = [[s for s, _, _ in d["history"]] for d in finals]
                row.update(
                    down_ms=round((t_back - t_kill) * 1000, 1),
                    steps_while_down=None if after is None else after - before - 1,
                    steps_lost=sum(1 for s in range(steps) if any(h.count(s) != 1 for h in histories)),
                    resumed=bool(adopted[0].get("resumed")),
                    states_equal=len({d["checksum"] for d in finals}) == 1,
                )
            runs.append(row)
    return {"reps": reps, "steps": steps, "kill_at": kill_at, "runs": runs}


def print_coordinator_kill(ck: Dict[str, Any]) -> None:
    print(f"\ncoordinator SIGKILLed at step {ck['kill_at']} of {ck['steps']} (3 workers), started again 0.5 s later")
    for i, run in enumerate(ck["runs"]):
        print(f"  run {i}: kill -> serving again {run.get('down_ms')} ms, steps committed meanwhile "
              f"{run.get('steps_while_down')}, steps lost {run.get('steps_lost')}, generation resumed "
              f"{run.get('resumed')}, states equal {run.get('states_equal')}, workers done {run['workers_done']}, "
              f"exit codes {run['exit_codes']}")  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="first engine only; kill in collective (2 repetitions), hang and joiner; size 4; one overhead round")
    parser.add_argument("--json", default=None, help="write the results here")
    parser.add_argument("--reps", type=int, default=None, help="repetitions of 'kill in collective' at N=4 (one job, <= 4)")
    parser.add_argument("--sizes", default=None, help="world sizes for the scaling runs (default 4,8; 16 takes minutes on 2 cores)")
    parser.add_argument("--engines", default=None, help="default: native,rebuild where native exists, else rebuild")
    parser.add_argument("--all-scenarios", action="store_true", help="every scenario with the second engine too")
    parser.add_argument("--overhead-rounds", type=int, default=None, help="interleaved rounds of the overhead runs (default 2; --quick 1)")
    parser.add_argument("--paired-blocks", type=int, default=None, help="blocks per variant of the paired overhead runs (default 20; --quick 6)")
    parser.add_argument("--tail", type=int, default=None, metavar="N",
                        help="kills inside the allreduce for the tail latency (p50/p99; one job; default 50, --quick 10)")
    parser.add_argument("--coordinator-kill", action="store_true",
                        help="only the coordinator-kill part (3 runs; --quick 1); otherwise it runs after tail")
    parser.add_argument("--skip", default="", help="comma list of parts to skip: scenarios,scaling,tail,coordinator-kill,torchrun,overhead,paired,torchft")
    args = parser.parse_args()
    reps = min(4, args.reps or (2 if args.quick else 4))
    sizes = [int(s) for s in (args.sizes or ("4" if args.quick else "4,8")).split(",")]
    engines = (args.engines or ("native,rebuild" if _compat.GLOO_RECONFIGURE else "rebuild")).split(",")
    if args.quick and not args.engines:
        engines = engines[:1]
    skip = set(filter(None, args.skip.split(",")))
    if args.coordinator_kill:
        skip = {"scenarios", "scaling", "tail", "torchrun", "overhead", "paired", "torchft"}
    started = time.time()
    results: Dict[str, Any] = {"torch": torch.__version__, "engines": engines, "cpus": os.cpu_count(),
                               "load_avg_start": os.getloadavg()[0], "quick": args.quick}  # fmt: skip
    print(f"ptc fault tolerance benchmark: torch {torch.__version__}, engines {engines}, {os.cpu_count()} CPUs, "
          f"load average {os.getloadavg()[0]:.1f}; step = {SLEEP * 1000:.0f} ms sleep + the MLP (float64)", flush=True)
    torchft_error = torchft_importable()
    results["torchft"] = "importable: measured at the end (--skip torchft to skip)" if not torchft_error else \
        f"absent (import torchft failed: {torchft_error}): not measured"
    print(f"torchft: {results['torchft']}", flush=True)

    if "scenarios" not in skip:
        results["scenarios"] = {}
        for engine in engines:
            rows = []
            for name, spec in scenarios(4).items():
                if engine != engines[0] and name != "kill in collective" and not args.all_scenarios:
                    continue  # the second engine: the main scenario only (time)
                if args.quick and name not in QUICK_SCENARIOS:
                    continue
                n = reps if name == "kill in collective" else 1
                if name == "kill in collective":
                    pending = run_ptc_repeated(4, engine, n)
                else:
                    pending = None
                runs = []
                for _ in range(1 if pending is not None else n):
                    infos = pending if pending is not None else [run_ptc(4, engine, spec, timeout=150)]
                    for info in infos:
                        info.pop("_events", None), info.pop("_states", None)
                        runs.append(info)
                        print(f"  [{engine}] {name}: resume {info.get('resume_ms')} ms, detect {info.get('detect_ms')} ms, "
                              f"lost {info.get('lost')}, survivors {info.get('survivors')}, params equal "
                              f"{info.get('params_equal')}, job {info['elapsed_s']} s", flush=True)  # fmt: skip
                row = _row(name, runs)
                row["detail"] = runs
                rows.append(row)
            results["scenarios"][engine] = rows
            print_rows(f"ptc, engine {engine}, 4 workers", rows)
            sys.stdout.flush()

    if "scaling" not in skip:
        engine = engines[0]
        scaling = []
        for world in sizes:
            if world == 4 and "scenarios" in results:
                runs = [r for r in results["scenarios"][engine][0]["detail"]]
            else:
                spec = scenarios(world)["kill in collective"]
                t0 = time.time()
                runs = [run_ptc(world, engine, spec, timeout=60 + 25 * world, sleep=0.02 if world > 8 else SLEEP)]
                runs[0].pop("_events"), runs[0].pop("_states")
                print(f"  [{engine}] N={world}: resume {runs[0].get('resume_ms')} ms, {time.time() - t0:.0f} s", flush=True)
            row = _row(f"N={world}", runs)
            row["detail"] = runs
            scaling.append(row)
        results["scaling"] = scaling
        print_rows(f"ptc, engine {engine}, kill in collective, by world size", scaling)

    if "tail" not in skip:
        n = args.tail or (10 if args.quick else 50)
        tail = run_tail(4, engines[0], n)
        results["tail"] = tail
        print_tail(tail)
        sys.stdout.flush()

    if "coordinator-kill" not in skip:
        ck = run_coordinator_kill(1 if args.quick else 3)
        results["coordinator_kill"] = ck
        print_coordinator_kill(ck)
        sys.stdout.flush()

    if "torchrun" not in skip:
        tr = run_torchrun(4)
        results["torchrun"] = tr
        print("\ntorchrun --max-restarts 1 (restart the world), 4 workers, checkpoint every 20 steps, "
              "TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1, kill at step 50")  # fmt: skip
        print(f"  kill -> first survivor error    {tr.get('detect_ms')} ms")
        print(f"  kill -> restarted processes up  {tr.get('restart_first_start_ms')} ms")
        print(f"  kill -> new process group       {tr.get('restart_pg_ms')} ms")
        print(f"  kill -> first step after restart (all ranks)  {tr.get('resume_ms')} ms")
        print(f"  steps redone                    {tr.get('steps_redone')}")
        print(f"  final params equal              {tr.get('params_equal')}   (exit {tr.get('returncode')}, "
              f"timed out {tr.get('timed_out')}, torchrun hung after every rank was done: {tr.get('hung_after_done')})")

    if "overhead" not in skip:
        world, steps = 4, (200 if args.quick else 300)
        rounds = args.overhead_rounds or (1 if args.quick else 2)
        ov = overhead(world, steps, rounds, engines[0])
        results["overhead"] = ov
        print(f"\nsteady state, {world} workers, sleep 0, {steps} steps, median step time of worker 0 "
              f"(median over {rounds} interleaved runs; overhead: median of the per-round ratios), engine {engines[0]}")  # fmt: skip
        def against_plain(name: str, r: Dict[str, Any], key: str) -> str:
            pct = r[f"{key}overhead_pct"]
            if pct is None or name.startswith("plain"):
                return ""
            return f"   {pct:+.1f} % (per round: {', '.join(f'{x:+.1f}' for x in r[f'{key}overhead_pct_per_round'])})"

        for name, r in ov.items():
            runs = ", ".join(f"{v:.2f}" if v is not None else "-" for v in r["median_ms_per_run"])
            print(f"  {name:24} {r['median_ms'] or float('nan'):7.2f} ms   (runs: {runs}){against_plain(name, r, '')}")
            print(f"  {'':24} {r['cpu_ms'] or float('nan'):7.2f} ms CPU per step (worker 0's process, every thread)"
                  f"{against_plain(name, r, 'cpu_')}")

    if "paired" not in skip:
        world = 4
        blocks = args.paired_blocks or (6 if args.quick else 20)
        print(f"\nsteady state, {world} workers, plain DDP / DDP with torch's Python allreduce hook / Trainer / ddp=True "
              f"in alternating blocks inside the same "
              f"processes ({blocks} blocks; overhead: median of the per-block ratios to the plain-DDP block, "
              f"[interquartile range]), engine {engines[0]}")  # fmt: skip
        results["paired"] = {}
        try:  # built here once, not by every worker at once (the workers' Trainer then finds it built)
            from ptc.distributed.ft import native as ft_native

            ft_native.load(build=True)
        except Exception as exc:  # noqa: BLE001 - then ddp=True runs the Python hook, and says so
            print(f"  (the native DDP hook is not available: {exc}; ddp=True runs the Python hook)")
        for model, block_steps, label in (("mlp", 40, "ft_example's MLP, float64, 577 parameters"),
                                          ("wide", 4, "float32 MLP, 1.6M parameters (6.3 MB of gradients)")):  # fmt: skip
            pr = results["paired"][model] = paired_overhead(world, blocks, block_steps, engines[0], model)
            print(f"  {label}, {block_steps} steps per block")
            if "error" in pr:
                print(f"    {pr['error']}")
                continue
            for name, title in (("plain", "plain DDP (gloo)"), ("hooked", "DDP + torch's Python hook"),
                                ("trainer", "ptc Trainer"), ("ddp", f"ptc ddp=True ({pr['ddp_hook'] or 'no'} hook)"),
                                ("ddp_python", "ptc ddp=True, ddp_hook=python")):  # fmt: skip
                r = pr[name]
                line = f"    {title:30} {r['wall_ms']:8.2f} ms  {r['cpu_ms']:7.2f} ms CPU"
                if name != "plain":
                    line += (f"   wall {r['wall_ms_overhead_pct']:+.1f} % {r['wall_ms_overhead_iqr_pct']}"
                             f"   CPU {r['cpu_ms_overhead_pct']:+.1f} % {r['cpu_ms_overhead_iqr_pct']}")  # fmt: skip
                print(line, flush=True)

    if "torchft" not in skip and not torchft_error:
        try:
            results["torchft"] = torchft_bench()
        except Exception as exc:  # torchft is not ptc: report, keep the ptc results
            results["torchft"] = f"failed: {type(exc).__name__}: {exc}"
            print(f"\ntorchft: {results['torchft']}", flush=True)

    results["elapsed_s"] = round(time.time() - started, 1)
    print(f"\nbenchmark done in {results['elapsed_s']:.0f} s; load average now {os.getloadavg()[0]:.1f}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1, default=str))
        print(f"results: {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
