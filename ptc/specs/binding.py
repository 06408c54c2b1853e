"""Bind a Spec to a function signature and generate its checker and facts.

Binding happens once, at decoration. It resolves spec keys to parameters
(``*args``/``**kwargs``/``self`` included; unknown keys are a ``SpecError``),
orders the work (bind each variable where it first appears as a bare dim,
solve variables that appear only inside expressions, then check the rest),
and generates Python functions with the user's own signature:

* the **checker** runs before every eager or compiled call on the real
  values. It is straight-line code on ints (no sympy), and raises
  ``SpecViolation`` naming the argument path, the rule, the value and the
  variable bindings derived so far. It returns the tensor leaves.
* the **facts** function runs inside traced code (Dynamo, export, make_fx):
  it states every range, relation and assumption as ``torch._check`` on the
  symbolic sizes, then calls the user's function.
* the **enter** function is what a compiled call runs at the boundary: the
  facts, then the boundary's own call (the function, or ``nn.Module.__call__``
  for a module).

Facts and enter both forward to one body taking the same arguments under
names unique to this spec (``_ptc7_x``); the body is the frame Dynamo compiles
at the boundary, and ``int_sources`` names its scalar int leaves as Dynamo
spells their sources (``L['_ptc7_n']``), with their kinds. No other frame has
those names, so naming them to Dynamo affects this spec's frame only.
"""

from __future__ import annotations

import difflib
import inspect
import linecache
import itertools
import re
from collections.abc import Mapping as MappingABC
from typing import Any, Callable, Dict, FrozenSet, List, Optional, Sequence, Set, Tuple

import sympy
import torch

from ptc.errors import SpecError, SpecViolation
from ptc.specs.expr import solve_linear, to_python
from ptc.specs.spec import Leaf, Spec, _vars_of
from ptc.specs.variables import STATIC, Var

__all__ = ["BoundSpec"]

_file_ids = itertools.count()


def _display(expr) -> str:
    text = to_python(expr)
    if text.startswith("(") and text.endswith(")") and text.count("(") == 1:
        text = text[1:-1]
    return text


def _get(obj: Any, key: Any, path: str) -> Any:
    """``obj[key]`` for mappings, ``getattr(obj, key)`` otherwise; a violation if missing."""
    if isinstance(obj, MappingABC):
        try:
            return obj[key]
        except KeyError:
            raise SpecViolation(f"{path} has no key {key!r} (the spec describes {path}[{key!r}])") from None
    try:
        return getattr(obj, key)
    except (AttributeError, TypeError):
        raise SpecViolation(
            f"{path} ({type(obj).__name__}) has no attribute or key {key!r} that the spec describes"
        ) from None


def _index(obj: Any, i: int, path: str) -> Any:
    try:
        return obj[i]
    except (IndexError, KeyError, TypeError):
        raise SpecViolation(f"{path}[{i}] is missing: the spec describes it, the call passed {_short(obj)}") from None


def _get_traced(obj: Any, key: Any) -> Any:
    return obj[key] if isinstance(obj, MappingABC) else getattr(obj, key)


def _short(obj: Any) -> str:
    if isinstance(obj, (list, tuple)):
        return f"{type(obj).__name__} of length {len(obj)}"
    return type(obj).__name__


def _no_tensors(value: Any, path: str) -> None:
    import torch.utils._pytree as pytree

    if any(isinstance(leaf, torch.Tensor) for leaf in pytree.tree_leaves(value)):
        raise SpecError(
            f"{path} holds a tensor the spec does not describe, and the spec says "
            "unspecified='error'; describe it (tensor(...) or STATIC dims) or change the policy"
        )


