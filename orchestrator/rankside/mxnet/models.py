"""MXNet Gluon implementations of the benchmark models described in :mod:`orchestrator.zoo`.

Same architectures and exactly the same trainable parameter counts as
:mod:`orchestrator.rankside.torch.models` (weights, biases and BatchNorm gamma/beta; BatchNorm
running statistics are auxiliary states with ``grad_req='null'`` and are not counted):

* ImageNet variants: torchvision's AlexNet, GoogLeNet without aux heads, ResNet-18 and ResNet-50
  (v1.5: a down-sampling bottleneck strides on its 3x3 conv);
* CIFAR variants: the zoo's rule (3x3/1 first conv, stem max-pools removed, 10-way classifier).

Gluon equivalents of torch details: ``ceil_mode=True`` max-pools are Gluon's ``ceil_mode=True``
(pooling convention 'full'), torch's ``BatchNorm2d(eps=1e-3)`` is ``BatchNorm(epsilon=1e-3)``,
and AlexNet's adaptive 6x6 average pool is what the zoo allows: the identity on ImageNet (pool5
is already 6x6) and a 2x2/1 average pool on CIFAR (7x7 -> 6x6).

Every layer is given its input width (``in_channels``/``in_units``), so parameter shapes are
known at ``initialize()`` (no deferred initialization): the KVStore can be initialized before
the first batch, and parameters can be counted without a forward pass.

Each network is a :class:`Stages` block: named top-level stages applied in order, so
:func:`trace` can report every stage's output shape (used by the tests to check spatial sizes).

Runs on the ``mxnet`` environment (MXNet 1.9.1, numpy 1.23.5, Python 3.11); imports only
:mod:`orchestrator.zoo` (stdlib) from orch.
"""

from __future__ import annotations

from mxnet import gluon
from mxnet.gluon import nn

from orchestrator import zoo

__all__ = ["Stages", "build", "input_shape", "num_classes", "param_count", "trace"]


def input_shape(dataset: str) -> tuple[int, int, int]:
    """Per-sample input shape (C, H, W) of ``dataset``: Gluon's default NCHW layout."""
    return zoo.get_dataset(dataset).shape_chw


def num_classes(dataset: str) -> int:
    return zoo.get_dataset(dataset).num_classes


class Stages(nn.HybridBlock):
    """Named blocks applied in order (``add(name, block)``): a Sequential with names."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._order: list[str] = []

    def add(self, name: str, block: gluon.Block) -> None:
        self.register_child(block, name)
        setattr(self, name, block)
        self._order.append(name)

    def hybrid_forward(self, F, x):  # Gluon passes F (mx.nd or mx.sym)
        for name in self._order:
            x = getattr(self, name)(x)
        return x


def trace(net: Stages, x) -> list[tuple[str, tuple[int, ...]]]:
    """Run ``x`` through the stages imperatively; (stage name, output shape) for each."""
    out = []
    for name in net._order:
        x = getattr(net, name)(x)
        out.append((name, tuple(x.shape)))
    return out


def param_count(net: gluon.Block) -> int:
    """Trainable parameters (grad_req != 'null'), counted as PyTorch's ``parameters()``."""
    total = 0
    for p in net.collect_params().values():
        if p.grad_req != "null":
            n = 1
            for d in p.shape:
                n *= d
            total += n
    return total


# --------------------------------------------------------------------------------------------
# LeNet-5
# --------------------------------------------------------------------------------------------


def lenet5(classes: int) -> Stages:
    net = Stages(prefix="lenet5_")
    with net.name_scope():
        net.add("conv1", nn.Conv2D(6, 5, in_channels=3, activation="relu"))  # 32 -> 28
        net.add("pool1", nn.MaxPool2D(2, 2))  # 14
        net.add("conv2", nn.Conv2D(16, 5, in_channels=6, activation="relu"))  # 10
        net.add("pool2", nn.MaxPool2D(2, 2))  # 5
        net.add("flatten", nn.Flatten())
        net.add("fc1", nn.Dense(120, activation="relu", in_units=16 * 5 * 5))
        net.add("fc2", nn.Dense(84, activation="relu", in_units=120))
        net.add("fc3", nn.Dense(classes, in_units=84))
    return net


# --------------------------------------------------------------------------------------------
# AlexNet
# --------------------------------------------------------------------------------------------


