"""The analysis behind ``ptc fr-trace DIR``: which rank is missing, which collective mismatched.

Reads a directory of Flight Recorder dumps (ptc's, or torch's native ones),
one file ``<prefix><rank>`` per rank, and needs nothing beyond the standard
library: no ``tabulate``, not even torch.  Files are unpickled with a loader
that accepts only plain data (dicts, lists, strings, numbers), so a dump
cannot run code.

For every process group (each generation of a reconfigured group is its own
group, ``"<name>@gen<g>"``), collectives are lined up across the members by
``collective_seq_id`` and the *first* problem is reported; later entries of
that group are consequences of it:

=================  =========  ==============================================
kind               severity   meaning
=================  =========  ==============================================
``desync``         error      members called different collectives (op,
                              sizes, dtypes or root) at the same sequence id;
                              the culprits are the ranks outside the
                              majority (on a tie, those that differ from the
                              lowest rank, and the finding says so)
``missing``        error      some members entered a collective that others
                              never reached: a hang, those others are the
                              culprits
``failed``         error      the collective failed (``error`` says how)
``stuck``          error      every member entered it, it did not complete
                              within the group's timeout
``no_dump``        warning    members that left no dump; if the others wait
                              in a collective, the silent ones are suspects
                              (and the finding is an error)
``p2p``            error      a send without its recv, or sizes that differ
``in_flight``      info       the latest collective was still running when
                              the dumps were taken, within its timeout
``config``         warning    dumps disagree about a group's members, or a
                              group is missing from ``pg_config`` (torch's
                              native gloo recorder files it under ``""``)
=================  =========  ==============================================

:func:`analyze` returns a :class:`Report`; ``Report.ok`` is False when any
finding is an error.  ``ptc fr-trace`` exits 1 in that case.
"""

from __future__ import annotations

import ast
import io
import os
import pickle
import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

from ptc.errors import PtcValueError

__all__ = ["Finding", "GroupSummary", "RankDump", "Report", "analyze", "format_entries", "load_dumps"]

_SAFE_BUILTINS = {"dict", "list", "tuple", "set", "frozenset", "str", "bytes", "int", "float", "bool", "complex"}
_RANK_SUFFIX = re.compile(r"^(.*?)(\d+)$")
_DONE = ("completed", "failed")


class _DataUnpickler(pickle.Unpickler):
    """Unpickles plain data only; a class reference in the file is refused."""

    def find_class(self, module: str, name: str) -> Any:
        if module == "builtins" and name in _SAFE_BUILTINS:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"refusing to load {module}.{name}: a dump holds plain data only")


@dataclass
class RankDump:
    """One rank's dump."""

    rank: int
    path: str
    version: str
    entries: List[Dict[str, Any]]
    pg_config: Dict[str, Dict[str, Any]]
    meta: Dict[str, Any] = field(default_factory=dict)  # ptc's section; {} for torch's own dumps

    @property
    def reason(self) -> str:
        return str(self.meta.get("reason", ""))

    @property
    def dropped(self) -> int:
        return int(self.meta.get("dropped", 0) or 0)


@dataclass
class Finding:
    kind: str
    severity: str  # "error", "warning" or "info"
    group: str
    message: str
    seq: Optional[int] = None
    op: Optional[str] = None
    culprit_ranks: List[int] = field(default_factory=list)
    missing_ranks: List[int] = field(default_factory=list)
    time_ns: Optional[int] = None

    def to_json(self) -> Dict[str, Any]:
        return {
            "kind": self.kind,
            "severity": self.severity,
            "group": self.group,
            "seq": self.seq,
            "op": self.op,
            "culprit_ranks": self.culprit_ranks,
            "missing_ranks": self.missing_ranks,
            "message": self.message,
        }


