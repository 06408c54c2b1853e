"""ptc's own conditional nodes (``ptc.cudagraph.cuda_nodes``) driven on the CPU.

``FakeDriver`` stands in for ``cuda.bindings.driver``: it models stream capture
(each stream captures into a graph, a launch appends a node after the stream's
current dependencies) so the tests check the graph that ``ConditionalNodes``
builds, in both spellings of the driver API (cuda-bindings 12.x and 13.x). This
is the CPU twin of the GPU tests in test_cuda.py; the set-handle kernels
themselves compile on the CPU with NVRTC where it is installed."""

import itertools

import pytest
import torch

from ptc import _compat
from ptc.cudagraph import cuda_nodes
from ptc.cudagraph.cuda_nodes import ConditionalNodes, DriverApi
from ptc.errors import CaptureError


class _Enum:
    def __init__(self, *names):
        for i, n in enumerate(names):
            setattr(self, n, i)


class Node:
    def __init__(self, kind, deps, **info):
        self.kind, self.deps, self.info = kind, list(deps), info

    def __repr__(self):
        return self.kind


class Graph:
    def __init__(self, name):
        self.name, self.nodes = name, []

    def shape(self):
        """Nodes in order, each conditional with its bodies' shapes."""
        out = []
        for n in self.nodes:
            if n.kind == "cond":
                out.append((n.info["type"], [b.shape() for b in n.info["bodies"]]))
            else:
                out.append(n.kind)
        return out


class _Conditional:
    handle = ctx = type = size = None
    phGraph_out = None


class _Params:
    def __init__(self):
        self.type = None
        self.conditional = _Conditional()


class _Call:
    """A callable with its own docstring (the bindings' first docstring line is the signature)."""

    def __init__(self, fn, doc):
        self.fn, self.__doc__ = fn, doc

    def __call__(self, *args):
        return self.fn(*args)


class FakeDriver:
    """The subset of cuda.bindings.driver ptc uses, with a model of stream capture."""

    def __init__(self, edges=True, version=12080):
        self.edges, self.ver = edges, version
        self.CUstreamCaptureStatus = _Enum("CU_STREAM_CAPTURE_STATUS_NONE", "CU_STREAM_CAPTURE_STATUS_ACTIVE")
        self.CUgraphNodeType = _Enum("CU_GRAPH_NODE_TYPE_KERNEL", "CU_GRAPH_NODE_TYPE_CONDITIONAL")
        self.CUgraphConditionalNodeType = _Enum("CU_GRAPH_COND_TYPE_IF", "CU_GRAPH_COND_TYPE_WHILE", "CU_GRAPH_COND_TYPE_SWITCH")
        self.CUstreamUpdateCaptureDependencies_flags = _Enum("CU_STREAM_ADD_CAPTURE_DEPENDENCIES", "CU_STREAM_SET_CAPTURE_DEPENDENCIES")
        self.CUstreamCaptureMode = _Enum("CU_STREAM_CAPTURE_MODE_GLOBAL", "CU_STREAM_CAPTURE_MODE_THREAD_LOCAL", "CU_STREAM_CAPTURE_MODE_RELAXED")
        self.CUgraphNodeParams = _Params
        self.capturing = {}  # stream -> [graph, deps]
        self.handles = itertools.count(100)
        self.log = []
        sig = "(hGraph, dependencies, dependencyData, size_t numDependencies, nodeParams)" if edges else \
              "(hGraph, dependencies, size_t numDependencies, nodeParams)"
        self.cuGraphAddNode = _Call(self._add_node, f"cuGraphAddNode{sig}\n")

    # capture model
    def start(self, stream, graph):
        self.capturing[stream] = [graph, []]

    def _append(self, stream, node):
        graph, deps = self.capturing[stream]
        node.deps = list(deps)
        graph.nodes.append(node)
        self.capturing[stream][1] = [node]

    # driver calls
    def CUstream(self, handle):
        return handle

    def cuDriverGetVersion(self):
        return 0, self.ver

    def cuGetErrorName(self, err):
        return 0, f"CUDA_ERROR_{err}".encode()

    def cuStreamGetCaptureInfo(self, stream):
        if stream not in self.capturing:
            return (0, self.CUstreamCaptureStatus.CU_STREAM_CAPTURE_STATUS_NONE, 0, None, None) + ((None,) if self.edges else ()) + (0,)
        graph, deps = self.capturing[stream]
        return (0, self.CUstreamCaptureStatus.CU_STREAM_CAPTURE_STATUS_ACTIVE, 1, graph, list(deps)) + (
            ([None] * len(deps),) if self.edges else ()) + (len(deps),)

    def cuStreamGetCtx(self, stream):
        return 0, "ctx"

    def cuCtxGetCurrent(self):
        return 0, "ctx"

    def cuGraphConditionalHandleCreate(self, graph, ctx, default, flags):
        assert ctx == "ctx" and default == 0 and flags == 0
        return 0, next(self.handles)

    def _add_node(self, graph, deps, *rest):
        if self.edges:
            data, n, params = rest
            assert data is None
        else:
            n, params = rest
        assert n == len(deps) and params.type == self.CUgraphNodeType.CU_GRAPH_NODE_TYPE_CONDITIONAL
        c = params.conditional
        kind = {0: "IF", 1: "WHILE", 2: "SWITCH"}[c.type]
        bodies = [Graph(f"{kind}.body{i}") for i in range(c.size)]
        c.phGraph_out = bodies
        node = Node("cond", deps, type=kind, handle=c.handle, bodies=bodies)
        graph.nodes.append(node)
        self.log.append(("add", kind, c.size))
        return 0, node

    def cuStreamUpdateCaptureDependencies(self, stream, deps, *rest):
        n, flags = (rest[1], rest[2]) if self.edges else rest
        assert n == 1 and flags == 1
        self.capturing[stream][1] = list(deps)
        return (0,)

    def cuStreamBeginCaptureToGraph(self, stream, graph, deps, data, n, mode):
        assert stream not in self.capturing, "a stream already capturing cannot begin again"
        self.start(stream, graph)
        self.log.append(("begin", graph.name))
        return (0,)

    def cuStreamEndCapture(self, stream):
        graph, _ = self.capturing.pop(stream)
        self.log.append(("end", graph.name))
        return 0, graph

    def cuModuleLoadData(self, image):
        assert image == b"cubin"
        self.log.append(("load",))
        return 0, "module"

    def cuModuleGetFunction(self, module, name):
        return 0, name.decode()

    def cuLaunchKernel(self, f, gx, gy, gz, bx, by, bz, shm, stream, params, extra):
        assert (gx, gy, gz, bx, by, bz) == (1, 1, 1, 1, 1, 1)
        self._append(stream, Node(f"set:{f[8:]}", []))
        return (0,)


