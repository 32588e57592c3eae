"""What a forward tap serves: the engine's own thread only (when asked), never a traced,
exported, scripted or fake-tensor call, and nothing of it outlives the tap."""

from __future__ import annotations

import threading
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode

from vinlens.health import collect_activation_stats, compare_models, find_nonfinite_origin
from vinlens.hooks import HookSet, leftover_hooks


class ScriptableBlock(nn.Module):
    """Only scripted while tapped (a class TorchScript has compiled before is cached)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # ``F`` resolves through this module's globals, which a tap must keep.
        return F.relu(self.fc(x)) * 2.0


class TracedNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 3)
        self.act = nn.Tanh()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.fc(x)).sum(dim=-1)


def _on_another_thread(model: nn.Module, x: torch.Tensor, times: int = 3) -> None:
    def serve() -> None:
        with torch.no_grad():
            for _ in range(times):
                model(x)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    thread.join(timeout=30)
    assert not thread.is_alive()


def _recorder() -> tuple[list[str], Any]:
    seen: list[str] = []

    def post(label: str, _args: tuple[Any, ...], _output: Any) -> None:
        seen.append(label)

    return seen, post


def test_own_thread_sets_observe_only_the_registering_thread() -> None:
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
    model[1].register_forward_hook(lambda *_: None)  # one module served by instance hooks
    own, own_post = _recorder()
    every, every_post = _recorder()
    x = torch.randn(2, 4)
    with HookSet() as hooks:
        hooks.hook_modules([("0", model[0]), ("1", model[1])], post=own_post, own_thread=True)
        hooks.hook_modules([("0", model[0]), ("1", model[1])], post=every_post)
        model(x)
        _on_another_thread(model, x, times=2)
    assert own == ["0", "1"]
    assert every == ["0", "1"] * 3


def test_nonfinite_origin_ignores_a_serving_thread_beside_it() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2)).eval()
    poisoned = torch.full((1, 4), float("nan"))

    def run() -> None:
        model(torch.randn(3, 4))  # the analysed forward: finite
        _on_another_thread(model, poisoned)  # a server's NaN request meanwhile

    assert find_nonfinite_origin(model, run) is None
    assert leftover_hooks(model.modules()) == []


def test_compare_models_ignores_a_serving_thread_beside_it() -> None:
    torch.manual_seed(0)
    model_a = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2)).eval()
    model_b = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2)).eval()
    model_b.load_state_dict(model_a.state_dict())
    x = torch.randn(3, 4)

    def run(model: nn.Module) -> object:
        out = model(x)
        if model is model_a:  # a server forwarding model A on other requests meanwhile
            _on_another_thread(model_a, torch.randn(5, 4))
        return out

    with torch.no_grad():
        diff = compare_models(model_a, model_b, run)
    assert [(m.module_path, m.call_index) for m in diff.modules] == [
        ("0", 0),
        ("1", 0),
        ("2", 0),
        ("<root>", 0),
    ]
    assert diff.first_divergent_path() is None
    assert leftover_hooks(model_a.modules()) == [] and leftover_hooks(model_b.modules()) == []


def test_scripting_a_tapped_class_compiles_its_original_forward() -> None:
    observed = ScriptableBlock()
    seen, post = _recorder()
    x = torch.randn(2, 4)
    with HookSet() as hooks:
        hooks.hook_modules([("<root>", observed)], post=post)
        fresh = ScriptableBlock()
        scripted = torch.jit.script(fresh)  # failed with "undefined value F" in the tap
        assert torch.equal(scripted(x), fresh(x))
        observed(x)
    assert seen == ["<root>"]  # the scripted copy and the fresh instance were not observed
    # Nothing of the tap is cached for the class: scripting after it works and agrees.
    again = ScriptableBlock()
    assert torch.equal(torch.jit.script(again)(x), again(x))
    assert leftover_hooks() == []


def test_symbolic_trace_export_and_fake_calls_pass_through_unobserved() -> None:
    torch.manual_seed(0)
    model = TracedNet().eval()
    x = torch.randn(2, 4)
    seen, post = _recorder()
    pre_seen: list[str] = []
    targets = [("<root>", model), ("fc", model.fc), ("act", model.act)]
    with HookSet() as hooks:
        hooks.hook_modules(targets, lambda label, *_: pre_seen.append(label), post)
        traced = torch.fx.symbolic_trace(model)
        exported = torch.export.export(model, (x,))
        with FakeTensorMode(allow_non_fake_inputs=True) as fake:
            model(fake.from_tensor(x))
        assert seen == [] and pre_seen == []
        model(x)
    assert seen == ["fc", "act", "<root>"]
    assert torch.allclose(traced(x), model(x))
    assert torch.allclose(exported.module()(x), model(x))
    assert leftover_hooks(model.modules()) == []


def test_activation_stats_ignore_a_serving_thread_beside_them() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2)).eval()
    batches = [torch.randn(3, 4), torch.randn(3, 4)]

    def run(net: nn.Module, batch: torch.Tensor) -> object:
        out = net(batch)
        _on_another_thread(net, torch.randn(5, 4))  # a server's requests meanwhile
        return out

    stats = collect_activation_stats(model, batches, run)
    # Two batches of three rows on the analysis thread only: the server's 3 x 5 rows per
    # batch are not these statistics'.
    assert stats.modules["2"].count == 2 * 3 * 2
    assert stats.modules["0"].count == 2 * 3 * 4
    assert leftover_hooks(model.modules()) == []
