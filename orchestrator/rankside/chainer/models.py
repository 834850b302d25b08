"""Chainer implementations of the benchmark models described in :mod:`orchestrator.zoo`.

Same architectures and parameter counts as ``models_torch`` (the zoo's ``expected_params``):
the ImageNet variants are torchvision's, the CIFAR variants follow the zoo's rule (3x3/1 first
conv, stem max-pools removed, 10-way classifier). Max-pools use ``cover_all=False`` (Chainer's
default rounds up, PyTorch's down), AlexNet's adaptive 6x6 average pool is a 2x2/1 average pool
on CIFAR's 7x7 map and the identity on ImageNet's 6x6 one. Parameters counted: weights, biases,
BatchNorm gamma/beta (running statistics are persistent values, not parameters).
"""

import chainer
import chainer.functions as F
import chainer.links as L

from orchestrator import zoo

MODELS = ("lenet5", "alexnet", "resnet18", "resnet50")


def input_shape(dataset: str) -> tuple:
    return zoo.get_dataset(dataset).shape_chw


def num_classes(dataset: str) -> int:
    return zoo.get_dataset(dataset).num_classes


def synthetic_pool(xp, batch: int, dataset: str, seed: int, count: int = 4) -> list:
    """A few distinct (images, int32 labels) batches in ``xp`` memory (numpy or cupy), the
    synthetic input every rank (and the fidelity benchmark's native loop) cycles through."""
    import numpy as np

    rng = np.random.RandomState(seed)
    shape = (batch, *input_shape(dataset))
    classes = num_classes(dataset)
    return [(xp.asarray(rng.standard_normal(shape).astype(np.float32)),
             xp.asarray(rng.randint(0, classes, batch).astype(np.int32)))
            for _ in range(count)]


def _maxpool(x, k, s, pad=0):
    return F.max_pooling_2d(x, k, stride=s, pad=pad, cover_all=False)


class LeNet5(chainer.Chain):
    def __init__(self, classes: int = 10) -> None:
        super().__init__()
        with self.init_scope():
            self.conv1 = L.Convolution2D(3, 6, 5)  # 32 -> 28
            self.conv2 = L.Convolution2D(6, 16, 5)  # 14 -> 10
            self.fc1 = L.Linear(16 * 5 * 5, 120)
            self.fc2 = L.Linear(120, 84)
            self.fc3 = L.Linear(84, classes)

    def forward(self, x):
        x = _maxpool(F.relu(self.conv1(x)), 2, 2)
        x = _maxpool(F.relu(self.conv2(x)), 2, 2)
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        return self.fc3(x)


class AlexNet(chainer.Chain):
    def __init__(self, classes: int, imagenet: bool) -> None:
        super().__init__()
        self.imagenet = imagenet
        with self.init_scope():
            if imagenet:
                self.conv1 = L.Convolution2D(3, 64, 11, stride=4, pad=2)
            else:
                self.conv1 = L.Convolution2D(3, 64, 3, stride=1, pad=1)
            self.conv2 = L.Convolution2D(64, 192, 5, pad=2)
            self.conv3 = L.Convolution2D(192, 384, 3, pad=1)
            self.conv4 = L.Convolution2D(384, 256, 3, pad=1)
            self.conv5 = L.Convolution2D(256, 256, 3, pad=1)
            self.fc6 = L.Linear(256 * 6 * 6, 4096)
            self.fc7 = L.Linear(4096, 4096)
            self.fc8 = L.Linear(4096, classes)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        if self.imagenet:
            x = _maxpool(x, 3, 2)  # pool1 (removed on CIFAR)
        x = _maxpool(F.relu(self.conv2(x)), 3, 2)
        x = F.relu(self.conv3(x))
        x = F.relu(self.conv4(x))
        x = _maxpool(F.relu(self.conv5(x)), 3, 2)  # ImageNet 6x6, CIFAR 7x7
        if not self.imagenet:
            x = F.average_pooling_2d(x, 2, stride=1)  # adaptive 6x6 on a 7x7 map
        x = F.relu(self.fc6(F.dropout(x, 0.5)))
        x = F.relu(self.fc7(F.dropout(x, 0.5)))
        return self.fc8(x)


