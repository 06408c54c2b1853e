"""ptc.specs on two real transformers models built from configs with random
weights (no downloads): GPT-2 with its KV cache (a decoder: a mask over the
cache and the new tokens) and BERT (an encoder with padding masks), through
``benchmarks/specs_models.py``'s own cases and runner, on a bounded number of
shapes. The full table (more models, torch's own tools beside ptc) is the
benchmark's."""

import importlib.util
import pathlib
import sys

import pytest
import torch

pytest.importorskip("transformers", reason="the `models` extra (transformers) is not installed")

ROOT = pathlib.Path(__file__).resolve().parents[2]
N_COMPILE, N_UNSEEN = 8, 4

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("ptc_specs_models", ROOT / "benchmarks" / "specs_models.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop(spec.name, None)


@pytest.fixture(scope="module", params=["gpt2", "bert"])
def runner(request, bench):
    (case,), _ = bench.cases("backed", [request.param])
    return bench.Runner(case, "aot_eager", case.compile_points[:N_COMPILE], case.unseen_points[:N_UNSEEN])


def _clean(row):
    return row.cv == 0 and row.errors == 0 and row.equal == row.calls > 0


def test_compile_one_graph_for_every_in_spec_shape_equal_to_eager(runner):
    row = runner.ptc_compile()
    assert _clean(row), row
    assert (row.graphs, row.recompiles, row.static_dims) == (1, 0, 0), row
    assert row.calls == N_COMPILE


def test_export_save_load_runs_unseen_shapes_equal_to_eager(runner):
    row = runner.ptc_export()
    assert _clean(row), row
    assert row.static_dims == 0, row
    assert row.calls == N_UNSEEN


def test_inferred_spec_from_three_calls_passes_compile_and_export(runner):
    compiled, exported, spec = runner.ptc_infer()
    assert _clean(compiled) and (compiled.graphs, compiled.recompiles) == (1, 0), (compiled, spec)
    assert _clean(exported), (exported, spec)


def test_the_callers_tensors_keep_no_trace(runner):
    """After the compiled calls, the caller's inputs (cache layers included) have
    exactly the attributes they had: a later plain compile on them is unaffected."""
    from ptc.specs import spec_of

    pt = runner.compile_points[0]
    kwargs = runner.case.call(pt, 0)
    tensors = [t for t in torch.utils._pytree.tree_leaves(kwargs) if isinstance(t, torch.Tensor)]
    before = [dict(vars(t)) for t in tensors]
    torch._dynamo.reset()
    torch.compile(runner.spec_model, backend="eager")(**kwargs)
    assert [dict(vars(t)) for t in tensors] == before
    assert spec_of(runner.spec_cls) is not None
