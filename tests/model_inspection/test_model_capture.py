"""ModelCapture on real models: indices, paths, quotas, dtypes and cleanup."""

from __future__ import annotations

import dataclasses
import threading
import warnings
from collections import namedtuple
from typing import Any

import pytest
import torch
from mi_models import SmallCNN, TiedLanguageModel, assert_no_hooks
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from vinlens.model_inspection import (
    CaptureLimits,
    ModelCapture,
    TensorSnapshot,
    capture_model,
)
from vinlens.model_inspection.capture import _row_major_prefix

BIG = CaptureLimits(max_tensors=10_000, max_bytes=10_000_000)


def by(snapshots: tuple[TensorSnapshot, ...], **match: Any) -> list[TensorSnapshot]:
    return [s for s in snapshots if all(getattr(s, k) == v for k, v in match.items())]


class Doubler(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 2


class Recursive(nn.Module):
    """Calls itself: call k sees input base + k and returns 2 * (its inner result)."""

    def forward(self, x: torch.Tensor, depth: int) -> torch.Tensor:
        if depth == 0:
            return x.clone()
        return self(x + 1, depth - 1) * 2


def test_transformer_default_limits_bound_the_trace(tiny_transformer: nn.Transformer) -> None:
    src, tgt = torch.randn(2, 5, 16), torch.randn(2, 4, 16)
    expected = tiny_transformer(src, tgt)
    with capture_model(tiny_transformer) as capture:
        assert capture.active
        output = tiny_transformer(src, tgt)
    assert not capture.active
    assert_no_hooks(tiny_transformer)
    torch.testing.assert_close(output, expected, rtol=0, atol=0)
    snapshots = capture.snapshots
    assert 0 < len(snapshots) <= 64
    assert capture.sampled_bytes == sum(s.sampled_bytes for s in snapshots) <= 16 * 1024
    first = snapshots[0]
    assert (first.module_path, first.call_index, first.direction, first.tensor_path) == (
        "<root>",
        0,
        "input",
        "args[0]",
    )
    assert first.shape == (2, 5, 16) and first.numel == 160 and first.device == "cpu"
    assert first.values == tuple(src.reshape(-1)[:32].tolist())
    assert first.sampled_bytes == 32 * 4
    assert (
        by(snapshots, module_path="<root>", tensor_path="args[1]")[0].values[0]
        == tgt[0, 0, 0].item()
    )


def test_only_selected_paths_and_output_paths(tiny_transformer: nn.Transformer) -> None:
    paths = ["encoder.layers.0.self_attn", "decoder.norm"]
    with capture_model(tiny_transformer, module_paths=paths, limits=BIG) as capture:
        tiny_transformer(torch.randn(1, 3, 16), torch.randn(1, 2, 16))
    snapshots = capture.snapshots
    assert {s.module_path for s in snapshots} == set(paths)
    attention_outputs = by(snapshots, module_path=paths[0], direction="output")
    # The encoder layer asks for need_weights=False: output is (attn_output, None).
    assert [s.tensor_path for s in attention_outputs] == ["output[0]"]
    assert [s.tensor_path for s in by(snapshots, module_path=paths[0], direction="input")][:3] == [
        "args[0]",
        "args[1]",
        "args[2]",
    ]


def test_call_index_is_shared_by_input_and_output_of_each_invocation() -> None:
    shared = Doubler()
    model = nn.Sequential(shared, nn.ReLU(), shared)
    x = torch.arange(4.0)
    with capture_model(model, module_paths=["0"], limits=BIG) as capture:
        model(x)
    rows = [(s.call_index, s.direction, s.values) for s in capture.snapshots]
    assert rows == [
        (0, "input", (0.0, 1.0, 2.0, 3.0)),
        (0, "output", (0.0, 2.0, 4.0, 6.0)),
        (1, "input", (0.0, 2.0, 4.0, 6.0)),
        (1, "output", (0.0, 4.0, 8.0, 12.0)),
    ]


def test_recursive_calls_pair_inputs_with_their_own_outputs() -> None:
    model = Recursive()
    with capture_model(model, limits=BIG) as capture:
        model(torch.zeros(1), 3)
    inputs = {s.call_index: s.values[0] for s in by(capture.snapshots, direction="input")}
    outputs = {s.call_index: s.values[0] for s in by(capture.snapshots, direction="output")}
    assert inputs == {0: 0.0, 1: 1.0, 2: 2.0, 3: 3.0}
    # Innermost (call 3) returns 3; each outer level doubles what its inner call returned.
    assert outputs == {3: 3.0, 2: 6.0, 1: 12.0, 0: 24.0}
    # Outputs are recorded innermost first, inputs outermost first.
    assert [s.call_index for s in by(capture.snapshots, direction="output")] == [3, 2, 1, 0]


class Resilient(nn.Module):
    """Calls a child that raises, catches the error and carries on."""

    def __init__(self, error: type[BaseException]) -> None:
        super().__init__()
        self.child = Doubler()
        self.error = error

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        def boom(module: nn.Module, args: tuple[Any, ...], output: Any) -> None:
            raise self.error("child failed")

        handle = self.child.register_forward_hook(boom)
        try:
            self.child(x)
        except self.error:
            pass
        finally:
            handle.remove()
        return self.child(x + 10)


@pytest.mark.parametrize("error", [ValueError, KeyboardInterrupt])
def test_exception_caught_inside_forward_keeps_later_indices_paired(
    error: type[BaseException],
) -> None:
    model = Resilient(error)
    with capture_model(model, limits=BIG) as capture:
        model(torch.ones(2))
    child_in = {
        s.call_index: s.values
        for s in by(capture.snapshots, module_path="child", direction="input")
    }
    child_out = {
        s.call_index: s.values
        for s in by(capture.snapshots, module_path="child", direction="output")
    }
    assert child_in == {0: (1.0, 1.0), 1: (11.0, 11.0)}
    # The failed call has no output sample (a Python exception may reach the always-call
    # hook with the result computed before the failing hook; a KeyboardInterrupt never does).
    assert child_out[1] == (22.0, 22.0)
    root_out = by(capture.snapshots, module_path="<root>", direction="output")
    assert [(s.call_index, s.values) for s in root_out] == [(0, (22.0, 22.0))]


def test_capture_is_cumulative_across_entrances_and_refuses_nesting() -> None:
    model = Doubler()
    capture = capture_model(model, limits=BIG)
    with capture:
        model(torch.ones(1))
        with pytest.raises(RuntimeError, match="already active"), capture:
            pass
        assert capture.active  # the refused nested entry did not tear anything down
    with capture:
        model(torch.ones(1))
    assert [s.call_index for s in capture.snapshots] == [0, 0, 1, 1]
    capture.close()
    capture.close()
    assert not capture.active
    assert_no_hooks(model)


def test_manual_close_without_with_block() -> None:
    model = SmallCNN()
    capture = ModelCapture(model, module_paths=["head"])
    capture.__enter__()
    model(torch.randn(1, 3, 8, 8))
    capture.close()
    assert_no_hooks(model)
    assert {s.module_path for s in capture.snapshots} == {"head"}


def test_unknown_paths_are_rejected_on_entry_with_suggestions(
    tiny_transformer: nn.Transformer,
) -> None:
    capture = capture_model(tiny_transformer, module_paths=["encoder.layer.0", "nope_xyz"])
    with pytest.raises(ValueError) as info, capture:
        pass
    message = str(info.value)
    assert "'encoder.layer.0' (did you mean 'encoder.layers.0'" in message
    assert "'nope_xyz' (no similar path)" in message
    assert not capture.active
    assert_no_hooks(tiny_transformer)


def test_root_aliases_and_shared_instances() -> None:
    shared = Doubler()
    model = nn.Sequential(shared, shared)
    with capture_model(model, module_paths=["", "1"]) as capture:
        model(torch.ones(1))
    assert {s.module_path for s in capture.snapshots} == {"<root>", "1"}
    with (
        pytest.raises(ValueError, match="name the same module instance"),
        capture_model(model, module_paths=["0", "1"]),
    ):
        pass
    assert_no_hooks(model)


@pytest.mark.parametrize("bad", ["encoder", b"encoder", [1], 3])
def test_module_paths_type_errors(bad: Any) -> None:
    with pytest.raises(TypeError, match="module_paths"):
        capture_model(nn.Linear(1, 1), module_paths=bad)


def test_constructor_type_errors() -> None:
    with pytest.raises(TypeError, match=r"torch\.nn\.Module"):
        capture_model("model")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="CaptureLimits"):
        capture_model(nn.Linear(1, 1), limits={"max_tensors": 1})  # type: ignore[arg-type]


