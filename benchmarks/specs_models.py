"""ptc.specs on real models, side by side with torch's own tools for dynamic shapes.

    python benchmarks/specs_models.py            # every model, every tool
    python benchmarks/specs_models.py --quick    # GPT-2 and ResNet-50, fewer shapes
    python benchmarks/specs_models.py --models gpt2,bert --tools ptc-compile,mark_dynamic

Every model is built from a small config with random weights (transformers,
and timm where its torchvision loads beside the installed torch; otherwise
transformers' own ResNet/ConvNeXt/ViT stand in, and the header says so).
Each model has one hand-written ptc spec (``Case.spec``): batch, sequence or
image sizes with the divisibility the model needs, attention masks, decoder
inputs, and the KV cache where the model takes one. Then, per model:

(a) ``ptc-compile``: ``@dynamic_spec`` on the model's class + ``torch.compile``
    over ``--shapes`` in-spec shapes (16 by default): graphs, recompiles,
    outputs equal to eager;
(b) ``ptc-export``: ``ptc.specs.export`` at one example, ``torch.export.save``
    / ``load``, then the loaded program at 8 shapes never seen, equal to eager;
(c) ``ptc-infer``: ``infer_spec`` from 3 example calls; the inferred spec
    through (a) and (b).

and torch's tools on the same model and shapes:

* ``compile``: plain ``torch.compile`` (torch's automatic dynamic);
* ``mark_dynamic``: ``torch._dynamo.mark_dynamic`` on every dim the spec calls
  variable, before each call, + ``torch.compile``;
* ``native-spec``: torch's own ``ShapesSpec`` (``torch.compile(shapes_spec=)``
  on 2.13, ``dynamic_shapes=`` on 2.14), the same variables and relations;
* ``export-Dim``: ``torch.export`` with a ``Dim`` per variable (``k*Dim`` for a
  multiple of k; a dim no ``Dim`` expression can state, such as a sum of two
  variables, is ``Dim.AUTO``), saved, loaded, run at the 8 unseen shapes;
* ``export-AUTO``: the same with ``Dim.AUTO`` in every dim.

Columns: graphs (Dynamo graphs, or 1 exported program), recompiles (graphs
compiled after the first call), cv (torch ``ConstraintViolationError`` s,
ptc's ``SpecConstraintError`` included), spec'd dims left static (in the last
graph, or in the program's inputs, of the dims the spec calls variable),
errors (calls or exports that raised anything else), equal (calls whose
outputs equal eager / calls made), wall seconds for the whole row. Notes
below the table give each row's first error.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import inspect
import io
import logging
import os
import platform
import re
import sys
import time
import traceback
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import sympy
import torch
import torch.utils._pytree as pytree

from ptc import _compat
from ptc.errors import SpecConstraintError
from ptc.specs import Spec, Var, dynamic_spec, export, export_dynamic_shapes, spec_of, tensor
from ptc.specs.diagnose import violation
from ptc.specs.infer import infer_spec
from ptc.specs.spec import TensorSpec, _vars_of
from ptc.specs.variables import STATIC

Point = Dict[str, int]


# --- models ----------------------------------------------------------------------


def _quiet_transformers() -> None:
    import transformers

    transformers.logging.set_verbosity_error()


def timm_status() -> Tuple[bool, str]:
    """(timm usable, why not): timm needs torchvision, whose wheel must load beside this torch."""
    try:
        import torchvision  # noqa: F401
        import timm  # noqa: F401

        torch.ops.torchvision.nms  # noqa: B018 - the op the broken pairing lacks
        return True, f"timm {timm.__version__}, torchvision {torchvision.__version__}"
    except Exception as e:  # noqa: BLE001 - any failure means: not usable here
        return False, f"{type(e).__name__}: {str(e).splitlines()[0][:80]}"


@dataclasses.dataclass
class Case:
    """One model and its spec.

    ``build()`` returns the model (eval mode, random weights); ``spec()`` the
    ptc spec of its ``forward`` as ``(params, assumptions)`` over fresh
    ``Var`` s; ``call(point, seed)`` the keyword arguments of one call at
    ``point`` (variable name -> value), the same tensors for the same seed;
    ``outputs(out)`` the tensors compared with eager. ``compile_points`` are
    in-spec shapes for (a), ``export_point`` the example for (b),
    ``unseen_points`` 8 shapes (b) runs and (a) never saw, ``infer_points`` the
    3 examples of (c).
    """

    name: str
    source: str
    build: Callable[[], torch.nn.Module]
    spec: Callable[[], Tuple[Dict[str, Any], List[Any]]]
    call: Callable[[Point, int], Dict[str, Any]]
    outputs: Callable[[Any], List[torch.Tensor]]
    compile_points: List[Point]
    export_point: Point
    unseen_points: List[Point]
    infer_points: List[Point]
    setup: Callable[[], None] = lambda: None
    atol: float = 1e-4
    why: str = ""  # what the model's code needs that shaped the spec (ptc.specs.explain's finding)


def _ids(g: torch.Generator, b: int, t: int, vocab: int = 128) -> torch.Tensor:
    return torch.randint(0, vocab, (b, t), generator=g)


def _dynamic_cache(config: Any, layers: int, b: int, heads: int, p: int, d: int, g: torch.Generator) -> Any:
    from transformers import DynamicCache

    cache = DynamicCache(config=config)
    for i in range(layers):
        cache.update(torch.randn(b, heads, p, d, generator=g), torch.randn(b, heads, p, d, generator=g), i)
    return cache


def _register_cache_pytree() -> None:
    """transformers' own registration of DynamicCache as a pytree node (what torch.export needs)."""
    from transformers.integrations.executorch import register_dynamic_cache_export_support

    register_dynamic_cache_export_support()