@dataclass
class GroupSummary:
    name: str
    desc: str
    ranks: List[int]
    generation: int
    collectives: int  # distinct collective sequence ids recorded by any member
    matched: int  # of those, how many every dumped member recorded alike and completed
    no_dump: List[int]

    def to_json(self) -> Dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class Report:
    directory: str
    dumps: Dict[int, RankDump]
    groups: List[GroupSummary]
    findings: List[Finding]

    @property
    def ok(self) -> bool:
        """No finding is an error."""
        return not any(f.severity == "error" for f in self.findings)

    @property
    def errors(self) -> List[Finding]:
        return [f for f in self.findings if f.severity == "error"]

    def verdict(self) -> str:
        """One line: the earliest error, or that none was found."""
        errors = self.errors
        if not errors:
            total = sum(g.matched for g in self.groups)
            return f"no problem found ({total} collectives matched in {len(self.groups)} group(s))"
        first = min(errors, key=lambda f: (f.time_ns is None, f.time_ns or 0))
        more = f" (+{len(errors) - 1} more)" if len(errors) > 1 else ""
        return first.message + more

    def to_json(self) -> Dict[str, Any]:
        return {
            "directory": self.directory,
            "ok": self.ok,
            "verdict": self.verdict(),
            "dumps": [
                {"rank": d.rank, "path": d.path, "entries": len(d.entries), "reason": d.reason, "dropped": d.dropped}
                for d in sorted(self.dumps.values(), key=lambda d: d.rank)
            ],
            "groups": [g.to_json() for g in self.groups],
            "findings": [f.to_json() for f in self.findings],
        }

    def format(self) -> str:
        """The human-readable report ``ptc fr-trace`` prints."""
        ranks = sorted(self.dumps)
        lines = [f"{len(ranks)} dump(s) in {self.directory} from rank(s) {_ranks(ranks)}"]
        for rank in ranks:
            d = self.dumps[rank]
            extra = f", {d.dropped} older dropped" if d.dropped else ""
            why = f"; dumped on: {d.reason}" if d.reason else ""
            lines.append(f"  rank {rank}: {len(d.entries)} entries{extra}{why}")
        by_group: Dict[str, List[Finding]] = defaultdict(list)
        for f in self.findings:
            by_group[f.group].append(f)
        for g in self.groups:
            gen = f", generation {g.generation}" if g.generation else ""
            lines.append(
                f"group {g.name} ({g.desc}{gen}), ranks {g.ranks}: "
                f"{g.matched} of {g.collectives} collective(s) matched"
            )
            for f in by_group.pop(g.name, []):
                lines.append(f"  {f.severity.upper()}: {f.message}")
        for name, findings in by_group.items():  # findings about groups with no summary
            for f in findings:
                lines.append(f"{f.severity.upper()}: {f.message}")
        lines.append(f"verdict: {self.verdict()}")
        return "\n".join(lines)


def _ranks(ranks: Sequence[int]) -> str:
    return ", ".join(str(r) for r in ranks) or "none"


# --- loading ------------------------------------------------------------------


def _infer_prefix(names: Sequence[str]) -> str:
    prefixes = Counter()
    for name in names:
        m = _RANK_SUFFIX.match(name)
        if m:
            prefixes[m.group(1)] += 1
    if not prefixes:
        raise PtcValueError("no file named <prefix><rank> (like rank_0) found")
    if len(prefixes) > 1:
        found = ", ".join(repr(p) for p in sorted(prefixes))
        raise PtcValueError(f"dump files have different prefixes ({found}); pass prefix= (ptc fr-trace -p PREFIX)")
    return next(iter(prefixes))


