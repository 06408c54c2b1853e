"""The feature probes agree with what each torch release really has."""

import importlib.util

import pytest
import torch

from ptc import _compat

# What each CI torch release really has, checked by hand against its sources
# (see ../shared/anchors). Entries that depend on the build use a callable.
GROUND_TRUTH = {
    "2.13.0": {
        "NATIVE_SWITCH_HOP": False,
        "NATIVE_SHAPES_SPEC": True,
        "NATIVE_DYNAMIC_SPEC_DECORATOR": False,
        "NATIVE_DYNAMIC_SPEC_EXPORT": False,
        "COMPILE_SHAPES_SPEC_KWARG": True,
        "COMPILE_DYNAMIC_SHAPES_KWARG": False,
        "CUDA_GRAPH_WHILE_NODES": False,
        "CUDA_THREAD_POOL_ROUTING": True,
        "NATIVE_COMPLEX_WRAPPER": True,
        "INDUCTOR_CHOICES_HOOK": True,
        "INDUCTOR_CHOICE_PREPROCESSING": True,
        "INDUCTOR_PRE_GRAD_CUSTOM_PASS": True,
        "INDUCTOR_CPP_VEC_BITCAST": True,
        "INDUCTOR_CPP_VEC_LOAD_LINE": True,
        "INDUCTOR_CPP_VEC_MATH": True,
        "INDUCTOR_CPP_VEC_NARROWING": True,
        "INDUCTOR_REALIZE_ON_REUSE": True,
        "INDUCTOR_CUSTOM_PASS_LISTS": True,
        # 2.13's NVGEMM imports cutlass_api (not on PyPI): unusable whatever is installed
        "NATIVE_NVGEMM": False,
        "NATIVE_NVGEMM_EPILOGUE_FUSION": False,
        "DISTRIBUTED": True,
        "NATIVE_RECONFIGURE": False,
        "GLOO_RECONFIGURE": False,
        "PROCESS_GROUP_HOOKS": False,
        "COMPILE_SOURCE_LISTS": True,
        "MARK_DYNAMIC_SPECIALIZE_ON": True,
        "SHAPE_GUARD_STACKS": True,
        "FP4_DTYPE": True,
        "INDUCTOR_EXTERN_KERNEL_REGISTRY": True,
        "ONEDNN_LINEAR": True,
    },
    "2.14.1": {
        "NATIVE_SWITCH_HOP": True,
        "NATIVE_SHAPES_SPEC": True,
        "NATIVE_DYNAMIC_SPEC_DECORATOR": True,
        "NATIVE_DYNAMIC_SPEC_EXPORT": True,
        "COMPILE_SHAPES_SPEC_KWARG": False,
        "COMPILE_DYNAMIC_SHAPES_KWARG": True,
        "CUDA_GRAPH_IF_NODES": lambda: torch.version.cuda is not None,
        "CUDA_GRAPH_WHILE_NODES": lambda: torch.version.cuda is not None,
        "CUDA_THREAD_POOL_ROUTING": True,
        "NATIVE_COMPLEX_WRAPPER": True,
        "INDUCTOR_CHOICES_HOOK": True,
        "INDUCTOR_CHOICE_PREPROCESSING": True,
        "INDUCTOR_PRE_GRAD_CUSTOM_PASS": True,
        "INDUCTOR_CPP_VEC_BITCAST": True,
        "INDUCTOR_CPP_VEC_LOAD_LINE": True,
        "INDUCTOR_CPP_VEC_MATH": True,
        "INDUCTOR_CPP_VEC_NARROWING": True,
        "INDUCTOR_REALIZE_ON_REUSE": True,
        "INDUCTOR_CUSTOM_PASS_LISTS": True,
        # 2.14.1's NVGEMM uses cutlass.operators: usable exactly when that package is installed
        "NATIVE_NVGEMM": lambda: importlib.util.find_spec("cutlass") is not None
        and importlib.util.find_spec("cutlass.operators") is not None,
        "NATIVE_NVGEMM_EPILOGUE_FUSION": True,
        "DISTRIBUTED": True,
        "NATIVE_RECONFIGURE": True,
        "GLOO_RECONFIGURE": True,
        "PROCESS_GROUP_HOOKS": True,
        "COMPILE_SOURCE_LISTS": True,
        "MARK_DYNAMIC_SPECIALIZE_ON": True,
        "SHAPE_GUARD_STACKS": True,
        "FP4_DTYPE": True,
        "INDUCTOR_EXTERN_KERNEL_REGISTRY": True,
        "ONEDNN_LINEAR": True,
    },
}
RELEASE = torch.__version__.split("+")[0]


