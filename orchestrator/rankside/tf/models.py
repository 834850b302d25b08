"""TensorFlow implementations of the benchmark models described in :mod:`orchestrator.zoo`.

Plain TensorFlow (``tf.Module`` + ``tf.nn``), no Keras: the distributed workloads need full
control over where variables live and how they are read, which Keras 3 does not give under
``ParameterServerStrategy`` (its ``model.fit`` does not run there at all). The architectures and
parameter counts are the zoo's (torchvision's for ImageNet, the zoo's CIFAR rule otherwise):
``count_params(build(name, dataset)) == zoo.get(name).expected_params[dataset]``.

Layout is NHWC (TensorFlow's CPU layout); padding is explicit so that every spatial size is
PyTorch's (``ceil_mode`` max-pools pad the bottom/right edge as PyTorch's windows do).

Two deliberate differences from the PyTorch zoo, neither of which changes the parameters:

* BatchNorm always normalises with the batch's statistics (training mode) and keeps no running
  averages: those are buffers for inference, and keeping them would add cross-replica variable
  updates that the benchmark does not need. Its ``eps`` is PyTorch's (1e-5; 1e-3 in GoogLeNet).
* Initial values come from stateless random ops with fixed seeds (He-normal convolutions,
  LeCun-normal dense layers, zero biases): every process builds bit-identical weights.

Reading weights through :func:`substitute`: every layer reads its variables through
:func:`_read`, so a caller can run the network on *other tensors* than the variables, e.g. on
copies pulled from a parameter server in one step (``tf_ps`` does this to time the pull)::

    pulled = [tf.identity(v) for v in model.trainable_variables]
    with substitute(model.trainable_variables, pulled):
        logits = model(x, training=True)
"""

from __future__ import annotations

import math
from contextlib import contextmanager

import tensorflow as tf

from orchestrator import zoo

__all__ = [
    "GPT",
    "AlexNet",
    "GoogLeNet",
    "LeNet5",
    "ResNet",
    "build",
    "count_params",
    "input_shape",
    "num_classes",
    "substitute",
]

# Variable ref -> tensor to use instead, while a `substitute` block is active (trace time).
_SUBSTITUTES: dict | None = None


@contextmanager
def substitute(variables, values):
    """Within the block, layers read ``values[i]`` wherever they would read ``variables[i]``."""
    global _SUBSTITUTES
    saved = _SUBSTITUTES
    _SUBSTITUTES = {v.ref(): t for v, t in zip(variables, values, strict=True)}
    try:
        yield
    finally:
        _SUBSTITUTES = saved


# The dtype layers compute in while a `compute_in` block is active (trace time); None: float32.
_COMPUTE_DTYPE = None


@contextmanager
def compute_in(dtype):
    """Within the block, layers read their variables cast to ``dtype`` (mixed precision:
    rankside.tf.precision), as Keras' AutoCastVariable reads them under a mixed policy."""
    global _COMPUTE_DTYPE
    saved = _COMPUTE_DTYPE
    _COMPUTE_DTYPE = dtype
    try:
        yield
    finally:
        _COMPUTE_DTYPE = saved


def _read(var, cast: bool = True):
    """The tensor a layer computes with: ``var`` (or its substitute), in the compute dtype
    unless ``cast`` is False (batch norm's scale and offset stay float32)."""
    value = var
    if _SUBSTITUTES is not None:
        found = _SUBSTITUTES.get(var.ref())
        if found is not None:
            value = found
    if cast and _COMPUTE_DTYPE is not None:
        return tf.cast(value, _COMPUTE_DTYPE)
    return value


def input_shape(dataset: str) -> tuple[int, ...]:
    """Per-sample input shape (H, W, C) of ``dataset``; (T,) token ids of a token dataset."""
    ds = zoo.get_dataset(dataset)
    return (ds.seq_len,) if ds.tokens else ds.shape_hwc


def num_classes(dataset: str) -> int:
    return zoo.get_dataset(dataset).num_classes


def count_params(model: tf.Module) -> int:
    """Trainable parameters (every variable these models have is trainable)."""
    return sum(math.prod(v.shape) for v in model.trainable_variables)


