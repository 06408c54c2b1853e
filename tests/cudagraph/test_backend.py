"""The torch.compile backend and the function API: registration, CPU behaviour,
Inductor-compiled segments under simulated capture, argument errors."""

import pytest
import torch

import ptc.cudagraph as cg
from ptc.cudagraph import capture, make_backend
from ptc.demos import cudagraph_programs as P
from ptc.errors import PtcTypeError, PtcValueError

from .conftest import T


def test_backend_name_is_registered_through_the_entry_point():
    from importlib.metadata import entry_points

    names = {ep.name: ep.value for ep in entry_points(group="torch_dynamo_backends")}
    assert names.get("ptc_cudagraphs") == "ptc.cudagraph.backend:ptc_cudagraphs"
    from torch._dynamo.backends.registry import lookup_backend

    assert lookup_backend("ptc_cudagraphs") is cg.ptc_cudagraphs


def test_backend_by_name_on_cpu_runs_ungraphed_and_correct(x4):
    torch._dynamo.reset()
    f = torch.compile(P.counted, backend="ptc_cudagraphs", fullgraph=True)
    for n in (0, 1, 3, 7):
        torch.testing.assert_close(f(x4, T(n)), P.counted(x4, T(n)))
    program = cg.ptc_cudagraphs.programs[-1]
    assert program.executor == "eager" and program.graphs == []
    assert program.report.counts["loops_fallback"] == 1


@pytest.fixture(scope="module")
def sim_backend_switch():
    torch._dynamo.reset()
    backend = make_backend(executor="sim", segments="eager")
    return backend, torch.compile(P.switch_in_while, backend=backend, fullgraph=True)


@pytest.mark.parametrize("n,k", [(0, 0), (1, 1), (3, 0), (100, 2), (5, -1)])
def test_sim_backend_switch_in_while(sim_backend_switch, x4, n, k):
    backend, f = sim_backend_switch
    torch.testing.assert_close(f(x4, T(n), T(k)), P.switch_in_while(x4, T(n), T(k)))
    (program,) = backend.programs
    assert program.report.counts == {"loops_captured": 1, "loops_fallback": 0, "conds_captured": 2, "conds_fallback": 0}


def test_sim_backend_captures_after_warmup(sim_backend_switch, x4):
    backend, f = sim_backend_switch
    f(x4, T(2), T(0))
    f(x4, T(3), T(1))
    (program,) = backend.programs
    (g,) = program.graphs
    assert g.counts()["while"] == 1 and g.replays >= 1
    assert g.iterations[0] == 3


def test_inductor_segments_under_simulated_capture(x4):
    """Straight-line code compiled by Inductor: each segment is one opaque kernel of
    the captured program; the WHILE and IF nodes stay graph structure."""
    torch._dynamo.reset()
    backend = make_backend(executor="sim", segments="inductor")
    f = torch.compile(P.cond_in_while, backend=backend, fullgraph=True)
    for n in (3, 0, 1, 4, 100):
        torch.testing.assert_close(f(x4, T(n)), P.cond_in_while(x4, T(n)))
    (program,) = backend.programs
    segments = program.plan.segments
    assert segments and all(s.compiled for s in segments)
    (g,) = program.graphs
    counts = g.counts()
    assert counts["while"] == 1 and counts["if"] == 1
    assert counts["kernel"] < 17  # fewer than the op-by-op recording of the same program


@pytest.mark.parametrize("program", ["newton", "swap"])
def test_inductor_fuses_a_loop_step_into_one_kernel(program):
    """A straight-line loop compiles as one step (body, in-place write-back of the
    carries, next predicate): one opaque kernel per iteration plus the handle set,
    equal to eager for 0, 1, 3, 100 trips and new inputs between replays. ``swap``
    returns its carries crossed over, so the in-place write-back must not clobber one
    carry before the other is read."""
    def rand(n, seed, shift=0.0):
        return torch.rand(n, generator=torch.Generator().manual_seed(seed)) + shift

    if program == "newton":
        fn, args = P.newton, lambda k, s=0: (rand(64, s, 1.0), T(k))
    else:
        fn, args = P.swap, lambda k, s=0: (rand(8, s), rand(8, s + 9), T(k))
    cf = capture(fn, *args(3), executor="sim", segments="inductor")
    cf(*args(3))  # warmup: compiles the fused step
    (loop,) = cf.plan.loops
    assert loop.step is not None, loop.step_note
    for k, seed in [(3, 0), (0, 1), (1, 2), (100, 3)]:
        torch.testing.assert_close(cf(*args(k, seed)), fn(*args(k, seed)))
    (g,) = cf.graphs
    assert g.render(max_kernels=20).split("while[0]:\n")[1].splitlines()[0].strip() == "kernels x1: forward"


def test_a_loop_holding_control_flow_keeps_its_three_part_step(x4):
    cf = capture(P.cond_in_while, x4, T(3), executor="sim", segments="inductor")
    cf(x4, T(3))
    (loop,) = [lp for lp in cf.plan.loops]
    assert loop.step is None and loop.step_note == "its body holds control flow"
    torch.testing.assert_close(cf(x4, T(4)), P.cond_in_while(x4, T(4)))


