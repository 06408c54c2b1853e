"""``switch``: pick one of N branch functions by an integer index.

Eager calls run the chosen branch directly. Under ``torch.compile``,
``torch.export`` (strict and non-strict) and ``make_fx`` the switch becomes a
balanced binary tree of ``torch.cond`` of depth ``ceil(log2 N)``, which every
torch consumer (Inductor, ``torch.export.save``/``load``) already understands.
Under ``torch.vmap`` with a batched index every branch runs and each sample
selects its own result.
"""

from __future__ import annotations

import itertools
from typing import Any, Callable, Dict, List, NoReturn, Optional, Sequence, Tuple

import torch
import torch.utils._pytree as pytree

from ptc import _compat
from ptc.errors import BranchMismatch, PtcTypeError, PtcValueError

__all__ = ["switch", "tree_depth"]


def switch(index: Any, branches: Sequence[Callable[..., Any]], *operands: Any) -> Any:
    """Apply exactly one of ``branches`` to ``operands``, chosen by ``index``.

    Equivalent to the following Python::

        def switch(index, branches, *operands):
            index = min(max(int(index), 0), len(branches) - 1)
            return branches[index](*operands)

    Args:
        index: an integer scalar: a Python ``int``, a ``SymInt``, or an integer
            tensor with one element (shape ``()`` or ``(1,)``). Out-of-range
            values are clamped to ``[0, len(branches) - 1]``, so ``-5`` picks the
            first branch and ``99`` the last, as in ``jax.lax.switch``. Floating,
            complex and bool indices are a ``PtcTypeError`` (a ``TypeError``).
        branches: a non-empty list or tuple of callables. Each takes
            ``*operands`` and returns a pytree of tensors, which may hold ``None``
            and Python ``bool``/``int``/``float``/``str`` constants beside them (a
            layer's ``(hidden, None)``); all branches must return the same pytree
            structure, dtypes, numbers of dimensions and constants.
            Sizes may differ between branches (traced code then gets one size
            symbol per differing dimension). A branch may return an operand, a
            view of one (``x``, ``x[1:]``, ``x.float()`` of a float ``x``) or one
            tensor twice: traced code returns a copy there (``torch.cond`` refuses
            outputs that alias), so its outputs never share memory with the
            operands or with each other; eager returns what the branch returns.
            A ``detach()`` of an operand is not recognised as a view (it has no
            ``_base``): return ``x.detach().clone()`` from a branch instead. A
            parameter the branch closes over is copied too; a buffer is not
            recognised (return ``buf.clone()``).
        operands: pytrees passed unchanged to the chosen branch.

    What is checked where:
        * The arguments (``index``'s type, dtype and shape, ``branches``) are
          checked by every consumer, with the same errors: ``PtcTypeError`` /
          ``PtcValueError`` in eager and while ``torch.compile``,
          ``torch.export`` (strict or not) or ``make_fx`` trace the call.
        * The branches' outputs are compared wherever more than one branch is
          traced: under ``torch.compile``, ``torch.export`` and ``make_fx`` with
          a tensor or ``SymInt`` index, and under ``torch.vmap`` with a batched
          index. Each branch's output is checked against the first branch's as
          it is traced, before ``torch.cond`` is emitted; a difference raises
          ``BranchMismatch`` naming both branches and the output that differs
          (``output[1]``, ``output['key']``) and how (structure, dtype, number
          of dimensions, constant value). Under ``vmap`` the shapes must agree too.
        * An error raised while Dynamo traces (``torch.compile``, strict
          export, and ``torch.cond``'s own tracing under ``make_fx`` and
          non-strict export) is an instance of a subclass of the ptc type that
          is also an ``AssertionError``, the kind Dynamo passes through
          unchanged; it is caught as the ptc type and its builtin base.
        * In eager only the chosen branch runs, so the others are not checked:
          checking them would cost running every branch. Branches that disagree
          run in eager and return whatever the chosen branch returns; trace the
          call (or run it under ``vmap`` with a batched index) to check them.
          The same holds for a Python ``int`` index when traced: it selects its
          branch at trace time and no other branch is traced.

    Behaviour per consumer:
        * eager: validates the arguments, reads the index (one host sync for a
          tensor index) and calls ``branches[index](*operands)``.
        * ``torch.compile`` / ``torch.export`` / ``make_fx``: a tensor or
          ``SymInt`` index becomes a balanced tree of ``torch.cond`` on
          ``index < mid``; a Python ``int`` index selects its branch at trace
          time (the graph holds that branch only). Where Dynamo may read a
          tensor's value into the graph (``fullgraph=True``, strict export,
          ``capture_scalar_outputs``) and there are three or more branches, the
          index is read once (``index.item()``) and each ``mid`` is compared
          with that integer: one host read per call. Elsewhere each level's
          predicate is a tensor.
        * ``torch.vmap`` over a batched index: every branch runs on every
          sample and each sample takes its branch's output. Operands reach a
          branch's gradient only for the samples that selected it, so a NaN or
          inf in the backward of an unselected branch does not leak into the
          gradient. (Values a branch captures by closure are not guarded: pass
          them as operands for that guarantee.) All branches must then return
          the same shapes.
        * autograd: first-order gradients flow through the chosen branch in
          eager and compiled code. Higher orders follow ``torch.cond``, which
          does not support double backward in traced code. In traced code the
          parameters of the branches not taken get zero gradients (eager leaves
          them ``None``), and torch's limits on ``torch.cond`` apply (no in-place
          update of a buffer or an operand in a branch; the backward of branches
          whose output sizes differ fails to compile).
    """
    n = _check_branches(branches)
    if isinstance(index, bool):
        _raise(
            PtcTypeError,
            "switch: index must be an integer scalar, got a bool; "
            "use int(flag) to choose between two branches",
        )
    if isinstance(index, int):
        return branches[_clamp(index, n)](*operands)
    if isinstance(index, torch.SymInt):
        index = torch.scalar_tensor(index, dtype=torch.int64)
    elif not isinstance(index, torch.Tensor):
        _raise(
            PtcTypeError,
            "switch: index must be a Python int, a SymInt or an integer tensor with one "
            f"element, got {type(index).__name__}",
        )
    _check_tensor_index(index)

    mode = _mode(index)
    if mode == "eager":
        return branches[_clamp(int(index), n)](*operands)
    if n == 1:
        return branches[0](*operands)
    if index.dim() == 1:
        index = index.reshape(())
    index = index.clamp(0, n - 1)
    if mode == "vmap":
        return _select_all(index, branches, operands)
    return _cond_tree(index, branches, operands)


