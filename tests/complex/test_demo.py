"""``ptc demo complex``: its comparison (ptc.demos.complex.compare) on small inputs."""

import torch

from ptc.demos import complex as demo


def _check(rows, tol):
    assert [r.label for r in rows] == ["eager", "stock compile", "ptc.complex"]
    eager, stock, ptc_row = rows
    assert all(r.ms > 0 for r in rows)
    assert stock.fallbacks, "stock Inductor leaves complex arithmetic on eager kernels"
    assert ptc_row.fallbacks == []  # every complex op between the library calls is fused
    assert stock.max_err <= tol and ptc_row.max_err <= tol, (stock.max_err, ptc_row.max_err)
    assert ptc_row.first_s > 0


def test_demo_fft_filter_and_quantum_step_run_fused_and_match_eager():
    torch.manual_seed(0)
    x, cutoff = torch.randn(4, 256), torch.tensor(30.0)
    rows = demo.compare(lambda x, c: (demo.fft_lowpass(x, c),), (x, cutoff), rounds=1, budget_ms=1.0)
    _check(rows, 1e-5)
    rows = demo.compare(demo.quantum_step, demo.quantum_args(16), rounds=1, budget_ms=1.0)
    _check(rows, 1e-5)
