"""Class-activation-map attribution for one camera of a multi-camera model.

Every method here reads one camera's feature map at a target layer (routed by a
:class:`~vinlens.attribution.targets.CameraExplanationTarget`) and returns a map of
shape ``[B, H, W]`` at that layer's resolution, ReLU applied.

Conventions shared by all methods, because a notebook user calls them on a live
training model and must get it back untouched:

* ``score`` is a zero-argument callable that runs the model forward and returns the
  score to explain: a scalar, or one value per sample (shape ``[B]``). Gradient
  methods differentiate the sum, which gives every sample the gradient of its own
  score as long as samples do not interact (true in eval mode).
* The model runs in eval mode during the explanation (dropout off, batch norm using
  and not updating its running statistics); every module's own ``training`` flag is
  restored afterwards, including mixed train/eval states.
* Gradient methods temporarily set ``requires_grad`` on all parameters so that frozen
  models still produce a graph up to the target layer, then restore each flag.
  Gradients are taken with :func:`torch.autograd.grad` up to the target activation
  only, so parameters' ``.grad`` fields are left exactly as they were (never zeroed,
  never accumulated into).
* Hooks are removed in ``finally`` on every path, including when ``score`` raises,
  and no reference to the autograd graph survives the call: returned maps are
  detached.
* Code is device-agnostic: tensors stay on whatever device the model computes on.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Sequence
from contextlib import ExitStack

import torch
from torch import nn

from vinlens.attribution.capture import (
    ActivationCapture,
    CameraHook,
    GradientCapture,
    TensorModuleOutput,
    replace_camera_tensor,
)
from vinlens.attribution.layout import layout_is_known
from vinlens.attribution.state import explanation_mode
from vinlens.attribution.targets import CameraExplanationTarget, LayerTarget, VisionCaptureMode
from vinlens.hooks import HookSet

__all__ = [
    "ReplicatedScore",
    "Score",
    "ablation_cam",
    "ablation_cam_with_scores",
    "ablation_weights",
    "cam_from_channel_weights",
    "explanation_mode",
    "grad_cam",
    "grad_cam_plus_plus",
    "grad_cam_plus_plus_weights",
    "grad_cam_weights",
    "gradient_captures",
    "resolve_target_module",
]

Score = Callable[[], torch.Tensor]
"""Runs the forward pass and returns the score to explain (scalar or ``[B]``)."""

ReplicatedScore = Callable[[int], torch.Tensor]
"""``f(r)`` runs the same forward with every input repeated ``r`` times along the batch
dimension (``Tensor.repeat``, so copy ``r`` of sample ``b`` sits at ``r * B + b``) and
returns the per-sample scores, shape ``[r * B]``. Lets Ablation-CAM evaluate many
ablations in one forward."""

# Grad-CAM++ denominators vanish where the gradient is zero; the same guard as in
# the reference implementation (jacobgil/pytorch-grad-cam).
_GRAD_CAM_PLUS_PLUS_EPS = 1e-6
# Ablation-CAM divides by the unablated score; keep its sign when it is ~0.
_ABLATION_SCORE_EPS = 1e-8


def resolve_target_module(model: nn.Module, target: LayerTarget) -> nn.Module:
    """Return the module at ``target.module_path`` or raise naming close matches."""
    try:
        return model.get_submodule(target.module_path)
    except AttributeError:
        names = [name for name, _ in model.named_modules() if name]
        close = difflib.get_close_matches(target.module_path, names, n=3)
        hint = f" Did you mean {close}?" if close else ""
        raise ValueError(
            f"Target layer {target.module_path!r} is not a submodule of "
            f"{type(model).__name__}.{hint}"
        ) from None


class _GraphGradientCapture(GradientCapture):
    """A GradientCapture that also remembers the graph-attached layer output.

    :func:`torch.autograd.grad` needs that tensor as its ``inputs`` so backward
    stops at the target layer instead of running into every parameter.
    """

    def __init__(self, target: CameraExplanationTarget) -> None:
        super().__init__(target)
        self.live_output: torch.Tensor | None = None

    def keep(self, layer_output: torch.Tensor, camera_output: torch.Tensor) -> None:
        super().keep(layer_output, camera_output)
        self.live_output = layer_output


def _score_tensor(value: object, *, what: str = "score()") -> torch.Tensor:
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{what} must return a torch.Tensor, got {type(value).__name__}.")
    if value.ndim > 1 and value.numel() != 1:
        raise ValueError(
            f"{what} must return a scalar or one score per sample (shape [B]), "
            f"got shape {tuple(value.shape)}."
        )
    if not value.is_floating_point():
        raise ValueError(f"{what} must return a floating-point tensor, got {value.dtype}.")
    return value


def _per_sample_scores(value: torch.Tensor, batch_size: int, *, what: str) -> torch.Tensor:
    flat = value.reshape(-1)
    if flat.numel() != batch_size:
        raise ValueError(
            f"{what} returned {flat.numel()} score(s) but the target activation has batch "
            f"size {batch_size}; return one score per sample (shape [{batch_size}])."
        )
    return flat


def _missing_activation_error(target: CameraExplanationTarget, call_count: int) -> RuntimeError:
    return RuntimeError(
        f"Target layer {target.target.module_path!r} never produced camera "
        f"{target.camera_key!r}: no activation for it in capture mode {target.capture_mode!r} "
        f"(invocation_index={target.invocation_index}); the layer ran {call_count} time(s) "
        "during score(). Check the module path, the capture mode and the invocation index."
    )


def _drop_live_outputs(captures: Sequence[_GraphGradientCapture]) -> None:
    for capture in captures:
        capture.live_output = None


def gradient_captures(
    model: nn.Module,
    targets: Sequence[CameraExplanationTarget],
    score: Score,
) -> tuple[list[tuple[torch.Tensor, torch.Tensor]], torch.Tensor]:
    """Run ``score`` once and return each target's ``(activation, gradient)`` plus the score.

    All targets share one forward and one backward pass, so explaining three cameras
    costs about what explaining one does. Activations and gradients are detached,
    camera-sliced tensors read as ``[B, C, H, W]`` by each layer's layout (see
    :mod:`vinlens.attribution.layout`); the score is detached.

    Raises:
        ValueError: If a module path does not exist, the score has a bad shape, or a
            layer's layout is ambiguous or does not fit (:class:`LayerLayoutError`).
        RuntimeError: If a target layer never ran for its camera, the score does not
            depend on a camera's activation, or :class:`GradientCapture` rejects the
            routing (layer invoked twice, activation without gradients).
    """
    modules = [resolve_target_module(model, target.target) for target in targets]
    captures = [_GraphGradientCapture(target) for target in targets]
    with ExitStack() as stack:
        stack.enter_context(explanation_mode(model, enable_parameter_grads=True))
        stack.enter_context(torch.enable_grad())
        stack.callback(_drop_live_outputs, captures)
        hooks = stack.enter_context(HookSet())
        for module, capture in zip(modules, captures, strict=True):
            capture.hooks = hooks  # its gradient (tensor) hooks go into the same set
            hooks.forward(module, capture.forward_hook)
        value = _score_tensor(score())
        for capture in captures:
            if capture.live_output is None:
                raise _missing_activation_error(capture.target, capture.call_index)
        if not value.requires_grad:
            raise RuntimeError(
                "score() returned a tensor that does not require gradients; compute it "
                "from the model output without torch.no_grad() or .detach()."
            )
        inputs: list[torch.Tensor] = []
        for capture in captures:
            live = capture.live_output
            if live is not None and not any(live is seen for seen in inputs):
                inputs.append(live)
        # Backward stops at the target activations; parameters' .grad stay untouched.
        torch.autograd.grad(value.sum(), inputs, allow_unused=True)
        results = []
        for capture in captures:
            if capture.gradient is None:
                raise RuntimeError(
                    f"score() does not depend on camera {capture.target.camera_key!r}'s "
                    f"activation at layer {capture.target.target.module_path!r}; there is "
                    "no gradient to explain."
                )
            results.append(capture.require_nchw_tensors())
        return results, value.detach()


def cam_from_channel_weights(weights: torch.Tensor, activation: torch.Tensor) -> torch.Tensor:
    """``ReLU(sum_k w_k A_k)``: ``weights`` ``[B, C]``, ``activation`` ``[B, C, H, W]`` -> ``[B, H, W]``."""
    return torch.relu((weights[:, :, None, None] * activation).sum(dim=1))


def grad_cam_weights(activation: torch.Tensor, gradient: torch.Tensor) -> torch.Tensor:
    """Grad-CAM channel weights ``mean_hw(dS/dA_k)``, shape ``[B, C]``."""
    return gradient.mean(dim=(2, 3))


def grad_cam_plus_plus_weights(activation: torch.Tensor, gradient: torch.Tensor) -> torch.Tensor:
    """Grad-CAM++ channel weights (Chattopadhyay et al. 2018), shape ``[B, C]``.

    The closed form with an exponential score, as in the paper and in pytorch-grad-cam:
    ``alpha = g^2 / (2 g^2 + sum_hw(A) g^3)``, weights ``sum_hw(alpha * ReLU(g))``.
    """
    grads_2 = gradient.pow(2)
    grads_3 = grads_2 * gradient
    sum_activation = activation.sum(dim=(2, 3), keepdim=True)
    alpha = grads_2 / (2 * grads_2 + sum_activation * grads_3 + _GRAD_CAM_PLUS_PLUS_EPS)
    alpha = torch.where(gradient != 0, alpha, torch.zeros_like(alpha))
    return (alpha * torch.relu(gradient)).sum(dim=(2, 3))


def ablation_weights(base_scores: torch.Tensor, ablated_scores: torch.Tensor) -> torch.Tensor:
    """Ablation-CAM channel weights ``(y - y_k) / y``: ``[B]`` and ``[C, B]`` -> ``[B, C]``."""
    denominator = torch.where(
        base_scores.abs() < _ABLATION_SCORE_EPS,
        torch.full_like(base_scores, _ABLATION_SCORE_EPS),
        base_scores,
    )
    return ((base_scores - ablated_scores) / denominator).transpose(0, 1)


def grad_cam_from_tensors(activation: torch.Tensor, gradient: torch.Tensor) -> torch.Tensor:
    """Grad-CAM map ``ReLU(sum_k mean_hw(dS/dA_k) * A_k)``, shape ``[B, H, W]``."""
    return cam_from_channel_weights(grad_cam_weights(activation, gradient), activation)


def grad_cam_plus_plus_from_tensors(
    activation: torch.Tensor, gradient: torch.Tensor
) -> torch.Tensor:
    """Grad-CAM++ map (:func:`grad_cam_plus_plus_weights`), shape ``[B, H, W]``."""
    return cam_from_channel_weights(grad_cam_plus_plus_weights(activation, gradient), activation)


def grad_cam(model: nn.Module, target: CameraExplanationTarget, score: Score) -> torch.Tensor:
    """Grad-CAM for one camera, ``[B, H, W]`` at the target layer's resolution.

    For a dedicated layer this equals Captum's
    ``LayerGradCam(forward, layer).attribute(inputs, target=..., relu_attributions=True)``
    squeezed to ``[B, H, W]``. For a shared layer (per-camera call or stacked batch) it
    is the same map computed from the chosen camera's activation and gradient only.
    """
    ((activation, gradient),), _ = gradient_captures(model, (target,), score)
    return grad_cam_from_tensors(activation, gradient)


def grad_cam_plus_plus(
    model: nn.Module, target: CameraExplanationTarget, score: Score
) -> torch.Tensor:
    """Grad-CAM++ for one camera, ``[B, H, W]`` at the target layer's resolution."""
    ((activation, gradient),), _ = gradient_captures(model, (target,), score)
    return grad_cam_plus_plus_from_tensors(activation, gradient)