def tree_depth(n: int) -> int:
    """Depth of the ``torch.cond`` tree ``switch`` emits for ``n`` branches: ceil(log2 n)."""
    return (n - 1).bit_length()


# --- validation ---------------------------------------------------------------


def _check_branches(branches: Any) -> int:
    if not isinstance(branches, (list, tuple)):
        _raise(
            PtcTypeError,
            f"switch: branches must be a list or tuple of callables, got {type(branches).__name__}",
        )
    if len(branches) == 0:
        _raise(PtcValueError, "switch: branches is empty; give at least one branch function")
    for i, branch in enumerate(branches):
        if not callable(branch):
            _raise(
                PtcTypeError,
                f"switch: branches[{i}] must be callable, got {type(branch).__name__}",
            )
    return len(branches)


def _check_tensor_index(index: torch.Tensor) -> None:
    dtype = index.dtype
    if dtype == torch.bool or dtype.is_floating_point or dtype.is_complex:
        _raise(
            PtcTypeError,
            f"switch: index must be a Python int or a tensor of integer dtype, got {dtype}; "
            "convert it explicitly, e.g. index.long(), if truncation is what you mean",
        )
    if index.dim() > 1 or index.numel() != 1:
        _raise(
            PtcValueError,
            "switch: index must be a scalar (shape () or (1,)), "
            f"got a tensor of shape {tuple(index.shape)}",
        )