def test_existing_pre_hooks_run_first_and_outputs_are_untouched() -> None:
    model = Doubler()
    model.register_forward_pre_hook(lambda module, args: (args[0] + 100,))
    result = torch.arange(3.0)
    model.register_forward_hook(lambda module, args, output: result)
    with capture_model(model, limits=BIG) as capture:
        returned = model(torch.zeros(3))
    assert returned is result
    assert by(capture.snapshots, direction="input")[0].values == (100.0, 100.0, 100.0)
    # The user's replacing forward hook was registered first, so ours sees its result.
    assert by(capture.snapshots, direction="output")[0].values == (0.0, 1.0, 2.0)


class Structured(nn.Module):
    Pair = namedtuple("Pair", ["left", "right"])

    @dataclasses.dataclass
    class Out:
        hidden: torch.Tensor
        extras: list[Any]

    def forward(self, x: torch.Tensor, *, scale: torch.Tensor, note: str = "") -> dict[str, Any]:
        return {
            "logits": [x, x * scale],
            "pair": self.Pair(x, 3),
            "out": self.Out(hidden=x, extras=[None, {"deep": x}]),
            7: x,
        }


def test_container_paths_are_readable() -> None:
    model = Structured()
    with capture_model(model, limits=BIG) as capture:
        model(torch.ones(2), scale=torch.full((1,), 2.0), note="hi")
    assert [(s.direction, s.tensor_path) for s in capture.snapshots] == [
        ("input", "args[0]"),
        ("input", "kwargs['scale']"),
        ("output", "output['logits'][0]"),
        ("output", "output['logits'][1]"),
        ("output", "output['pair'].left"),
        ("output", "output['out'].hidden"),
        ("output", "output['out'].extras[1]['deep']"),
        ("output", "output[7]"),
    ]