def _cache_kwarg(model_cls: type) -> str:
    """The name ``model_cls.forward`` takes its KV cache by (``cache`` in newer transformers, ``past_key_values`` before)."""
    params = inspect.signature(model_cls.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def _cache_out(out: Any) -> Any:
    """The cache a model output returns, by either spelling."""
    return out.cache if hasattr(out, "cache") else out.past_key_values


def _at_least(points: List[Point], low: Dict[str, int]) -> List[Point]:
    return [{k: max(v, low.get(k, v)) for k, v in pt.items()} for pt in points]


def _decoder_points(min_t: int = 1) -> Tuple[List[Point], Point, List[Point], List[Point]]:
    """(B, T, P) shapes: new tokens T (at least ``min_t``) on a cache of P, batch B."""
    compile_points = [
        {"B": b, "T": t, "P": p}
        for b, t, p in [
            (2, 3, 5), (3, 4, 7), (4, 7, 9), (2, 16, 2), (5, 2, 30), (8, 32, 64), (6, 9, 13), (7, 5, 40),
            (3, 11, 3), (4, 2, 17), (2, 25, 6), (8, 6, 21), (5, 13, 48), (6, 3, 11), (3, 30, 4), (7, 17, 33),
        ]
    ]
    unseen = [
        {"B": b, "T": t, "P": p}
        for b, t, p in [(1, 1, 1), (2, 1, 8), (1, 5, 3), (3, 27, 50), (8, 32, 63), (5, 1, 2), (4, 12, 29), (6, 2, 58)]
    ]
    infer = [{"B": 2, "T": 5, "P": 3}, {"B": 8, "T": 32, "P": 64}, {"B": 1, "T": 1, "P": 1}]
    low = {"T": min_t}
    return _at_least(compile_points, low), {"B": 2, "T": 3, "P": 5}, _at_least(unseen, low), _at_least(infer, low)


def _decoder_case(name: str, title: str, model_cls: type, config: Any, kind: str, heads: int, min_t: int,
                  why: str = "") -> Case:
    """A causal LM with a DynamicCache of 2 layers, ``heads`` KV heads of 16: new tokens T on a cache of P."""
    cache_kw = _cache_kwarg(model_cls)

    def spec():
        B, T, P = Var("B", min=1, max=8, kind=kind), Var("T", min=min_t, max=32, kind=kind), Var("P", min=1, max=64, kind=kind)
        layer = {"keys": tensor(B, heads, P, 16), "values": tensor(B, heads, P, 16)}
        return {
            "input_ids": tensor(B, T),
            "attention_mask": tensor(B, P + T),
            cache_kw: {"layers": [layer, layer]},
        }, []

    def call(pt, seed):
        g = torch.Generator().manual_seed(seed)
        b, t, p = pt["B"], pt["T"], pt["P"]
        return {
            "input_ids": _ids(g, b, t),
            "attention_mask": torch.ones(b, p + t, dtype=torch.long),
            cache_kw: _dynamic_cache(config, 2, b, heads, p, 16, g),
            "use_cache": True,
        }

    def build():
        torch.manual_seed(0)
        return model_cls(config).eval()

    cp, ep, unseen, inf = _decoder_points(min_t)
    return Case(
        name, title, build, spec, call,
        lambda out: [out.logits, _cache_out(out).layers[-1].keys], cp, ep, unseen, inf, _register_cache_pytree,
        why=why,
    )


def gpt2_case(kind: str) -> Case:
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(
        n_embd=64, n_layer=2, n_head=4, vocab_size=128, n_positions=128, bos_token_id=0, eos_token_id=0
    )
    return _decoder_case("gpt2", "transformers GPT2LMHeadModel (2 layers, 64 wide) + DynamicCache",
                         GPT2LMHeadModel, config, kind, heads=4, min_t=1)


def llama_case(kind: str) -> Case:
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=128, max_position_embeddings=256, bos_token_id=0, eos_token_id=0,
        pad_token_id=0,
    )
    return _decoder_case(
        "llama", "transformers LlamaForCausalLM (2 layers, GQA 4/2 heads) + DynamicCache",
        LlamaForCausalLM, config, kind, heads=2, min_t=2,
        why="T >= 2: the causal mask is built differently for one new token (ptc.specs.explain with T from 1: "
        "'T must be at least 2, imposed at transformers/masking_utils.py (return kv_idx <= q_idx)'); "
        "one-token decoding is a program of its own",
    )