class _Seeds:
    """Deterministic, distinct seeds for every variable of one model."""

    def __init__(self) -> None:
        self.n = 0

    def __call__(self) -> tuple[int, int]:
        self.n += 1
        return (self.n, 1234)


def _normal(shape, std: float, seeds: _Seeds):
    seed = seeds()
    return lambda: tf.random.stateless_truncated_normal(shape, seed=seed, stddev=std)


def _zeros(shape):
    return lambda: tf.zeros(shape)


def _ones(shape):
    return lambda: tf.ones(shape)


# --------------------------------------------------------------------------------------------
# Layers
# --------------------------------------------------------------------------------------------


class Conv2d(tf.Module):
    """k x k convolution with symmetric zero padding ``pad`` (PyTorch's Conv2d geometry)."""

    def __init__(self, seeds: _Seeds, cin: int, cout: int, k: int, stride: int = 1,
                 pad: int = 0, bias: bool = True, name: str | None = None) -> None:
        super().__init__(name=name)
        self.stride, self.pad = stride, pad
        std = math.sqrt(2.0 / (k * k * cin))  # He normal (ReLU follows)
        self.kernel = tf.Variable(_normal((k, k, cin, cout), std, seeds), name="kernel")
        self.bias = tf.Variable(_zeros((cout,)), name="bias") if bias else None

    def __call__(self, x):
        padding = [[0, 0], [self.pad, self.pad], [self.pad, self.pad], [0, 0]] if self.pad \
            else "VALID"
        y = tf.nn.conv2d(x, _read(self.kernel), strides=self.stride, padding=padding)
        return y if self.bias is None else tf.nn.bias_add(y, _read(self.bias))


class Dense(tf.Module):
    def __init__(self, seeds: _Seeds, cin: int, cout: int, std: float | None = None,
                 name: str | None = None) -> None:
        super().__init__(name=name)
        std = math.sqrt(1.0 / cin) if std is None else std  # LeCun normal
        self.kernel = tf.Variable(_normal((cin, cout), std, seeds), name="kernel")
        self.bias = tf.Variable(_zeros((cout,)), name="bias")

    def __call__(self, x):
        return tf.matmul(x, _read(self.kernel)) + _read(self.bias)


class BatchNorm(tf.Module):
    """Batch normalisation over N, H, W with the batch's statistics (see the module doc)."""

    def __init__(self, channels: int, eps: float = 1e-5, name: str | None = None) -> None:
        super().__init__(name=name)
        self.eps = eps
        self.gamma = tf.Variable(_ones((channels,)), name="gamma")
        self.beta = tf.Variable(_zeros((channels,)), name="beta")

    def __call__(self, x):
        y, _, _ = tf.compat.v1.nn.fused_batch_norm(
            x, _read(self.gamma, cast=False), _read(self.beta, cast=False), epsilon=self.eps,
            is_training=True)
        return y


def max_pool(x, k: int, stride: int, pad: int = 0, ceil: bool = False):
    """PyTorch's MaxPool2d: padding never wins the max; ``ceil`` keeps the partial last window."""
    h = x.shape[1]
    out = (h + 2 * pad - k + (stride - 1 if ceil else 0)) // stride + 1
    if ceil and (out - 1) * stride >= h + pad:  # PyTorch: the last window must start inside
        out -= 1
    extra = max(0, (out - 1) * stride + k - (h + 2 * pad))
    if pad or extra:
        x = tf.pad(x, [[0, 0], [pad, pad + extra], [pad, pad + extra], [0, 0]],
                   constant_values=x.dtype.min)
    return tf.nn.max_pool2d(x, k, stride, "VALID")


def relu(x):
    return tf.nn.relu(x)


# --------------------------------------------------------------------------------------------
# LeNet-5
# --------------------------------------------------------------------------------------------