def alexnet(classes: int, cifar: bool, dropout: float = 0.5) -> Stages:
    net = Stages(prefix="alexnet_")
    with net.name_scope():
        if cifar:
            net.add("conv1", nn.Conv2D(64, 3, 1, 1, in_channels=3, activation="relu"))  # 32
        else:
            net.add("conv1", nn.Conv2D(64, 11, 4, 2, in_channels=3, activation="relu"))  # 55
            net.add("pool1", nn.MaxPool2D(3, 2))  # 27
        net.add("conv2", nn.Conv2D(192, 5, padding=2, in_channels=64, activation="relu"))
        net.add("pool2", nn.MaxPool2D(3, 2))  # 13 | cifar 15
        net.add("conv3", nn.Conv2D(384, 3, padding=1, in_channels=192, activation="relu"))
        net.add("conv4", nn.Conv2D(256, 3, padding=1, in_channels=384, activation="relu"))
        net.add("conv5", nn.Conv2D(256, 3, padding=1, in_channels=256, activation="relu"))
        net.add("pool5", nn.MaxPool2D(3, 2))  # 6 | cifar 7
        if cifar:  # torchvision's AdaptiveAvgPool2d((6, 6)) on a 7x7 input
            net.add("avgpool", nn.AvgPool2D(2, 1))  # 6
        net.add("flatten", nn.Flatten())
        net.add("drop6", nn.Dropout(dropout))
        net.add("fc6", nn.Dense(4096, activation="relu", in_units=256 * 6 * 6))
        net.add("drop7", nn.Dropout(dropout))
        net.add("fc7", nn.Dense(4096, activation="relu", in_units=4096))
        net.add("fc8", nn.Dense(classes, in_units=4096))
    return net


# --------------------------------------------------------------------------------------------
# GoogLeNet (Inception v1), torchvision layout without auxiliary heads
# --------------------------------------------------------------------------------------------


def basic_conv(in_channels: int, channels: int, kernel: int, stride: int = 1,
               padding: int = 0) -> nn.HybridSequential:
    """conv (no bias) + BatchNorm(eps=1e-3) + ReLU, as torchvision's BasicConv2d."""
    block = nn.HybridSequential(prefix="")
    block.add(nn.Conv2D(channels, kernel, stride, padding, use_bias=False,
                        in_channels=in_channels),
              nn.BatchNorm(epsilon=0.001, in_channels=channels),
              nn.Activation("relu"))
    return block


class Inception(nn.HybridBlock):
    """Inception module; branch3 uses a 3x3 conv like torchvision (the paper says 5x5)."""

    def __init__(self, in_channels: int, ch1x1: int, ch3x3red: int, ch3x3: int, ch5x5red: int,
                 ch5x5: int, pool_proj: int, **kwargs) -> None:
        super().__init__(**kwargs)
        with self.name_scope():
            self.branch1 = basic_conv(in_channels, ch1x1, 1)
            self.branch2 = nn.HybridSequential(prefix="b2_")
            self.branch2.add(basic_conv(in_channels, ch3x3red, 1),
                             basic_conv(ch3x3red, ch3x3, 3, padding=1))
            self.branch3 = nn.HybridSequential(prefix="b3_")
            self.branch3.add(basic_conv(in_channels, ch5x5red, 1),
                             basic_conv(ch5x5red, ch5x5, 3, padding=1))
            self.branch4 = nn.HybridSequential(prefix="b4_")
            self.branch4.add(nn.MaxPool2D(3, 1, 1, ceil_mode=True),
                             basic_conv(in_channels, pool_proj, 1))

    def hybrid_forward(self, F, x):  # Gluon passes F (mx.nd or mx.sym)
        return F.concat(self.branch1(x), self.branch2(x), self.branch3(x), self.branch4(x),
                        dim=1)


def googlenet(classes: int, cifar: bool, dropout: float = 0.2) -> Stages:
    net = Stages(prefix="googlenet_")
    with net.name_scope():
        if cifar:
            net.add("conv1", basic_conv(3, 64, 3, 1, 1))  # 32
        else:
            net.add("conv1", basic_conv(3, 64, 7, 2, 3))  # 112
            net.add("maxpool1", nn.MaxPool2D(3, 2, ceil_mode=True))  # 56
        net.add("conv2", basic_conv(64, 64, 1))
        net.add("conv3", basic_conv(64, 192, 3, padding=1))
        if not cifar:
            net.add("maxpool2", nn.MaxPool2D(3, 2, ceil_mode=True))  # 28
        net.add("inception3a", Inception(192, 64, 96, 128, 16, 32, 32))
        net.add("inception3b", Inception(256, 128, 128, 192, 32, 96, 64))
        net.add("maxpool3", nn.MaxPool2D(3, 2, ceil_mode=True))  # 14 | cifar 16
        net.add("inception4a", Inception(480, 192, 96, 208, 16, 48, 64))
        net.add("inception4b", Inception(512, 160, 112, 224, 24, 64, 64))
        net.add("inception4c", Inception(512, 128, 128, 256, 24, 64, 64))
        net.add("inception4d", Inception(512, 112, 144, 288, 32, 64, 64))
        net.add("inception4e", Inception(528, 256, 160, 320, 32, 128, 128))
        net.add("maxpool4", nn.MaxPool2D(2, 2, ceil_mode=True))  # 7 | cifar 8
        net.add("inception5a", Inception(832, 256, 160, 320, 32, 128, 128))
        net.add("inception5b", Inception(832, 384, 192, 384, 48, 128, 128))
        net.add("avgpool", nn.GlobalAvgPool2D())
        net.add("flatten", nn.Flatten())
        net.add("dropout", nn.Dropout(dropout))
        net.add("fc", nn.Dense(classes, in_units=1024))
    return net


# --------------------------------------------------------------------------------------------
# ResNet (torchvision layout, v1.5 bottleneck)
# --------------------------------------------------------------------------------------------