# --- raising while Dynamo traces ----------------------------------------------
#
# Dynamo runs the code it traces symbolically: a ``raise`` there reaches the user
# as Dynamo's ``Unsupported`` ("Observed exception") under ``fullgraph=True`` and
# strict export, and an exception raised by Python code Dynamo calls for real is
# re-raised as ``InternalTorchDynamoError`` unless it is one of the types Dynamo
# lets through unchanged, ``AssertionError`` among them. So while tracing, switch
# raises its errors from a function Dynamo calls for real
# (``torch.compiler.assume_constant_result``: called once, at trace time, with
# the trace-time values of its arguments), as a subclass of the ptc type that is
# also an ``AssertionError``. It keeps the ptc type's name and module, so it reads
# and is caught as that type (``except ptc.BranchMismatch``, ``except TypeError``).


def _passes_dynamo(cls: type) -> type:
    return type(cls.__name__, (cls, AssertionError), {"__module__": cls.__module__, "__doc__": cls.__doc__})


_TRACED = {cls: _passes_dynamo(cls) for cls in (PtcTypeError, PtcValueError, BranchMismatch)}


@torch.compiler.assume_constant_result
def _raise_traced(cls: type, message: str) -> bool:
    raise _TRACED[cls](message)


def _raise(cls: type, message: str) -> NoReturn:
    """Raise ``cls(message)``; while Dynamo traces, as the type Dynamo lets through."""
    if torch.compiler.is_compiling():
        _raise_traced(cls, message)
    raise cls(message)


def _clamp(i: int, n: int) -> int:
    return 0 if i < 0 else (n - 1 if i >= n else i)


def _mode(index: torch.Tensor) -> str:
    """How to run: "eager" (``index`` holds a real value we may read), "vmap" (the
    index is batched by ``torch.vmap`` at some level) or "trace" (Dynamo, export,
    make_fx)."""
    if torch.compiler.is_compiling():
        return "trace"
    t, batched = _compat.unwrap_functorch(index)  # vmap / grad levels, outermost first
    if batched:
        return "vmap"
    return "trace" if _compat.is_tracing(t) else "eager"  # make_fx, fake and functional modes, fake tensors


# --- traced: a balanced tree of torch.cond ------------------------------------


def _cond_tree(index: torch.Tensor, branches: Sequence[Callable], operands: tuple) -> Any:
    """``branches[index](*operands)`` as nested ``torch.cond`` on ``index < mid``.

    ``torch.cond`` operands must be tensors, so the operand pytree is split into
    its tensor leaves (passed through every cond, together with the index) and
    the rest (constants, closed over). Each branch's output is checked against
    the others' as the branch is traced (:func:`_check_traced_output`).
    """
    leaves, spec = pytree.tree_flatten(operands)
    if len(branches) > 2 and _reads_index_once():
        # the index read once into an unbacked SymInt; every cond's predicate is a SymBool of it,
        # which Inductor evaluates on the host with no further read.  Two branches keep their one
        # tensor predicate: Inductor (2.13, 2.14) emits no read of a SymInt that only a predicate
        # uses (NameError at the first call).  Already clamped: a torch._check of the range would
        # add its asserts to every subgraph.
        index = index.item()
    is_tensor = [isinstance(leaf, torch.Tensor) for leaf in leaves]
    tensors = tuple(leaf for leaf, t in zip(leaves, is_tensor) if t)
    call = _open_check()

    def rebuild(flat_tensors: Sequence[torch.Tensor]) -> tuple:
        it = iter(flat_tensors)
        full = [next(it) if t else leaf for leaf, t in zip(leaves, is_tensor)]
        return pytree.tree_unflatten(full, spec)

    def subtree(lo: int, hi: int) -> Callable:
        if hi - lo == 1:
            branch = branches[lo]

            def leaf(idx: torch.Tensor, *flat: torch.Tensor, k: int = lo) -> Any:
                out = _fresh(_unaliased(branch(*rebuild(flat)), flat))
                _check_traced_output(call, k, _signature(out), _constants_of(out))
                return _without_constants(out)

            return leaf
        mid = lo + (hi - lo + 1) // 2
        left, right = subtree(lo, mid), subtree(mid, hi)
        return lambda idx, *flat: torch.cond(idx < mid, left, right, (idx, *flat))

    out = subtree(0, len(branches))(index, *tensors)
    constants = _constant_leaves(call)
    _close_check(call)
    return _with_constants(out, constants) if constants else out