class _AblationHook(CameraHook):
    """Forward hook that swaps one camera's activation for a prepared (ablated) tensor."""

    def __init__(self, target: CameraExplanationTarget, replacement: torch.Tensor) -> None:
        super().__init__(target)
        self.replacement = replacement
        self.applied = False

    def __call__(
        self,
        module: nn.Module,
        module_input: tuple[torch.Tensor, ...],
        module_output: TensorModuleOutput,
    ) -> TensorModuleOutput:
        selected = self._camera_output(module, module_output)
        if selected is None:
            return module_output
        if self.applied:
            raise RuntimeError(
                f"Target layer {self.target.target.module_path!r} was invoked more than once "
                f"for camera {self.target.camera_key!r} in capture mode "
                f"{self.target.capture_mode!r}; which call to ablate is ambiguous. Use a "
                "per-camera capture mode or a more specific target layer."
            )
        self.applied = True
        output, camera_slice = selected
        if camera_slice.shape != self.replacement.shape:
            raise RuntimeError(
                f"Camera {self.target.camera_key!r} activation at "
                f"{self.target.target.module_path!r} has shape {tuple(camera_slice.shape)} "
                f"during the ablation forward, expected {tuple(self.replacement.shape)}; a "
                "replicated_score(r) must repeat every input r times along the batch dimension."
            )
        replaced = replace_camera_tensor(output, self.replacement.to(output.dtype), self.target)
        return _with_tensor_output(module_output, self.target.target.output_index, replaced)


