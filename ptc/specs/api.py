"""``@dynamic_spec`` and ``export``: one spec for eager, torch.compile, torch.export and make_fx."""

from __future__ import annotations

import contextlib
import functools
import inspect
import logging
import re
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch
import torch.utils._pytree as pytree

from ptc import _compat
from ptc.errors import PtcTypeError, SpecError
from ptc.specs import diagnose
from ptc.specs.binding import BoundSpec
from ptc.specs.lowering import (
    begin_compiled_call,
    dynamic_shapes,
    end_compiled_call,
    needs_runtime_asserts,
    restore_attributes,
    snapshot_attributes,
    to_native,
)
from ptc.specs.spec import Spec

_log = logging.getLogger(__name__)

__all__ = ["dynamic_spec", "export", "explain", "spec_of", "check"]

_SPEC_ATTR = "__ptc_spec__"


def dynamic_spec(
    params: Optional[Any] = None,
    /,
    *,
    assumptions: Sequence[Any] = (),
    unspecified: str = "auto",
    **by_name: Any,
) -> Callable:
    """Attach a shape spec to a function or an ``nn.Module`` class.

    ``@dynamic_spec({"x": tensor(B, T), "y": tensor(2*B)}, assumptions=[...])`` or
    ``@dynamic_spec(x=tensor(B, T), y=tensor(2*B))``, or a ready ``Spec``.

    A decorated function ``f`` behaves like::

        def f(*args, **kwargs):
            check(spec, args, kwargs)        # SpecViolation before anything runs
            return original_f(*args, **kwargs)

    Under ``torch.compile(f)`` the check runs in plain Python before the
    compiled frame (a violation never reaches Dynamo, so it never recompiles);
    the call's tensors are marked per the spec's variable kinds, its scalar int
    arguments are backed or unbacked symbols per theirs in the frame ptc
    compiles for the call (``"auto"``: torch's automatic dynamic; past a graph
    break inside the function, its own frames see ints as torch does), and the
    compiled graph receives the ranges and relations as facts. The marks last
    exactly as long as the call: afterwards, raising or not, every input
    tensor's ``__dict__`` is what it was before (torch's marks and any
    ``_dynamo_*`` stamp undone; an attribute the function itself sets on an
    input stays, as in eager) and torch's config is unchanged, so other
    compiled functions see the tensors as if ptc never had. Where torch
    refuses the spec in a compiled call (the model's code fixes or guards a
    variable under ``torch.compile``), ptc logs the constraint and, from then
    on, marks those variables' dims as unbacked sizes or, where that fails
    too, as ``torch.compile`` does by itself (``maybe_mark_dynamic``), so the
    model runs as under stock compile.
    Under ``ptc.specs.export`` the spec becomes ``dynamic_shapes`` plus runtime
    assertions (the example tensors keep their attributes there too); under
    ``make_fx(tracing_mode="symbolic")`` the facts apply.
    Keys are bound to the signature (``inspect.signature``, which follows
    ``functools.wraps``); a key that names no parameter is a ``SpecError`` at
    decoration time. On an ``nn.Module`` class the spec describes ``forward``
    (``"self"`` may describe attributes of the module).

    Called inside a larger compiled function (a wrapper, a helper, another
    spec's function, a model's ``forward``), the decorated call keeps the same
    contract: Dynamo ends the caller's graph at the call (a graph break; the
    call goes through ``torch.compiler.disable(..., recursive=False)``), so the
    call runs as an entry point: checked in plain Python (a ``SpecViolation``
    with the eager message, compiling nothing for the decorated function), its
    body compiled as its own frame, dynamic per the spec from the first call.
    The caller's frame guards the arguments it passes like any frame that
    breaks its graph at a call, so a size it has not seen, valid or not, may
    recompile the caller's part before the call; and a spec'd function that
    calls another one compiles as separate graphs around that call (the outer
    facts are stated in the graph before it, the marks hold throughout). Where Dynamo may not break the
    graph (``fullgraph=True``, ``error_on_graph_break``, ``torch.export``, the
    body of a higher-order op, a ``try`` block; see
    ``_compat.dynamo_may_break_graph``) the call is inlined and only the facts
    apply: the caller's graph knows the ranges and relations, and a violating
    call fails inside Dynamo's trace.
    """
    if isinstance(params, Spec):
        if by_name or assumptions or unspecified != "auto":
            raise SpecError("dynamic_spec(Spec(...)): put assumptions and unspecified inside the Spec")
        spec = params
    else:
        if params is not None and by_name:
            raise SpecError("dynamic_spec: give the parameter specs as one dict or as keywords, not both")
        spec = Spec(params if params is not None else by_name, assumptions=assumptions, unspecified=unspecified)

    def decorate(target: Any) -> Any:
        if getattr(target, _SPEC_ATTR, None) is not None and not isinstance(target, type):
            raise SpecError(f"{getattr(target, '__qualname__', target)!r} already has a ptc spec")
        if isinstance(target, type) and issubclass(target, torch.nn.Module):
            return _decorate_module(target, spec)
        if callable(target):
            return _decorate_function(target, spec)
        raise PtcTypeError(f"dynamic_spec decorates a function or an nn.Module class, got {type(target).__name__}")

    return decorate


