"""PyTorch implementations of the benchmark models described in :mod:`orchestrator.zoo`.

Plain ``torch.nn`` (torchvision is not used).  The ImageNet variants reproduce torchvision's
architectures and parameter counts exactly; the CIFAR variants follow the rule documented in
:mod:`orchestrator.zoo` (3x3/1 first conv, stem max-pools removed, 10-way classifier).

Module names follow torchvision where torchvision has meaningful names (``conv1``, ``bn1``,
``layer1.0.conv2``, ``inception3a.branch2.1.conv``, ``fc``); AlexNet and LeNet-5 get named layers
(``features.conv1``, ``classifier.fc6``, ``fc1``...) instead of torchvision's numeric indices.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable

import torch
from torch import Tensor, nn

from orchestrator import zoo

__all__ = [
    "AlexNet",
    "GoogLeNet",
    "LeNet5",
    "ResNet",
    "build",
    "input_shape",
    "num_classes",
]


def input_shape(dataset: str) -> tuple[int, int, int]:
    """Per-sample input shape (C, H, W) of ``dataset``."""
    return zoo.get_dataset(dataset).shape_chw


def num_classes(dataset: str) -> int:
    """Number of classes of ``dataset``."""
    return zoo.get_dataset(dataset).num_classes


def loss_for(name: str) -> nn.Module:
    """The training loss of zoo model ``name``: cross-entropy of its logits against the labels,
    or for a language model against every target token of the sequences."""
    if zoo.get(name).objective == "classify":
        return nn.CrossEntropyLoss()
    from .transformers import SequenceCrossEntropy

    return SequenceCrossEntropy()


def _is_imagenet(dataset: str) -> bool:
    return dataset == "imagenet"


# --------------------------------------------------------------------------------------------
# LeNet-5
# --------------------------------------------------------------------------------------------


class LeNet5(nn.Module):
    """LeNet-5 for 3x32x32 inputs (ReLU, 2x2 max-pool, full C3 connectivity)."""

    def __init__(self, num_classes: int = 10, in_channels: int = 3) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, 6, kernel_size=5)  # 32 -> 28
        self.relu1 = nn.ReLU(inplace=True)
        self.pool1 = nn.MaxPool2d(kernel_size=2, stride=2)  # 28 -> 14
        self.conv2 = nn.Conv2d(6, 16, kernel_size=5)  # 14 -> 10
        self.relu2 = nn.ReLU(inplace=True)
        self.pool2 = nn.MaxPool2d(kernel_size=2, stride=2)  # 10 -> 5
        self.fc1 = nn.Linear(16 * 5 * 5, 120)
        self.relu3 = nn.ReLU(inplace=True)
        self.fc2 = nn.Linear(120, 84)
        self.relu4 = nn.ReLU(inplace=True)
        self.fc3 = nn.Linear(84, num_classes)

    def forward(self, x: Tensor) -> Tensor:
        x = self.pool1(self.relu1(self.conv1(x)))
        x = self.pool2(self.relu2(self.conv2(x)))
        x = torch.flatten(x, 1)
        x = self.relu3(self.fc1(x))
        x = self.relu4(self.fc2(x))
        return self.fc3(x)


# --------------------------------------------------------------------------------------------
# AlexNet
# --------------------------------------------------------------------------------------------


class AlexNet(nn.Module):
    """torchvision AlexNet (ImageNet) or its CIFAR variant (3x3/1 conv1, no pool1)."""

    def __init__(self, num_classes: int = 1000, cifar: bool = False, dropout: float = 0.5):
        super().__init__()
        if cifar:
            stem: list[tuple[str, nn.Module]] = [
                ("conv1", nn.Conv2d(3, 64, kernel_size=3, stride=1, padding=1)),  # 32
                ("relu1", nn.ReLU(inplace=True)),
            ]
        else:
            stem = [
                ("conv1", nn.Conv2d(3, 64, kernel_size=11, stride=4, padding=2)),  # 55
                ("relu1", nn.ReLU(inplace=True)),
                ("pool1", nn.MaxPool2d(kernel_size=3, stride=2)),  # 27
            ]
        self.features = nn.Sequential(
            OrderedDict(
                [
                    *stem,
                    ("conv2", nn.Conv2d(64, 192, kernel_size=5, padding=2)),
                    ("relu2", nn.ReLU(inplace=True)),
                    ("pool2", nn.MaxPool2d(kernel_size=3, stride=2)),  # 13 | cifar 15
                    ("conv3", nn.Conv2d(192, 384, kernel_size=3, padding=1)),
                    ("relu3", nn.ReLU(inplace=True)),
                    ("conv4", nn.Conv2d(384, 256, kernel_size=3, padding=1)),
                    ("relu4", nn.ReLU(inplace=True)),
                    ("conv5", nn.Conv2d(256, 256, kernel_size=3, padding=1)),
                    ("relu5", nn.ReLU(inplace=True)),
                    ("pool5", nn.MaxPool2d(kernel_size=3, stride=2)),  # 6 | cifar 7
                ]
            )
        )
        self.avgpool = nn.AdaptiveAvgPool2d((6, 6))
        self.classifier = nn.Sequential(
            OrderedDict(
                [
                    ("drop6", nn.Dropout(p=dropout)),
                    ("fc6", nn.Linear(256 * 6 * 6, 4096)),
                    ("relu6", nn.ReLU(inplace=True)),
                    ("drop7", nn.Dropout(p=dropout)),
                    ("fc7", nn.Linear(4096, 4096)),
                    ("relu7", nn.ReLU(inplace=True)),
                    ("fc8", nn.Linear(4096, num_classes)),
                ]
            )
        )

    def forward(self, x: Tensor) -> Tensor:
        x = self.features(x)
        x = self.avgpool(x)
        x = torch.flatten(x, 1)
        return self.classifier(x)


# --------------------------------------------------------------------------------------------
# GoogLeNet (Inception v1), torchvision layout without auxiliary heads
# --------------------------------------------------------------------------------------------


class BasicConv2d(nn.Module):
    """conv (no bias) + BatchNorm(eps=1e-3) + ReLU, as in torchvision's GoogLeNet."""

    def __init__(self, in_channels: int, out_channels: int, **kwargs: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, bias=False, **kwargs)
        self.bn = nn.BatchNorm2d(out_channels, eps=0.001)
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x: Tensor) -> Tensor:
        return self.relu(self.bn(self.conv(x)))