def test_traversal_quotas_restart_for_each_walk() -> None:
    model = Structured()
    limits = CaptureLimits(max_traversal_nodes=4, max_tensors=100, max_bytes=10_000)
    with capture_model(model, limits=limits) as capture:
        model(torch.ones(2), scale=torch.ones(1))
        model(torch.ones(2), scale=torch.ones(1))
    # Input walk: args, args[0], kwargs, kwargs['scale'] = 4 nodes.
    # Output walk: output, ['logits'], ['logits'][0], ['logits'][1] = 4 nodes.
    paths = [(s.call_index, s.tensor_path) for s in capture.snapshots]
    assert paths == [
        (0, "args[0]"),
        (0, "kwargs['scale']"),
        (0, "output['logits'][0]"),
        (0, "output['logits'][1]"),
        (1, "args[0]"),
        (1, "kwargs['scale']"),
        (1, "output['logits'][0]"),
        (1, "output['logits'][1]"),
    ]


def test_depth_quota_skips_deep_subtrees_but_keeps_siblings() -> None:
    model = Structured()
    with capture_model(model, limits=CaptureLimits(max_container_depth=1)) as capture:
        model(torch.ones(2), scale=torch.ones(1))
    assert [s.tensor_path for s in capture.snapshots] == ["args[0]", "kwargs['scale']", "output[7]"]