class LeNet5(tf.Module):
    """LeNet-5 for 32x32x3 inputs (ReLU, 2x2 max-pool, full C3 connectivity)."""

    def __init__(self, classes: int = 10) -> None:
        super().__init__(name="lenet5")
        s = _Seeds()
        self.conv1 = Conv2d(s, 3, 6, 5, name="conv1")  # 28
        self.conv2 = Conv2d(s, 6, 16, 5, name="conv2")  # 10
        self.fc1 = Dense(s, 16 * 5 * 5, 120, name="fc1")
        self.fc2 = Dense(s, 120, 84, name="fc2")
        self.fc3 = Dense(s, 84, classes, name="fc3")

    def __call__(self, x, training: bool = True):
        x = max_pool(relu(self.conv1(x)), 2, 2)  # 14
        x = max_pool(relu(self.conv2(x)), 2, 2)  # 5
        x = tf.reshape(x, [-1, 16 * 5 * 5])
        x = relu(self.fc1(x))
        x = relu(self.fc2(x))
        return self.fc3(x)


# --------------------------------------------------------------------------------------------
# AlexNet
# --------------------------------------------------------------------------------------------


class AlexNet(tf.Module):
    """torchvision AlexNet, or its CIFAR variant (3x3/1 conv1, no pool1, 2x2/1 avg pool)."""

    def __init__(self, classes: int = 1000, cifar: bool = False, dropout: float = 0.5) -> None:
        super().__init__(name="alexnet")
        s = _Seeds()
        self.cifar, self.dropout = cifar, dropout
        self.conv1 = (Conv2d(s, 3, 64, 3, 1, 1, name="conv1") if cifar
                      else Conv2d(s, 3, 64, 11, 4, 2, name="conv1"))  # 32 | 55
        self.conv2 = Conv2d(s, 64, 192, 5, pad=2, name="conv2")
        self.conv3 = Conv2d(s, 192, 384, 3, pad=1, name="conv3")
        self.conv4 = Conv2d(s, 384, 256, 3, pad=1, name="conv4")
        self.conv5 = Conv2d(s, 256, 256, 3, pad=1, name="conv5")
        self.fc6 = Dense(s, 256 * 6 * 6, 4096, name="fc6")
        self.fc7 = Dense(s, 4096, 4096, name="fc7")
        self.fc8 = Dense(s, 4096, classes, std=0.01, name="fc8")

    def __call__(self, x, training: bool = True):
        x = relu(self.conv1(x))
        if not self.cifar:
            x = max_pool(x, 3, 2)  # 27
        x = max_pool(relu(self.conv2(x)), 3, 2)  # 13 | cifar 15
        x = relu(self.conv3(x))
        x = relu(self.conv4(x))
        x = max_pool(relu(self.conv5(x)), 3, 2)  # 6 | cifar 7
        if self.cifar:  # torchvision's adaptive average pool to 6x6, exactly, on a 7x7 input
            x = tf.nn.avg_pool2d(x, 2, 1, "VALID")
        x = tf.reshape(x, [-1, 256 * 6 * 6])
        if training:
            x = tf.nn.dropout(x, self.dropout)
        x = relu(self.fc6(x))
        if training:
            x = tf.nn.dropout(x, self.dropout)
        x = relu(self.fc7(x))
        return self.fc8(x)


# --------------------------------------------------------------------------------------------
# GoogLeNet (Inception v1), torchvision layout without auxiliary heads
# --------------------------------------------------------------------------------------------


class BasicConv2d(tf.Module):
    """conv (no bias) + BatchNorm(eps=1e-3) + ReLU, as in torchvision's GoogLeNet."""

    def __init__(self, s: _Seeds, cin: int, cout: int, k: int, stride: int = 1, pad: int = 0,
                 name: str | None = None) -> None:
        super().__init__(name=name)
        self.conv = Conv2d(s, cin, cout, k, stride, pad, bias=False)
        self.bn = BatchNorm(cout, eps=1e-3)

    def __call__(self, x):
        return relu(self.bn(self.conv(x)))


class Inception(tf.Module):
    """Inception module; branch3 uses a 3x3 conv like torchvision (the paper says 5x5)."""

    def __init__(self, s: _Seeds, cin: int, ch1x1: int, ch3x3red: int, ch3x3: int,
                 ch5x5red: int, ch5x5: int, pool_proj: int, name: str | None = None) -> None:
        super().__init__(name=name)
        self.branch1 = BasicConv2d(s, cin, ch1x1, 1)
        self.branch2 = [BasicConv2d(s, cin, ch3x3red, 1), BasicConv2d(s, ch3x3red, ch3x3, 3, 1, 1)]
        self.branch3 = [BasicConv2d(s, cin, ch5x5red, 1), BasicConv2d(s, ch5x5red, ch5x5, 3, 1, 1)]
        self.branch4 = BasicConv2d(s, cin, pool_proj, 1)

    def __call__(self, x):
        b1 = self.branch1(x)
        b2 = self.branch2[1](self.branch2[0](x))
        b3 = self.branch3[1](self.branch3[0](x))
        b4 = self.branch4(max_pool(x, 3, 1, 1, ceil=True))
        return tf.concat([b1, b2, b3, b4], axis=3)