class Inception(nn.Module):
    """Inception module; branch3 uses a 3x3 conv like torchvision (the paper says 5x5)."""

    def __init__(
        self,
        in_channels: int,
        ch1x1: int,
        ch3x3red: int,
        ch3x3: int,
        ch5x5red: int,
        ch5x5: int,
        pool_proj: int,
    ) -> None:
        super().__init__()
        self.branch1 = BasicConv2d(in_channels, ch1x1, kernel_size=1)
        self.branch2 = nn.Sequential(
            BasicConv2d(in_channels, ch3x3red, kernel_size=1),
            BasicConv2d(ch3x3red, ch3x3, kernel_size=3, padding=1),
        )
        self.branch3 = nn.Sequential(
            BasicConv2d(in_channels, ch5x5red, kernel_size=1),
            BasicConv2d(ch5x5red, ch5x5, kernel_size=3, padding=1),
        )
        self.branch4 = nn.Sequential(
            nn.MaxPool2d(kernel_size=3, stride=1, padding=1, ceil_mode=True),
            BasicConv2d(in_channels, pool_proj, kernel_size=1),
        )

    def forward(self, x: Tensor) -> Tensor:
        return torch.cat([self.branch1(x), self.branch2(x), self.branch3(x), self.branch4(x)], 1)