def _with_tensor_output(
    value: TensorModuleOutput, output_index: int | None, tensor: torch.Tensor
) -> TensorModuleOutput:
    """``value`` with the tensor that :func:`select_tensor_output` picks replaced."""
    if isinstance(value, torch.Tensor):
        return tensor
    items = list(value)
    if output_index is None:
        output_index = next(index for index, item in enumerate(items) if item is not None)
    items[output_index] = tensor
    return tuple(items)


def ablation_cam(
    model: nn.Module,
    target: CameraExplanationTarget,
    score: Score,
    *,
    replicated_score: ReplicatedScore | None = None,
    channel_batch_size: int = 32,
    ablation_value: float = 0.0,
) -> torch.Tensor:
    """Ablation-CAM (Desai & Ramaswamy 2020) for one camera, ``[B, H, W]``.

    Channel ``k`` of the camera's activation (read as ``[B, C, H, W]`` by the layer's
    layout; leading tokens of a token layer are left alone) is replaced by
    ``ablation_value`` and the relative score drop ``w_k = (y - y_k) / y`` weights that
    channel: ``ReLU(sum_k w_k A_k)``. No gradients are used, so it also works on
    layers whose gradients are saturated or noisy.

    ``score`` must return one score per sample (or a scalar when ``B == 1``). With
    ``replicated_score`` (see :data:`ReplicatedScore`), ``channel_batch_size`` ablations
    run in one forward over a repeated batch; without it each channel needs its own
    forward through ``score``.
    """
    cam, _ = ablation_cam_with_scores(
        model,
        target,
        score,
        replicated_score=replicated_score,
        channel_batch_size=channel_batch_size,
        ablation_value=ablation_value,
    )
    return cam