@pytest.mark.skipif(RELEASE not in GROUND_TRUTH, reason=f"no ground truth for torch {RELEASE}")
@pytest.mark.parametrize("name", sorted({k for facts in GROUND_TRUTH.values() for k in facts}))
def test_probe_matches_release(name):
    facts = GROUND_TRUTH[RELEASE]
    if name not in facts:
        pytest.skip(f"{name} depends on the build, not on torch {RELEASE}")
    expected = facts[name]() if callable(facts[name]) else facts[name]
    assert getattr(_compat, name) is expected, f"{name} on torch {torch.__version__}"


def test_probes_agree_with_direct_evidence():
    """Each probe agrees with a direct look at the thing it names."""
    import importlib.util
    import inspect

    switch_exists = importlib.util.find_spec("torch._higher_order_ops.switch") is not None
    assert _compat.NATIVE_SWITCH_HOP is switch_exists
    assert _compat.NATIVE_RECONFIGURE is hasattr(torch.distributed, "_reconfigure")
    compile_params = inspect.signature(torch.compile).parameters
    assert _compat.COMPILE_SHAPES_SPEC_KWARG is ("shapes_spec" in compile_params)
    assert _compat.CUDA_BUILD is (torch.version.cuda is not None)
    assert _compat.CUDA_AVAILABLE is torch.cuda.is_available()
    # exactly one spelling of the compile-time spec kwarg exists in each release we support
    assert _compat.COMPILE_SHAPES_SPEC_KWARG != _compat.COMPILE_DYNAMIC_SHAPES_KWARG


def test_while_nodes_imply_if_nodes():
    assert not _compat.CUDA_GRAPH_WHILE_NODES or _compat.CUDA_GRAPH_IF_NODES


def test_every_probe_is_a_documented_boolean():
    probes = _compat.probes()
    assert len(probes) >= 15
    values = _compat.probe_values()
    assert list(values) == list(probes)
    for name, probe in probes.items():
        assert name.isupper() and probe.doc, name
        assert type(values[name]) is bool, name
        assert getattr(_compat, name) is values[name]


def test_unknown_probe_is_an_attribute_error():
    with pytest.raises(AttributeError, match="NO_SUCH_PROBE"):
        _compat.NO_SUCH_PROBE  # noqa: B018


def test_probes_are_cached():
    probe = _compat.probes()["NATIVE_SWITCH_HOP"]
    probe.check()
    before = probe.check.cache_info().hits
    probe.check()
    assert probe.check.cache_info().hits == before + 1


def test_is_tracing_sees_every_tracer():
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.proxy_tensor import make_fx

    x = torch.ones(3)
    assert _compat.is_tracing() is False and _compat.is_tracing(x) is False
    with FakeTensorMode() as mode:
        fake = mode.from_tensor(x)
        assert _compat.is_tracing() is True  # a dispatch mode is active
    assert _compat.is_tracing(fake) is True  # a fake value, outside its mode
    seen = {}

    def f(t):
        seen["make_fx"] = _compat.is_tracing(t)
        return t + 1

    make_fx(f)(x)

    def g(t):
        seen["dynamo"] = _compat.is_tracing()
        return t + 1

    torch.compile(g, backend="eager", fullgraph=True)(x)
    assert seen == {"make_fx": True, "dynamo": True}