# --- non-tensor outputs ----------------------------------------------------------
#
# torch.cond returns tensors only, but a branch may return None or a Python
# constant beside them (a layer's ``(hidden, None)``). Such a leaf must be equal in
# every branch (checked with the signatures); inside the tree it travels as an
# empty tensor and is put back after the tree from what the first branch returned.

_CONSTANT_TYPES = (type(None), bool, int, float, str)


def _is_constant(leaf: Any) -> bool:
    return isinstance(leaf, _CONSTANT_TYPES)


def _without_constants(out: Any) -> Any:
    leaves, spec = pytree.tree_flatten(out)
    if not any(_is_constant(leaf) for leaf in leaves):
        return out
    return pytree.tree_unflatten([torch.empty(0) if _is_constant(leaf) else leaf for leaf in leaves], spec)


def _with_constants(out: Any, constants: Tuple[Tuple[int, Any], ...]) -> Any:
    leaves, spec = pytree.tree_flatten(out)
    for position, value in constants:
        leaves[position] = _literal(value)
    return pytree.tree_unflatten(leaves, spec)


def _literal(value: Any) -> Any:
    """``value`` itself, computed anew: under Dynamo a value read from
    :func:`_constant_leaves` keeps that call as its source, and strict export cannot
    guard an output with such a source (``NotImplementedError``); the result of an
    operation has none."""
    if value is None:
        return None
    if isinstance(value, bool):
        return True if value else False
    if isinstance(value, str):
        return value + ""
    return value * 1  # int, float (keeps -0.0 and nan)


def _constants_of(out: Any) -> Tuple[Tuple[int, Any], ...]:
    """(position among the pytree leaves, value) of each constant leaf of ``out``."""
    return tuple((i, leaf) for i, leaf in enumerate(pytree.tree_leaves(out)) if _is_constant(leaf))


@torch.compiler.assume_constant_result
def _constant_leaves(call: str) -> Tuple[Tuple[int, Any], ...]:
    """The constant leaves (:func:`_constants_of`) of the first branch traced for ``call``."""
    seen = _traced_constants.get(call) or {}
    return seen[min(seen)] if seen else ()


def _unaliased(out: Any, operands: Sequence[torch.Tensor]) -> Any:
    """``out`` with a copy in place of each tensor that is, or is a view of, an
    operand or an earlier output (``torch.cond`` refuses a branch whose outputs
    alias its inputs or each other, which eager code may well return: ``x``,
    ``x[1:]``, ``x.float()`` of a float ``x``).  Only the identity of tensors and
    of their ``_base`` is compared, which Dynamo and the tracers answer exactly."""
    seen: List[torch.Tensor] = list(operands)
    seen += [t._base for t in operands if t._base is not None]

    def fresh(t: torch.Tensor) -> torch.Tensor:
        base = t._base
        if any(t is s or (base is not None and base is s) for s in seen):
            return t.clone()
        if _a_parameter(t) or (base is not None and _a_parameter(base)):
            return t.clone()  # a parameter the branch closes over (a learned default), or a view of one
        seen.append(t)
        if base is not None:  # a later view of the same intermediate aliases this one
            seen.append(base)
        return t

    return pytree.tree_map_only(torch.Tensor, fresh, out)


# dtypes whose ``torch.where`` Inductor compiles; others keep _unaliased's copy only
_FRESH_DTYPES = frozenset(
    (torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16,
     torch.bfloat16, torch.float32, torch.float64, torch.complex64, torch.complex128)
)


def _fresh(out: Any) -> Any:
    """``out`` with each tensor ``t`` replaced by ``torch.where(t == t, t, t)``: equal
    to ``t`` in every element (nan included: both sides are ``t``), and new.

    Inductor (2.13 and 2.14) removes arithmetic it can prove to be the identity
    (``x * 1``, ``x + 0``, ``x + zeros_like(x)``; torch 2.14 for Python numbers too)
    and copies, also inside a ``torch.cond`` branch, which then returns its
    operand's buffer as its output; the code after the cond takes that buffer as its
    own and writes into it, changing the caller's tensor (and the result). Nothing
    removes the ``where``: its condition depends on the values. Inductor fuses it into
    the kernel that computes ``t``; only an output no kernel computes (an operand
    itself, or a library call's result such as a matmul's) costs a pass over it.
    """

    def fresh(t: torch.Tensor) -> torch.Tensor:
        if t.dtype not in _FRESH_DTYPES:
            return t
        return torch.where(t == t, t, t)

    return pytree.tree_map_only(torch.Tensor, fresh, out)