def ablation_cam_with_scores(
    model: nn.Module,
    target: CameraExplanationTarget,
    score: Score,
    *,
    replicated_score: ReplicatedScore | None = None,
    channel_batch_size: int = 32,
    ablation_value: float = 0.0,
    channel_weights: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`ablation_cam` plus the unablated per-sample scores ``[B]`` it measured.

    ``channel_weights(base_scores [B], ablated_scores [C, B]) -> [B, C]`` replaces
    :func:`ablation_weights` (a registry entry of kind ``"ablation"`` passes its own).
    """
    if channel_batch_size < 1:
        raise ValueError(f"channel_batch_size must be >= 1, got {channel_batch_size}.")
    module = resolve_target_module(model, target.target)
    capture = ActivationCapture(target)
    # Where the layout is neither given nor fixed by the module type, the unablated
    # forward keeps its autograd history so that it can be decided from how the layer
    # output was computed, as the gradient methods do.
    history = not layout_is_known(target.target.layout, target.target.reshape_transform, module)
    with ExitStack() as stack:
        stack.enter_context(explanation_mode(model, enable_parameter_grads=history))
        stack.enter_context(torch.enable_grad() if history else torch.no_grad())
        stack.enter_context(HookSet()).forward(module, capture.forward_hook)
        baseline = _score_tensor(score()).detach()
    with explanation_mode(model, enable_parameter_grads=False), torch.no_grad():
        if capture.activation is None:
            raise _missing_activation_error(target, capture.call_index)
        if (
            target.capture_mode != VisionCaptureMode.PER_CAMERA_CALL.value
            and capture.call_index > 1
        ):
            # ActivationCapture keeps the last call; ablating "the" camera would be a guess.
            raise RuntimeError(
                f"Target layer {target.target.module_path!r} was invoked "
                f"{capture.call_index} times for camera {target.camera_key!r} in capture mode "
                f"{target.capture_mode!r}; which call to ablate is ambiguous. Use a "
                "per-camera capture mode or a more specific target layer."
            )
        raw = capture.require_activation()
        reader = capture.require_reader()
        activation = reader.to_nchw(raw)
        batch, channels = activation.shape[:2]
        # Flat positions in the layer's own layout of each [B, C, H, W] channel.
        channel_positions = (
            reader.source_index(tuple(raw.shape), raw.device).transpose(0, 1).reshape(channels, -1)
        )
        base_scores = _per_sample_scores(baseline, batch, what="score()")

        chunk = channel_batch_size if replicated_score is not None else 1
        ablated_scores = torch.empty(
            channels, batch, dtype=base_scores.dtype, device=base_scores.device
        )
        for start in range(0, channels, chunk):
            stop = min(start + chunk, channels)
            repeats = stop - start
            replacement = raw.repeat(repeats, *([1] * (raw.ndim - 1)))
            rows = torch.arange(repeats, device=raw.device).unsqueeze(1)
            replacement.view(repeats, -1)[rows, channel_positions[start:stop]] = ablation_value
            hook = _AblationHook(target, replacement)
            with HookSet() as hooks:
                hooks.forward(module, hook)
                if replicated_score is not None:
                    value = _score_tensor(replicated_score(repeats), what="replicated_score(r)")
                else:
                    value = _score_tensor(score())
            if not hook.applied:
                raise _missing_activation_error(target, hook.call_index)
            what = "replicated_score(r)" if replicated_score is not None else "score()"
            ablated_scores[start:stop] = _per_sample_scores(
                value, repeats * batch, what=what
            ).reshape(repeats, batch)

        weigh = ablation_weights if channel_weights is None else channel_weights
        weights = weigh(base_scores, ablated_scores)
        return cam_from_channel_weights(weights.to(activation.dtype), activation), base_scores