def test_dynamo_compiles_no_frame_of_is_tracing():
    """Frames Dynamo runs as plain Python (ptc.specs' wrappers) call is_tracing: it must add no frame."""
    import torch._dynamo
    from torch._dynamo.utils import counters

    def inner(x):
        return x + 1

    def outer(x):
        _compat.is_tracing()
        return inner(x)

    _compat.skip_frame(outer.__code__)
    torch._dynamo.reset()
    counters.clear()
    torch.compile(outer, backend="eager")(torch.ones(2))
    assert counters["frames"]["total"] == 1  # inner only

def test_unwrap_functorch_finds_vmap_levels():
    x = torch.ones(2, 3)
    assert _compat.unwrap_functorch(x) == (x, False)
    found = []
    torch.vmap(lambda row: found.append(_compat.unwrap_functorch(row)[1]) or row)(x)
    assert found == [True]


def test_small_accessors():
    assert _compat.torch_dtype("bfloat16") is torch.bfloat16
    assert _compat.torch_dtype("no_such_dtype") is None and _compat.torch_dtype("nn") is None
    aten = torch.ops.aten
    assert _compat.aten_overloads("add.Tensor", "no_such_op", "neg", "add.no_such_overload") == [
        aten.add.Tensor, aten.neg.default]


def test_feature_modules_leave_torch_internals_to_compat():
    """The modules issue 29 cleaned probe no torch internals of their own (ptc._compat does)."""
    import pathlib
    import re

    root = pathlib.Path(_compat.__file__).parent
    files = [root / p for p in ("gemm/problem.py", "gemm/inductor.py", "gemm/blockscale.py",
                                "cudagraph/cuda_nodes.py", "specs/api.py", "control_flow/switch.py")]
    files += sorted((root / "complex" / "rules").glob("*.py"))
    leak = re.compile(r"hasattr\(torch\b|getattr\(torch\b|torch\._C\.|torch\._subclasses|__version__|\._registry\b"
                      r"|getattr\(aten\b|getattr\(V\.")
    found = [f"{f.relative_to(root)}:{n}: {line.strip()}"
             for f in files for n, line in enumerate(f.read_text().splitlines(), 1)
             if leak.search(line) and not line.lstrip().startswith(("#", '"', "'")) and "requirement=" not in line]
    assert not found, "\n".join(found)


def test_dynamo_reads_scalars_only_where_a_graph_may_hold_them():
    assert _compat.dynamo_reads_scalars() is False  # not tracing at all
    seen = []

    @torch.compiler.assume_constant_result
    def probe() -> bool:
        seen.append(_compat.dynamo_reads_scalars())
        return True

    def f(x):
        probe()
        return x + 1

    torch._dynamo.reset()
    torch.compile(f, backend="eager", fullgraph=True)(torch.ones(2))
    torch._dynamo.reset()
    torch.compile(f, backend="eager")(torch.ones(2))  # may break the graph: no scalar reads
    torch._dynamo.reset()
    torch.compile(torch.vmap(f), backend="eager", fullgraph=True)(torch.ones(3, 2))  # under a transform
    assert seen == [True, False, False]


def test_asking_what_a_native_build_needs_leaves_path_alone(monkeypatch, tmp_path):
    """With ninja only in the PyPI package, the capability query put the package's directory
    on the process's PATH for good; now only the build itself sees it, for its duration."""
    import os
    import shutil

    from ptc import _native

    monkeypatch.setattr(_native, "_ninja_package_dir", lambda: str(tmp_path))
    real_which = shutil.which
    monkeypatch.setattr(_native.shutil, "which", lambda name, *a, **k: None if name == "ninja" else real_which(name, *a, **k))
    before = os.environ.get("PATH")
    assert _native.missing_tools() is None or "compiler" in _native.missing_tools()
    assert os.environ.get("PATH") == before
    with _native._ninja_on_path():
        assert os.environ["PATH"].split(os.pathsep)[0] == str(tmp_path)
    assert os.environ.get("PATH") == before
