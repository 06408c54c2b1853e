"""Real CUDA graphs (marked ``cuda``: skipped without a GPU). Each test names its CPU
twin, the simulator test of the same logic, in ``TWINS``; ``test_every_gpu_test_has_a_cpu_twin``
checks the twins exist."""

import importlib

import pytest
import torch

from ptc import _compat
from ptc.cudagraph import capture, make_backend
from ptc.demos import cudagraph_programs as P

T = torch.tensor

TWINS = {
    "test_cuda_counted_loop": "test_simulator.py::test_counted_loop_replay_equals_eager",
    "test_cuda_cond_inside_while": "test_simulator.py::test_cond_inside_while",
    "test_cuda_switch_inside_while": "test_simulator.py::test_switch_inside_while",
    "test_cuda_nested_loops": "test_simulator.py::test_nested_loops",
    "test_cuda_changing_inputs": "test_simulator.py::test_changing_inputs_between_replays",
    "test_cuda_no_host_sync_in_replay": "test_simulator.py::test_counted_loop_replay_equals_eager",
    "test_cuda_host_read_during_capture_raises": "test_simulator.py::test_host_read_during_capture_raises",
    "test_cuda_rng_loop_falls_back": "test_eligibility.py::test_rng_loop_falls_back_with_correct_results",
    "test_cuda_backend_inductor": "test_backend.py::test_inductor_segments_under_simulated_capture",
    "test_cuda_ptc_nodes_switch_and_if_else": "test_cuda_adapter.py::test_switch_and_if_else_through_ptc_nodes",
    "test_cuda_ptc_nodes_graph_shape": "test_cuda_nodes.py::test_nested_nodes_capture_into_their_own_bodies",
}


def _dev(*xs):
    return [x.cuda() for x in xs]


def _captured(fn, *args, segments="eager"):
    cf = capture(fn, *args, executor="cuda", segments=segments)
    cf(*args)  # warmup
    cf(*args)  # capture + first replay
    return cf


def _loop_expected_in_graph():
    from ptc.cudagraph.cuda_graph import cuda_support

    return cuda_support().while_nodes


@pytest.mark.cuda
@pytest.mark.parametrize("n", [0, 1, 3, 100])
def test_cuda_counted_loop(n):
    x, n0 = _dev(torch.randn(1024), T(3))
    cf = _captured(P.counted, x, n0)
    nn = T(n).cuda()
    torch.testing.assert_close(cf(x, nn), P.counted(x, nn))
    assert cf.report.counts["loops_captured"] == int(_loop_expected_in_graph())


@pytest.mark.cuda
@pytest.mark.parametrize("n", [0, 1, 3, 100])
def test_cuda_cond_inside_while(n):
    x, n0 = _dev(torch.randn(1024), T(3))
    cf = _captured(P.cond_in_while, x, n0)
    nn = T(n).cuda()
    torch.testing.assert_close(cf(x, nn), P.cond_in_while(x, nn))


@pytest.mark.cuda
@pytest.mark.parametrize("n,k", [(0, 0), (3, 0), (4, -3), (7, 9), (100, 1)])
def test_cuda_switch_inside_while(n, k):
    x, n0, k0 = _dev(torch.randn(256), T(4), T(0))
    cf = _captured(P.switch_in_while, x, n0, k0)
    a, b = T(n).cuda(), T(k).cuda()
    torch.testing.assert_close(cf(x, a, b), P.switch_in_while(x, a, b))


@pytest.mark.cuda
@pytest.mark.parametrize("a,b", [(0, 0), (1, 1), (2, 3), (3, 100)])
def test_cuda_nested_loops(a, b):
    x, a0, b0 = _dev(torch.randn(256), T(2), T(3))
    cf = _captured(P.nested, x, a0, b0)
    aa, bb = T(a).cuda(), T(b).cuda()
    torch.testing.assert_close(cf(x, aa, bb), P.nested(x, aa, bb))


@pytest.mark.cuda
def test_cuda_changing_inputs():
    x, n0 = _dev(torch.randn(512), T(3))
    cf = _captured(P.counted, x, n0)
    for seed in range(4):
        x = torch.randn(512, generator=torch.Generator().manual_seed(seed)).cuda()
        n = T(seed * 5).cuda()
        torch.testing.assert_close(cf(x, n), P.counted(x, n))
    if _loop_expected_in_graph():
        assert len(cf.graphs) == 1