class FakeStream:
    ids = itertools.count(1)

    def __init__(self, device=None):
        self.cuda_stream = next(self.ids)


@pytest.fixture(params=["13.x", "12.x"])
def nodes(request, monkeypatch):
    """ConditionalNodes on a FakeDriver, inside a (fake) capture on stream ``main``."""
    drv = FakeDriver(edges=request.param == "13.x")
    main = FakeStream()
    current = {"stream": main}
    routing = []
    monkeypatch.setattr(_compat, "CUDA_THREAD_POOL_ROUTING", True, raising=False)
    monkeypatch.setattr(cuda_nodes, "compile_set_kernels", lambda arch: b"cubin")
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda d=None: (9, 0))
    monkeypatch.setattr(torch.cuda, "graph_pool_handle", lambda: ("body", 1))
    monkeypatch.setattr(torch.cuda, "Stream", FakeStream)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda d=None: current["stream"])
    monkeypatch.setattr(torch.cuda, "set_stream", lambda s: current.__setitem__("stream", s))
    routed = set()

    def begin_routing(d, p):  # torch: "beginAllocateToPool: already recording to mempool_id"
        if p in routed:
            raise RuntimeError("beginAllocateToPool: already recording to mempool_id")
        routed.add(p)
        routing.append(("+", p))

    def end_routing(d, p):
        routed.remove(p)
        routing.append(("-", p))

    monkeypatch.setattr(torch._C, "_cuda_beginAllocateCurrentThreadToPool", begin_routing, raising=False)
    monkeypatch.setattr(torch._C, "_cuda_endAllocateToPool", end_routing, raising=False)
    monkeypatch.setattr(torch._C, "_cuda_releasePool", lambda d, p: routing.append(("release", p)), raising=False)
    cn = ConditionalNodes(api=DriverApi(drv))
    root = Graph("root")
    drv.start(main.cuda_stream, root)
    return cn, drv, root, current, main, routing


def kernel(drv, current):
    """A captured 'user' kernel on torch's current stream."""
    drv._append(current["stream"].cuda_stream, Node("k", []))


B = torch.tensor(True)
I = torch.tensor(1, dtype=torch.int32)


def test_driver_api_sees_the_bindings_spelling():
    assert DriverApi(FakeDriver(edges=True)).edges and not DriverApi(FakeDriver(edges=False)).edges


def test_while_node_sets_its_handle_before_and_at_the_end_of_the_body(nodes):
    cn, drv, root, current, main, routing = nodes
    kernel(drv, current)
    cn.begin("while", B)
    assert current["stream"] is not main and cn.depth == 1
    kernel(drv, current)
    cn.set_handle(B)
    cn.end()
    kernel(drv, current)  # after the loop, on the parent stream again
    assert current["stream"] is main and cn.depth == 0
    assert root.shape() == ["k", "set:bool", ("WHILE", [["k", "set:bool"]]), "k"]
    cond = root.nodes[2]
    assert cond.deps == [root.nodes[1]] and root.nodes[3].deps == [cond]  # set -> node -> next
    assert cond.info["handle"] == 100
    assert routing == [("+", ("body", 1)), ("-", ("body", 1))]


