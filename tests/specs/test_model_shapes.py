"""What real models pass to a spec'd forward: keyword calls of signatures with
many defaults, KV-cache objects (pytree-registered, described by attribute
path), namedtuples, masks whose length is a sum of two variables; and
``infer_spec`` on modules and such calls. Small stand-ins for transformers'
classes, so these run in the fast suite."""

import collections
import functools

import pytest
import torch
import torch.utils._pytree as pytree

import ptc
from ptc.specs import Var, dynamic_spec, export, export_dynamic_shapes, spec_of, tensor
from ptc.specs.infer import infer_spec

from .helpers import Graphs, save_load


class Layer:
    def __init__(self, keys):
        self.keys = keys
        self.is_initialized = True


class Cache:
    """A KV cache as transformers keeps one: an object whose layers hold tensors as attributes."""

    def __init__(self, keys):
        self.layers = [Layer(k) for k in keys]

    def append(self, new):
        for layer, n in zip(self.layers, new):
            layer.keys = torch.cat([layer.keys, n], dim=1)


pytree.register_pytree_node(
    Cache,
    lambda c: ([layer.keys for layer in c.layers], len(c.layers)),
    lambda keys, n: Cache(list(keys)),
    serialized_type_name=f"{__name__}.Cache",
    flatten_with_keys_fn=lambda c: ([(pytree.SequenceKey(i), layer.keys) for i, layer in enumerate(c.layers)], len(c.layers)),
)


class Decoder(torch.nn.Module):
    """forward(ids, mask=None, cache=None, ...): new tokens attend to the cache and to themselves."""

    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(32, 4)

    def forward(self, ids, mask=None, cache=None, position_ids=None, use_cache=False, scale=1.0, **kwargs):
        h = self.embed(ids)  # (B, T, 4)
        cache.append([h, h])
        keys = cache.layers[-1].keys  # (B, P + T, 4)
        scores = (h @ keys.transpose(1, 2)) * scale + (1 - mask[:, None, :].float()) * -1e4
        return scores.softmax(-1) @ keys


def _cache(b, p, layers=2, seed=0):
    g = torch.Generator().manual_seed(seed)
    return Cache([torch.randn(b, p, 4, generator=g) for _ in range(layers)])


def _call(b, t, p, seed=0):
    g = torch.Generator().manual_seed(seed)
    return {"ids": torch.randint(0, 32, (b, t), generator=g), "mask": torch.ones(b, p + t), "cache": _cache(b, p, seed=seed)}


def spec_decoder():
    B, T, P = Var("B", min=1, max=8), Var("T", min=1, max=16), Var("P", min=1, max=32)
    layer = {"keys": tensor(B, P, 4)}

    @dynamic_spec({"ids": tensor(B, T), "mask": tensor(B, P + T), "cache": {"layers": [layer, layer]}})
    class SpecDecoder(Decoder):
        pass

    torch.manual_seed(0)
    return SpecDecoder().eval()


def _reference(model, kwargs):
    plain = Decoder()
    plain.load_state_dict(model.state_dict())
    return plain(**kwargs)


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()


def test_export_of_a_keyword_call_keys_dynamic_shapes_by_the_passed_arguments():
    """A forward with defaults and **kwargs, called with three of them by keyword:
    torch.export wants exactly those three keys, not every parameter."""
    model = spec_decoder()
    kwargs = _call(2, 3, 5)
    shapes = export_dynamic_shapes(model, (), kwargs)
    assert list(shapes) == ["ids", "mask", "cache"]  # signature order, defaults left out
    ep = export(model, (), kwargs)
    assert len(ep.range_constraints) >= 3


def test_export_reads_a_pytree_registered_cache_through_the_spec_attribute_paths():
    """The cache's tensors are described by attribute path; export sees the cache
    as its flattened children and still gets a Dim for P: the loaded program runs
    at cache lengths it never saw."""
    model = spec_decoder()
    kwargs = _call(2, 3, 5)
    shapes = export_dynamic_shapes(model, (), kwargs)
    cache_shapes = shapes["cache"]
    assert isinstance(cache_shapes, list) and len(cache_shapes) == 2
    assert all(s[1].__name__ == "P" for s in cache_shapes)
    loaded = save_load(export(model, (), kwargs)).module()
    for b, t, p in [(1, 1, 1), (3, 7, 20), (8, 16, 32)]:
        got = loaded(**_call(b, t, p, seed=b))
        assert torch.allclose(got, _reference(model, _call(b, t, p, seed=b)), atol=1e-5)


def test_compile_marks_the_cache_tensors_one_graph_for_every_length():
    model = spec_decoder()
    backend = Graphs()
    compiled = torch.compile(model, backend=backend)
    for b, t, p in [(2, 3, 5), (3, 4, 9), (4, 7, 2), (5, 16, 32)]:
        assert torch.allclose(compiled(**_call(b, t, p)), _reference(model, _call(b, t, p)), atol=1e-5)
    assert len(backend.graphs) == 1
    with pytest.raises(ptc.SpecViolation, match="mask.shape"):
        compiled(**dict(_call(2, 3, 5), mask=torch.ones(2, 9)))