def load_dumps(directory: Union[str, os.PathLike], prefix: Optional[str] = None) -> Dict[int, RankDump]:
    """Read ``<directory>/<prefix><rank>`` files; ``prefix`` is inferred when all files share one.

    Raises:
      PtcValueError: ``directory`` does not exist, is a file (the analysis lines up
        every rank's dump, so it takes the directory that holds them), or holds no
        readable dump.
    """
    directory = os.fspath(directory)
    if os.path.isfile(directory):
        parent = os.path.dirname(directory) or "."
        raise PtcValueError(
            f"{directory!r} is a file; pass the directory that holds the <prefix><rank> dumps "
            f"(here {parent!r}): the analysis lines up every rank's calls"
        )
    if not os.path.isdir(directory):
        raise PtcValueError(f"directory {directory!r}: no such directory")
    names = sorted(
        n for n in os.listdir(directory)
        if not n.startswith(".") and os.path.isfile(os.path.join(directory, n))
    )  # fmt: skip
    if prefix is None:
        prefix = _infer_prefix(names)
    dumps: Dict[int, RankDump] = {}
    for name in names:
        if not name.startswith(prefix) or not name[len(prefix):].isdigit():
            continue
        rank = int(name[len(prefix):])
        path = os.path.join(directory, name)
        with open(path, "rb") as f:
            raw = f.read()
        try:
            data = _DataUnpickler(io.BytesIO(raw)).load()
        except Exception as exc:  # noqa: BLE001
            raise PtcValueError(f"{path}: not a readable Flight Recorder dump ({exc})") from None
        if not isinstance(data, dict) or not {"entries", "version", "pg_config"} <= set(data):
            raise PtcValueError(f"{path}: not a Flight Recorder dump (needs keys entries, version, pg_config)")
        meta = data.get("ptc") if isinstance(data.get("ptc"), dict) else {}
        dumps[rank] = RankDump(rank, path, str(data["version"]), list(data["entries"]), dict(data["pg_config"]), meta)
    if not dumps:
        raise PtcValueError(f"directory {directory!r}: no dump named {prefix!r}<rank>")
    return dumps


# --- analysis -------------------------------------------------------------------


def _parse_ranks(value: Any) -> Optional[List[int]]:
    if isinstance(value, str):
        try:
            value = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            return None
    if isinstance(value, (list, tuple)) and all(isinstance(r, int) for r in value):
        return [int(r) for r in value]
    return None


def _op(entry: Dict[str, Any]) -> str:
    name = str(entry.get("profiling_name", ""))
    return name.split(":", 1)[-1].split(" ", 1)[0]


def _call(entry: Dict[str, Any]) -> str:
    """``all_reduce(sizes [[1000]], Float)``: how a finding names one rank's call."""
    op = _op(entry)
    sizes = entry.get("input_sizes") or entry.get("output_sizes") or []
    dtypes = sorted(set(entry.get("input_dtypes") or entry.get("output_dtypes") or []))
    parts = [f"sizes {sizes}"]
    if dtypes:
        parts.append("/".join(dtypes))
    root = entry.get("peer")
    if op in ("broadcast", "reduce", "gather", "scatter") and isinstance(root, int) and root >= 0:
        parts.append(f"root {root}")
    return f"{op}({', '.join(parts)})"


def _signature(entry: Dict[str, Any]) -> Tuple[Any, ...]:
    """What must agree across the members of a collective."""
    op = _op(entry)
    ins = repr(entry.get("input_sizes")), tuple(entry.get("input_dtypes") or ())
    outs = repr(entry.get("output_sizes")), tuple(entry.get("output_dtypes") or ())
    root = entry.get("peer", -1)
    if op in ("all_reduce", "broadcast", "reduce"):
        return (op, *ins, root)
    if op == "all_gather":
        return (op, *ins)
    if op == "reduce_scatter":
        return (op, *outs)
    if op == "gather":
        return (op, *ins, root)
    if op == "scatter":
        return (op, *outs, root)
    if op == "all_to_all":
        return (op, ins[1])
    if op == "barrier":
        return (op,)
    return (op, *ins)


def _culprits(calls: Dict[int, Tuple[Any, ...]]) -> Tuple[List[int], bool]:
    """Ranks outside the majority call; on a tie, those unlike the lowest rank (second value True)."""
    counts = Counter(calls.values())
    ranked = counts.most_common()
    if len(ranked) > 1 and ranked[0][1] > ranked[1][1]:
        majority = ranked[0][0]
        return sorted(r for r, s in calls.items() if s != majority), False
    reference = calls[min(calls)]
    return sorted(r for r, s in calls.items() if s != reference), True


@dataclass
class _GroupInfo:
    name: str
    desc: str
    ranks: List[int]
    generation: int


