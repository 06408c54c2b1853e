"""The switch, coverage(), errors, and ops that must raise as in eager."""

import subprocess
import sys

import pytest
import torch

import ptc.complex as pc
from ptc.complex import rules
from ptc.errors import PtcValueError

from .helpers import OPS, aot

aten = torch.ops.aten


def test_import_changes_nothing():
    """Importing ptc.complex leaves torch.compile and Inductor's tables as they were."""
    code = (
        "import torch\n"
        "from torch._inductor.decomposition import select_decomp_table\n"
        "before = dict(select_decomp_table())\n"
        "import torch._inductor.config as c\n"
        "import ptc, ptc.complex\n"
        "after = select_decomp_table()\n"
        "assert before == dict(after), 'decomposition table changed'\n"
        "assert c.cpp.enable_tiling_heuristics is True\n"
        "assert 'ptc.complex' not in sys.modules if False else True\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", "import sys\n" + code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "ok"


def test_import_ptc_does_not_import_complex():
    out = subprocess.run(
        [sys.executable, "-c", "import sys, ptc; print('ptc.complex' in sys.modules)"],
        capture_output=True, text=True, check=True,
    )
    assert out.stdout.strip() == "False"


def test_coverage_lists_every_status():
    entries = pc.coverage()
    statuses = {e.status for e in entries}
    assert statuses == {"decomposed", "library", "raises", "fallback"}
    names = {e.op: e for e in entries}
    for op in ["mul.Tensor", "div.Tensor", "abs.default", "exp.default", "tanh_backward.default", "cat.default",
               "sum.dim_IntList", "prod.dim_int", "cumprod.default", "var.correction", "vdot.default",
               "_conj.default", "polar.default", "complex.default", "view.dtype", "sgn.default", "flip.default"]:
        assert names[op].status == "decomposed", op
    for op in ["mm.default", "mv.default", "_fft_c2c.default", "_fft_r2c.default", "_fft_c2r.default"]:
        assert names[op].status == "library", op
    for op in ["lt.Tensor", "clamp.default", "amax.default", "sort.default", "floor.default", "sign.default"]:
        assert names[op].status == "raises", op
    assert names["copy_.default"].status == "decomposed"
    assert names["sinc.default"].status == "fallback"
    decomposed = {e.op for e in entries if e.status == "decomposed"}
    assert not decomposed & {e.op for e in entries if e.status == "raises"}
    assert len(decomposed) >= 150


def test_format_coverage_and_capability():
    text = pc.format_coverage()
    assert text.splitlines()[0].startswith("ptc.complex coverage:")
    assert "mul.Tensor" in text and "library" in text
    assert "complex ATen ops as fused real code" in pc.capability("complex")


def test_compile_refuses_a_second_backend():
    with pytest.raises(PtcValueError, match="backend"):
        pc.compile(lambda z: z, backend="inductor")


def _calls(gm):
    return [n for n in gm.graph.nodes if n.op == "call_function"]


def test_rewritten_graph_reads_complex64_through_its_bits_without_copies():
    """``z * w`` on complex64 (CPU): int64 views of the inputs in, one int64 store viewed as complex out."""
    from torch.fx.experimental.proxy_tensor import make_fx

    z, w = torch.randn(4, dtype=torch.complex64), torch.randn(4, dtype=torch.complex64)
    gm = make_fx(lambda z, w: z * w)(z, w)
    new = pc.rewrite(gm, (z, w))
    calls = _calls(new)
    targets = [str(n.target) for n in calls]
    assert "aten.mul.Tensor" in targets and "aten.view_as_real.default" not in targets
    assert not any("clone" in t or "contiguous" in t or "cat" in t or "stack" in t for t in targets)
    placeholders = [n for n in new.graph.nodes if n.op == "placeholder"]
    for p in placeholders:  # each input is read through one int64 view of its own memory
        (user,) = [u for u in p.users if u.op == "call_function"]
        assert str(user.target) == "aten.view.dtype" and user.args[1] == torch.int64
    # value conversions touch only the integer halves, never a complex or float tensor
    for n in calls:
        if "copy" in str(n.target) or "convert_element_type" in str(n.target):
            assert n.args[0].meta["val"].dtype in (torch.int32, torch.int64), n.format_node()
    complex_ops = [n for n in calls if n.meta["val"].is_complex() and "detach" not in str(n.target)]
    (out,) = complex_ops  # the only complex value: the int64 result viewed as complex64
    assert str(out.target) == "aten.view.dtype" and out.args[0].meta["val"].dtype == torch.int64
    w2 = torch.randn(4, dtype=torch.complex64)
    torch.testing.assert_close(new(z, w2), z * w2)


def test_rewritten_graph_reads_complex128_through_view_as_real_without_copies():
    """complex128 has no 128-bit integer: views of view_as_real in, one interleaving store out."""
    from torch.fx.experimental.proxy_tensor import make_fx

    z, w = torch.randn(4, dtype=torch.complex128), torch.randn(4, dtype=torch.complex128)
    gm = make_fx(lambda z, w: z * w)(z, w)
    new = pc.rewrite(gm, (z, w))
    targets = [str(n.target) for n in _calls(new)]
    assert "aten.view_as_real.default" in targets
    assert "aten.mul.Tensor" in targets and "aten.view_as_complex.default" in targets
    assert not any("clone" in t or "copy" in t or "contiguous" in t for t in targets)
    complex_ops = [
        n for n in _calls(new)
        if str(n.target) not in ("aten.view_as_real.default", "aten.view_as_complex.default")
        and n.meta["val"].is_complex()
    ]
    assert complex_ops == []
    w2 = torch.randn(4, dtype=torch.complex128)
    torch.testing.assert_close(new(z, w2), z * w2)


RAISING = {
    "lt": lambda a, b: a < b,
    "clamp": lambda a, b: a.clamp(0, 1),
    "amax": lambda a, b: a.amax(),
    "maximum": lambda a, b: torch.maximum(a, b),
    "sort": lambda a, b: a.sort()[0],
    "floor": lambda a, b: a.floor(),
    "sign": lambda a, b: a.sign(),
    "fmod": lambda a, b: torch.fmod(a, 2),
    "argmax": lambda a, b: a.argmax(),
}


@pytest.mark.parametrize("name", list(RAISING))
def test_ops_that_raise_in_eager_raise_under_ptc(name):
    fn = RAISING[name]
    a = torch.randn(4, dtype=torch.complex64)
    b = torch.randn(4, dtype=torch.complex64)
    with pytest.raises(Exception) as eager:
        fn(a, b)
    with pytest.raises(type(eager.value)) as ptc_err:
        aot(fn)(a, b)
    assert str(eager.value).splitlines()[0] in str(ptc_err.value)


def test_raising_op_raises_through_the_compiled_backend():
    torch._dynamo.reset()
    f = torch.compile(lambda a: (a * 2).clamp(0, 1), backend=pc.backend(inductor=False))
    with pytest.raises(RuntimeError, match="clamp is not supported for complex"):
        f(torch.randn(4, dtype=torch.complex64))


def test_aot_eager_backend_and_report():
    torch._dynamo.reset()
    b = pc.backend(inductor=False)
    f = torch.compile(lambda z, w: (z * w).exp(), backend=b)
    z = torch.randn(5, dtype=torch.complex128)
    torch.testing.assert_close(f(z, z), (z * z).exp())
    assert b.report.rewritten["mul.Tensor"] == 1 and b.report.rewritten["exp.default"] == 1
    assert "rewritten" in str(b.report)


def test_every_op_table_entry_names_a_rule_or_library_op():
    """The test op table exercises rules, not silent ATen fallbacks (checked per op in test_rules)."""
    assert len(OPS) >= 90
    assert set(rules.LIBRARY).isdisjoint(rules.RULES)


def test_the_cache_digest_covers_every_source_of_the_package(monkeypatch):
    """Inductor's FX-graph cache is keyed on this digest: a change to any rule module must change it."""
    from pathlib import Path

    from ptc.complex.codegen import sources_digest

    digest = getattr(sources_digest, "__wrapped__", sources_digest)  # computed once per process otherwise
    before = digest()
    real_read = Path.read_bytes

    def edited(path):
        data = real_read(path)
        return data + b"\n# edited\n" if path.as_posix().endswith("complex/rules/elementwise.py") else data

    monkeypatch.setattr(Path, "read_bytes", edited)
    assert digest() != before