class GoogLeNet(tf.Module):
    """torchvision GoogLeNet without aux heads, or its CIFAR variant (3x3/1 conv1, no
    maxpool1/maxpool2)."""

    def __init__(self, classes: int = 1000, cifar: bool = False, dropout: float = 0.2) -> None:
        super().__init__(name="googlenet")
        s = _Seeds()
        self.cifar, self.dropout = cifar, dropout
        self.conv1 = (BasicConv2d(s, 3, 64, 3, 1, 1, name="conv1") if cifar
                      else BasicConv2d(s, 3, 64, 7, 2, 3, name="conv1"))
        self.conv2 = BasicConv2d(s, 64, 64, 1, name="conv2")
        self.conv3 = BasicConv2d(s, 64, 192, 3, 1, 1, name="conv3")
        self.inception3a = Inception(s, 192, 64, 96, 128, 16, 32, 32, name="inception3a")
        self.inception3b = Inception(s, 256, 128, 128, 192, 32, 96, 64, name="inception3b")
        self.inception4a = Inception(s, 480, 192, 96, 208, 16, 48, 64, name="inception4a")
        self.inception4b = Inception(s, 512, 160, 112, 224, 24, 64, 64, name="inception4b")
        self.inception4c = Inception(s, 512, 128, 128, 256, 24, 64, 64, name="inception4c")
        self.inception4d = Inception(s, 512, 112, 144, 288, 32, 64, 64, name="inception4d")
        self.inception4e = Inception(s, 528, 256, 160, 320, 32, 128, 128, name="inception4e")
        self.inception5a = Inception(s, 832, 256, 160, 320, 32, 128, 128, name="inception5a")
        self.inception5b = Inception(s, 832, 384, 192, 384, 48, 128, 128, name="inception5b")
        self.fc = Dense(s, 1024, classes, std=0.01, name="fc")

    def __call__(self, x, training: bool = True):
        x = self.conv1(x)
        if not self.cifar:
            x = max_pool(x, 3, 2, ceil=True)  # maxpool1
        x = self.conv3(self.conv2(x))
        if not self.cifar:
            x = max_pool(x, 3, 2, ceil=True)  # maxpool2
        x = self.inception3b(self.inception3a(x))
        x = max_pool(x, 3, 2, ceil=True)  # maxpool3
        for block in (self.inception4a, self.inception4b, self.inception4c, self.inception4d,
                      self.inception4e):
            x = block(x)
        x = max_pool(x, 2, 2, ceil=True)  # maxpool4
        x = self.inception5b(self.inception5a(x))
        x = tf.reduce_mean(x, axis=[1, 2])  # global average pool
        if training:
            x = tf.nn.dropout(x, self.dropout)
        return self.fc(x)


# --------------------------------------------------------------------------------------------
# ResNet (torchvision layout, v1.5 bottleneck)
# --------------------------------------------------------------------------------------------