@pytest.mark.cuda
def test_cuda_no_host_sync_in_replay():
    if not _loop_expected_in_graph():
        pytest.skip("no WHILE nodes here (neither torch's nor ptc's): loops fall back")
    x, n = _dev(torch.randn(1024), T(50))
    cf = _captured(P.counted, x, n)
    (g,) = cf.graphs
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(3):
            g.replay()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()


@pytest.mark.cuda
def test_cuda_host_read_during_capture_raises():
    """Run in its own process: on torch 2.11 a failed capture leaves the CUDA generator in capture
    mode for good (one ``capturing_`` flag; 2.13+ keep generator state per capture), which made every
    later RNG call of the test session fail ("Offset increment outside graph capture")."""
    import subprocess
    import sys

    code = (
        "import torch\n"
        "from ptc.cudagraph.cuda_graph import CudaGraph\n"
        "x = torch.randn(8, device='cuda')\n"
        "g = CudaGraph()\n"
        "try:\n"
        "    with g.capture():\n"
        "        (x.sum() > 0).item()\n"
        "except RuntimeError as e:\n"
        "    print('raised', type(e).__name__, str(e)[:200])\n"
        "else:\n"
        "    print('did not raise')\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.startswith("raised"), proc.stdout + proc.stderr[-2000:]


@pytest.mark.cuda
def test_cuda_rng_loop_falls_back():
    x, n = _dev(torch.randn(64), T(3))
    cf = _captured(P.rng_body, x, n)
    assert cf.report.fallbacks["loop0"][0].startswith("RNG in body:")
    torch.manual_seed(3)
    got = cf(x, n)
    torch.manual_seed(3)
    want = P.rng_body(x, n)
    assert got.shape == want.shape and torch.isfinite(got).all()


@pytest.mark.cuda
def test_cuda_backend_inductor():
    torch._dynamo.reset()
    backend = make_backend(executor="cuda", segments="inductor")
    f = torch.compile(P.cond_in_while, backend=backend, fullgraph=True)
    x = torch.randn(1024, device="cuda")
    for n in (3, 0, 1, 4, 100):
        nn = T(n).cuda()
        torch.testing.assert_close(f(x, nn), P.cond_in_while(x, nn))
    (program,) = backend.programs
    assert all(s.compiled for s in program.plan.segments)


@pytest.mark.cuda
@pytest.mark.parametrize("n,k", [(0, 0), (3, 0), (4, -3), (7, 9)])
def test_cuda_ptc_nodes_switch_and_if_else(n, k):
    from ptc.cudagraph.cuda_graph import cuda_support

    if not cuda_support("ptc").switch_nodes:
        pytest.skip("ptc's SWITCH and IF/ELSE nodes need cuda-python and a CUDA 12.8 driver")
    x, n0, k0 = _dev(torch.randn(256), T(4), T(0))
    cf = _captured(P.switch_in_while, x, n0, k0)
    (g,) = cf.graphs
    assert g.nodes == "ptc" and g.support.switch_nodes
    a, b = T(n).cuda(), T(k).cuda()
    torch.testing.assert_close(cf(x, a, b), P.switch_in_while(x, a, b))
    assert cf.report.counts["loops_captured"] == 1


@pytest.mark.cuda
def test_cuda_ptc_nodes_graph_shape():
    """The WHILE node holds its body: one replay runs n iterations with no host work."""
    from ptc.cudagraph.cuda_graph import cuda_support

    if not cuda_support("ptc").while_nodes:
        pytest.skip("ptc's nodes need cuda-python and a CUDA 12.4 driver")
    x, n0, m0 = _dev(torch.randn(256), T(2), T(3))
    cf = _captured(P.nested, x, n0, m0)
    (g,) = cf.graphs
    assert g.nodes == "ptc"
    for a, b in [(0, 5), (5, 0), (3, 4)]:
        aa, bb = T(a).cuda(), T(b).cuda()
        torch.testing.assert_close(cf(x, aa, bb), P.nested(x, aa, bb))
    assert cf.report.counts["loops_captured"] == 2


def test_every_gpu_test_has_a_cpu_twin():
    import sys

    here = sys.modules[__name__]
    gpu_tests = [name for name in dir(here) if name.startswith("test_cuda_")]
    assert sorted(gpu_tests) == sorted(TWINS)
    for gpu_test, twin in TWINS.items():
        marks = [m.name for m in getattr(getattr(here, gpu_test), "pytestmark", [])]
        assert "cuda" in marks, gpu_test
        module, _, name = twin.partition("::")
        mod = importlib.import_module(f"{__package__}.{module[:-3]}")
        assert callable(getattr(mod, name, None)), f"{gpu_test}: twin {twin} is missing"
