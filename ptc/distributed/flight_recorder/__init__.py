"""Flight Recorder for any c10d backend, dumped in the format torch's ``torchfrtrace`` reads.

A :class:`FlightRecorder` keeps, per process, a bounded ring buffer of the
collective and point-to-point calls issued on the process groups it is
attached to, whatever their backend (gloo, NCCL, the ``fake`` test backend,
custom backends, ptc's fault-tolerant groups).  Each record holds the op, the
group's name and generation, sequence ids, input/output sizes and dtypes, a
state and real times:

============  ==============================================================
state         meaning
============  ==============================================================
scheduled     the call was made; the backend has not returned its Work yet
              (``time_created_ns``)
started       the backend accepted the call and returned its Work
              (``time_discovered_started_ns``; an asynchronous backend may
              start moving data a little later)
completed     the Work finished without error (``time_discovered_completed_ns``)
failed        the call raised, or its Work finished with an error (``error``
              holds the message; the time as for completed)
============  ==============================================================

Two cores keep the records (``core=``):

``"native"`` (:mod:`ptc.distributed.flight_recorder.native`, a C++ extension built once per
    torch version): the ring buffer and the per-call work are C++.  The end
    time is when the Work's future completed, from a callback the backend's
    own thread runs without the GIL, so it is exact for every Work, waited or
    not (DDP's buckets included).  A Work without a CPU future is watched by
    a poller thread through ``is_completed()``: gloo's send/recv (no future)
    end within a millisecond of their ``wait()`` returning; NCCL's (a device
    future completes at enqueue) when the GPU has finished them.  Where torch
    has C++ process-group hooks (2.14) a recorded call runs no Python at all.
``"python"``: the records are Python objects.  The end time is the moment
    ``Work.wait()`` returned in Python, which for synchronous calls
    (``dist.all_reduce(t)``) is when the collective finished; Works nobody
    waits on in Python (the DDP reducer's, those consumed through
    ``get_future()``) are seen finished at the next recorded call, or by the
    watchdog within ``poll_interval``, so their end time is an upper bound.
    (A Python done-callback would be exact, but it must take the GIL in the
    backend's thread: 5-15 % of a 1 MB gloo all_reduce.)
``"auto"`` (default): native when it is already built for this torch (it never
    starts a 30-40 s build by itself) and ``record_stacks`` is off.

Python stacks are recorded only with ``record_stacks=True`` (off by default:
it costs a frame walk per call), and only by the Python core.  Both cores
write the same dumps, field for field.

Dumps are pickles in torch's Flight Recorder format (``version`` "2.10",
``pg_config``, ``pg_status``, ``entries`` with the same keys as native
entries, plus ptc's own keys and a ``ptc`` section that stock tools ignore),
one file ``<dump_dir>/<prefix><rank>`` per process, so ``torchfrtrace DIR``
and ``ptc fr-trace DIR`` both read a directory of them.  A dump is written:

* on demand: :meth:`FlightRecorder.dump`, or :func:`dump_all` for every
  recorder of the process (what ptc's fault-tolerant runtime calls on every
  rank when it detects a failure);
* on a signal: ``dump_signal=signal.SIGUSR1``.  The signal wakes the recorder's
  own thread through ``signal.set_wakeup_fd``, so a process whose main thread
  is blocked inside a collective still dumps at once;
* when a recorded call fails (``dump_on_failure``, default on; the native
  core's callback wakes the recorder's thread, which dumps within
  milliseconds);
* when a call is still unfinished after the group's timeout (the watchdog;
  ``timeout=`` overrides the group's);
* on a peer's request: with ``store=``, a recorder that dumps because of a
  failure or timeout asks every other recorder on the store to dump too, so
  the rank that never arrived at a hung collective leaves its record as well.
  Every request is served (each has its own key on the store), and a
  requested dump that replaces this rank's own failure or timeout dump keeps
  that reason first: ``"timeout: ...; then requested by rank 1: timeout: ..."``.

Automatic dumps happen at most once per group and generation for a failure
and once for a timeout (a timeout after a failure adds nothing and does not
dump); the next generation re-arms them.

Group names and reconfiguration: a group is recorded under its c10d
``group_name`` ("0" for the default group) in generation 0, and under
``"<name>@gen<g>"`` after :meth:`FlightRecorder.on_reconfigure` moves it to
generation ``g``.  Sequence ids restart at 1 in each generation, which is
what every member of a generation, including a process that joined in it,
agrees on; the distinct names keep the generations apart for the analyzers.

How calls are captured (see :mod:`ptc.distributed.flight_recorder.capture`): where torch
has process-group pre/post hooks (2.14) the recorder registers a hook pair on
each attached group, which also sees the collectives C++ issues (DDP);
elsewhere (2.13), or with ``capture="wrapper"``, it wraps ``ProcessGroup``'s
collective methods for as long as any recorder is attached, dispatching per
group, and restores them when the last one detaches (cheaper per call, blind
to C++-issued calls).  The Python core also wraps ``Work.wait`` while attached,
for end times; the native core leaves it alone.
Either way recording starts only when you attach and stops when you detach or
close; importing ptc changes nothing in torch.  ptc records in its own buffer
and never enables torch's native recorder, so nothing is recorded twice.

What recording costs (``benchmarks/flight_recorder.py``, 2 ranks, 1 MB gloo
all_reduce, 2-core machine, 2.3-2.9 ms per step): with the native core, the
main thread's CPU time per call grows by 0-8 us through torch 2.14's C++ hooks
(0.0-0.3 %) and 17-32 us through the method wrapper on torch 2.13 (0.8-0.9 %);
warm, alone, 0-4 and 3-7 us per call.  The Python core costs 31-69 us per call
in the loop (0.9-2.4 %; cold caches: a 1 MB all_reduce evicts them between
calls) and 5-8 us warm.
"""

import importlib
from typing import Any

__all__ = [
    "DUMP_VERSION",
    "FlightRecorder",
    "active_recorders",
    "disable",
    "dump_all",
    "enable",
    "on_reconfigure",
    "recording",
]

# The recorder's names, imported on first use: importing this package (as ``ptc fr-trace`` does,
# for .analysis) imports neither torch nor the recorder.
_LAZY = {name: "recorder" for name in (*__all__, "CORES", "DEFAULT_CAPACITY", "DEFAULT_PREFIX", "DUMP_DIR_ENV")}
_LAZY["DUMP_VERSION"] = "dumps"


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY))
