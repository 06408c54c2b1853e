"""`ptc env`, `ptc demo` and `dev.py` as a user runs them."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from ptc import _compat, _env, demos

ROOT = Path(__file__).resolve().parents[2]
PTC = Path(sys.executable).with_name("ptc")


def _ptc(*args, check=True):
    """Run the installed `ptc` console script."""
    assert PTC.exists(), f"console script not installed at {PTC}"
    proc = subprocess.run([str(PTC), *args], capture_output=True, text=True, timeout=240)
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


@pytest.fixture(scope="module")
def env_json():
    return json.loads(_ptc("env", "--json").stdout)


def test_env_json_reports_this_torch(env_json):
    assert env_json["torch"]["version"] == torch.__version__
    assert env_json["torch"]["git"] == torch.version.git_version
    assert env_json["torch"]["build"] == (f"cuda {torch.version.cuda}" if torch.version.cuda else "cpu")
    assert env_json["gpu"]["available"] is torch.cuda.is_available()


def test_env_json_probes_match_compat(env_json):
    # a fresh process probes the same install the same way
    assert env_json["probes"] == _compat.probe_values()


def test_env_json_lists_every_feature_with_both_sides(env_json):
    names = [f["name"] for f in env_json["features"]]
    assert names == [f.name for f in _env.FEATURES]
    for feature in env_json["features"]:
        assert feature["native"] and feature["ptc"]


def test_env_native_column_follows_probes(env_json):
    native = {f["name"]: f["native"] for f in env_json["features"]}
    if _compat.NATIVE_SWITCH_HOP:
        assert native["switch"].startswith("prototype switch HOP")
    else:
        assert native["switch"] == "none (nest torch.cond)"
    if _compat.NATIVE_RECONFIGURE:
        assert native["fault_tolerance"].startswith("gloo _reconfigure")
    else:
        assert native["fault_tolerance"].startswith("none")


def test_readme_complex_row_agrees_with_each_torch_and_ptc_env(env_json):
    """The README's feature table says what each torch really has (test_compat's ground
    truth), and `ptc env` says the same for the torch at hand."""
    from test_compat import GROUND_TRUTH

    row = next(ln for ln in (ROOT / "README.md").read_text().splitlines() if ln.startswith("| complex"))
    cells = [c.strip() for c in row.strip().strip("|").split("|")]
    native = {"2.13.0": cells[1], "2.14.1": cells[1] if cells[2] == "same" else cells[2]}
    for version, cell in native.items():
        assert ("enable_complex_wrapper" in cell) == GROUND_TRUTH[version]["NATIVE_COMPLEX_WRAPPER"], (version, cell)
    env = next(f["native"] for f in env_json["features"] if f["name"] == "complex")
    assert ("enable_complex_wrapper" in env) == _compat.NATIVE_COMPLEX_WRAPPER, env
    here = next((cell for version, cell in native.items() if torch.__version__.startswith(version)), None)
    if here is not None:
        assert ("enable_complex_wrapper" in here) == ("enable_complex_wrapper" in env), (here, env)


def test_env_text_report():
    out = _ptc("env").stdout
    assert f"torch {torch.__version__}" in out
    for name, value in _compat.probe_values().items():
        line = next(line for line in out.splitlines() if f" {name} " in line)
        assert line.strip().startswith("yes" if value else "no"), line
    for feature in _env.FEATURES:
        assert feature.name in out


def test_demo_list_names_every_section():
    out = _ptc("demo", "--list").stdout
    for name in demos.SECTIONS:
        assert name in out


def test_demo_one_section():
    out = _ptc("demo", "env").stdout
    assert "=== ptc demo env:" in out
    assert f"torch {torch.__version__}" in out
    assert "ptc demo finished" in out


def test_demo_specs_prints_no_empty_heading(capsys):
    demos.run(["specs"])
    lines = capsys.readouterr().out.splitlines()
    headings = [i for i, line in enumerate(lines) if line.endswith(":") and not line.startswith(" ")]
    assert headings, lines
    for i in headings:
        assert i + 1 < len(lines) and lines[i + 1].startswith("  "), f"empty heading {lines[i]!r}"


def test_demo_unknown_section_is_a_clear_error():
    proc = _ptc("demo", "no_such_section", check=False)
    assert proc.returncode == 2
    assert "unknown section(s) no_such_section" in proc.stderr
    assert "env" in proc.stderr


def test_dev_py_usage_and_bad_torch_version():
    proc = subprocess.run([sys.executable, str(ROOT / "dev.py")], capture_output=True, text=True)
    assert proc.returncode == 2 and "usage" in proc.stderr
    bad = dict(os.environ, PTC_TORCH="latest")
    proc = subprocess.run(
        [sys.executable, str(ROOT / "dev.py"), "test"], capture_output=True, text=True, env=bad
    )
    assert proc.returncode == 1
    assert "PTC_TORCH='latest' is not a version" in proc.stderr