def _encoder_points(min_t: int = 1) -> Tuple[List[Point], Point, List[Point], List[Point]]:
    """(B, T) shapes: sequence T (at least ``min_t``), batch B."""
    compile_points = [
        {"B": b, "T": t}
        for b, t in [
            (2, 5), (3, 8), (4, 17), (2, 64), (5, 2), (8, 33), (6, 9), (7, 40),
            (3, 3), (4, 21), (2, 47), (8, 6), (5, 13), (6, 58), (3, 30), (7, 11),
        ]
    ]
    unseen = [{"B": b, "T": t} for b, t in [(1, 1), (2, 1), (1, 7), (3, 27), (8, 64), (5, 4), (4, 63), (6, 2)]]
    infer = [{"B": 2, "T": 5}, {"B": 8, "T": 64}, {"B": 1, "T": 1}]
    low = {"T": min_t}
    return _at_least(compile_points, low), {"B": 2, "T": 5}, _at_least(unseen, low), _at_least(infer, low)


def bert_case(kind: str) -> Case:
    from transformers import BertConfig, BertModel

    config = BertConfig(
        hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128, vocab_size=128,
        max_position_embeddings=128,
    )

    def spec():
        B, T = Var("B", min=1, max=8, kind=kind), Var("T", min=1, max=64, kind=kind)
        return {"input_ids": tensor(B, T), "attention_mask": tensor(B, T), "token_type_ids": tensor(B, T)}, []

    def call(pt, seed):
        g = torch.Generator().manual_seed(seed)
        b, t = pt["B"], pt["T"]
        mask = torch.ones(b, t, dtype=torch.long)
        mask[0, t // 2 + 1 :] = 0  # padding in the first row
        return {"input_ids": _ids(g, b, t), "attention_mask": mask, "token_type_ids": torch.randint(0, 2, (b, t), generator=g)}

    def build():
        torch.manual_seed(0)
        return BertModel(config).eval()

    cp, ep, unseen, inf = _encoder_points()
    return Case(
        "bert", "transformers BertModel (2 layers, 64 wide)", build, spec, call,
        lambda out: [out.last_hidden_state, out.pooler_output], cp, ep, unseen, inf,
        why="T from 1: the attention branches on one token (ptc.specs.explain: 'T must be at least 2, imposed at "
        "transformers/integrations/sdpa_attention.py (is_causal = q_length > 1 and ...)'), the same result either "
        "way here; ptc.specs.export says so and exports as torch.export does",
    )


def t5_case(kind: str) -> Case:
    from transformers import T5Config, T5ForConditionalGeneration

    config = T5Config(
        d_model=64, d_kv=16, d_ff=128, num_layers=2, num_decoder_layers=2, num_heads=4, vocab_size=128,
        decoder_start_token_id=0, pad_token_id=0, eos_token_id=1,
    )

    def spec():
        B, S, T = Var("B", min=1, max=8, kind=kind), Var("S", min=2, max=64, kind=kind), Var("T", min=2, max=32, kind=kind)
        return {
            "input_ids": tensor(B, S),
            "attention_mask": tensor(B, S),
            "decoder_input_ids": tensor(B, T),
            "decoder_attention_mask": tensor(B, T),
        }, []

    def call(pt, seed):
        g = torch.Generator().manual_seed(seed)
        b, s, t = pt["B"], pt["S"], pt["T"]
        mask = torch.ones(b, s, dtype=torch.long)
        mask[0, s // 2 + 1 :] = 0
        return {
            "input_ids": _ids(g, b, s),
            "attention_mask": mask,
            "decoder_input_ids": _ids(g, b, t),
            "decoder_attention_mask": torch.ones(b, t, dtype=torch.long),
            "use_cache": False,
        }

    def build():
        torch.manual_seed(0)
        return T5ForConditionalGeneration(config).eval()

    compile_points = [
        {"B": b, "S": s, "T": t}
        for b, s, t in [
            (2, 5, 3), (3, 8, 4), (4, 17, 7), (2, 64, 16), (5, 2, 2), (8, 33, 32), (6, 9, 9), (7, 40, 5),
            (3, 3, 11), (4, 21, 2), (2, 47, 25), (8, 6, 6), (5, 13, 13), (6, 58, 3), (3, 30, 30), (7, 11, 17),
        ]
    ]
    unseen = [
        {"B": b, "S": s, "T": t}
        for b, s, t in [(1, 2, 2), (2, 3, 8), (1, 7, 2), (3, 27, 31), (8, 64, 32), (5, 4, 2), (4, 63, 12), (6, 2, 20)]
    ]
    infer = [{"B": 2, "S": 5, "T": 3}, {"B": 8, "S": 64, "T": 32}, {"B": 1, "S": 2, "T": 2}]
    return Case(
        "t5", "transformers T5ForConditionalGeneration (2+2 layers) encoder-decoder", build, spec, call,
        lambda out: [out.logits, out.encoder_last_hidden_state], compile_points, {"B": 2, "S": 5, "T": 3}, unseen, infer,
        why="S, T >= 2: SDPA attention takes another path for one query (ptc.specs.explain with S and T from 1: "
        "'S must be at least 2, imposed at transformers/integrations/sdpa_attention.py "
        "(is_causal = q_length > 1 and ...)', the same for T)",
    )


def _image_points(k: int, lo: int, hi: int) -> Tuple[List[Point], Point, List[Point], List[Point]]:
    """(B, H, W) with H and W multiples of ``k`` in [lo, hi].

    The CNNs downsample by 32 and their code treats a 1x1 final feature map
    apart (torch guards ``(W - 1) // 32 + 1 != 1`` for a backed W: export with
    ``Dim`` fails on it, ptc names it as a constraint), so their images start
    at 64, not 32."""
    sizes = list(range(lo, hi + 1, k))
    compile_points = []
    for i in range(16):
        compile_points.append({"B": 2 + i % 7, "H": sizes[(3 * i + 1) % len(sizes)], "W": sizes[(5 * i + 2) % len(sizes)]})
    unseen = [
        {"B": 1, "H": lo, "W": lo}, {"B": 1, "H": hi, "W": lo}, {"B": 2, "H": sizes[1], "W": hi},
        {"B": 3, "H": sizes[-2], "W": sizes[2]}, {"B": 8, "H": hi, "W": hi}, {"B": 5, "H": sizes[2], "W": sizes[-3]},
        {"B": 1, "H": sizes[3 % len(sizes)], "W": sizes[1]}, {"B": 4, "H": sizes[-1], "W": sizes[-2]},
    ]
    unseen = [u for u in unseen if u not in compile_points][:8]
    # H and W values whose greatest common divisor is k, related to nothing else
    infer = [{"B": 2, "H": lo + k, "W": lo + 3 * k}, {"B": 8, "H": hi, "W": hi}, {"B": 1, "H": lo, "W": lo}]
    return compile_points, {"B": 2, "H": sizes[1], "W": sizes[2]}, unseen, infer


def _image_case(name: str, source: str, build, k: int, lo: int, hi: int, kind: str, extra: Optional[Dict[str, Any]] = None, outputs=None,
                hw_kind: Optional[str] = None, hw_why: str = "") -> Case:
    def spec():
        B = Var("B", min=1, max=8, kind=kind)
        H, W = Var("H", min=lo, max=hi, kind=hw_kind or kind), Var("W", min=lo, max=hi, kind=hw_kind or kind)
        assumptions = [sympy.Eq(H % k, 0), sympy.Eq(W % k, 0)] if k > 1 else []
        return {"pixel_values" if extra is not None else "x": tensor(B, 3, H, W)}, assumptions

    why = (
        f"H, W >= {lo}: a 1x1 final feature map is treated apart (from H, W = {k}, export guards "
        f"(W - 1) // {k} + 1 != 1; ptc.specs.explain names it)"
        if lo > k else ""
    )
    why = "; ".join(w for w in (why, hw_why) if w)

    def call(pt, seed):
        g = torch.Generator().manual_seed(seed)
        x = torch.randn(pt["B"], 3, pt["H"], pt["W"], generator=g)
        return {"pixel_values": x, **extra} if extra is not None else {"x": x}

    cp, ep, unseen, inf = _image_points(k, lo, hi)
    return Case(name, source, build, spec, call, outputs or (lambda out: [out]), cp, ep, unseen, inf, why=why)


def vit_case(kind: str) -> Case:
    from transformers import ViTConfig, ViTForImageClassification

    def build():
        torch.manual_seed(0)
        config = ViTConfig(
            image_size=32, patch_size=8, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
            intermediate_size=128, num_labels=10,
        )
        return ViTForImageClassification(config).eval()

    return _image_case(
        "vit", "transformers ViTForImageClassification (patch 8, interpolate_pos_encoding)", build, 8, 16, 96, kind,
        extra={"interpolate_pos_encoding": True}, outputs=lambda out: [out.logits],
    )


def hf_resnet_case(kind: str) -> Case:
    from transformers import ResNetConfig, ResNetForImageClassification

    def build():
        torch.manual_seed(0)
        config = ResNetConfig(
            embedding_size=16, hidden_sizes=[32, 64, 128, 256], depths=[3, 4, 6, 3], layer_type="bottleneck", num_labels=10
        )
        return ResNetForImageClassification(config).eval()

    return _image_case(
        "resnet50", "transformers ResNetForImageClassification (ResNet-50 layout, 1/8 width)", build, 32, 64, 192, kind,
        extra={}, outputs=lambda out: [out.logits],
    )


def hf_convnext_case(kind: str) -> Case:
    from transformers import ConvNextConfig, ConvNextForImageClassification

    def build():
        torch.manual_seed(0)
        config = ConvNextConfig(hidden_sizes=[16, 32, 64, 128], depths=[1, 1, 2, 1], num_labels=10)
        return ConvNextForImageClassification(config).eval()

    return _image_case(
        "convnext", "transformers ConvNextForImageClassification (depths 1-1-2-1, 16-128 wide)", build, 32, 64, 192, kind,
        extra={}, outputs=lambda out: [out.logits],
    )


def timm_case(name: str, model_name: str, k: int, lo: int, hi: int, kind: str, hw_kind: Optional[str] = None,
              hw_why: str = "", **kwargs: Any) -> Case:
    import timm

    def build():
        torch.manual_seed(0)
        return timm.create_model(model_name, pretrained=False, num_classes=10, **kwargs).eval()

    shown = ", ".join(f"{k}={v}" for k, v in kwargs.items())
    return _image_case(name, f"timm {model_name}" + (f" ({shown})" if shown else ""), build, k, lo, hi, kind,
                       hw_kind=hw_kind, hw_why=hw_why)


def cases(kind: str, names: Optional[Sequence[str]] = None) -> Tuple[List[Case], str]:
    """The model cases (``names``: a subset) and a line saying where the image models come from."""
    _quiet_transformers()
    usable, why = timm_status()
    builders: Dict[str, Callable[[], Case]] = {
        "gpt2": lambda: gpt2_case(kind),
        "llama": lambda: llama_case(kind),
        "bert": lambda: bert_case(kind),
        "t5": lambda: t5_case(kind),
        "vit": lambda: vit_case(kind),
    }
    if usable:
        builders["resnet50"] = lambda: timm_case("resnet50", "resnet50", 32, 64, 192, kind)
        builders["timm-vit"] = lambda: timm_case(
            "timm-vit", "vit_tiny_patch16_224", 16, 32, 128, kind, dynamic_img_size=True, hw_kind="unbacked",
            hw_why="H, W unbacked: timm's PatchEmbed formats H and W into its assertion messages "
            "(timm/layers/patch_embed.py: f'Input height ({H}) ...'), which specialises backed sizes under "
            "torch.compile (with backed H, W ptc logs that and falls back by itself: 2 graphs, 16/16 equal)",
        )
        builders["convnext"] = lambda: timm_case("convnext", "convnext_atto", 32, 64, 192, kind)
        line = f"image models from timm ({why})"
    else:
        builders["resnet50"] = lambda: hf_resnet_case(kind)
        builders["convnext"] = lambda: hf_convnext_case(kind)
        line = f"timm not usable here ({why}): transformers' ResNet and ConvNeXt stand in, and its ViT is the ViT row"
    if names:
        unknown = [n for n in names if n not in builders]
        if unknown:
            raise SystemExit(f"unknown model(s) {unknown}; known here: {', '.join(builders)}")
        builders = {n: builders[n] for n in names}
    return [b() for b in builders.values()], line


# --- measuring -------------------------------------------------------------------


class CountingBackend:
    """A torch.compile backend that counts the graphs it gets and runs ``inner`` on them."""

    def __init__(self, inner: str) -> None:
        from torch._dynamo.backends.registry import lookup_backend

        self.inner = lookup_backend(inner)
        self.graphs: List[torch.fx.GraphModule] = []

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: Any) -> Any:
        self.graphs.append(gm)
        return self.inner(gm, example_inputs)


@dataclasses.dataclass
class Row:
    model: str
    tool: str
    graphs: Any = "-"
    recompiles: Any = "-"
    cv: int = 0
    static_dims: Any = "-"
    errors: int = 0
    equal: int = 0
    calls: int = 0
    seconds: float = 0.0
    note: str = ""

    def fail(self, e: BaseException) -> None:
        if violation(e) is not None or isinstance(e, SpecConstraintError):
            self.cv += 1
        else:
            self.errors += 1
        if not self.note:
            self.note = _first_line(e)


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    first = next((line for line in text if line.strip()), "")
    return f"{type(e).__name__}: {first[:160]}"


def _equal(case: Case, out: Any, ref: Any) -> bool:
    got, want = case.outputs(out), case.outputs(ref)
    return len(got) == len(want) and all(
        g.shape == w.shape and torch.allclose(g, w, atol=case.atol, rtol=1e-4) for g, w in zip(got, want)
    )


def spec_dims(case: Case, spec_cls: type, model: torch.nn.Module, kwargs: Dict[str, Any]) -> List[Tuple[str, int, torch.Tensor]]:
    """(spec path, dim, tensor) of every dim the spec calls variable, for one call."""
    bound = spec_of(spec_cls)
    tensors = bound.traced_leaves(model, **kwargs)
    leaves = [leaf for leaf in bound.leaves if leaf.is_tensor]
    out = []
    for t, leaf in zip(tensors, leaves):
        for j, d in enumerate(leaf.spec.dims):
            if d is not STATIC and not isinstance(d, int):
                out.append((leaf.text, j, t))
    return out


def _norm(path: str) -> str:
    """A spec path (``past_key_values.layers[0].keys``) spelt as Dynamo names graph inputs."""
    return re.sub(r"[^0-9A-Za-z]+", "_", path).strip("_").lower()


def _input_path(node: torch.fx.Node) -> str:
    """A Dynamo graph input's name without the frame's prefix (``l_kwargs_``, ptc's ``l_ptc3_``)."""
    return re.sub(r"^l_(?:kwargs_|ptc\d+_)?", "", node.name).strip("_")


def static_in_graph(gm: torch.fx.GraphModule, wanted: List[Tuple[str, int, torch.Tensor]]) -> Optional[int]:
    """How many of ``wanted`` (spec path, dim) are plain ints in ``gm``'s inputs (None: no input matched)."""
    shapes = {}
    for node in gm.graph.find_nodes(op="placeholder"):
        value = node.meta.get("example_value")
        if isinstance(value, torch.Tensor):
            shapes[_input_path(node)] = value.shape
    matched = [(_norm(p), j) for p, j, _ in wanted if _norm(p) in shapes]
    if not matched:
        return None
    return sum(1 for p, j in matched if not isinstance(shapes[p][j], torch.SymInt))


def static_in_program(ep: Any, kwargs: Dict[str, Any], wanted: List[Tuple[str, int, torch.Tensor]]) -> int:
    """How many of ``wanted`` dims are plain ints in the exported program's inputs."""
    user = set(ep.graph_signature.user_inputs)
    values = [n.meta.get("val") for n in ep.graph.find_nodes(op="placeholder") if n.name in user]
    values = [v for v in values if isinstance(v, torch.Tensor)]
    leaves = [t for t in pytree.tree_leaves(((), kwargs)) if isinstance(t, torch.Tensor)]
    by_id = {id(t): v for t, v in zip(leaves, values)}
    return sum(1 for _, j, t in wanted if id(t) in by_id and not isinstance(by_id[id(t)].shape[j], torch.SymInt))


def save_load(ep: Any) -> Any:
    """``ep`` after ``torch.export.save`` / ``load`` through memory.

    torch's loader logs a warning with a broken format string when it falls
    back to ``weights_only=False`` for the example inputs (custom pytree
    classes such as a KV cache); that logger is kept at ERROR here.
    """
    logging.getLogger("torch._export.serde.serialize").setLevel(logging.ERROR)
    buffer = io.BytesIO()
    torch.export.save(ep, buffer)
    buffer.seek(0)
    return torch.export.load(buffer)


def spec_class(model: torch.nn.Module, params: Any, assumptions: Sequence[Any] = ()) -> type:
    """A subclass of ``model``'s class with the spec, decorated with ``@dynamic_spec``."""
    base = type(model)
    spec = params if isinstance(params, Spec) else Spec(params, assumptions=assumptions)
    return dynamic_spec(spec)(type(f"Spec{base.__name__}", (base,), {"__module__": base.__module__}))


def with_class(model: torch.nn.Module, cls: type) -> torch.nn.Module:
    """A shallow copy of ``model`` (same parameters and buffers) of class ``cls``."""
    import copy

    other = copy.copy(model)
    other.__class__ = cls
    return other


class Runner:
    """Runs the tools on one case; ``model`` is the plain (undecorated) model, the eager reference."""

    def __init__(self, case: Case, backend: str, compile_points: List[Point], unseen_points: List[Point]) -> None:
        self.case = case
        self.backend = backend
        self.compile_points = compile_points
        self.unseen_points = unseen_points
        case.setup()
        self.model = case.build()
        params, assumptions = case.spec()
        self.spec_cls = spec_class(self.model, params, assumptions)
        self.spec_model = with_class(self.model, self.spec_cls)
        self._refs: Dict[Tuple[str, int], Any] = {}

    # -- helpers --

    def ref(self, pt: Point, seed: int) -> Any:
        key = (repr(sorted(pt.items())), seed)
        if key not in self._refs:
            with torch.no_grad():
                self._refs[key] = self.model(**self.case.call(pt, seed))
        return self._refs[key]

    def compile_row(self, tool: str, compiled: Callable, before_call: Callable = lambda kw: None, backend=None, model=None) -> Row:
        row = Row(self.case.name, tool, calls=len(self.compile_points))
        backend = backend or self._backend
        first = None
        start = time.perf_counter()
        wanted = None
        for i, pt in enumerate(self.compile_points):
            kwargs = self.case.call(pt, i)
            wanted = spec_dims(self.case, self.spec_cls, self.model, kwargs)
            try:
                before_call(kwargs)
                with torch.no_grad():
                    out = compiled(**kwargs)
                row.equal += _equal(self.case, out, self.ref(pt, i))
            except Exception as e:  # noqa: BLE001 - every failure is a result
                row.fail(e)
            if first is None:
                first = len(backend.graphs)
        row.seconds = time.perf_counter() - start
        row.graphs = len(backend.graphs)
        row.recompiles = len(backend.graphs) - (first or 0)
        if backend.graphs and wanted:
            counts = [static_in_graph(gm, wanted) for gm in backend.graphs]
            counts = [c for c in counts if c is not None]
            row.static_dims = counts[-1] if counts else "?"
        return row

    def export_row(self, tool: str, make: Callable[[Dict[str, Any]], Any]) -> Row:
        """``make(kwargs)`` exports at the case's export point; the loaded program runs the unseen shapes."""
        row = Row(self.case.name, tool, calls=len(self.unseen_points))
        start = time.perf_counter()
        kwargs = self.case.call(self.case.export_point, 1000)
        wanted = spec_dims(self.case, self.spec_cls, self.model, kwargs)
        try:
            ep = make(kwargs)
            row.graphs = 1
            row.static_dims = static_in_program(ep, kwargs, wanted)
            loaded = save_load(ep).module()
        except Exception as e:  # noqa: BLE001
            row.fail(e)
            row.graphs = 0
            row.seconds = time.perf_counter() - start
            return row
        for i, pt in enumerate(self.unseen_points):
            try:
                with torch.no_grad():
                    out = loaded(**self.case.call(pt, 2000 + i))
                row.equal += _equal(self.case, out, self.ref(pt, 2000 + i))
            except Exception as e:  # noqa: BLE001
                row.fail(e)
        row.seconds = time.perf_counter() - start
        return row

    @property
    def _backend(self) -> CountingBackend:
        return self.__dict__["_current_backend"]

    def fresh_backend(self) -> CountingBackend:
        torch._dynamo.reset()
        self.__dict__["_current_backend"] = CountingBackend(self.backend)
        return self._backend

    # -- tools --

    def ptc_compile(self, spec_model: Optional[torch.nn.Module] = None, tool: str = "ptc-compile") -> Row:
        backend = self.fresh_backend()
        compiled = torch.compile(spec_model or self.spec_model, backend=backend)
        return self.compile_row(tool, compiled)

    def ptc_export(self, spec_model: Optional[torch.nn.Module] = None, tool: str = "ptc-export") -> Row:
        torch._dynamo.reset()
        target = spec_model or self.spec_model
        return self.export_row(tool, lambda kw: export(target, (), kw))

    def inferred_spec(self) -> Spec:
        examples = [((), self.case.call(pt, 3000 + i)) for i, pt in enumerate(self.case.infer_points)]
        kinds = {v.shape_kind for v in spec_of(self.spec_cls).spec.vars}
        # one kind for every inferred variable: unbacked where the hand-written spec needs some
        # (a model that specialises backed sizes), else the spec's own
        kind = "unbacked" if "unbacked" in kinds else (kinds.pop() if len(kinds) == 1 else "backed")
        return infer_spec(self.model, examples, kind=kind)

    def ptc_infer(self) -> Tuple[Row, Row, Spec]:
        start = time.perf_counter()
        spec = self.inferred_spec()
        seconds = time.perf_counter() - start
        model = with_class(self.model, spec_class(self.model, spec))
        a = self.ptc_compile(model, "ptc-infer (a)")
        b = self.ptc_export(model, "ptc-infer (b)")
        a.seconds += seconds
        return a, b, spec

    def plain_compile(self) -> Row:
        backend = self.fresh_backend()
        return self.compile_row("compile", torch.compile(self.model, backend=backend))

    def mark_dynamic(self) -> Row:
        backend = self.fresh_backend()

        def mark(kwargs):
            for _, j, t in spec_dims(self.case, self.spec_cls, self.model, kwargs):
                torch._dynamo.mark_dynamic(t, j)

        return self.compile_row("mark_dynamic", torch.compile(self.model, backend=backend), before_call=mark)

    def native_spec(self) -> Row:
        backend = self.fresh_backend()
        kwargs = self.case.call(self.case.export_point, 0)
        spec = to_native_spec(self.spec_cls, kwargs)
        key = "dynamic_shapes" if _compat.COMPILE_DYNAMIC_SHAPES_KWARG else "shapes_spec"
        return self.compile_row("native-spec", torch.compile(self.model, backend=backend, **{key: spec}))

    def export_dim(self) -> Row:
        torch._dynamo.reset()

        def make(kw):
            shapes = export_dynamic_shapes(self.spec_model, (), kw)
            shapes = pytree.tree_map(_auto_for_expressions, shapes, is_leaf=_is_dim)
            return torch.export.export(self.model, (), kw, dynamic_shapes=shapes)

        return self.export_row("export-Dim", make)

    def export_auto(self) -> Row:
        torch._dynamo.reset()
        from torch.export import Dim

        def make(kw):
            shapes = {
                k: pytree.tree_map(lambda t: {j: Dim.AUTO for j in range(t.dim())} if isinstance(t, torch.Tensor) else None, _flat(v))
                for k, v in kw.items()
            }
            return torch.export.export(self.model, (), kw, dynamic_shapes=shapes)

        return self.export_row("export-AUTO", make)


def _flat(value: Any) -> Any:
    """``value`` with each pytree-registered object replaced by its flattened children (how export reads it)."""
    typ = pytree._get_node_type(value)
    if typ in pytree.SUPPORTED_NODES and typ not in pytree.BUILTIN_TYPES:
        return [_flat(c) for c in pytree.SUPPORTED_NODES[typ].flatten_fn(value)[0]]
    if isinstance(value, dict):
        return {k: _flat(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_flat(v) for v in value)
    return value


def _is_dim(x: Any) -> bool:
    return x is None or isinstance(x, int) or type(x).__name__ in ("Dim", "_Dim", "_DerivedDim", "DerivedDim", "_DimHint", "DimHint") or hasattr(x, "__fn__")


def _auto_for_expressions(x: Any) -> Any:
    """ptc names a Dim for an expression ``Dim`` cannot state ``<vars>_expr``; torch alone has only ``Dim.AUTO`` there."""
    from torch.export import Dim

    name = getattr(x, "__name__", "") or ""
    return Dim.AUTO if name.endswith("_expr") else x


def to_native_spec(spec_cls: type, kwargs: Dict[str, Any]) -> Any:
    """torch's ``ShapesSpec`` for the case's spec: dicts the call passes as objects become ``ObjectSpec``."""
    from torch.fx.experimental import dynamic_spec as native

    from ptc.specs.expr import to_python

    spec = spec_of(spec_cls).spec
    tensor_vars = {v for leaf in spec.leaves if leaf.is_tensor for d in leaf.spec.dims for v in _vars_of(d)}
    natives = {v: (native.ShapeVar if v in tensor_vars else native.IntVar)(v.name, min=v.min, max=v.max) for v in spec.vars}

    def value(expr):
        return eval(to_python(expr, lambda s: f"V[{s.uid}]"), {"V": {v.uid: n for v, n in natives.items()}})  # noqa: S307

    def convert(node, val):
        if isinstance(node, TensorSpec):
            return native.TensorSpec([native.STATIC if d is STATIC else (d if isinstance(d, int) else value(d)) for d in node.dims])
        if isinstance(node, dict):
            if isinstance(val, dict):
                return native.DictSpec({k: convert(v, val[k]) for k, v in node.items()})
            return native.ObjectSpec({k: convert(v, getattr(val, k)) for k, v in node.items()})
        if isinstance(node, (list, tuple)):
            return native.SeqSpec([convert(v, val[i]) for i, v in enumerate(node)])
        return value(node)

    params = {k: convert(v, kwargs[k]) for k, v in spec.params.items()}
    return native.ShapesSpec(native.ParamsSpec(params), assumptions=[value(a) for a in spec.assumptions])


TOOLS = ["ptc-compile", "ptc-export", "ptc-infer", "compile", "mark_dynamic", "native-spec", "export-Dim", "export-AUTO"]


def run_case(case: Case, tools: Sequence[str], backend: str, n_compile: int, n_unseen: int, log=print) -> Tuple[List[Row], Dict[str, str]]:
    """The rows of one model, and what to show about it (its spec, the inferred spec)."""
    runner = Runner(case, backend, case.compile_points[:n_compile], case.unseen_points[:n_unseen])
    info = {"spec": repr(spec_of(runner.spec_cls).spec)}
    rows: List[Row] = []
    for tool in tools:
        if tool == "native-spec" and not (_compat.NATIVE_SHAPES_SPEC and (_compat.COMPILE_SHAPES_SPEC_KWARG or _compat.COMPILE_DYNAMIC_SHAPES_KWARG)):
            continue
        try:
            if tool == "ptc-infer":
                a, b, spec = runner.ptc_infer()
                info["inferred"] = repr(spec)
                new = [a, b]
            else:
                method = {
                    "ptc-compile": runner.ptc_compile, "ptc-export": runner.ptc_export, "compile": runner.plain_compile,
                    "mark_dynamic": runner.mark_dynamic, "native-spec": runner.native_spec,
                    "export-Dim": runner.export_dim, "export-AUTO": runner.export_auto,
                }[tool]
                new = [method()]
        except Exception as e:  # noqa: BLE001 - a tool that cannot even start is a result
            row = Row(case.name, tool, graphs=0)
            row.fail(e)
            if os.environ.get("PTC_BENCH_TRACEBACK"):
                traceback.print_exc()
            new = [row]
        for row in new:
            log(format_row(row), flush=True)
        rows.extend(new)
    return rows, info


HEADER = f"{'model':9} {'tool':15} {'graphs':>6} {'recomp':>6} {'cv':>3} {'static':>6} {'errors':>6} {'equal':>7} {'seconds':>8}"


def format_row(r: Row) -> str:
    return (
        f"{r.model:9} {r.tool:15} {r.graphs!s:>6} {r.recompiles!s:>6} {r.cv:3d} {r.static_dims!s:>6} "
        f"{r.errors:6d} {f'{r.equal}/{r.calls}':>7} {r.seconds:8.1f}"
    )


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="GPT-2 and ResNet-50 only, 6 compile shapes, 3 unseen")
    parser.add_argument("--models", help="comma-separated subset of the models")
    parser.add_argument("--tools", help=f"comma-separated subset of {','.join(TOOLS)}")
    parser.add_argument("--backend", default="aot_eager", help="torch.compile backend for every compile row")
    parser.add_argument("--kind", default="backed", choices=("backed", "unbacked"), help="the kind of every spec variable")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    # torch 2.14 fails to log its compile metrics when the config holds a native ShapesSpec's SymInts
    logging.getLogger("torch._dynamo.metrics_context").setLevel(logging.CRITICAL)
    names = args.models.split(",") if args.models else (["gpt2", "resnet50"] if args.quick else None)
    tools = args.tools.split(",") if args.tools else TOOLS
    n_compile, n_unseen = (6, 3) if args.quick else (16, 8)
    import transformers

    all_cases, image_line = cases(args.kind, names)
    print(f"# {datetime.datetime.now().isoformat(timespec='seconds')}  {platform.node()}  {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, 1 torch thread")
    print(f"# python {platform.python_version()}, torch {torch.__version__}, transformers {transformers.__version__}; {image_line}")
    print(f"# command: python {' '.join(sys.argv)}")
    print(f"# compile backend {args.backend}; {n_compile} in-spec shapes per compile row, {n_unseen} unseen shapes per export row")
    print(HEADER, flush=True)
    rows, infos = [], {}
    for case in all_cases:
        case_rows, infos[case.name] = run_case(case, tools, args.backend, n_compile, n_unseen)
        rows.extend(case_rows)
    print("\n# specs")
    for case in all_cases:
        print(f"{case.name} ({case.source}):\n  spec:     {infos[case.name]['spec']}")
        if case.why:
            print(f"  why:      {case.why}")
        if "inferred" in infos[case.name]:
            print(f"  inferred: {infos[case.name]['inferred']}")
    notes = [r for r in rows if r.note]
    if notes:
        print("\n# first error of each row that had one")
        for r in notes:
            print(f"{r.model:9} {r.tool:15} {r.note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