def test_capture_api_pytrees_and_report(x4):
    def f(inputs):
        return {"y": P.counted(inputs["x"], inputs["n"]), "z": inputs["x"] * 2}

    cf = capture(f, {"x": x4, "n": T(2)}, executor="sim", segments="eager")
    for n in (2, 0, 5):
        got = cf({"x": x4, "n": T(n)})
        want = f({"x": x4, "n": T(n)})
        torch.testing.assert_close(got, want)
    assert "loop0" in cf.report.format() and cf.report.counts["loops_captured"] == 1


def test_capture_auto_on_cpu_is_eager(x4):
    cf = capture(P.counted, x4, T(3), segments="eager")
    assert cf.program.executor == "eager"
    torch.testing.assert_close(cf(x4, T(4)), P.counted(x4, T(4)))
    assert cf.graphs == []


def test_argument_errors(x4):
    with pytest.raises(PtcTypeError, match="fn must be callable"):
        capture(3, x4)
    with pytest.raises(PtcTypeError, match="example_inputs leaf 1 must be a tensor"):
        capture(P.counted, x4, 3)
    with pytest.raises(PtcValueError, match="executor must be one of"):
        capture(P.counted, x4, T(3), executor="gpu")
    with pytest.raises(PtcValueError, match="segments must be 'inductor' or 'eager'"):
        capture(P.counted, x4, T(3), executor="sim", segments="triton")
    with pytest.raises(PtcValueError, match="executor must be one of"):
        make_backend(executor="nope")
    with pytest.raises(PtcTypeError, match="support must be a ptc.cudagraph.Support"):
        capture(P.counted, x4, T(3), executor="sim", support="12.4")


def test_wrong_input_shape_after_capture_names_the_input(x4):
    cf = capture(P.counted, x4, T(3), executor="sim", segments="eager")
    cf(x4, T(3))
    cf(x4, T(3))
    with pytest.raises(PtcValueError, match=r"captured as torch.float32\[4\].*got torch.float32\[5\]"):
        cf(torch.randn(5), T(3))


def test_capability_line():
    line = cg.capability("cudagraph")
    assert "ptc_cudagraphs" in line and "simulator" in line


def test_parameters_are_read_in_place_not_copied(x4):
    """Weights are static by address (no copy per replay); an in-place update of a
    weight is seen by the next replay."""
    from torch._higher_order_ops.while_loop import while_loop

    class Recurrent(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.randn(4, 4, generator=torch.Generator().manual_seed(1)) * 0.3)

        def forward(self, x, n):
            i0 = torch.zeros((), dtype=torch.int64)
            return while_loop(lambda i, x: i < n, lambda i, x: (i + 1, torch.tanh(self.w @ x)), (i0, x))[1]

    torch._dynamo.reset()
    m = Recurrent()
    backend = make_backend(executor="sim", segments="eager")
    cm = torch.compile(m, backend=backend, fullgraph=True)
    with torch.no_grad():
        for n in (3, 3, 5, 0):
            torch.testing.assert_close(cm(x4, T(n)), m(x4, T(n)))
        (region,) = [r for r in backend.programs[-1].program.regions if r.graph is not None]
        assert any(s is m.w for s in region.static_inputs)
        m.w.mul_(2)
        torch.testing.assert_close(cm(x4, T(4)), m(x4, T(4)))
    assert len(backend.programs[-1].graphs) == 1


def _switch_under_sim_backend(x4, device_predicates=None):
    """A top-level ptc.switch compiled with fullgraph=True by the sim backend (its
    ``ptc_device_predicates`` set to ``device_predicates`` unless None), checked against eager
    over calls that change the index after warm-up and capture; the planner's counts."""
    from ptc.control_flow import switch

    branches = [(lambda k: lambda x: x * (k + 2) + k)(k) for k in range(5)]

    def f(i, x):
        return switch(i, branches, x) + 1

    torch._dynamo.reset()
    backend = make_backend(executor="sim", segments="eager")
    if device_predicates is not None:
        backend.ptc_device_predicates = device_predicates
    g = torch.compile(f, backend=backend, fullgraph=True)
    for i in (-1, 0, 1, 2, 3, 4, 9, 1, 2):
        torch.testing.assert_close(g(T(i), x4), f(T(i), x4))
    return backend.programs[-1].report.counts


def test_sim_backend_runs_a_host_read_and_what_is_computed_from_it_on_every_call(x4):
    # fullgraph=True lets Dynamo put t.item() in the graph (here: switch's one read of its index,
    # for a backend that does not ask for device predicates) and compute on it in Python
    # (u0 < 3, the conds' predicates); a captured segment would replay the values of the
    # capture on every later call
    counts = _switch_under_sim_backend(x4, device_predicates=False)
    assert counts["conds_fallback"] == 4  # host predicates: the conds run on the host


def test_sim_backend_captures_a_top_level_switch_with_device_predicates(x4):
    counts = _switch_under_sim_backend(x4)  # the backend's own setting
    assert counts["conds_captured"] == 4
