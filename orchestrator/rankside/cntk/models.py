"""CNTK 2.7 implementations of the benchmark models described in :mod:`orchestrator.zoo`.

Runs on CNTK's Python 3.6, so it cannot import ``orchestrator.zoo`` (dataclasses and
``from __future__ import annotations`` are 3.7+): the two datasets' geometry is in
``GEOMETRY`` below, and tests/test_cntk_chainer.py checks it, and every model's parameter
count, against the zoo. Architectures and counts are the zoo's (torchvision's ImageNet
networks; CIFAR: 3x3/1 first conv, stem max-pools removed, 10 classes). CNTK's ``pad=True``
is "same" padding, which for every padded layer here gives PyTorch's output size (AlexNet's
ImageNet conv1 11x11/4 gives 56 instead of 55, and its pool1 27 either way). AlexNet's adaptive
6x6 average pool is a 2x2/1 average pool on CIFAR's 7x7 map and the identity on ImageNet's
6x6 one. Counted parameters: weights, biases, BatchNorm scale/bias (its running statistics are
CNTK constants, not parameters).

``build(..., after_first=f)`` applies ``f`` to the first layer's output (the workload's timing
stamp, see cntk_train).
"""

import sys
import types


def _skip_cntk_import_checks():
    """CNTK 2.7's ``import cntk`` runs ``cntk_py_init.cntk_check_libs()``: 17 ``ldconfig -N -v
    $LD_LIBRARY_PATH`` calls that only print warnings about optional GPU/MKL/OpenCV libraries,
    and that, as root, create soname links in every directory on LD_LIBRARY_PATH (and in the
    system's library directories). A stand-in module with the same two functions, doing
    nothing, is imported instead (only if cntk is not imported yet)."""
    if "cntk" in sys.modules or "cntk.cntk_py_init" in sys.modules:
        return
    stub = types.ModuleType("cntk.cntk_py_init")
    stub.cntk_check_distro_info = stub.cntk_check_libs = lambda: None
    sys.modules["cntk.cntk_py_init"] = stub


_skip_cntk_import_checks()

import cntk as C  # noqa: E402 - after the stand-in above
from cntk.layers import (  # noqa: E402
    AveragePooling,
    BatchNormalization,
    Convolution2D,
    Dense,
    Dropout,
    GlobalAveragePooling,
    MaxPooling,
)

MODELS = ("lenet5", "alexnet", "resnet18", "resnet50")
# dataset -> ((C, H, W), classes); must equal orchestrator.zoo.DATASETS (a test checks).
GEOMETRY = {"cifar": ((3, 32, 32), 10), "imagenet": ((3, 224, 224), 1000)}
# model -> datasets it is defined for (as the zoo)
DATASETS = {"lenet5": ("cifar",), "alexnet": ("cifar", "imagenet"),
            "resnet18": ("cifar", "imagenet"), "resnet50": ("cifar", "imagenet")}


def input_shape(dataset):
    return GEOMETRY[dataset][0]


def num_classes(dataset):
    return GEOMETRY[dataset][1]


def _same(f):
    return f if f is not None else (lambda h: h)


def lenet5(x, classes, after_first):
    h = after_first(Convolution2D((5, 5), 6, activation=C.relu, pad=False)(x))  # 28
    h = MaxPooling((2, 2), strides=2)(h)  # 14
    h = Convolution2D((5, 5), 16, activation=C.relu, pad=False)(h)  # 10
    h = MaxPooling((2, 2), strides=2)(h)  # 5
    h = Dense(120, activation=C.relu)(h)
    h = Dense(84, activation=C.relu)(h)
    return Dense(classes)(h)


def alexnet(x, classes, imagenet, after_first):
    if imagenet:
        h = Convolution2D((11, 11), 64, strides=4, activation=C.relu, pad=True)(x)  # 56
        h = after_first(h)
        h = MaxPooling((3, 3), strides=2)(h)  # 27
    else:
        h = after_first(Convolution2D((3, 3), 64, activation=C.relu, pad=True)(x))  # 32
    h = Convolution2D((5, 5), 192, activation=C.relu, pad=True)(h)
    h = MaxPooling((3, 3), strides=2)(h)  # ImageNet 13, CIFAR 15
    h = Convolution2D((3, 3), 384, activation=C.relu, pad=True)(h)
    h = Convolution2D((3, 3), 256, activation=C.relu, pad=True)(h)
    h = Convolution2D((3, 3), 256, activation=C.relu, pad=True)(h)
    h = MaxPooling((3, 3), strides=2)(h)  # ImageNet 6, CIFAR 7
    if not imagenet:
        h = AveragePooling((2, 2), strides=1)(h)  # adaptive 6x6 on 7x7
    h = Dense(4096, activation=C.relu)(Dropout(0.5)(h))
    h = Dense(4096, activation=C.relu)(Dropout(0.5)(h))
    return Dense(classes)(h)