def spec_of(obj: Any) -> Optional[BoundSpec]:
    """The bound spec of a decorated function, module class or module instance."""
    return getattr(obj, _SPEC_ATTR, None) if not isinstance(obj, torch.nn.Module) else getattr(type(obj), _SPEC_ATTR, None)


def check(obj: Any, *args: Any, **kwargs: Any) -> None:
    """Check a call against ``obj``'s spec without running it (raises ``SpecViolation``)."""
    bound = _require_spec(obj)
    if isinstance(obj, torch.nn.Module):
        args = (obj,) + args
    bound.checker(*args, **kwargs)


# The boundary (the decorated entry point) runs in a frame Dynamo skips; every
# ptc function it calls while a compile is active must run with Dynamo disabled,
# or Dynamo would compile that helper as a frame of its own.
_dynamo_callback = _compat.dynamo_callback_getter()
_set_dynamo_callback = _compat.dynamo_callback_setter()
_begin_outside_dynamo = torch._dynamo.disable(begin_compiled_call)
_end_outside_dynamo = torch._dynamo.disable(end_compiled_call)


@torch._dynamo.disable
def _soften_or_raise(obj: Any, bound: BoundSpec, failure: Exception, args: tuple, kwargs: dict) -> None:
    """After a compiled call's ``failure``: return to call again, or raise.

    A violation of the spec under ``torch.compile`` (torch's constraint
    violation) means the model's code constrains variables the spec calls
    dynamic: a size it specialises (even one it only formats into a string), a
    divisibility it guards. Stock ``torch.compile`` runs such a model, so ptc
    changes how it marks those variables' dims (``BoundSpec.softened``) and
    logs the constraints in spec terms (:func:`explain` through a strict
    export, which does not run the model's Python again, so its side effects
    happen once, as under stock compile; where it sees none, torch's message):
    first as unbacked sizes (no guard can specialise
    them: one graph for every size where the model allows it), and, if that
    call fails too, with ``maybe_mark_dynamic``, torch's own automatic dynamic
    (it may specialise or recompile for them). Anything else is raised as it
    is; so is a violation with nothing left to change, as a
    ``SpecConstraintError`` naming the constraints where ptc finds them.
    """
    if bound.soften_pending:  # the unbacked attempt failed: torch's automatic dynamic for those
        names, bound.soften_pending = bound.soften_pending, set()
        _to_automatic_dynamic(obj, bound, names, failure)
        return
    violation = diagnose.violation(failure)
    if violation is None:
        unbacked = {n for n, how in bound.softened.items() if how == "unbacked"}
        if not unbacked:
            raise failure
        # a later call the unbacked sizes do not serve (a size the model fixes, where Dynamo's
        # runtime assertion and guards disagree: "Guard failed on the same frame it was created")
        _to_automatic_dynamic(obj, bound, unbacked, failure)
        return
    # the constraints in spec terms, from a strict export (Dynamo: the model's Python is not run
    # again, so its side effects happen once, as under stock compile)
    found = _explain_best_effort(obj, args, kwargs, strict=True)
    named = {n for c in found for n in c.vars} or _violated_vars(bound, violation)
    names = (named or {v.name for v in bound.spec.vars}) - bound.softened.keys()
    if not names:
        # about to raise: a call that fails anyway may run the model's Python once more (a
        # non-strict export) to name the constraints where Dynamo's export could not
        found = found or _explain_best_effort(obj, args, kwargs, strict=False)
        if not found:
            raise failure
        raise diagnose.constraint_error(f"torch.compile({_qualname(obj)})", found) from failure
    bound.softened.update(dict.fromkeys(names, "unbacked"))
    bound.soften_pending = set(names)
    why = "; ".join(str(c) for c in found) or " ".join(str(violation).split())[:300]
    _log.warning(
        "torch.compile(%s): the model's code constrains %s beyond the spec under torch.compile (%s); "
        "compiling those dims as unbacked sizes (no guard can fix them), or if that fails as torch.compile "
        "does by itself", _qualname(obj), ", ".join(sorted(names)), why,
    )