def test_export_of_a_namedtuple_argument():
    Pair = collections.namedtuple("Pair", ["a", "b"])
    B = Var("B", min=2, max=16)

    @dynamic_spec({"pair": {"a": tensor(B, 3), "b": tensor(B)}})
    def f(pair):
        return pair.a.sum(1) + pair.b

    pair = Pair(torch.randn(4, 3), torch.randn(4))
    shapes = export_dynamic_shapes(f, (pair,))
    assert type(shapes["pair"]) is Pair
    ep = export(f, (pair,))
    other = Pair(torch.randn(9, 3), torch.randn(9))
    assert torch.allclose(ep.module()(other), f(other))


def test_infer_spec_of_a_module_keys_the_spec_by_forward_parameters():
    class M(torch.nn.Module):
        def forward(self, x, mask=None):
            return x * mask

    examples = [((torch.randn(b, 3),), {"mask": torch.ones(b, 3)}) for b in (2, 5, 7)]
    for target in (M(), M):
        spec = infer_spec(target, examples)
        assert set(spec.params) == {"x", "mask"}
        assert spec.params["x"].dims[0] is spec.params["mask"].dims[0]


def test_infer_spec_follows_cache_objects_and_states_the_mask_as_a_sum():
    """The mask (length P + T) comes before the cache in the signature: the spec
    still has one variable per length and the mask's dim as their sum, and it
    passes compile and export."""
    model = Decoder().eval()
    examples = [((), _call(b, t, p, seed=i)) for i, (b, t, p) in enumerate([(2, 4, 3), (8, 16, 32), (1, 1, 1)])]
    spec = infer_spec(model, examples)
    b, t = spec.params["ids"].dims
    layer_dims = [layer["keys"].dims for layer in spec.params["cache"]["layers"]]
    (p_dim,) = {dims[1] for dims in layer_dims}
    assert all(dims[0] is b and dims[2] == 4 for dims in layer_dims)
    assert spec.params["mask"].dims == (b, t + p_dim)
    assert sorted(v.name for v in spec.vars) == sorted({b.name, t.name, *map(str, p_dim.free_symbols)})

    spec_cls = dynamic_spec(spec)(type("Inferred", (Decoder,), {}))
    inferred = spec_cls()
    inferred.load_state_dict(model.state_dict())
    backend = Graphs()
    compiled = torch.compile(inferred, backend=backend)
    for b_, t_, p_ in [(2, 3, 5), (7, 9, 30), (4, 2, 2)]:
        assert torch.allclose(compiled(**_call(b_, t_, p_)), model(**_call(b_, t_, p_)), atol=1e-5)
    assert len(backend.graphs) == 1
    loaded = save_load(export(inferred, (), _call(2, 3, 5))).module()
    assert torch.allclose(loaded(**_call(8, 16, 32)), model(**_call(8, 16, 32)), atol=1e-5)


def test_infer_spec_sum_of_two_earlier_variables():
    def f(x, y, z):
        return x

    examples = [(torch.ones(b, t), torch.ones(p), torch.ones(b + t + p, p + t + 1)) for b, t, p in [(2, 3, 9), (5, 1, 4), (7, 6, 2)]]
    spec = infer_spec(f, examples)
    b, t = spec.params["x"].dims
    (p,) = spec.params["y"].dims
    assert spec.params["z"].dims[1] == p + t + 1
    assert spec_of(dynamic_spec(spec)(f)) is not None


def _config_defaults(forward):
    """As transformers' ``merge_with_config_defaults``: ``use_cache`` comes from
    the kwargs or the config, and is passed on as a keyword."""

    @functools.wraps(forward)
    def wrapper(self, *args, **kwargs):
        if kwargs.get("use_cache") is None:
            kwargs["use_cache"] = self.config_use_cache
        return forward(self, *args, **kwargs)

    return wrapper


class Encoder(torch.nn.Module):
    config_use_cache = False

    @_config_defaults
    def forward(self, input_ids=None, attention_mask=None, use_cache=None, **kwargs):
        assert use_cache is False
        return input_ids * attention_mask


def test_a_forward_decorated_to_fill_defaults_from_kwargs_runs_in_every_consumer():
    """ptc forwards parameters that have defaults by keyword, as a caller passes
    them; positionally, such a decorator would pass ``use_cache`` twice."""
    B, T = Var("B", min=1, max=8), Var("T", min=1, max=64)

    @dynamic_spec({"input_ids": tensor(B, T), "attention_mask": tensor(B, T)})
    class SpecEncoder(Encoder):
        pass

    model = SpecEncoder()
    kw = {"input_ids": torch.randn(2, 5), "attention_mask": torch.ones(2, 5)}
    torch.testing.assert_close(model(**kw), kw["input_ids"])
    torch._dynamo.reset()
    torch.testing.assert_close(torch.compile(model, backend="eager")(**kw), kw["input_ids"])
    loaded = save_load(export(model, (), kw)).module()
    x = torch.randn(3, 7)
    torch.testing.assert_close(loaded(input_ids=x, attention_mask=torch.ones(3, 7)), x)
