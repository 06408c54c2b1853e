"""Declarative shape specs: say once what is dynamic, every consumer honours it.

    from ptc.specs import Var, tensor, dynamic_spec
    B, T = Var("B", min=1, max=64), Var("T", min=8, max=4096)

    @dynamic_spec({"x": tensor(B, T), "mask": tensor(B, T)}, assumptions=[sympy.Eq(T % 8, 0)])
    def f(x, mask): ...

One spec serves eager calls (checked before the call), ``torch.compile``
(one graph, violations never reach Dynamo), ``ptc.specs.export`` (Dims,
ranges and runtime assertions) and ``make_fx``. ``Var("H", choices=(64, 128))``
allows only those values; ``explain(f, *args)`` names, in the spec's terms,
the constraints the model's own code adds (``export`` raises them as
``SpecConstraintError``).
"""

from ptc.specs.api import check, dynamic_spec, explain, export, export_dynamic_shapes, native_spec, spec_of
from ptc.specs.spec import Spec, TensorSpec, tensor
from ptc.specs.variables import STATIC, Var

__all__ = [
    "Var",
    "STATIC",
    "tensor",
    "TensorSpec",
    "Spec",
    "dynamic_spec",
    "check",
    "export",
    "explain",
    "export_dynamic_shapes",
    "native_spec",
    "spec_of",
    "capability",
]


def capability(feature: str) -> str:
    """Status line for ``ptc env``."""
    return "@dynamic_spec: checked calls, compile, export, make_fx, allowed-value sets, constraint diagnosis"