def _groups(dumps: Dict[int, RankDump], findings: List[Finding]) -> Dict[str, _GroupInfo]:
    infos: Dict[str, _GroupInfo] = {}
    seen: Dict[str, Dict[int, List[int]]] = defaultdict(dict)
    for rank, d in sorted(dumps.items()):
        for name, cfg in d.pg_config.items():
            if not isinstance(cfg, dict):
                continue
            ranks = _parse_ranks(cfg.get("ranks"))
            if ranks is None:
                continue
            seen[name][rank] = ranks
            if name not in infos:
                gen = d.meta.get("groups", {}).get(name, {}).get("generation", 0) if d.meta else 0
                infos[name] = _GroupInfo(name, str(cfg.get("desc", "undefined")), ranks, int(gen or 0))
    for name, by_rank in seen.items():
        variants = {tuple(r) for r in by_rank.values()}
        if len(variants) > 1:
            detail = "; ".join(f"rank {r}: {v}" for r, v in sorted(by_rank.items()))
            findings.append(Finding("config", "warning", name, f"dumps disagree about the members of group {name}: {detail}"))
    # groups named by entries but absent from pg_config (torch's native gloo recorder)
    referenced: Dict[str, Tuple[str, set]] = {}
    for rank, d in dumps.items():
        for e in d.entries:
            name, desc = e["process_group"][0], e["process_group"][1]
            if name not in infos:
                referenced.setdefault(name, (desc, set()))[1].add(rank)
    for name, (desc, ranks) in referenced.items():
        members = sorted(dumps) if desc == "default_pg" else sorted(ranks)
        infos[name] = _GroupInfo(name, desc, members, 0)
        findings.append(Finding(
            "config", "warning", name,
            f"group {name} ({desc}) is missing from pg_config (torch's native gloo recorder files it "
            f"under ''); assumed members {members}",
        ))  # fmt: skip
    return infos