def _a_parameter(t: torch.Tensor) -> bool:
    """A parameter (traced code lifts one a branch closes over as an input of the cond, which
    refuses an output that is one)."""
    return isinstance(t, torch.nn.Parameter)


@torch.compiler.assume_constant_result
def _reads_index_once() -> bool:
    return _compat.dynamo_reads_scalars()


# --- comparing the branches' outputs -------------------------------------------
#
# A signature describes an output without its sizes: ("tensor", dtype, ndim),
# ("list" | "tuple", (signature, ...)), ("dict", ((key, signature), ...)) or
# (type name,) for anything else. Under Dynamo it is computed from trace-time
# constants, so it can be handed to the checks below, which Dynamo calls for real.


def _signature(out: Any) -> tuple:
    if isinstance(out, torch.Tensor):
        return ("tensor", out.dtype, out.dim())
    if _is_constant(out):
        return ("constant", out)
    if isinstance(out, (list, tuple)):
        return ("list" if isinstance(out, list) else "tuple", tuple(_signature(o) for o in out))
    if isinstance(out, dict):
        return ("dict", tuple((key, _signature(value)) for key, value in out.items()))
    return (type(out).__name__,)


def _describe(sig: tuple) -> str:
    kind = sig[0]
    if kind == "tensor":
        return f"a {sig[2]}-d {sig[1]} tensor"
    if kind in ("list", "tuple"):
        return f"a {kind} of {len(sig[1])}"
    if kind == "dict":
        return f"a dict with keys {[key for key, _ in sig[1]]}"
    if kind == "constant":
        return repr(sig[1])
    return f"{'an' if kind[0] in 'aeiou' else 'a'} {kind}"


def _difference(a: tuple, b: tuple, path: str = "output") -> Optional[Tuple[str, str, str, str]]:
    """The first place where signatures ``a`` and ``b`` differ, as (what differs,
    where, ``a``'s, ``b``'s), or None when they agree."""
    same_shape = a[0] == b[0] and (
        a[0] not in ("list", "tuple", "dict") or len(a[1]) == len(b[1])
    )
    if a[0] == "dict" and same_shape:
        same_shape = [key for key, _ in a[1]] == [key for key, _ in b[1]]
    if not same_shape:
        return ("structure", path, _describe(a), _describe(b))
    if a[0] == "constant":
        if not _equal_constants(a[1], b[1]):
            return ("value", path, repr(a[1]), repr(b[1]))
    elif a[0] == "tensor":
        if a[1] != b[1]:
            return ("dtype", path, str(a[1]), str(b[1]))
        if a[2] != b[2]:
            return ("number of dimensions", path, f"{a[2]}-d", f"{b[2]}-d")
    elif a[0] in ("list", "tuple"):
        for i, (x, y) in enumerate(zip(a[1], b[1])):
            found = _difference(x, y, f"{path}[{i}]")
            if found:
                return found
    elif a[0] == "dict":
        for (key, x), (_, y) in zip(a[1], b[1]):
            found = _difference(x, y, f"{path}[{key!r}]")
            if found:
                return found
    return None


def _mismatch_message(k: int, sig: tuple, ref: int, ref_sig: tuple) -> Optional[str]:
    found = _difference(sig, ref_sig)
    if found is None:
        return None
    what, where, got, want = found
    return (
        f"switch: branches[{k}] returns a different {what} than branches[{ref}]: "
        f"{where} is {got} in branches[{k}] but {want} in branches[{ref}]; all branches "
        "must return the same pytree structure, dtypes and numbers of dimensions "
        "(sizes may differ), and equal non-tensor values"
    )