def test_if_else_and_switch_capture_each_body_in_turn(nodes):
    cn, drv, root, current, main, routing = nodes
    cn.begin("if", B, 2)
    kernel(drv, current)
    cn.next_body()
    kernel(drv, current)
    kernel(drv, current)
    cn.end()
    cn.begin("switch", I, 3)
    for k in range(3):
        if k:
            cn.next_body()
        kernel(drv, current)
    cn.end()
    assert root.shape() == ["set:bool", ("IF", [["k"], ["k", "k"]]), "set:index", ("SWITCH", [["k"], ["k"], ["k"]])]
    assert [e for e in drv.log if e[0] == "add"] == [("add", "IF", 2), ("add", "SWITCH", 3)]
    assert routing == [("+", ("body", 1)), ("-", ("body", 1))] * 2  # once per outermost node


def test_nested_nodes_capture_into_their_own_bodies(nodes):
    cn, drv, root, current, main, routing = nodes
    cn.begin("while", B)
    outer = current["stream"]
    cn.begin("if", B)
    assert current["stream"] not in (main, outer)
    kernel(drv, current)
    cn.end()
    assert current["stream"] is outer
    cn.set_handle(B)
    cn.end()
    assert root.shape() == ["set:bool", ("WHILE", [["set:bool", ("IF", [["k"]]), "set:bool"]])]
    assert routing == [("+", ("body", 1)), ("-", ("body", 1))]  # the pool is routed once, for both bodies


def test_abort_unwinds_every_open_node(nodes):
    cn, drv, root, current, main, routing = nodes
    cn.begin("while", B)
    cn.begin("switch", I, 2)
    cn.abort()
    assert current["stream"] is main and cn.depth == 0 and list(drv.capturing) == [main.cuda_stream]
    assert routing == [("+", ("body", 1)), ("-", ("body", 1))]


def test_a_begin_that_fails_leaves_nothing_open(nodes, monkeypatch):
    cn, drv, root, current, main, routing = nodes

    def refuse(d, p):
        raise RuntimeError("beginAllocateToPool: already recording to mempool_id")

    monkeypatch.setattr(torch._C, "_cuda_beginAllocateCurrentThreadToPool", refuse, raising=False)
    with pytest.raises(RuntimeError, match="already recording"):
        cn.begin("while", B)
    assert current["stream"] is main and cn.depth == 0 and list(drv.capturing) == [main.cuda_stream]


def test_misuse_raises_capture_errors(nodes):
    cn, drv, root, current, main, routing = nodes
    with pytest.raises(CaptureError, match="outside a conditional node"):
        cn.end()
    with pytest.raises(CaptureError, match="cannot have 2 bodies"):
        cn.begin("while", B, 2)
    with pytest.raises(CaptureError, match="unknown conditional node kind"):
        cn.begin("until", B)
    cn.begin("if", B)
    with pytest.raises(CaptureError, match="has only 1 bodies"):
        cn.next_body()
    cn.end()
    drv.capturing.clear()  # the capture is gone
    with pytest.raises(CaptureError, match="no stream capture is under way"):
        cn.begin("if", B)


def test_a_failed_body_ends_quietly_and_restores_the_stream(nodes):
    cn, drv, root, current, main, routing = nodes
    cn.begin("while", B)
    drv.capturing.pop(current["stream"].cuda_stream)  # the body's capture was invalidated

    def broken(stream):
        return 1, None

    drv.cuStreamEndCapture = broken
    with pytest.raises(CaptureError, match="cuStreamEndCapture failed with CUDA_ERROR_1"):
        cn.end()
    cn.begin("while", B)
    cn.end(failed=True)  # while another error propagates: no second error
    assert current["stream"] is main and cn.depth == 0
    assert routing.count(("+", ("body", 1))) == routing.count(("-", ("body", 1)))


def test_release_gives_the_body_pool_back_once(nodes):
    cn, drv, root, current, main, routing = nodes
    cn.release()
    cn.release()
    assert routing == [("release", ("body", 1))]


@pytest.mark.parametrize("version,expected", [(12030, (False, False)), (12040, (True, False)), (12080, (True, True)), (13000, (True, True))])
def test_driver_capabilities_by_version(version, expected):
    caps = cuda_nodes.driver_capabilities(DriverApi(FakeDriver(version=version)))
    assert (caps["while_if"], caps["if_else_switch"]) == expected
    assert caps["version"] == (version // 1000, version % 1000 // 10)


def test_set_kernels_compile_on_the_cpu():
    if not _compat.CUDA_PYTHON_BINDINGS:
        pytest.skip("cuda-python is not installed here; the FakeDriver tests above cover the logic")
    try:
        cubins = {arch: cuda_nodes.compile_set_kernels(arch) for arch in ("sm_90", "sm_100")}
    except cuda_nodes.FeatureUnavailable as e:
        pytest.skip(f"NVRTC is not installed here: {e}")
    for arch, cubin in cubins.items():
        assert cubin[:4] == b"\x7fELF", arch
        assert b"ptc_set_bool" in cubin and b"ptc_set_index" in cubin, arch


def test_the_kernels_are_loaded_once_per_device(nodes):
    cn, drv, root, current, main, routing = nodes
    again = ConditionalNodes(api=cn.api)
    assert again.functions is cn.functions and drv.log.count(("load",)) == 1
