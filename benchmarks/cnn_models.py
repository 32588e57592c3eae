"""Light CNNs built from torch.nn alone, shaped like resnet50, efficientnet_b0, mobilenet_v3_large.

Layer counts, widths and module nesting follow the torchvision definitions (so a
hook per module costs what it would there), with random initialisation and no
torchvision import. Used by the capture and health benchmarks.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn


def _conv_norm_act(
    cin: int, cout: int, kernel: int, stride: int = 1, groups: int = 1, act: type | None = nn.ReLU
) -> nn.Sequential:
    layers: list[nn.Module] = [
        nn.Conv2d(cin, cout, kernel, stride, (kernel - 1) // 2, groups=groups, bias=False),
        nn.BatchNorm2d(cout),
    ]
    if act is not None:
        layers.append(act(inplace=True))
    return nn.Sequential(*layers)


class Bottleneck(nn.Module):
    def __init__(self, cin: int, mid: int, stride: int) -> None:
        super().__init__()
        cout = mid * 4
        self.conv1 = nn.Conv2d(cin, mid, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(mid)
        self.conv2 = nn.Conv2d(mid, mid, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(mid)
        self.conv3 = nn.Conv2d(mid, cout, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.downsample: nn.Module | None = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        result: torch.Tensor = self.relu(out + identity)
        return result


def resnet50(classes: int = 1000) -> nn.Module:
    layers: list[nn.Module] = []
    cin = 64
    for index, (mid, blocks) in enumerate(((64, 3), (128, 4), (256, 6), (512, 3))):
        stage: list[nn.Module] = []
        for block in range(blocks):
            stride = 2 if block == 0 and index > 0 else 1
            stage.append(Bottleneck(cin, mid, stride))
            cin = mid * 4
        layers.append(nn.Sequential(*stage))
    return nn.Sequential(
        nn.Conv2d(3, 64, 7, 2, 3, bias=False),
        nn.BatchNorm2d(64),
        nn.ReLU(inplace=True),
        nn.MaxPool2d(3, 2, 1),
        *layers,
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(2048, classes),
    )


class SqueezeExcitation(nn.Module):
    def __init__(self, channels: int, squeeze: int, act: type, gate: type) -> None:
        super().__init__()
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc1 = nn.Conv2d(channels, squeeze, 1)
        self.fc2 = nn.Conv2d(squeeze, channels, 1)
        self.activation = act()
        self.scale_activation = gate()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scale = self.scale_activation(self.fc2(self.activation(self.fc1(self.avgpool(x)))))
        scaled: torch.Tensor = x * scale
        return scaled


class InvertedResidual(nn.Module):
    def __init__(
        self,
        cin: int,
        expanded: int,
        cout: int,
        kernel: int,
        stride: int,
        squeeze: int | None,
        act: type,
        gate: type,
    ) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        if expanded != cin:
            layers.append(_conv_norm_act(cin, expanded, 1, act=act))
        layers.append(_conv_norm_act(expanded, expanded, kernel, stride, expanded, act=act))
        if squeeze is not None:
            se_act = nn.SiLU if act is nn.SiLU else nn.ReLU
            layers.append(SqueezeExcitation(expanded, squeeze, se_act, gate))
        layers.append(_conv_norm_act(expanded, cout, 1, act=None))
        self.block = nn.Sequential(*layers)
        self.residual = stride == 1 and cin == cout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.block(x)
        return out + x if self.residual else out


def _divisible(value: float, divisor: int = 8) -> int:
    rounded = max(divisor, int(value + divisor / 2) // divisor * divisor)
    return rounded + divisor if rounded < 0.9 * value else rounded


def efficientnet_b0(classes: int = 1000) -> nn.Module:
    config = (
        (1, 3, 1, 16, 1),
        (6, 3, 2, 24, 2),
        (6, 5, 2, 40, 2),
        (6, 3, 2, 80, 3),
        (6, 5, 1, 112, 3),
        (6, 5, 2, 192, 4),
        (6, 3, 1, 320, 1),
    )
    stages: list[nn.Module] = [_conv_norm_act(3, 32, 3, 2, act=nn.SiLU)]
    cin = 32
    for expand, kernel, stride, cout, repeats in config:
        stage: list[nn.Module] = []
        for repeat in range(repeats):
            stage.append(
                InvertedResidual(
                    cin,
                    cin * expand,
                    cout,
                    kernel,
                    stride if repeat == 0 else 1,
                    max(1, cin // 4),
                    nn.SiLU,
                    nn.Sigmoid,
                )
            )
            cin = cout
        stages.append(nn.Sequential(*stage))
    stages.append(_conv_norm_act(cin, 1280, 1, act=nn.SiLU))
    return nn.Sequential(
        nn.Sequential(*stages),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Sequential(nn.Dropout(0.2), nn.Linear(1280, classes)),
    )


def mobilenet_v3_large(classes: int = 1000) -> nn.Module:
    relu, hswish = nn.ReLU, nn.Hardswish
    config = (
        (3, 16, 16, False, relu, 1),
        (3, 64, 24, False, relu, 2),
        (3, 72, 24, False, relu, 1),
        (5, 72, 40, True, relu, 2),
        (5, 120, 40, True, relu, 1),
        (5, 120, 40, True, relu, 1),
        (3, 240, 80, False, hswish, 2),
        (3, 200, 80, False, hswish, 1),
        (3, 184, 80, False, hswish, 1),
        (3, 184, 80, False, hswish, 1),
        (3, 480, 112, True, hswish, 1),
        (3, 672, 112, True, hswish, 1),
        (5, 672, 160, True, hswish, 2),
        (5, 960, 160, True, hswish, 1),
        (5, 960, 160, True, hswish, 1),
    )
    layers: list[nn.Module] = [_conv_norm_act(3, 16, 3, 2, act=hswish)]
    cin = 16
    for kernel, expanded, cout, se, act, stride in config:
        squeeze = _divisible(expanded // 4) if se else None
        layers.append(
            InvertedResidual(cin, expanded, cout, kernel, stride, squeeze, act, nn.Hardsigmoid)
        )
        cin = cout
    layers.append(_conv_norm_act(cin, 960, 1, act=hswish))
    return nn.Sequential(
        nn.Sequential(*layers),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Sequential(
            nn.Linear(960, 1280),
            nn.Hardswish(inplace=True),
            nn.Dropout(0.2),
            nn.Linear(1280, classes),
        ),
    )


MODELS: dict[str, Callable[[], nn.Module]] = {
    "resnet50": resnet50,
    "efficientnet_b0": efficientnet_b0,
    "mobilenet_v3_large": mobilenet_v3_large,
}