# The signatures (and constant leaves) of the branches traced so far, per switch
# call being traced. A call is named by a string: Dynamo specializes on strings,
# where it would turn an int that changes from one trace to the next into a symbol.
_traced_calls: Dict[str, Dict[int, tuple]] = {}
_traced_constants: Dict[str, Dict[int, tuple]] = {}
_call_ids = itertools.count()


@torch.compiler.assume_constant_result
def _open_check() -> str:
    call = f"switch{next(_call_ids)}"
    _traced_calls[call] = {}
    _traced_constants[call] = {}
    return call


@torch.compiler.assume_constant_result
def _close_check(call: str) -> bool:
    _traced_calls.pop(call, None)
    _traced_constants.pop(call, None)
    return True


@torch.compiler.assume_constant_result
def _check_traced_output(call: str, k: int, sig: tuple, constants: tuple = ()) -> bool:
    """Record branch ``k``'s output signature and constant leaves; a mismatch with the
    lowest-numbered branch traced before it is a ``BranchMismatch``."""
    seen = _traced_calls.setdefault(call, {})
    seen_constants = _traced_constants.setdefault(call, {})
    seen[k], seen_constants[k] = sig, constants
    ref = min(seen)
    message = None
    if ref != k:
        message = _mismatch_message(k, sig, ref, seen[ref]) or _constants_message(
            k, constants, ref, seen_constants[ref]
        )
    if message is not None:
        _close_check(call)
        raise _TRACED[BranchMismatch](message)
    return True


def _constants_message(k: int, constants: tuple, ref: int, ref_constants: tuple) -> Optional[str]:
    """Where the constant leaves of two branches differ inside containers the
    signatures do not look into (a dataclass, a custom pytree node)."""
    if _same_constants(constants, ref_constants):
        return None
    return (
        f"switch: branches[{k}] returns other non-tensor values than branches[{ref}]: "
        f"(leaf, value) {constants} against {ref_constants}; all branches must return "
        "equal non-tensor values"
    )


def _same_constants(a: tuple, b: tuple) -> bool:
    return len(a) == len(b) and all(i == j and _equal_constants(x, y) for (i, x), (j, y) in zip(a, b))


def _equal_constants(x: Any, y: Any) -> bool:
    """Equal values of one type (``1`` is not ``True`` nor ``1.0``); nan equals nan."""
    return type(x) is type(y) and (x == y or (x != x and y != y))


# --- vmap over a batched index: run every branch, select per sample -------------


def _select_all(index: torch.Tensor, branches: Sequence[Callable], operands: tuple) -> Any:
    outputs: List[Any] = []
    for k, branch in enumerate(branches):
        chosen = index == k
        # Gradient reaches the operands only where this branch was chosen (jax#1052).
        guarded = pytree.tree_map_only(
            torch.Tensor, lambda x, c=chosen: torch.where(c, x, x.detach()), operands
        )
        outputs.append(branch(*guarded))

    sig0 = _signature(outputs[0])
    flat0, spec0 = pytree.tree_flatten(outputs[0])
    flats = [flat0]
    constants0 = _constants_of(outputs[0])
    for k, out in enumerate(outputs[1:], start=1):
        message = _mismatch_message(k, _signature(out), 0, sig0) or _constants_message(
            k, _constants_of(out), 0, constants0
        )
        if message is not None:
            raise BranchMismatch(message)
        flat, _ = pytree.tree_flatten(out)
        for j, (a, b) in enumerate(zip(flat0, flat)):
            if isinstance(a, torch.Tensor) and a.shape != b.shape:
                raise BranchMismatch(
                    f"switch under vmap with a batched index: output leaf {j} of branches[{k}] "
                    f"is {b.dtype}{list(b.shape)} but branches[0] gives {a.dtype}{list(a.shape)}; "
                    "all branches must agree in shape there (every branch runs on every sample)"
                )
        flats.append(flat)

    selected = []
    for j in range(len(flat0)):
        acc = flats[0][j]
        if not isinstance(acc, torch.Tensor):  # a constant, equal in every branch
            selected.append(acc)
            continue
        for k in range(1, len(branches)):
            acc = torch.where(index == k, flats[k][j], acc)
        selected.append(acc)
    return pytree.tree_unflatten(selected, spec0)