def _to_automatic_dynamic(obj: Any, bound: BoundSpec, names: set, failure: Exception) -> None:
    """Compiling ``names`` as unbacked sizes failed (``failure``): mark them as torch.compile
    does by itself from now on (``maybe_mark_dynamic``), and say so."""
    bound.softened.update(dict.fromkeys(names, "maybe"))
    _log.warning("torch.compile(%s): compiling %s as unbacked sizes failed (%s: %s); compiling them as "
                 "torch.compile does by itself (maybe_mark_dynamic: it may specialise or recompile)",
                 _qualname(obj), ", ".join(sorted(names)), type(failure).__name__,
                 str(failure).strip().splitlines()[0][:200] if str(failure).strip() else "")  # fmt: skip


def _explain_best_effort(obj: Any, args: tuple, kwargs: dict, *, strict: bool) -> List["diagnose.Constraint"]:
    try:
        return _explain(obj, args, kwargs, strict=strict)
    except Exception:  # noqa: BLE001 - the diagnosis is best effort; torch's error stands
        return []


def _violated_vars(bound: BoundSpec, violation: BaseException) -> set:
    """The spec variables bound to the dims torch's violation message names
    (``L['_ptc3_x'].size()[2]``: parameter ``x``, dim 2), where ptc can tell."""
    by_source = {text: v.name for v, text in bound.sources.items()}
    found = set()
    for param, dim in re.findall(r"L\['_ptc\d+_(\w+)'\]\.size\(\)\[(\d+)\]", str(violation)):
        name = by_source.get(f"{param}.shape[{dim}]")
        if name is not None:
            found.add(name)
    return found


def _compiled_call(obj: Any, bound: BoundSpec, enter: Callable, call_args: tuple, args: tuple, kwargs: dict) -> Any:
    """``enter(*call_args, **kwargs)`` (the compiled body frame) between ptc's marks, called again
    after each change :func:`_soften_or_raise` makes; ``args`` without a module's ``self``.
    A compile that raises leaves Dynamo's frame callback uninstalled: each call again installs
    the one this call began under, so it is compiled (not run eagerly)."""
    callback = _dynamo_callback()
    while True:
        state = _begin_outside_dynamo(bound, call_args, kwargs)
        try:
            if _dynamo_callback() is None:
                _set_dynamo_callback(callback)
            out = enter(*call_args, **kwargs)
            bound.soften_pending.clear()
            return out
        except Exception as e:
            failure = e
        finally:
            _end_outside_dynamo(state)
        _soften_or_raise(obj, bound, failure, args, kwargs)  # or raises