class ConvBN(chainer.Chain):
    def __init__(self, cin: int, cout: int, k: int, stride: int = 1, pad: int = 0) -> None:
        super().__init__()
        with self.init_scope():
            self.conv = L.Convolution2D(cin, cout, k, stride=stride, pad=pad, nobias=True)
            self.bn = L.BatchNormalization(cout)

    def forward(self, x):
        return self.bn(self.conv(x))


class BasicBlock(chainer.Chain):
    expansion = 1

    def __init__(self, cin: int, width: int, stride: int) -> None:
        super().__init__()
        with self.init_scope():
            self.c1 = ConvBN(cin, width, 3, stride, 1)
            self.c2 = ConvBN(width, width, 3, 1, 1)
            self.shortcut = (ConvBN(cin, width, 1, stride)
                             if stride != 1 or cin != width else None)

    def forward(self, x):
        h = self.c2(F.relu(self.c1(x)))
        return F.relu(h + (self.shortcut(x) if self.shortcut is not None else x))


class Bottleneck(chainer.Chain):
    expansion = 4

    def __init__(self, cin: int, width: int, stride: int) -> None:
        super().__init__()
        out = width * 4
        with self.init_scope():
            self.c1 = ConvBN(cin, width, 1)
            self.c2 = ConvBN(width, width, 3, stride, 1)  # v1.5: stride on the 3x3
            self.c3 = ConvBN(width, out, 1)
            self.shortcut = ConvBN(cin, out, 1, stride) if stride != 1 or cin != out else None

    def forward(self, x):
        h = self.c3(F.relu(self.c2(F.relu(self.c1(x)))))
        return F.relu(h + (self.shortcut(x) if self.shortcut is not None else x))


class ResNet(chainer.Chain):
    def __init__(self, block, layers: tuple, classes: int, imagenet: bool) -> None:
        super().__init__()
        self.imagenet = imagenet
        with self.init_scope():
            self.stem = ConvBN(3, 64, 7, 2, 3) if imagenet else ConvBN(3, 64, 3, 1, 1)
            self.stages = chainer.ChainList()
            cin = 64
            for i, (blocks, width) in enumerate(zip(layers, (64, 128, 256, 512), strict=True)):
                stage = chainer.ChainList()
                for b in range(blocks):
                    stage.add_link(block(cin, width, 2 if (i > 0 and b == 0) else 1))
                    cin = width * block.expansion
                self.stages.add_link(stage)
            self.fc = L.Linear(cin, classes)

    def forward(self, x):
        x = F.relu(self.stem(x))
        if self.imagenet:
            x = _maxpool(x, 3, 2, pad=1)
        for stage in self.stages:
            for block in stage:
                x = block(x)
        x = F.average(x, axis=(2, 3))
        return self.fc(x)


def build(model: str, dataset: str, classes: "int | None" = None) -> chainer.Chain:
    """Model ``model`` for ``dataset``; ``classes``: the output width when it is not the
    dataset's (the labelled data set's class count, ``--classes``)."""
    spec = zoo.get(model)
    spec.check_dataset(dataset)
    classes, imagenet = classes or num_classes(dataset), dataset == "imagenet"
    if model == "lenet5":
        return LeNet5(classes)
    if model == "alexnet":
        return AlexNet(classes, imagenet)
    if model == "resnet18":
        return ResNet(BasicBlock, (2, 2, 2, 2), classes, imagenet)
    if model == "resnet50":
        return ResNet(Bottleneck, (3, 4, 6, 3), classes, imagenet)
    raise ValueError(f"model {model!r} has no Chainer implementation; available: "
                     f"{', '.join(MODELS)}")


def count_params(model: chainer.Chain) -> int:
    return sum(p.size for p in model.params())