def conv_bn(h, k, out, stride=1, relu=True):
    h = Convolution2D((k, k), out, strides=stride, pad=k > 1, bias=False)(h)
    h = BatchNormalization(map_rank=1)(h)
    return C.relu(h) if relu else h


def basic_block(h, cin, width, stride):
    y = conv_bn(h, 3, width, stride)
    y = conv_bn(y, 3, width, relu=False)
    if stride != 1 or cin != width:
        h = conv_bn(h, 1, width, stride, relu=False)
    return C.relu(y + h), width


def bottleneck(h, cin, width, stride):
    out = width * 4
    y = conv_bn(h, 1, width)
    y = conv_bn(y, 3, width, stride)  # v1.5: stride on the 3x3
    y = conv_bn(y, 1, out, relu=False)
    if stride != 1 or cin != out:
        h = conv_bn(h, 1, out, stride, relu=False)
    return C.relu(y + h), out


def resnet(x, block, layers, classes, imagenet, after_first):
    if imagenet:
        h = after_first(conv_bn(x, 7, 64, 2))
        h = MaxPooling((3, 3), strides=2, pad=True)(h)
    else:
        h = after_first(conv_bn(x, 3, 64))
    cin = 64
    # Python 3.6 has no zip(strict=...) (ruff targets 3.10); the lengths are equal (4).
    for i, (blocks, width) in enumerate(zip(layers, (64, 128, 256, 512))):  # noqa: B905
        for b in range(blocks):
            h, cin = block(h, cin, width, 2 if (i > 0 and b == 0) else 1)
    h = GlobalAveragePooling()(h)
    return Dense(classes)(h)


def build(model, dataset, x, after_first=None, classes=None):
    """The model's output (logits) as a CNTK function of the input variable ``x``;
    ``classes``: the output width when it is not the dataset's (``--classes``)."""
    if model not in DATASETS:
        raise ValueError(f"model {model!r} has no CNTK implementation; available: "
                         f"{', '.join(MODELS)}")
    if dataset not in DATASETS[model]:
        raise ValueError(f"model {model!r} does not support dataset {dataset!r}; supported: "
                         f"{', '.join(DATASETS[model])}")
    classes = classes or num_classes(dataset)
    imagenet, first = dataset == "imagenet", _same(after_first)
    if model == "lenet5":
        return lenet5(x, classes, first)
    if model == "alexnet":
        return alexnet(x, classes, imagenet, first)
    if model == "resnet18":
        return resnet(x, basic_block, (2, 2, 2, 2), classes, imagenet, first)
    return resnet(x, bottleneck, (3, 4, 6, 3), classes, imagenet, first)


def count_params(z):
    n = 0
    for p in z.parameters:
        size = 1
        for d in p.shape:
            size *= d
        n += size
    return n


def main():
    """``python -m orchestrator.rankside.cntk.models``: one JSON line per model and dataset,
    with the parameter count and output shape (what the tests compare with the zoo)."""
    import json

    import numpy as np

    for model in MODELS:
        for dataset in DATASETS[model]:
            x = C.input_variable(input_shape(dataset))
            z = build(model, dataset, x)
            out = None
            if dataset == "cifar":
                out = list(z.eval({x: np.zeros((1, *input_shape(dataset)), np.float32)}).shape)
            print(json.dumps({"model": model, "dataset": dataset, "params": count_params(z),
                              "output_shape": out, "geometry": GEOMETRY[dataset]}))


if __name__ == "__main__":
    main()


def distributed_trainer(z, y, learner, batch, world):
    """CNTK's standard distributed training setup for ``z`` (labels ``y``): softmax
    cross-entropy, ``momentum_sgd`` (lr 0.01, momentum 0.9) wrapped in the distributed learner
    ``learner`` names (``data_parallel``: 32-bit all-reduce; ``one_bit_sgd``: 1-bit quantized;
    ``block_momentum``: model averaging, one block = one global minibatch). Returns (trainer,
    distributed learner)."""
    from cntk.train import distributed

    loss = C.cross_entropy_with_softmax(z, y)
    local = C.momentum_sgd(z.parameters, C.learning_parameter_schedule(0.01),
                           C.momentum_schedule(0.9))
    if learner == "block_momentum":
        dist = distributed.block_momentum_distributed_learner(local, block_size=batch * world)
    else:
        dist = distributed.data_parallel_distributed_learner(
            local, num_quantization_bits=1 if learner == "one_bit_sgd" else 32)
    return C.Trainer(z, (loss, None), [dist]), dist