_compat.skip_frame(_compiled_call.__code__)  # a boundary frame too: only the body frame is compiled


def _decorate_function(fn: Callable, spec: Spec) -> Callable:
    bound = BoundSpec(spec, fn)
    checker, facts, enter = bound.checker, bound.facts, bound.enter

    @functools.wraps(fn)
    def with_spec(*args, **kwargs):
        if _compat.is_tracing():
            if _compat.dynamo_may_break_graph():
                return at_boundary(*args, **kwargs)  # graph break: runs as an entry point
            _refuse_static_export(bound, args, kwargs)  # traced: values are symbolic
            return facts(*args, **kwargs)
        if _dynamo_callback() is None:  # plain eager
            checker(*args, **kwargs)
            return fn(*args, **kwargs)
        return _compiled_call(with_spec, bound, enter, args, args, kwargs)  # Dynamo compiles the body frame

    at_boundary = torch.compiler.disable(with_spec, recursive=False)
    _compat.skip_frame(with_spec.__code__)
    _compat.skip_frame(enter.__code__)
    setattr(with_spec, _SPEC_ATTR, bound)
    return with_spec


def _decorate_module(cls: type, spec: Spec) -> type:
    forward = cls.forward
    self_param = next(iter(inspect.signature(forward).parameters), None)
    module_call = torch.nn.Module.__call__
    bound = BoundSpec(spec, forward, self_param=self_param, boundary_call=module_call)
    checker, facts, enter = bound.checker, bound.facts, bound.enter

    def __call__(self, *args, **kwargs):
        if _compat.is_tracing():
            if _compat.dynamo_may_break_graph():
                return at_boundary(self, *args, **kwargs)
            return module_call(self, *args, **kwargs)
        if _dynamo_callback() is None:
            checker(self, *args, **kwargs)
            return module_call(self, *args, **kwargs)
        return _compiled_call(self, bound, enter, (self,) + args, args, kwargs)  # the body frame calls module_call

    @functools.wraps(forward)
    def forward_with_facts(self, *args, **kwargs):
        if _compat.is_tracing():
            _refuse_static_export(bound, (self,) + args, kwargs)
            return facts(self, *args, **kwargs)
        return forward(self, *args, **kwargs)

    at_boundary = torch.compiler.disable(__call__, recursive=False)
    _compat.skip_frame(__call__.__code__)
    _compat.skip_frame(enter.__code__)
    cls.__call__ = __call__
    cls.forward = forward_with_facts
    setattr(cls, _SPEC_ATTR, bound)
    return cls


def _refuse_static_export(bound: BoundSpec, args, kwargs) -> None:
    """torch.export.export called without the spec's dynamic shapes would silently
    export a static program; say how to export with the spec instead."""
    if not torch.compiler.is_exporting() or _EXPORTING_WITH_SPEC[0]:
        return
    has_vars = any(action != "static" for _, _, action, _ in bound.marks)
    sizes = [s for t in bound.traced_leaves(*args, **kwargs) if isinstance(t, torch.Tensor) for s in t.shape]
    if not has_vars or any(isinstance(s, torch.SymInt) for s in sizes):
        return
    raise SpecError(
        f"torch.export.export was called on {_qualname(bound.fn)}, which has a ptc spec, without "
        "the spec's dynamic shapes; use ptc.specs.export(obj, args) (or pass "
        "dynamic_shapes=ptc.specs.export_dynamic_shapes(obj, args))"
    )


_EXPORTING_WITH_SPEC = [False]


def _qualname(fn: Any) -> str:
    return getattr(fn, "__qualname__", None) or type(fn).__name__