class BoundSpec:
    """A Spec bound to one signature: the checker, the facts function and the plans."""

    def __init__(
        self,
        spec: Spec,
        fn: Callable,
        *,
        self_param: Optional[str] = None,
        boundary_call: Optional[Callable] = None,
    ) -> None:
        self.spec = spec
        self.fn = fn
        try:
            self.signature = inspect.signature(fn)
        except (TypeError, ValueError) as e:
            raise SpecError(f"cannot read the signature of {fn!r}: {e}") from None
        self.param_names = list(self.signature.parameters)
        self.key_to_param = self._resolve_keys(self_param)
        self.leaves: List[Leaf] = spec.leaves
        self.sources: Dict[Var, str] = {}  # var -> where it is bound ("x.shape[0]")
        # (tensor leaf index, dim, unbacked | dynamic | maybe | static | auto, hint or None)
        self.marks: List[Tuple[int, int, str, Optional[int]]] = []
        self.mark_vars: List[FrozenSet[str]] = []  # the names of the variables each mark's dim involves
        # variables the model's code constrains beyond the spec under torch.compile (ptc.specs.api's
        # fallback): name -> how a compiled call marks their dims now, "unbacked" (tried first: no
        # guard can fix it) or "maybe" (maybe_mark_dynamic: torch's own automatic dynamic)
        self.softened: Dict[str, str] = {}
        self.soften_pending: Set[str] = set()  # softened to "unbacked" and not yet through a call
        self._fail_messages: List[Callable[[Any, Dict[str, int]], str]] = []
        self.unmentioned = [
            p
            for p in self.param_names
            if p not in self.key_to_param.values() and p != self.key_to_param.get("self", self_param)
        ]
        # (tensor leaf index, dim) -> the choices of a specialize=True variable there
        self.specialize: Dict[Tuple[int, int], Tuple[int, ...]] = {}
        # (regex of a scalar int leaf's Dynamo source in the body frame, "backed" | "unbacked")
        self.int_sources: List[Tuple[str, str]] = []
        self.checker, self.facts, self.enter, self.traced_leaves = self._generate(
            fn if boundary_call is None else boundary_call
        )

    # -- keys ------------------------------------------------------------------

    def _resolve_keys(self, self_param: Optional[str]) -> Dict[str, str]:
        params = self.signature.parameters
        varargs = next((n for n, p in params.items() if p.kind is p.VAR_POSITIONAL), None)
        varkw = next((n for n, p in params.items() if p.kind is p.VAR_KEYWORD), None)
        named = [n for n, p in params.items() if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
        resolved: Dict[str, str] = {}
        for key in self.spec.params:
            if key == "*args" and varargs:
                resolved[key] = varargs
            elif key == "**kwargs" and varkw:
                resolved[key] = varkw
            elif key == "self" and self_param is not None:
                resolved[key] = self_param
            elif key in named:
                resolved[key] = key
            else:
                valid = named + (["*args"] if varargs else []) + (["**kwargs"] if varkw else [])
                close = difflib.get_close_matches(key, valid, n=1)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                raise SpecError(
                    f"spec key {key!r} does not match any parameter of {_name(self.fn)}"
                    f"{tuple(valid)}{hint}"
                )
        return resolved

    def add_mark(self, mark: Tuple[int, int, str, Optional[int]], vs: Sequence[Var]) -> None:
        """Record how a compiled call marks one tensor dim, and the variables it involves."""
        self.marks.append(mark)
        self.mark_vars.append(frozenset(v.name for v in vs))

    # -- code generation ---------------------------------------------------------

    def _generate(self, boundary_call: Callable):
        """Generate and compile the checker, facts, enter and leaves functions, in phases
        (each one adds lines to the functions in the order it runs; see :class:`_Codegen`)."""
        gen = _Codegen(self)
        gen.bind_leaves()  # 1. leaves: types, ranks, fixed dims, bare variables
        gen.solve_expressions()  # 2. expressions: check those whose variables are bound, solve single unknowns
        gen.add_assumptions()  # 3. assumptions
        gen.check_specialized_vars()
        gen.check_unmentioned()  # 4. parameters the spec does not mention
        return gen.compile(boundary_call)

    def _fail(self, k: int, value: Any, bindings: Dict[str, int]) -> None:
        raise SpecViolation(self._fail_messages[k](value, bindings))


class _Codegen:
    """The generation of one :class:`BoundSpec`'s functions, one method per phase.

    The phases run in order (:meth:`BoundSpec._generate`); each appends lines to
    the checker (``check``), the body the facts and enter functions forward to
    (``facts``) and the leaves function (``leaves``), and records what it finds
    on the BoundSpec (sources, marks, specialize, int_sources, fail messages).
    """

    def __init__(self, owner: "BoundSpec") -> None:
        self.owner = owner
        self.file_id = next(_file_ids)
        self.sig_src, self.defaults = _signature_source(owner.signature)
        self.body_params, self.forward_args, self.body_call = _body_source(owner.signature, f"_ptc{self.file_id}_")
        self.body_local = dict(zip(owner.param_names, self.body_params))
        self.check = _Lines()
        self.facts = _Lines()
        self.leaves = _Lines()
        self.var_name = {v: f"_ptc_v{v.uid}" for v in owner.spec.vars}
        self.bound: Dict[Var, None] = {}
        self.pending: List[Tuple[str, str, str, sympy.Expr]] = []  # (dim local, facts access, text, expr)
        self.tensor_locals: List[str] = []

    # -- helpers shared by the phases --------------------------------------------

    def fail(self, message: Callable[[Any, Dict[str, int]], str], value_src: str) -> str:
        """Source of the call raising ``message``'s violation with the bindings made so far."""
        k = len(self.owner._fail_messages)
        self.owner._fail_messages.append(message)
        bindings = ", ".join(f"{v.name!r}: {self.var_name[v]}" for v in self.bound)
        return f"_ptc_fail({k}, {value_src}, {{{bindings}}})"

    def where(self, vs: Sequence[Var], bindings: Dict[str, int]) -> str:
        parts = [
            f"{v.name}={bindings[v.name]} from {self.owner.sources[v]}" for v in vs if v.name in bindings
        ]
        return " where " + ", ".join(parts) if parts else ""

    def bind_or_compare(self, dim: str, fdim: str, text: str, d: Var) -> None:
        check, facts, fail, where = self.check, self.facts, self.fail, self.where
        v = self.var_name[d]
        if d not in self.bound:
            self.bound[d] = None
            self.owner.sources[d] = text
            check.add(f"{v} = {dim}")
            facts.add(f"{v} = {fdim}")
            cond = _allowed(v, d)
            check.add(
                f"if not ({cond}): "
                + fail(lambda val, b, t=text, d=d: f"{t}={val} violates {d.range_text()} ({d.name} from {t})", v)
            )
            _range_facts(facts, v, d)
        else:
            check.add(
                f"if {dim} != {v}: "
                + fail(lambda val, b, t=text, d=d: f"{t}={val} violates {t} == {d.name}" + where([d], b), dim)
            )
            facts.add(f"_ptc_check({fdim} == {v})")

    # -- 1. leaves: types, ranks, fixed dims, bare variables ---------------------

    def bind_leaves(self) -> None:
        for i, leaf in enumerate(self.owner.leaves):
            param = self.owner.key_to_param[leaf.param]
            access, faccess, laccess, text = self._leaf_access(leaf, param)
            t = f"_ptc_t{i}"
            self.check.add(f"{t} = {access}")
            self.facts.add(f"{t} = {faccess}")
            self.leaves.add(f"{t} = {laccess}")
            if leaf.is_tensor:
                self._tensor_leaf(i, t, text, leaf)
            else:
                self._int_leaf(t, text, leaf, param)

    def _leaf_access(self, leaf: Leaf, param: str) -> Tuple[str, str, str, str]:
        """Source reaching ``leaf`` from its parameter in the checker, in the body and in
        the leaves function, and the text naming it in messages."""
        access, faccess, laccess = param, self.body_local[param], param
        text = leaf.param if leaf.param not in ("*args", "**kwargs") else param
        for step in leaf.steps:
            if step.kind == "key":
                access = f"_ptc_get({access}, {step.key!r}, {text!r})"
                faccess = f"_ptc_get_traced({faccess}, {step.key!r})"
                laccess = f"_ptc_get_traced({laccess}, {step.key!r})"
                text = f"{text}.{step.key}" if isinstance(step.key, str) and step.key.isidentifier() else f"{text}[{step.key!r}]"
            else:
                access = f"_ptc_index({access}, {step.key}, {text!r})"
                faccess = f"{faccess}[{step.key}]"
                laccess = f"{laccess}[{step.key}]"
                text = f"{text}[{step.key}]"
        return access, faccess, laccess, text

    def _tensor_leaf(self, i: int, t: str, text: str, leaf: Leaf) -> None:
        check, fail = self.check, self.fail
        owner = self.owner
        dims = leaf.spec.dims
        self.tensor_locals.append(t)
        spec_text = f"[{', '.join(map(str, dims))}]"
        check.add(
            f"if not isinstance({t}, _ptc_Tensor): "
            + fail(lambda val, b, x=text, s=spec_text: f"{x} must be a tensor with dims {s}, got {type(val).__name__}", t)
        )
        check.add(f"_ptc_s{i} = {t}.shape")
        check.add(
            f"if len(_ptc_s{i}) != {len(dims)}: "
            + fail(
                lambda val, b, x=text, s=spec_text, n=len(dims): f"{x} must have {n} dims {s}, got {len(val)}: shape {tuple(val)}",
                f"_ptc_s{i}",
            )
        )
        for j, d in enumerate(dims):
            dim, fdim, dtext = f"_ptc_s{i}[{j}]", f"{t}.shape[{j}]", f"{text}.shape[{j}]"
            if d is STATIC:
                owner.add_mark((len(self.tensor_locals) - 1, j, "static", None), ())
            elif isinstance(d, int):
                owner.add_mark((len(self.tensor_locals) - 1, j, "static", None), ())
                check.add(
                    f"if {dim} != {d}: "
                    + fail(lambda val, b, x=dtext, d=d: f"{x}={val} violates {x} == {d}", dim)
                )
                self.facts.add(f"_ptc_check({fdim} == {d})")
            elif isinstance(d, Var):
                owner.add_mark((len(self.tensor_locals) - 1, j, _action([d], d.min), d.hint), [d])
                if d.specialize:
                    owner.specialize[(len(self.tensor_locals) - 1, j)] = d.choices
                self.bind_or_compare(dim, fdim, dtext, d)
            else:
                owner.add_mark((len(self.tensor_locals) - 1, j, _action(_vars_of(d), _lower_bound(d)), None), _vars_of(d))
                local = f"_ptc_d{i}_{j}"
                check.add(f"{local} = {dim}")
                self.pending.append((local, fdim, dtext, d))

    def _int_leaf(self, t: str, text: str, leaf: Leaf, param: str) -> None:
        check, fail = self.check, self.fail
        d = leaf.spec
        check.add(
            f"if type({t}) is not int: "
            + fail(lambda val, b, x=text, s=d: f"{x} must be an int (spec {s}), got {type(val).__name__}", t)
        )
        kind = _int_kind(d)
        source = _source_pattern(self.body_local[param], leaf.steps)
        if kind is not None and source is not None:
            self.owner.int_sources.append((source, kind))
        if isinstance(d, Var):
            self.bind_or_compare(t, t, text, d)
        elif isinstance(d, int):
            check.add(f"if {t} != {d}: " + fail(lambda val, b, x=text, d=d: f"{x}={val} violates {x} == {d}", t))
        else:
            self.pending.append((t, t, text, d))

    # -- 2. expressions: check those whose variables are bound, solve single unknowns

    def solve_expressions(self) -> None:
        pending, bound = self.pending, self.bound
        progress = True
        while pending and progress:
            progress = False
            for item in list(pending):
                if not (self._check_expression(item) or self._solve_expression(item)):
                    continue
                pending.remove(item)
                progress = True
        if pending:
            _, _, dtext, expr = pending[0]
            unknown = [v.name for v in _vars_of(expr) if v not in bound]
            raise SpecError(
                f"{dtext} == {_display(expr)}: ptc cannot solve for {', '.join(unknown)}; bind "
                f"{'it' if len(unknown) == 1 else 'them'} as a bare dim somewhere (e.g. tensor({unknown[0]}, ...)) "
                "or use an expression linear in one unknown"
            )

    def _local(self, s: Var) -> str:
        """The generated code's local holding variable ``s``."""
        return self.var_name[s]

    def _check_expression(self, item: Tuple[str, str, str, sympy.Expr]) -> bool:
        """Checks ``item`` if all its variables are bound (True), else does nothing (False)."""
        local, fdim, dtext, expr = item
        if any(v not in self.bound for v in _vars_of(expr)):
            return False
        where = self.where
        code = to_python(expr, self._local)
        shown = _display(expr)
        self.check.add(
            f"if {local} != {code}: "
            + self.fail(
                lambda val, b, x=dtext, s=shown, vs=_vars_of(expr): f"{x}={val} violates {x} == {s}" + where(vs, b),
                local,
            )
        )
        self.facts.add(f"_ptc_check({fdim} == {code})")
        return True

    def _solve_expression(self, item: Tuple[str, str, str, sympy.Expr]) -> bool:
        """Binds the one unbound variable of ``item`` where the expression is linear in
        it (True); False (and nothing added) otherwise."""
        local, fdim, dtext, expr = item
        unknown = [v for v in _vars_of(expr) if v not in self.bound]
        if not (len(unknown) == 1 and solve_linear(expr, unknown[0]) is not None):
            return False
        check, facts, fail, where, name = self.check, self.facts, self.fail, self.where, self._local
        (u,) = unknown
        a, b0 = solve_linear(expr, u)
        a_code, b_code = to_python(a, name), to_python(b0, name)
        shown = _display(expr)
        known = [v for v in _vars_of(expr) if v is not u]
        check.add(f"_ptc_a = {a_code}")
        check.add(f"_ptc_r = {local} - {b_code}")
        check.add(
            "if _ptc_a == 0 or _ptc_r % _ptc_a != 0: "
            + fail(
                lambda val, b, x=dtext, s=shown, u=u, vs=known: f"{x}={val} violates {x} == {s}: no integer {u.name} gives {val}"
                + where(vs, b),
                local,
            )
        )
        v = self.var_name[u]
        self.bound[u] = None
        self.owner.sources[u] = f"{dtext} == {shown}"
        check.add(f"{v} = _ptc_r // _ptc_a")
        cond = _allowed(v, u)
        check.add(
            f"if not ({cond}): "
            + fail(lambda val, b, u=u, x=dtext, s=shown: f"{u.name}={val} (from {x} == {s}) violates {u.range_text()}", v)
        )
        facts.add(f"_ptc_check(({fdim} - {b_code}) % {a_code} == 0)")
        facts.add(f"{v} = ({fdim} - {b_code}) // {a_code}")
        _range_facts(facts, v, u)
        return True

    # -- 3. assumptions ------------------------------------------------------------

    def add_assumptions(self) -> None:
        where = self.where
        for k, assumption in enumerate(self.owner.spec.assumptions):
            missing = [v.name for v in _vars_of(assumption) if v not in self.bound]
            if missing:
                raise SpecError(
                    f"assumptions[{k}] {_display(assumption)} uses {', '.join(missing)}, "
                    "which no input of the spec binds"
                )
            code = to_python(assumption, self._local)
            shown = _display(assumption)
            self.check.add(
                f"if not ({code}): "
                + self.fail(
                    lambda val, b, s=shown, vs=_vars_of(assumption): f"assumption {s} does not hold" + where(vs, b),
                    "None",
                )
            )
            self.facts.add(f"_ptc_check({code})")

    def check_specialized_vars(self) -> None:
        """A ``specialize=True`` variable must be a bare dim of some tensor."""
        owner = self.owner
        bare_dims = {d for leaf in owner.leaves if leaf.is_tensor for d in leaf.spec.dims if isinstance(d, Var)}
        for v in owner.spec.vars:
            if v.specialize and v not in bare_dims:
                raise SpecError(
                    f"Var {v.name}: specialize=True applies to tensor dims that are exactly the variable, "
                    f"and no tensor of the spec has {v.name} as a dim"
                )

    # -- 4. parameters the spec does not mention, and the returns ------------------

    def check_unmentioned(self) -> None:
        owner, check, tensor_locals = self.owner, self.check, self.tensor_locals
        if owner.spec.unspecified == "error":
            for p in owner.unmentioned:
                check.add(f"_ptc_no_tensors({p}, {p!r})")
        unmentioned = ", ".join(owner.unmentioned)
        check.add(f"return ({', '.join(tensor_locals)}{',' if tensor_locals else ''}), ({unmentioned}{',' if owner.unmentioned else ''})")
        self.facts.add(f"return _ptc_target({self.body_call})")
        self.leaves.add(f"return ({', '.join(tensor_locals)}{',' if tensor_locals else ''})")

    # -- the source, compiled ------------------------------------------------------

    def compile(self, boundary_call: Callable):
        """``(checker, facts, enter, leaves)``, compiled from the lines the phases added."""
        owner = self.owner
        namespace = {
            "_ptc_Tensor": torch.Tensor,
            "_ptc_get": _get,
            "_ptc_get_traced": _get_traced,
            "_ptc_index": _index,
            "_ptc_fail": owner._fail,
            "_ptc_no_tensors": _no_tensors,
            "_ptc_check": torch._check,
            "_ptc_fn": owner.fn,
            "_ptc_call": boundary_call,
            **self.defaults,
        }
        sig_src, forward_args = self.sig_src, self.forward_args
        body_args = ", ".join(["_ptc_target"] + self.body_params)
        source = (
            f"def _ptc_checker({sig_src}):\n{self.check.text()}\n\n"
            f"def _ptc_body({body_args}):\n{self.facts.text()}\n\n"
            f"def _ptc_facts({sig_src}):\n    return _ptc_body({', '.join(['_ptc_fn'] + forward_args)})\n\n"
            f"def _ptc_enter({sig_src}):\n    return _ptc_body({', '.join(['_ptc_call'] + forward_args)})\n\n"
            f"def _ptc_leaves({sig_src}):\n{self.leaves.text()}\n"
        )
        filename = f"<ptc.specs {_name(owner.fn)} #{self.file_id}>"
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        exec(compile(source, filename, "exec"), namespace)  # noqa: S102 - generated from the spec
        owner.source = source
        return namespace["_ptc_checker"], namespace["_ptc_facts"], namespace["_ptc_enter"], namespace["_ptc_leaves"]


def _allowed(v: str, d: Var) -> str:
    """Python source: is the value in local ``v`` allowed for ``d`` (its choices, else its range)?"""
    if d.choices is not None:
        return f"{v} in {d.choices!r}"
    return f"{d.min} <= {v}" + (f" <= {d.max}" if d.max is not None else "")


def _range_facts(facts: "_Lines", v: str, d: Var) -> None:
    if d.min > 0:
        facts.add(f"_ptc_check({v} >= {d.min})")
    if d.max is not None:
        facts.add(f"_ptc_check({v} <= {d.max})")
    if d.choices is not None and len(d.choices) <= d.max - d.min:  # not every value of the range
        facts.add(f"_ptc_check({' | '.join(f'({v} == {c})' for c in d.choices)})")


def _action(vs: Sequence[Var], lower: int) -> str:
    kinds = {v.shape_kind for v in vs}
    if "unbacked" in kinds:
        return "unbacked"
    if "backed" in kinds:
        # torch specialises backed sizes 0 and 1; mark_dynamic would then be an error
        return "dynamic" if lower >= 2 and all(v.min >= 2 for v in vs) else "maybe"
    return "auto"


def _lower_bound(expr) -> int:
    """A lower bound for ``expr`` over its variables' ranges (0 when unknown)."""
    expr = sympy.expand(expr)
    if all(c > 0 for c in expr.as_coefficients_dict().values()) and not expr.atoms(
        sympy.floor, sympy.ceiling, sympy.Mod, sympy.Max, sympy.Min
    ):
        value = expr.subs({v: v.min for v in _vars_of(expr)})
        if value.is_Integer:
            return int(value)
    return 0


class _Lines:
    def __init__(self) -> None:
        self.lines: List[str] = []

    def add(self, line: str) -> None:
        self.lines.append("    " + line)

    def text(self) -> str:
        return "\n".join(self.lines) if self.lines else "    pass"


def _name(fn: Callable) -> str:
    return getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or type(fn).__name__


def _signature_source(sig: inspect.Signature) -> Tuple[str, Dict[str, Any]]:
    """(parameter list source, default values namespace)."""
    params, defaults = [], {}
    saw_kw_marker = False
    positional_only = False
    for i, (name, p) in enumerate(sig.parameters.items()):
        if p.kind is p.POSITIONAL_ONLY:
            positional_only = True
        elif positional_only:
            params.append("/")
            positional_only = False
        if p.kind is p.KEYWORD_ONLY and not saw_kw_marker:
            params.append("*")
            saw_kw_marker = True
        default = ""
        if p.default is not p.empty:
            defaults[f"_ptc_default{i}"] = p.default
            default = f"=_ptc_default{i}"
        if p.kind is p.VAR_POSITIONAL:
            params.append(f"*{name}")
            saw_kw_marker = True
        elif p.kind is p.VAR_KEYWORD:
            params.append(f"**{name}")
        else:
            params.append(f"{name}{default}")
    if positional_only:
        params.append("/")
    return ", ".join(params), defaults


def _body_source(sig: inspect.Signature, prefix: str) -> Tuple[List[str], List[str], str]:
    """How the user's signature forwards to the body: (the body's parameter names,
    one per user parameter and each ``prefix + name``; the arguments passing the
    user's parameters to it, in order; the body's call of the target with the
    user's calling convention restored)."""
    body_params, forward_args, call = [], [], []
    star = any(p.kind is p.VAR_POSITIONAL for p in sig.parameters.values())
    for name, p in sig.parameters.items():
        local = prefix + name
        body_params.append(local)
        forward_args.append(name)
        if p.kind is p.VAR_POSITIONAL:
            call.append(f"*{local}")
        elif p.kind is p.VAR_KEYWORD:
            call.append(f"**{local}")
        elif p.kind is p.KEYWORD_ONLY or (p.kind is p.POSITIONAL_OR_KEYWORD and p.default is not p.empty and not star):
            # parameters with defaults by keyword, as callers pass them: decorators
            # that fill them in from kwargs (transformers' config defaults) see them there
            call.append(f"{name}={local}")
        else:
            call.append(local)
    return body_params, forward_args, ", ".join(call)


def _int_kind(d: Any) -> Optional[str]:
    """The kind a scalar int leaf takes in the compiled frame: ``"unbacked"`` if any
    of its variables is unbacked, else ``"backed"`` if any is backed, else None
    (a fixed int, or torch's automatic dynamic for ``"auto"``)."""
    if isinstance(d, int) or d is STATIC:
        return None
    kinds = {v.shape_kind for v in _vars_of(d)}
    for kind in ("unbacked", "backed"):
        if kind in kinds:
            return kind
    return None


def _source_pattern(local: str, steps: Sequence[Any]) -> Optional[str]:
    """A regex matching exactly Dynamo's name for the leaf at ``steps`` under the
    frame local ``local`` (``L['_ptc7_cfg']['n']``, ``L['_ptc7_cfg'].n``,
    ``L['_ptc7_args'][0]``); None where a key could not be written in torch's
    comma-separated source lists."""
    pattern = re.escape(f"L[{local!r}]")
    for step in steps:
        if step.kind == "key":
            if isinstance(step.key, str) and step.key.isidentifier():
                pattern += f"({re.escape(f'[{step.key!r}]')}|{re.escape('.' + step.key)})"
            else:
                text = f"[{step.key!r}]"
                if "," in text or any(c.isspace() for c in text):
                    return None
                pattern += re.escape(text)
        else:
            pattern += re.escape(f"[{step.key}]")
    return pattern + "$"