class _Shortcut(tf.Module):
    def __init__(self, s: _Seeds, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv = Conv2d(s, cin, cout, 1, stride, bias=False)
        self.bn = BatchNorm(cout)

    def __call__(self, x):
        return self.bn(self.conv(x))


class BasicBlock(tf.Module):
    expansion = 1

    def __init__(self, s: _Seeds, cin: int, planes: int, stride: int = 1,
                 downsample: _Shortcut | None = None) -> None:
        super().__init__()
        self.conv1 = Conv2d(s, cin, planes, 3, stride, 1, bias=False)
        self.bn1 = BatchNorm(planes)
        self.conv2 = Conv2d(s, planes, planes, 3, 1, 1, bias=False)
        self.bn2 = BatchNorm(planes)
        self.downsample = downsample

    def __call__(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return relu(out + identity)


class Bottleneck(tf.Module):
    expansion = 4

    def __init__(self, s: _Seeds, cin: int, planes: int, stride: int = 1,
                 downsample: _Shortcut | None = None) -> None:
        super().__init__()
        self.conv1 = Conv2d(s, cin, planes, 1, bias=False)
        self.bn1 = BatchNorm(planes)
        self.conv2 = Conv2d(s, planes, planes, 3, stride, 1, bias=False)  # v1.5: stride here
        self.bn2 = BatchNorm(planes)
        self.conv3 = Conv2d(s, planes, planes * 4, 1, bias=False)
        self.bn3 = BatchNorm(planes * 4)
        self.downsample = downsample

    def __call__(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = relu(self.bn1(self.conv1(x)))
        out = relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return relu(out + identity)


class ResNet(tf.Module):
    """torchvision ResNet, or its CIFAR variant (3x3/1 conv1, no maxpool)."""

    def __init__(self, block: type[BasicBlock] | type[Bottleneck], layers: list[int],
                 classes: int = 1000, cifar: bool = False, name: str = "resnet") -> None:
        super().__init__(name=name)
        s = _Seeds()
        self.cifar = cifar
        self.conv1 = (Conv2d(s, 3, 64, 3, 1, 1, bias=False, name="conv1") if cifar
                      else Conv2d(s, 3, 64, 7, 2, 3, bias=False, name="conv1"))
        self.bn1 = BatchNorm(64, name="bn1")
        self.inplanes = 64
        self.layer1 = self._make_layer(s, block, 64, layers[0])
        self.layer2 = self._make_layer(s, block, 128, layers[1], stride=2)
        self.layer3 = self._make_layer(s, block, 256, layers[2], stride=2)
        self.layer4 = self._make_layer(s, block, 512, layers[3], stride=2)
        self.fc = Dense(s, 512 * block.expansion, classes, name="fc")

    def _make_layer(self, s: _Seeds, block, planes: int, blocks: int, stride: int = 1):
        downsample = None
        if stride != 1 or self.inplanes != planes * block.expansion:
            downsample = _Shortcut(s, self.inplanes, planes * block.expansion, stride)
        out = [block(s, self.inplanes, planes, stride, downsample)]
        self.inplanes = planes * block.expansion
        out += [block(s, self.inplanes, planes) for _ in range(1, blocks)]
        return out

    def __call__(self, x, training: bool = True):
        x = relu(self.bn1(self.conv1(x)))
        if not self.cifar:
            x = max_pool(x, 3, 2, 1)
        for layer in (self.layer1, self.layer2, self.layer3, self.layer4):
            for blk in layer:
                x = blk(x)
        x = tf.reduce_mean(x, axis=[1, 2])
        return self.fc(x)


# --------------------------------------------------------------------------------------------
# GPT (the zoo's GPT-2 decoders), as the PyTorch zoo builds them (rankside/torch/transformers)
# --------------------------------------------------------------------------------------------


class LayerNorm(tf.Module):
    def __init__(self, d: int, eps: float = 1e-5, name: str | None = None) -> None:
        super().__init__(name=name)
        self.eps = eps
        self.gamma = tf.Variable(_ones((d,)), name="gamma")
        self.beta = tf.Variable(_zeros((d,)), name="beta")

    def __call__(self, x):
        mean, var = tf.nn.moments(tf.cast(x, tf.float32), axes=[-1], keepdims=True)
        y = (tf.cast(x, tf.float32) - mean) * tf.math.rsqrt(var + self.eps)
        return tf.cast(y * _read(self.gamma, cast=False) + _read(self.beta, cast=False),
                       x.dtype)


class Block(tf.Module):
    """GPT-2's pre-LayerNorm block: causal multi-head self-attention (one fused q/k/v
    projection) and a GELU (tanh) MLP of 4 x the width."""

    def __init__(self, s: _Seeds, d: int, heads: int, name: str | None = None) -> None:
        super().__init__(name=name)
        self.heads = heads
        self.ln_1 = LayerNorm(d, name="ln_1")
        self.qkv = Dense(s, d, 3 * d, std=0.02, name="qkv")
        self.proj = Dense(s, d, d, std=0.02, name="proj")
        self.ln_2 = LayerNorm(d, name="ln_2")
        self.fc = Dense(s, d, 4 * d, std=0.02, name="fc")
        self.out = Dense(s, 4 * d, d, std=0.02, name="out")

    def attention(self, x):
        b, t, d = tf.shape(x)[0], x.shape[1], x.shape[2]
        q, k, v = tf.split(tf.reshape(self.qkv(x), (b, t, 3, self.heads, d // self.heads)),
                           3, axis=2)
        q, k, v = (tf.transpose(tf.squeeze(z, 2), (0, 2, 1, 3)) for z in (q, k, v))
        scores = tf.matmul(q, k, transpose_b=True) / math.sqrt(d // self.heads)
        causal = tf.linalg.band_part(tf.ones((t, t), tf.bool), -1, 0)
        scores = tf.where(causal, scores, tf.cast(-1e4, scores.dtype))
        y = tf.matmul(tf.nn.softmax(scores, axis=-1), v)
        return self.proj(tf.reshape(tf.transpose(y, (0, 2, 1, 3)), (b, t, d)))

    def __call__(self, x):
        x = x + self.attention(self.ln_1(x))
        return x + self.out(tf.nn.gelu(self.fc(self.ln_2(x)), approximate=True))


class GPT(tf.Module):
    """A GPT-2 decoder: int32 token ids (B, T) -> next-token logits (B, T, vocab); the output
    layer is the token embedding (tied), as GPT-2's."""

    def __init__(self, vocab: int, context: int, layers: int, d: int, heads: int,
                 name: str = "gpt") -> None:
        super().__init__(name=name)
        s = _Seeds()
        self.wte = tf.Variable(_normal((vocab, d), 0.02, s), name="wte")
        self.wpe = tf.Variable(_normal((context, d), 0.02, s), name="wpe")
        self.blocks = [Block(s, d, heads, name=f"block{i}") for i in range(layers)]
        self.ln_f = LayerNorm(d, name="ln_f")

    def __call__(self, idx, training: bool = True):
        wte = _read(self.wte)
        x = tf.gather(wte, idx) + _read(self.wpe)[: idx.shape[1]]
        for block in self.blocks:
            x = block(x)
        return tf.matmul(self.ln_f(x), wte, transpose_b=True)


# --------------------------------------------------------------------------------------------
# Factory
# --------------------------------------------------------------------------------------------

_BUILDERS = {
    "lenet5": lambda n, imagenet: LeNet5(classes=n),
    "alexnet": lambda n, imagenet: AlexNet(classes=n, cifar=not imagenet),
    "googlenet": lambda n, imagenet: GoogLeNet(classes=n, cifar=not imagenet),
    "resnet18": lambda n, imagenet: ResNet(BasicBlock, [2, 2, 2, 2], n, cifar=not imagenet,
                                           name="resnet18"),
    "resnet50": lambda n, imagenet: ResNet(Bottleneck, [3, 4, 6, 3], n, cifar=not imagenet,
                                           name="resnet50"),
}


def build(name: str, dataset: str = "cifar", classes: int | None = None) -> tf.Module:
    """Build model ``name`` for ``dataset``: a ``tf.Module`` called as ``model(x, training)``
    on NHWC float32 input, returning logits. Variables are created in the current
    distribution strategy's scope, if any (mirrored, or placed on parameter servers).
    ``classes``: the output width when it is not the dataset's — the class count of the
    labelled data set trained on (``--classes``, from its manifest; CIFAR-100: 100).

    Unknown or unsupported names raise the zoo's ``UnknownModelError``/``UnknownDatasetError``.
    """
    spec = zoo.get(name)
    ds = spec.check_dataset(dataset)
    t = spec.transformer
    if t is not None:
        if t.family != "gpt":
            raise NotImplementedError(f"model {name!r} has no TensorFlow implementation")
        return GPT(ds.num_classes, ds.seq_len, t.layers, t.d_model, t.heads,
                   name=name.replace("-", "_"))
    return _BUILDERS[spec.name](classes or ds.num_classes, ds.name == "imagenet")
