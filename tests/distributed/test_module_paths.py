"""The module paths the README documents: each name is the module that implements it, and
``python -m`` on it runs that module's ``main``."""

import subprocess
import sys

import ptc.distributed


def test_documented_names_are_the_implementing_modules():
    from ptc.demos import ft_example
    from ptc.distributed import LocalJob, ft_faults as F
    from ptc.distributed import flight_recorder as fr
    from ptc.distributed.flight_recorder import native as fr_native, recorder
    from ptc.distributed.ft import coordinator, faults, launch
    from ptc.distributed.ft import native as ft_native
    from ptc.distributed.ft_launch import python_module

    import ptc.distributed.coordinator as old_coordinator
    import ptc.distributed.fr_native as old_fr_native
    import ptc.distributed.ft_example as old_ft_example
    import ptc.distributed.ft_native as old_ft_native

    assert F is faults and LocalJob is launch.LocalJob and python_module is launch.python_module
    assert (fr.enable, fr.dump_all, fr.on_reconfigure) == (recorder.enable, recorder.dump_all, recorder.on_reconfigure)
    assert old_coordinator is coordinator and old_ft_example is ft_example
    assert old_ft_native is ft_native and old_fr_native is fr_native
    for name, module in ptc.distributed._MODULES.items():  # every module name ptc.distributed had
        assert getattr(ptc.distributed, name).__name__ == module


def test_python_m_on_a_documented_path_runs_the_module():
    for old, new in (("ptc.distributed.ft_example", "ptc.demos.ft_example"),
                     ("ptc.distributed.coordinator", "ptc.distributed.ft.coordinator")):  # fmt: skip
        proc = subprocess.run([sys.executable, "-m", old, "--help"], capture_output=True, text=True, timeout=240)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.startswith(f"usage: python -m {new}"), proc.stdout