def _analyze_group(info: _GroupInfo, dumps: Dict[int, RankDump], findings: List[Finding]) -> GroupSummary:
    name = info.name
    members = info.ranks
    dumped = [r for r in members if r in dumps]
    no_dump = [r for r in members if r not in dumps]
    colls: Dict[int, Dict[int, Dict[str, Any]]] = {}
    p2p: Dict[int, List[Dict[str, Any]]] = {}
    for r in dumped:
        entries = [e for e in dumps[r].entries if e["process_group"][0] == name]
        colls[r] = {int(e["collective_seq_id"]): e for e in entries if not e.get("is_p2p")}
        p2p[r] = sorted((e for e in entries if e.get("is_p2p")), key=lambda e: e["p2p_seq_id"])
    seqs = sorted({s for by_seq in colls.values() for s in by_seq})
    summary = GroupSummary(name, info.desc, members, info.generation, len(seqs), 0, no_dump)
    if not seqs and not any(p2p.values()):
        return summary
    own: List[Finding] = []
    firsts = [min(by_seq) for by_seq in colls.values() if by_seq]
    start = max(firsts) if firsts else 0  # ring buffers keep different tails: compare what all kept
    last = {r: (max(colls[r]) if colls[r] else None) for r in dumped}
    for s in (x for x in seqs if x >= start):
        present = {r: colls[r][s] for r in dumped if s in colls[r]}
        any_entry = next(iter(present.values()))
        op = _op(any_entry)
        when = min(e.get("time_created_ns") or 0 for e in present.values())
        absent = [r for r in dumped if r not in present]
        if absent:
            here = _ranks(sorted(present))
            where = []
            for r in absent:
                lr = last[r]
                where.append(
                    f"rank {r} never reached it (its last collective in this group: "
                    + (f"seq {lr} {_op(colls[r][lr])}, {colls[r][lr].get('state')})" if lr is not None else "none)")
                )  # fmt: skip
            silent = f"; no dump from rank(s) {_ranks(no_dump)}" if no_dump else ""
            own.append(Finding(
                "missing", "error", name,
                f"hang in group {name} at collective seq {s} ({op}): rank(s) {here} entered it, "
                + "; ".join(where) + silent + f" -> missing rank(s) {_ranks(absent)}",
                seq=s, op=op, culprit_ranks=absent, missing_ranks=absent, time_ns=when,
            ))  # fmt: skip
            break
        sigs = {r: _signature(e) for r, e in present.items()}
        if len(set(sigs.values())) > 1:
            culprits, tie = _culprits(sigs)
            groups: Dict[str, List[int]] = defaultdict(list)
            for r, e in sorted(present.items()):
                groups[_call(e)].append(r)
            calls = "; ".join(f"rank(s) {_ranks(rs)} called {c}" for c, rs in groups.items())
            basis = f" (a tie: judged against rank {min(present)})" if tie else ""
            own.append(Finding(
                "desync", "error", name,
                f"desync in group {name} at collective seq {s}: {calls} -> culprit rank(s) {_ranks(culprits)}{basis}",
                seq=s, op=op, culprit_ranks=culprits, time_ns=when,
            ))  # fmt: skip
            break
        states = {r: e.get("state") for r, e in present.items()}
        failed = sorted(r for r, st in states.items() if st == "failed")
        if failed:
            error = next((present[r].get("error") for r in failed if present[r].get("error")), None)
            fine = sorted(r for r, st in states.items() if st == "completed")
            also = f"; completed on rank(s) {_ranks(fine)}" if fine else ""
            how = f": {error}" if error else ""
            own.append(Finding(
                "failed", "error", name,
                f"collective seq {s} ({op}) in group {name} failed on rank(s) {_ranks(failed)}{also}{how}",
                seq=s, op=op, time_ns=when,
            ))  # fmt: skip
            break
        waiting = sorted(r for r, st in states.items() if st not in _DONE)
        if waiting:
            if no_dump:
                own.append(Finding(
                    "no_dump", "error", name,
                    f"hang in group {name} at collective seq {s} ({op}): rank(s) {_ranks(waiting)} wait in it; "
                    f"rank(s) {_ranks(no_dump)} left no dump -> suspect rank(s) {_ranks(no_dump)} (dead or never arrived)",
                    seq=s, op=op, culprit_ranks=list(no_dump), missing_ranks=list(no_dump), time_ns=when,
                ))  # fmt: skip
            elif _overdue(present, dumps):
                own.append(Finding(
                    "stuck", "error", name,
                    f"collective seq {s} ({op}) in group {name}: every member entered it and it did not "
                    f"complete within its timeout (state on rank(s) {_ranks(waiting)}: "
                    f"{sorted(set(states[r] for r in waiting))})",
                    seq=s, op=op, time_ns=when,
                ))  # fmt: skip
            else:
                own.append(Finding(
                    "in_flight", "info", name,
                    f"collective seq {s} ({op}) in group {name} was running when the dumps were taken",
                    seq=s, op=op, time_ns=when,
                ))  # fmt: skip
            break
        summary.matched += 1
    if no_dump and not any(f.severity == "error" for f in own):
        own.append(Finding(
            "no_dump", "warning", name,
            f"group {name}: rank(s) {_ranks(no_dump)} left no dump; the dumped rank(s) {_ranks(dumped)} agree "
            f"on {summary.matched} collective(s)",
            missing_ranks=list(no_dump),
        ))  # fmt: skip
    own.extend(_analyze_p2p(info, dumps, p2p))
    findings.extend(own)
    return summary


def _overdue(present: Dict[int, Dict[str, Any]], dumps: Dict[int, RankDump]) -> bool:
    for r, e in present.items():
        if e.get("timed_out"):
            return True
        dumped_at = dumps[r].meta.get("dumped_at_ns")
        created, timeout_ms = e.get("time_created_ns"), e.get("timeout_ms")
        if dumped_at and created and timeout_ms and dumped_at - created > timeout_ms * 1_000_000:
            return True
    return False


def _peer(entry: Dict[str, Any]) -> Optional[int]:
    peer = entry.get("peer")
    if isinstance(peer, int):
        return peer
    m = re.search(r"(\d+)\s*(?:->|<-)\s*(\d+)", str(entry.get("profiling_name", "")))
    return int(m.group(2)) if m else None