def _require_spec(obj: Any) -> BoundSpec:
    bound = spec_of(obj)
    if bound is None:
        raise PtcTypeError(f"{_qualname(obj)} has no ptc spec; decorate it with @ptc.specs.dynamic_spec(...)")
    return bound


class _FunctionModule(torch.nn.Module):
    """Lets torch.export see a decorated function as a module."""

    def __init__(self, fn: Callable) -> None:
        super().__init__()
        self.fn = fn


def _function_module(fn: Callable, bound: BoundSpec) -> torch.nn.Module:
    params = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    params += list(bound.signature.parameters.values())

    def forward(self, *args, **kwargs):
        return bound.facts(*args, **kwargs)

    forward.__signature__ = inspect.Signature(params)
    module = _FunctionModule(fn)
    module.__class__ = type(f"{_qualname(fn)}_module".replace(".", "_").replace("<", "").replace(">", ""), (_FunctionModule,), {"forward": forward})
    return module


def export_dynamic_shapes(obj: Any, args: Tuple[Any, ...], kwargs: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """The ``dynamic_shapes`` argument for ``torch.export.export(obj, args, kwargs)``."""
    bound = _require_spec(obj)
    kwargs = dict(kwargs or {})
    if isinstance(obj, torch.nn.Module):
        return dynamic_shapes(bound, (obj,) + tuple(args), kwargs, skip_first=True)
    return dynamic_shapes(bound, tuple(args), kwargs)


def export(
    obj: Any,
    args: Tuple[Any, ...],
    kwargs: Optional[Dict[str, Any]] = None,
    *,
    strict: bool = False,
) -> "torch.export.ExportedProgram":
    """``torch.export.export`` with the spec of ``obj`` (a decorated function or module).

    The example call is checked against the spec first. Variables become
    ``Dim``s with their ranges (``range_constraints`` shows them), ``T`` with
    ``Eq(T % 8, 0)`` becomes ``8*T_over_8``; relations ``Dim`` cannot express
    (``B*H``, ``T // 2``, ``B <= T``, a variable's choices) become runtime
    assertions in the graph (export then turns the model's own shape guards
    into assertions too). The program saves and loads with
    ``torch.export.save``/``load``. Scalar int arguments are constants, as in
    torch.export. When a variable's range admits 0 or 1, the export traces
    size-obliviously, so the program accepts those sizes too; where the
    model's code treats them apart (a constraint that excludes only 0 and 1),
    it logs that constraint and exports as ``torch.export`` does (assuming
    such sizes take the larger sizes' branch, unchecked).

    Where the model's own code constrains the variables beyond the spec
    (torch's constraint violation), this raises ``SpecConstraintError``
    listing each constraint as :func:`explain` does, torch's error chained.
    """
    kwargs = dict(kwargs or {})
    check(obj, *args, **kwargs)
    names: Dict[str, Any] = {}
    bound = _require_spec(obj)
    small = any(v.min <= 1 for v in bound.spec.vars)
    try:
        program = _export(obj, tuple(args), kwargs, strict, names)
    except Exception as e:
        if diagnose.violation(e) is None:
            raise
        found = _explain(obj, tuple(args), kwargs, strict=strict)
        if not found:
            raise
        if not (small and all(c.small_sizes for c in found)):
            raise diagnose.constraint_error(f"ptc.specs.export({_qualname(obj)})", found) from e
        # the size-oblivious trace failed only where the model treats sizes 0 and 1 apart
        # (GPT-2's masking compares the batch size with another tensor's): as below
        return _export_assuming_larger_sizes(obj, tuple(args), kwargs, strict, found)
    if small:
        apart = [c for c in diagnose.constraints(bound, names, diagnose.shape_env(program)) if c.small_sizes]
        if apart:
            return _export_assuming_larger_sizes(obj, tuple(args), kwargs, strict, apart)
    return program


def _export_assuming_larger_sizes(obj: Any, args: tuple, kwargs: dict, strict: bool,
                                  apart: List["diagnose.Constraint"]) -> "torch.export.ExportedProgram":  # fmt: skip
    """The model's code branches on a size being 0 or 1 (``apart``), so a size-oblivious program
    refuses those sizes. torch.export's own answer: trace assuming they take the larger sizes'
    branch (unchecked; eager may differ there)."""
    _log.warning(
        "ptc.specs.export(%s): the model's code treats sizes 0 and 1 apart (%s); exported as torch.export "
        "does, assuming such sizes take the branch of larger ones (unchecked: see ptc.specs.explain for "
        "the model's source line, or raise the variable's min to state it)",
        _qualname(obj), "; ".join(c.rule for c in apart),
    )
    return _export(obj, args, kwargs, strict, {}, size_oblivious=False)


def explain(obj: Any, *args: Any, **kwargs: Any) -> List["diagnose.Constraint"]:
    """The shape constraints ``obj``'s code imposes beyond its spec, for a valid example call.

    Traces the call as ``ptc.specs.export`` does (non-strict) and returns one
    ``ptc.specs.diagnose.Constraint`` per constraint: the rule in the spec's
    terms (``"T must be a multiple of 8"``, ``"T must equal 16 (the model
    specialises it)"``, ``"A must equal B"``), the model's source line that
    imposes it and the spec change that states it. Empty when the spec states
    all the model needs. This includes what export accepts silently (a
    relation such as ``Q <= T`` becomes a guard of the exported program).
    Under ``torch.compile`` such constraints are guards (recompiles for some
    valid calls) or, for a variable the model fixes to one value, an error
    that a compiled call raises as ``SpecConstraintError``.
    """
    check(obj, *args, **kwargs)
    return _explain(obj, tuple(args), dict(kwargs), strict=False)


def _explain(obj: Any, args: tuple, kwargs: dict, *, strict: bool) -> List["diagnose.Constraint"]:
    names: Dict[str, Any] = {}
    with _compat.guard_stacks() as events:
        try:
            outcome = _export(obj, args, kwargs, strict, names)
        except Exception as e:
            if diagnose.violation(e) is None:
                raise
            outcome = e
    return diagnose.constraints(_require_spec(obj), names, diagnose.shape_env(outcome), events)


def _export(obj: Any, args: tuple, kwargs: dict, strict: bool, names: Dict[str, Any], *,
            size_oblivious: bool = True) -> "torch.export.ExportedProgram":
    """``torch.export.export`` of a checked call; ``names`` gets the ``Dim`` names (``lowering.dynamic_shapes``).
    Traced size-obliviously where a variable admits 0 or 1, unless ``size_oblivious=False``."""
    bound = _require_spec(obj)
    if isinstance(obj, torch.nn.Module):
        shapes = dynamic_shapes(bound, (obj,) + args, kwargs, skip_first=True, dim_names=names)
    else:
        shapes = dynamic_shapes(bound, args, kwargs, dim_names=names)
    module = obj if isinstance(obj, torch.nn.Module) else _function_module(obj, bound)
    small_sizes = size_oblivious and any(v.min <= 1 for v in bound.spec.vars)
    saved = snapshot_attributes(pytree.tree_leaves((list(args), kwargs)))  # export rewrites their marks
    _EXPORTING_WITH_SPEC[0] = True
    try:
        with _compat.size_oblivious_tracing() if small_sizes else contextlib.nullcontext():
            return torch.export.export(
                module,
                args,
                kwargs,
                dynamic_shapes=shapes,
                strict=strict,
                prefer_deferred_runtime_asserts_over_guards=needs_runtime_asserts(bound),
            )
    finally:
        _EXPORTING_WITH_SPEC[0] = False
        restore_attributes(saved)


def native_spec(obj: Any) -> Any:
    """torch 2.14's native ``ShapesSpec`` equivalent of ``obj``'s spec."""
    return to_native(_require_spec(obj))