class PassThrough(nn.Module):
    def forward(self, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return tensors


@pytest.mark.filterwarnings("ignore:Sparse CSR tensor support is in beta")
@pytest.mark.filterwarnings("ignore:torch.quantize_per_tensor")
def test_metadata_only_sources_and_empty_tensors() -> None:
    model = PassThrough()
    dense = torch.randn(3, 3)
    sources = [
        torch.randn(2, 2, dtype=torch.complex64),
        torch.empty(4, 5, device="meta"),
        dense.to_sparse(),
        dense.to_sparse_csr(),
        torch.quantize_per_tensor(dense, 0.1, 0, torch.qint8),
        torch.empty(0, 3),
    ]
    with capture_model(model, module_paths=["<root>"], limits=BIG) as capture:
        model(*sources)
    inputs = by(capture.snapshots, direction="input")
    reasons = [s.sample_omission_reason for s in inputs]
    assert reasons[0] is not None and "complex" in reasons[0]
    assert reasons[1] is not None and "meta" in reasons[1]
    assert reasons[2] is not None and "sparse_coo" in reasons[2]
    assert reasons[3] is not None and "sparse_csr" in reasons[3]
    assert reasons[4] is not None and "quantized" in reasons[4]
    assert reasons[5] is None
    for snapshot, source in zip(inputs, sources, strict=True):
        assert snapshot.shape == tuple(source.shape)
        assert snapshot.numel == source.numel()
        assert snapshot.values == () and snapshot.sampled_bytes == 0
    assert inputs[1].device == "meta"
    assert capture.sampled_bytes == 0


def test_dtypes_become_python_scalars() -> None:
    model = PassThrough()
    sources = [
        torch.tensor([1.5, -2.25], dtype=torch.bfloat16),
        torch.tensor([0.5, 3.0], dtype=torch.float16),
        torch.tensor([True, False]),
        torch.tensor([-3, 7], dtype=torch.int64),
        torch.tensor([250, 1], dtype=torch.uint8),
        torch.tensor([1.0, 2.0], dtype=torch.float8_e4m3fn),
    ]
    with capture_model(model, module_paths=["<root>"], limits=BIG) as capture:
        model(*sources)
    inputs = by(capture.snapshots, direction="input")
    assert [s.values for s in inputs] == [
        (1.5, -2.25),
        (0.5, 3.0),
        (True, False),
        (-3, 7),
        (250, 1),
        (1.0, 2.0),
    ]
    assert [type(s.values[0]) for s in inputs] == [float, float, bool, int, int, float]
    assert [s.sampled_bytes for s in inputs] == [4, 4, 2, 16, 2, 2]
    assert inputs[0].dtype == "torch.bfloat16"


def test_byte_quota_truncates_the_sample_that_reaches_it_then_stops() -> None:
    model = PassThrough()
    limits = CaptureLimits(max_bytes=10, max_tensors=100)
    with capture_model(model, limits=limits) as capture:
        model(torch.ones(1, dtype=torch.float64), torch.arange(5.0), torch.arange(3.0))
    rows = [(s.tensor_path, s.values, s.sampled_bytes) for s in capture.snapshots]
    # 8 bytes, then 2 bytes left: no room for one float32, so that sample is empty but
    # recorded; then the next float32 also gets nothing... until bytes or records run out.
    assert rows[0] == ("args[0]", (1.0,), 8)
    assert rows[1] == ("args[1]", (), 0)
    assert capture.sampled_bytes == 8

    with capture_model(model, limits=CaptureLimits(max_bytes=12)) as exact:
        model(torch.arange(5.0), torch.arange(3.0))
    assert [(s.tensor_path, s.values) for s in exact.snapshots] == [("args[0]", (0.0, 1.0, 2.0))]
    assert exact.sampled_bytes == 12


def test_tensor_quota_counts_metadata_only_and_empty_sources() -> None:
    model = PassThrough()
    with capture_model(model, limits=CaptureLimits(max_tensors=3)) as capture:
        model(torch.empty(0), torch.empty(2, device="meta"), torch.ones(1), torch.ones(1))
        model(torch.ones(1))
    assert [s.tensor_path for s in capture.snapshots] == ["args[0]", "args[1]", "args[2]"]


def test_values_never_alias_or_keep_autograd_state() -> None:
    model = nn.Linear(3, 3)
    x = torch.randn(2, 3, requires_grad=True)
    original = x.detach().clone()
    with capture_model(model, limits=BIG) as capture:
        output = model(x)
    output.sum().backward()  # the caller's graph is intact
    before = capture.snapshots
    with torch.no_grad():
        x.add_(100.0)
        output.zero_()
    assert before == capture.snapshots
    assert before[0].values == tuple(original.reshape(-1).tolist())
    assert all(isinstance(v, float) for s in before for v in s.values)
    assert x.grad is not None


def test_prefix_never_materializes_the_source() -> None:
    """Every op the sampler runs produces fewer than 2 x count elements."""

    class Sizes(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.largest = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            out = func(*args, **(kwargs or {}))
            if isinstance(out, torch.Tensor) and func._schema.name not in {
                "aten::detach",
                "aten::select",
                "aten::narrow",
                "aten::slice",
                "aten::view",
                "aten::alias",
            }:
                self.largest = max(self.largest, out.numel())
            return out

    source = torch.randn(512, 300, 7).permute(2, 0, 1)[:, ::3, 1:]  # non-contiguous
    for count in (1, 5, 32, 299, 1000):
        mode = Sizes()
        with mode:
            prefix = _row_major_prefix(source, count)
        assert prefix == tuple(source.reshape(-1)[:count].tolist())
        assert mode.largest < 2 * count


def test_no_grad_inference_mode_and_autocast(small_cnn: SmallCNN) -> None:
    images = torch.randn(2, 3, 8, 8)
    small_cnn.eval()
    with torch.no_grad(), capture_model(small_cnn, module_paths=["head"]) as under_no_grad:
        small_cnn(images)
    with torch.inference_mode(), capture_model(small_cnn, module_paths=["head"]) as under_inference:
        small_cnn(images)
    with (
        torch.autocast("cpu", dtype=torch.bfloat16),
        capture_model(small_cnn, module_paths=["head"]) as under_autocast,
    ):
        small_cnn(images)
    assert under_no_grad.snapshots == under_inference.snapshots
    output = by(under_autocast.snapshots, direction="output")[0]
    assert output.dtype == "torch.bfloat16"
    assert all(isinstance(v, float) for v in output.values)
    assert output.sampled_bytes == 2 * len(output.values)
    assert_no_hooks(small_cnn)


def test_tied_weights_model_capture() -> None:
    model = TiedLanguageModel()
    tokens = torch.randint(0, 50, (2, 6))
    with capture_model(model, module_paths=["embed", "decoder"], limits=BIG) as capture:
        logits = model(tokens)
    embed_in = by(capture.snapshots, module_path="embed", direction="input")[0]
    assert embed_in.dtype == "torch.int64" and embed_in.values == tuple(tokens.reshape(-1).tolist())
    decoder_out = by(capture.snapshots, module_path="decoder", direction="output")[0]
    assert decoder_out.shape == (2, 6, 50)
    assert decoder_out.values == tuple(logits.reshape(-1)[:32].tolist())


def test_threads_pair_their_own_calls() -> None:
    model = Doubler()
    with capture_model(model, limits=BIG) as capture:

        def worker(value: float) -> None:
            for _ in range(25):
                model(torch.full((1,), value))

        threads = [threading.Thread(target=worker, args=(float(v),)) for v in (1, 2, 3)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    inputs = {s.call_index: s.values[0] for s in by(capture.snapshots, direction="input")}
    outputs = {s.call_index: s.values[0] for s in by(capture.snapshots, direction="output")}
    assert sorted(inputs) == list(range(75))
    assert outputs == {index: 2 * value for index, value in inputs.items()}


def test_lazy_model_capture_sees_the_initializing_call() -> None:
    model = nn.Sequential(nn.LazyLinear(4), nn.ReLU())
    with capture_model(model, limits=BIG) as capture:
        model(torch.randn(2, 3))
    out = by(capture.snapshots, module_path="0", direction="output")[0]
    assert out.shape == (2, 4)
    assert_no_hooks(model)


def test_compiled_model_captures_the_eager_paths() -> None:
    torch._dynamo.reset()
    model = SmallCNN()
    x = torch.randn(2, 3, 8, 8)
    with capture_model(model) as eager:
        model(x)
    compiled = torch.compile(model, backend="eager")
    compiled(x)  # compiled before the capture's hooks exist
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with capture_model(compiled) as capture:
            compiled(x)
    assert [s.module_path for s in capture.snapshots] == [s.module_path for s in eager.snapshots]
    assert_no_hooks(model)
    torch._dynamo.reset()


def test_data_parallel_wrapper_paths() -> None:
    model = nn.DataParallel(SmallCNN())
    with capture_model(model, module_paths=["module.head"]) as capture:
        model(torch.randn(2, 3, 8, 8))
    assert {s.module_path for s in capture.snapshots} == {"module.head"}
    assert_no_hooks(model)


def test_repr_reports_usage() -> None:
    capture = capture_model(nn.Identity())
    assert "active=False" in repr(capture) and "snapshots=0/64" in repr(capture)


def test_a_model_edited_between_captures_is_walked_again() -> None:
    model = nn.Sequential(nn.Linear(3, 3), nn.ReLU())
    x = torch.randn(2, 3)

    def paths() -> set[str]:
        with capture_model(model) as capture:
            model(x)
        return {s.module_path for s in capture.snapshots}

    assert paths() == {"<root>", "0", "1"}
    assert paths() == {"<root>", "0", "1"}  # the reused walk
    model.append(nn.Tanh())  # a child added
    assert paths() == {"<root>", "0", "1", "2"}
    model[1] = nn.Sequential(nn.ReLU())  # a child replaced by a container
    assert paths() == {"<root>", "0", "1", "1.0", "2"}
    inner = model[1]
    assert isinstance(inner, nn.Sequential)
    inner[0] = nn.Identity()  # a grandchild replaced: same names, new module
    identity = inner[0]
    with capture_model(model) as capture:
        model(x)
    assert any(s.module_path == "1.0" for s in capture.snapshots)
    assert dict(model.named_modules())["1.0"] is identity
    del model._modules["2"]  # a child removed through the table itself
    assert paths() == {"<root>", "0", "1", "1.0"}
    assert_no_hooks(model)


def test_a_model_class_with_its_own_named_modules_is_walked_every_time() -> None:
    class Hidden(nn.Sequential):
        show = False

        def named_modules(self, *args: Any, **kwargs: Any) -> Any:
            for name, module in super().named_modules(*args, **kwargs):
                if self.show or not name:
                    yield name, module

    model = Hidden(nn.Linear(3, 3))
    x = torch.randn(2, 3)
    with capture_model(model) as capture:
        model(x)
    assert {s.module_path for s in capture.snapshots} == {"<root>"}
    Hidden.show = True
    with capture_model(model) as capture:
        model(x)
    assert {s.module_path for s in capture.snapshots} == {"<root>", "0"}


def test_the_reused_walk_keeps_no_model_or_module_alive() -> None:
    import gc
    import weakref

    model = nn.Sequential(nn.Linear(3, 3), nn.Sequential(nn.ReLU()))
    x = torch.randn(2, 3)
    for _ in range(2):
        with capture_model(model):
            model(x)
    refs = [weakref.ref(module) for module in model.modules()]
    del model
    gc.collect()
    assert all(ref() is None for ref in refs)