class GoogLeNet(nn.Module):
    """torchvision GoogLeNet without aux heads, or its CIFAR variant (3x3/1 conv1, no
    maxpool1/maxpool2)."""

    def __init__(self, num_classes: int = 1000, cifar: bool = False, dropout: float = 0.2):
        super().__init__()
        self.cifar = cifar
        if cifar:
            self.conv1 = BasicConv2d(3, 64, kernel_size=3, stride=1, padding=1)
            self.maxpool1: nn.Module | None = None
        else:
            self.conv1 = BasicConv2d(3, 64, kernel_size=7, stride=2, padding=3)
            self.maxpool1 = nn.MaxPool2d(3, stride=2, ceil_mode=True)
        self.conv2 = BasicConv2d(64, 64, kernel_size=1)
        self.conv3 = BasicConv2d(64, 192, kernel_size=3, padding=1)
        self.maxpool2: nn.Module | None = (
            None if cifar else nn.MaxPool2d(3, stride=2, ceil_mode=True)
        )

        self.inception3a = Inception(192, 64, 96, 128, 16, 32, 32)
        self.inception3b = Inception(256, 128, 128, 192, 32, 96, 64)
        self.maxpool3 = nn.MaxPool2d(3, stride=2, ceil_mode=True)

        self.inception4a = Inception(480, 192, 96, 208, 16, 48, 64)
        self.inception4b = Inception(512, 160, 112, 224, 24, 64, 64)
        self.inception4c = Inception(512, 128, 128, 256, 24, 64, 64)
        self.inception4d = Inception(512, 112, 144, 288, 32, 64, 64)
        self.inception4e = Inception(528, 256, 160, 320, 32, 128, 128)
        self.maxpool4 = nn.MaxPool2d(2, stride=2, ceil_mode=True)

        self.inception5a = Inception(832, 256, 160, 320, 32, 128, 128)
        self.inception5b = Inception(832, 384, 192, 384, 48, 128, 128)

        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.dropout = nn.Dropout(p=dropout)
        self.fc = nn.Linear(1024, num_classes)

        for m in self.modules():
            if isinstance(m, (nn.Conv2d, nn.Linear)):
                nn.init.trunc_normal_(m.weight, mean=0.0, std=0.01, a=-2, b=2)
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.constant_(m.weight, 1)
                nn.init.constant_(m.bias, 0)

    def forward(self, x: Tensor) -> Tensor:
        x = self.conv1(x)
        if self.maxpool1 is not None:
            x = self.maxpool1(x)
        x = self.conv2(x)
        x = self.conv3(x)
        if self.maxpool2 is not None:
            x = self.maxpool2(x)
        x = self.inception3a(x)
        x = self.inception3b(x)
        x = self.maxpool3(x)
        x = self.inception4a(x)
        x = self.inception4b(x)
        x = self.inception4c(x)
        x = self.inception4d(x)
        x = self.inception4e(x)
        x = self.maxpool4(x)
        x = self.inception5a(x)
        x = self.inception5b(x)
        x = self.avgpool(x)
        x = torch.flatten(x, 1)
        x = self.dropout(x)
        return self.fc(x)


# --------------------------------------------------------------------------------------------
# ResNet (torchvision layout, v1.5 bottleneck)
# --------------------------------------------------------------------------------------------


def _conv3x3(in_planes: int, out_planes: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(in_planes, out_planes, kernel_size=3, stride=stride, padding=1, bias=False)


def _conv1x1(in_planes: int, out_planes: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(in_planes, out_planes, kernel_size=1, stride=stride, bias=False)


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(
        self, inplanes: int, planes: int, stride: int = 1, downsample: nn.Module | None = None
    ) -> None:
        super().__init__()
        self.conv1 = _conv3x3(inplanes, planes, stride)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = _conv3x3(planes, planes)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = downsample

    def forward(self, x: Tensor) -> Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + identity)


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(
        self, inplanes: int, planes: int, stride: int = 1, downsample: nn.Module | None = None
    ) -> None:
        super().__init__()
        self.conv1 = _conv1x1(inplanes, planes)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = _conv3x3(planes, planes, stride)  # v1.5: stride on the 3x3 conv
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = _conv1x1(planes, planes * self.expansion)
        self.bn3 = nn.BatchNorm2d(planes * self.expansion)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample

    def forward(self, x: Tensor) -> Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + identity)