def _conv(in_channels: int, channels: int, kernel: int, stride: int = 1) -> nn.Conv2D:
    return nn.Conv2D(channels, kernel, stride, kernel // 2, use_bias=False,
                     in_channels=in_channels)


class BasicBlock(nn.HybridBlock):
    expansion = 1

    def __init__(self, inplanes: int, planes: int, stride: int = 1, **kwargs) -> None:
        super().__init__(**kwargs)
        with self.name_scope():
            self.body = nn.HybridSequential(prefix="")
            self.body.add(_conv(inplanes, planes, 3, stride), nn.BatchNorm(in_channels=planes),
                          nn.Activation("relu"),
                          _conv(planes, planes, 3), nn.BatchNorm(in_channels=planes))
            self.downsample = _downsample(inplanes, planes * self.expansion, stride)

    def hybrid_forward(self, F, x):  # Gluon passes F (mx.nd or mx.sym)
        identity = x if self.downsample is None else self.downsample(x)
        return F.Activation(self.body(x) + identity, act_type="relu")


class Bottleneck(nn.HybridBlock):
    expansion = 4

    def __init__(self, inplanes: int, planes: int, stride: int = 1, **kwargs) -> None:
        super().__init__(**kwargs)
        out = planes * self.expansion
        with self.name_scope():
            self.body = nn.HybridSequential(prefix="")
            self.body.add(_conv(inplanes, planes, 1), nn.BatchNorm(in_channels=planes),
                          nn.Activation("relu"),
                          _conv(planes, planes, 3, stride),  # v1.5: stride on the 3x3 conv
                          nn.BatchNorm(in_channels=planes), nn.Activation("relu"),
                          _conv(planes, out, 1), nn.BatchNorm(in_channels=out))
            self.downsample = _downsample(inplanes, out, stride)

    def hybrid_forward(self, F, x):  # Gluon passes F (mx.nd or mx.sym)
        identity = x if self.downsample is None else self.downsample(x)
        return F.Activation(self.body(x) + identity, act_type="relu")


def _downsample(inplanes: int, out: int, stride: int) -> nn.HybridSequential | None:
    if stride == 1 and inplanes == out:
        return None
    block = nn.HybridSequential(prefix="down_")
    with block.name_scope():
        block.add(_conv(inplanes, out, 1, stride), nn.BatchNorm(in_channels=out))
    return block


def resnet(block: type[BasicBlock] | type[Bottleneck], layers: list[int], classes: int,
           cifar: bool, name: str) -> Stages:
    net = Stages(prefix=f"{name}_")
    with net.name_scope():
        if cifar:
            net.add("conv1", _conv(3, 64, 3))  # 32
        else:
            net.add("conv1", nn.Conv2D(64, 7, 2, 3, use_bias=False, in_channels=3))  # 112
        net.add("bn1", nn.BatchNorm(in_channels=64))
        net.add("relu", nn.Activation("relu"))
        if not cifar:
            net.add("maxpool", nn.MaxPool2D(3, 2, 1))  # 56
        inplanes = 64
        for i, (planes, blocks) in enumerate(zip((64, 128, 256, 512), layers, strict=True)):
            stage = nn.HybridSequential(prefix=f"layer{i + 1}_")
            with stage.name_scope():
                for b in range(blocks):
                    stride = 2 if (i > 0 and b == 0) else 1
                    stage.add(block(inplanes, planes, stride))
                    inplanes = planes * block.expansion
            net.add(f"layer{i + 1}", stage)
        net.add("avgpool", nn.GlobalAvgPool2D())
        net.add("flatten", nn.Flatten())
        net.add("fc", nn.Dense(classes, in_units=512 * block.expansion))
    return net


# --------------------------------------------------------------------------------------------
# Factory
# --------------------------------------------------------------------------------------------

_BUILDERS = {
    "lenet5": lambda n, cifar: lenet5(n),
    "alexnet": lambda n, cifar: alexnet(n, cifar),
    "googlenet": lambda n, cifar: googlenet(n, cifar),
    "resnet18": lambda n, cifar: resnet(BasicBlock, [2, 2, 2, 2], n, cifar, "resnet18"),
    "resnet50": lambda n, cifar: resnet(Bottleneck, [3, 4, 6, 3], n, cifar, "resnet50"),
}


def build(name: str, dataset: str = "cifar", classes: int | None = None) -> Stages:
    """Build model ``name`` for ``dataset`` (uninitialized: call ``initialize()``).
    ``classes``: the output width when it is not the dataset's — the class count of the
    labelled data set trained on (``--classes``, from its manifest; CIFAR-100: 100).

    Raises the zoo's ``UnknownModelError`` / ``UnknownDatasetError`` (both ``KeyError`` and
    ``ValueError``) for an unknown model, an unknown dataset or an unsupported combination.
    """
    spec = zoo.get(name)
    ds = spec.check_dataset(dataset)
    try:
        builder = _BUILDERS[spec.name]
    except KeyError:  # catalogue entry without an MXNet implementation
        raise NotImplementedError(f"model {name!r} has no MXNet implementation") from None
    return builder(classes or ds.num_classes, ds.name != "imagenet")