def _analyze_p2p(info: _GroupInfo, dumps: Dict[int, RankDump], p2p: Dict[int, List[Dict[str, Any]]]) -> List[Finding]:
    """Pair the k-th send from a to b with the k-th recv at b from a."""
    findings: List[Finding] = []
    sends: Dict[Tuple[int, int], List[Dict[str, Any]]] = defaultdict(list)
    recvs: Dict[Tuple[int, int], List[Dict[str, Any]]] = defaultdict(list)
    members = info.ranks
    for r, entries in p2p.items():
        for e in entries:
            peer = _peer(e)
            if peer is None or not 0 <= peer < len(members):
                continue  # recv from any source: nothing to pair
            if _op(e) == "send":
                sends[(r, members[peer])].append(e)
            elif _op(e) == "recv":
                recvs[(members[peer], r)].append(e)
    for src, dst in sorted(set(sends) | set(recvs)):
        if src not in dumps or dst not in dumps or dumps[src].dropped or dumps[dst].dropped:
            continue  # cannot count what a side did not keep
        s, rv = sends.get((src, dst), []), recvs.get((src, dst), [])
        for k in range(max(len(s), len(rv))):
            if k >= len(rv) or k >= len(s):
                has, lacks, what = (src, dst, "send") if k >= len(rv) else (dst, src, "recv")
                e = s[k] if k >= len(rv) else rv[k]
                findings.append(Finding(
                    "p2p", "error", info.name,
                    f"group {info.name}: rank {has} {what} #{k + 1} ({_call(e)}) between ranks {src}->{dst} "
                    f"has no counterpart on rank {lacks} -> missing rank {lacks}",
                    op=what, culprit_ranks=[lacks], missing_ranks=[lacks], time_ns=e.get("time_created_ns"),
                ))  # fmt: skip
                break
            if s[k].get("input_sizes") != rv[k].get("output_sizes"):
                findings.append(Finding(
                    "p2p", "error", info.name,
                    f"group {info.name}: send #{k + 1} from rank {src} to {dst} has sizes {s[k].get('input_sizes')}, "
                    f"the matching recv {rv[k].get('output_sizes')}",
                    op="send", culprit_ranks=[src, dst], time_ns=s[k].get("time_created_ns"),
                ))  # fmt: skip
                break
    return findings


def analyze(source: Union[str, os.PathLike, Dict[int, RankDump]], prefix: Optional[str] = None) -> Report:
    """Analyze a directory of dumps (or what :func:`load_dumps` returned)."""
    if isinstance(source, dict):
        dumps, directory = source, "<memory>"
    else:
        directory = os.fspath(source)
        dumps = load_dumps(directory, prefix)
    findings: List[Finding] = []
    infos = _groups(dumps, findings)
    summaries = []
    order = sorted(infos.values(), key=lambda i: (i.generation, i.name))
    for info in order:
        summaries.append(_analyze_group(info, dumps, findings))
    return Report(directory, dumps, summaries, findings)


def format_entries(dumps: Dict[int, RankDump]) -> str:
    """Every rank's entries as a plain table (``ptc fr-trace --entries``)."""
    lines = []
    header = ("record", "group", "seq", "call", "state", "ms")
    for rank in sorted(dumps):
        lines.append(f"rank {rank} ({dumps[rank].path})")
        rows = [header]
        for e in dumps[rank].entries:
            seq = f"p{e.get('p2p_seq_id')}" if e.get("is_p2p") else str(e.get("collective_seq_id"))
            start, end = e.get("time_created_ns"), e.get("time_discovered_completed_ns")
            took = f"{(end - start) / 1e6:.3f}" if start and end else "-"
            call = _call(e) if not e.get("is_p2p") else str(e.get("profiling_name", "")).split(":", 1)[-1]
            rows.append((str(e.get("record_id")), str(e["process_group"][0]), seq, call, str(e.get("state")), took))
        widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
        for row in rows:
            lines.append("  " + "  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())
    return "\n".join(lines)