class ResNet(nn.Module):
    """torchvision ResNet, or its CIFAR variant (3x3/1 conv1, no maxpool)."""

    def __init__(
        self,
        block: type[BasicBlock] | type[Bottleneck],
        layers: list[int],
        num_classes: int = 1000,
        cifar: bool = False,
    ) -> None:
        super().__init__()
        self.inplanes = 64
        if cifar:
            self.conv1 = nn.Conv2d(3, 64, kernel_size=3, stride=1, padding=1, bias=False)
        else:
            self.conv1 = nn.Conv2d(3, 64, kernel_size=7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool: nn.Module | None = (
            None if cifar else nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        )
        self.layer1 = self._make_layer(block, 64, layers[0])
        self.layer2 = self._make_layer(block, 128, layers[1], stride=2)
        self.layer3 = self._make_layer(block, 256, layers[2], stride=2)
        self.layer4 = self._make_layer(block, 512, layers[3], stride=2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(512 * block.expansion, num_classes)

        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.constant_(m.weight, 1)
                nn.init.constant_(m.bias, 0)

    def _make_layer(
        self,
        block: type[BasicBlock] | type[Bottleneck],
        planes: int,
        blocks: int,
        stride: int = 1,
    ) -> nn.Sequential:
        downsample = None
        if stride != 1 or self.inplanes != planes * block.expansion:
            downsample = nn.Sequential(
                _conv1x1(self.inplanes, planes * block.expansion, stride),
                nn.BatchNorm2d(planes * block.expansion),
            )
        layers: list[nn.Module] = [block(self.inplanes, planes, stride, downsample)]
        self.inplanes = planes * block.expansion
        layers += [block(self.inplanes, planes) for _ in range(1, blocks)]
        return nn.Sequential(*layers)

    def forward(self, x: Tensor) -> Tensor:
        x = self.relu(self.bn1(self.conv1(x)))
        if self.maxpool is not None:
            x = self.maxpool(x)
        x = self.layer1(x)
        x = self.layer2(x)
        x = self.layer3(x)
        x = self.layer4(x)
        x = self.avgpool(x)
        x = torch.flatten(x, 1)
        return self.fc(x)


# --------------------------------------------------------------------------------------------
# Factory
# --------------------------------------------------------------------------------------------

_BUILDERS: dict[str, Callable[[int, bool], nn.Module]] = {
    "lenet5": lambda n, imagenet: LeNet5(num_classes=n),
    "alexnet": lambda n, imagenet: AlexNet(num_classes=n, cifar=not imagenet),
    "googlenet": lambda n, imagenet: GoogLeNet(num_classes=n, cifar=not imagenet),
    "resnet18": lambda n, imagenet: ResNet(BasicBlock, [2, 2, 2, 2], n, cifar=not imagenet),
    "resnet50": lambda n, imagenet: ResNet(Bottleneck, [3, 4, 6, 3], n, cifar=not imagenet),
}


def build(name: str, dataset: str = "cifar", classes: int | None = None) -> nn.Module:
    """Build model ``name`` (see :func:`orchestrator.zoo.names`) for ``dataset``.
    ``classes``: the output width when it is not the dataset's — the class count of the
    labelled data set trained on (``--classes``, from its manifest; CIFAR-100: 100).

    Raises the zoo's ``UnknownModelError`` / ``UnknownDatasetError`` (both ``KeyError`` and
    ``ValueError``) for an unknown model, an unknown dataset, or an unsupported combination.
    """
    spec = zoo.get(name)
    ds = spec.check_dataset(dataset)
    if spec.transformer is not None:
        from . import transformers

        return transformers.build(spec, ds, classes)
    try:
        builder = _BUILDERS[spec.name]
    except KeyError:  # catalogue entry without a PyTorch implementation
        raise NotImplementedError(f"model {name!r} has no PyTorch implementation") from None
    return builder(classes or ds.num_classes, _is_imagenet(ds.name))
