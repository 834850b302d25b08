"""Framework-free catalogue of the benchmark models and datasets.

This module is part of the control plane: it must never import torch, TensorFlow, MXNet,
Chainer, CNTK or any other deep-learning framework.  Every framework back-end (PyTorch in
``orchestrator.rankside.torch.models`` now, others later) builds the models described here and
must reproduce ``ModelSpec.expected_params`` exactly, which is how we make sure that all
frameworks benchmark the same network.

Datasets
--------
``cifar``    32x32x3 input (C,H,W = 3,32,32), 10 classes.
``imagenet`` 224x224x3 input (C,H,W = 3,224,224), 1000 classes.

ImageNet variants
-----------------
The ImageNet variants are the torchvision architectures (parameter counts match torchvision
exactly): AlexNet (the "one weird trick" single-GPU version, 64/192/384/256/256 conv channels),
GoogLeNet without the two auxiliary classifiers, ResNet-18 and ResNet-50 (ResNet v1.5: the stride
of a down-sampling bottleneck is on its 3x3 conv).

CIFAR variants (one rule for every ImageNet architecture)
---------------------------------------------------------
Every layer of the ImageNet network is kept with the same widths, except:

1. the first convolution becomes 3x3, stride 1, padding 1 (same number of output channels,
   same bias/BN choice as the ImageNet stem);
2. the max-pool(s) of the stem (the ones between the first convolution and the first
   "body" stage) are removed;
3. the final classifier has 10 outputs.

Resulting spatial sizes on a 32x32 input:

* ResNet-18/50: conv1 32x32, (no max-pool), layer1 32x32, layer2 16x16, layer3 8x8,
  layer4 4x4, global average pool, fc.  (The usual CIFAR ResNet, e.g. kuangliu/pytorch-cifar.)
* GoogLeNet: conv1/conv2/conv3 32x32, (maxpool1 and maxpool2 removed), inception3a/3b 32x32,
  maxpool3 16x16, inception4a-4e 16x16, maxpool4 8x8, inception5a/5b 8x8, global average pool,
  dropout, fc.
* AlexNet: conv1 32x32, (pool1 removed), conv2 32x32, pool2 15x15, conv3-5 15x15,
  pool5 7x7, adaptive average pool to 6x6 (same layer as torchvision; on a 7x7 input it is
  exactly a 2x2, stride-1 average pool, which other frameworks can use instead), classifier
  9216 -> 4096 -> 4096 -> 10 unchanged apart from the output width.

LeNet-5 exists only for CIFAR (it is not defined for 224x224 inputs).

Transformers
------------
``gpt-nano``, ``gpt2-small``, ``gpt2-medium`` (GPT-2 decoders: pre-LayerNorm blocks, learned
position embeddings, GELU MLP of 4x the width, the output layer tied to the token embedding,
as Hugging Face's ``GPT2LMHeadModel``), ``bert-base`` (BERT-base encoder with its masked-LM
head, the decoder tied to the word embedding, as ``BertForMaskedLM`` without the pooler) and
``vit-b16`` (torchvision's ViT-B/16). Their attention is scaled dot-product attention
(``torch.nn.functional.scaled_dot_product_attention`` in PyTorch: flash or memory-efficient
kernels on a GPU). The language models train on token datasets: a sample is a sequence of
``seq_len`` tokens, its targets the next tokens (GPT) or the masked ones (BERT: 15 % of the
positions, the others ignored).

Token datasets
--------------
``bytes``     byte-level tokens (vocabulary 256), 128-token sequences: ``orch data make --from
              text`` writes real ones from text on the machine; synthetic by default.
``webtext``   GPT-2's geometry: 50,257 BPE tokens, 1,024-token context (synthetic tokens).
``bookswiki`` BERT's geometry: 30,522 WordPiece tokens, 512-token sequences (synthetic).

Model FLOPs
-----------
:meth:`ModelSpec.flops_per_sample` is what a training step computes per sample (forward and
backward), the numerator of MFU. Transformers: ``T * (6N + 12 L H Q T)`` after the PaLM paper
(appendix B), T the tokens of a sample, N the parameters that take part in a matrix product
(all but the position, token-type and class-token tables; an embedding tied to the output
layer counts, as it is one), L layers, H heads, Q the head dimension; attention recomputation
is not counted. CNNs: what ``torch.utils.flop_counter.FlopCounterMode`` counts for one
training step of PyTorch's build (forward + backward; tests/test_models_torch.py counts it
again).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

__all__ = [
    "DATASETS",
    "MODELS",
    "Dataset",
    "ModelSpec",
    "Transformer",
    "UnknownDatasetError",
    "UnknownModelError",
    "get",
    "get_dataset",
    "names",
]


class UnknownModelError(KeyError, ValueError):
    """Raised by :func:`get` for a model name that is not in the catalogue.

    It is both a ``KeyError`` and a ``ValueError``; ``str()`` gives the plain message (a bare
    ``KeyError`` would show the message in quotes).
    """

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class UnknownDatasetError(KeyError, ValueError):
    """Raised for a dataset name that is unknown or not supported by a model."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


IMAGE, TOKENS = "image", "tokens"  # the kinds of dataset


@dataclass(frozen=True)
class Dataset:
    """Input/label geometry of a benchmark dataset (synthetic data uses the same geometry).

    An ``image`` dataset's sample is a C x H x W image with one of ``num_classes`` labels; a
    ``tokens`` dataset's is a sequence of ``seq_len`` token ids below ``num_classes`` (the
    vocabulary: the language model's output width)."""

    name: str
    channels: int
    height: int
    width: int
    num_classes: int
    description: str = ""
    kind: str = IMAGE
    seq_len: int = 0

    @property
    def tokens(self) -> bool:
        return self.kind == TOKENS

    @property
    def shape_chw(self) -> tuple[int, int, int]:
        """Per-sample input shape (C, H, W), the PyTorch/MXNet/Chainer layout."""
        return (self.channels, self.height, self.width)

    @property
    def shape_hwc(self) -> tuple[int, int, int]:
        """Per-sample input shape (H, W, C), the TensorFlow default layout."""
        return (self.height, self.width, self.channels)


DATASETS: Mapping[str, Dataset] = MappingProxyType(
    {
        "cifar": Dataset(
            name="cifar",
            channels=3,
            height=32,
            width=32,
            num_classes=10,
            description="CIFAR-10: 32x32 RGB images, 10 classes",
        ),
        "imagenet": Dataset(
            name="imagenet",
            channels=3,
            height=224,
            width=224,
            num_classes=1000,
            description="ImageNet-1k (ILSVRC-2012): 224x224 RGB crops, 1000 classes",
        ),
        "bytes": Dataset(
            name="bytes", channels=0, height=0, width=0, num_classes=256, kind=TOKENS,
            seq_len=128,
            description="byte-level tokens of text (vocabulary 256), 128-token sequences",
        ),
        "webtext": Dataset(
            name="webtext", channels=0, height=0, width=0, num_classes=50257, kind=TOKENS,
            seq_len=1024,
            description="GPT-2's geometry: 50,257 BPE tokens, 1,024-token sequences",
        ),
        "bookswiki": Dataset(
            name="bookswiki", channels=0, height=0, width=0, num_classes=30522, kind=TOKENS,
            seq_len=512,
            description="BERT's geometry: 30,522 WordPiece tokens, 512-token sequences",
        ),
    }
)
IMAGE_DATASETS = tuple(n for n, d in DATASETS.items() if not d.tokens)


def get_dataset(name: str) -> Dataset:
    """Return the :class:`Dataset` called ``name``; unknown names list the valid ones."""
    try:
        return DATASETS[name]
    except (KeyError, TypeError):
        valid = ", ".join(sorted(DATASETS))
        raise UnknownDatasetError(f"unknown dataset {name!r}; valid: {valid}") from None


@dataclass(frozen=True)
class Transformer:
    """A transformer's shape: ``family`` gpt (causal decoder), bert (encoder, masked LM) or
    vit (encoder over image patches of ``patch`` pixels); ``layers`` blocks of ``heads``
    attention heads over ``d_model`` features, an MLP of 4 x d_model."""

    family: str
    layers: int
    d_model: int
    heads: int
    patch: int = 0

    @property
    def head_dim(self) -> int:
        return self.d_model // self.heads

    @property
    def objective(self) -> str:
        return {"gpt": "causal-lm", "bert": "masked-lm"}.get(self.family, "classify")

    def tokens(self, ds: Dataset) -> int:
        """Tokens one sample is: its sequence, or a ViT's patches and class token."""
        if self.family == "vit":
            return (ds.height // self.patch) * (ds.width // self.patch) + 1
        return ds.seq_len

    def lookup_params(self, ds: Dataset) -> int:
        """Parameters that are only looked up, never a matrix product's: position
        embeddings, BERT's token types, ViT's class token."""
        extra = {"bert": 2 * self.d_model, "vit": self.d_model}.get(self.family, 0)
        return self.tokens(ds) * self.d_model + extra


@dataclass(frozen=True)
class ModelSpec:
    """A benchmark model, independent of any framework.

    ``expected_params[dataset]`` is the exact number of trainable parameters (weights, biases,
    BatchNorm affine parameters; BatchNorm running statistics are buffers and are not counted)
    that every framework implementation must have for that dataset's variant.
    """

    name: str
    title: str
    paper_ref: str
    description: str
    datasets: tuple[str, ...]
    expected_params: Mapping[str, int] = field(default_factory=dict)
    # The frameworks (model libraries: torch, tensorflow, mxnet, cntk, chainer) that build it;
    # None: every one.
    libraries: tuple[str, ...] | None = None
    transformer: Transformer | None = None
    # CNNs: training FLOPs per sample as counted (see the module docstring), per dataset.
    counted_flops: Mapping[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "datasets", tuple(self.datasets))
        object.__setattr__(self, "expected_params", MappingProxyType(dict(self.expected_params)))
        object.__setattr__(self, "counted_flops", MappingProxyType(dict(self.counted_flops)))
        for ds in self.datasets:
            if ds not in DATASETS:
                raise ValueError(f"model {self.name!r}: unknown dataset {ds!r}")
        if set(self.expected_params) != set(self.datasets):
            raise ValueError(
                f"model {self.name!r}: expected_params keys {sorted(self.expected_params)} "
                f"!= datasets {sorted(self.datasets)}"
            )

    def supports(self, dataset: str) -> bool:
        return dataset in self.datasets

    def check_dataset(self, dataset: str) -> Dataset:
        """Return the :class:`Dataset`; raise :class:`UnknownDatasetError` if unsupported."""
        ds = get_dataset(dataset)
        if dataset not in self.datasets:
            raise UnknownDatasetError(
                f"model {self.name!r} does not support dataset {dataset!r}; "
                f"supported: {', '.join(self.datasets)}"
            )
        return ds

    def params(self, dataset: str) -> int:
        """Expected parameter count for ``dataset`` (validated)."""
        self.check_dataset(dataset)
        return self.expected_params[dataset]

    def built_by(self, library: str) -> bool:
        return self.libraries is None or library in self.libraries

    @property
    def objective(self) -> str:
        """classify (an image's label), causal-lm (next tokens) or masked-lm."""
        return self.transformer.objective if self.transformer else "classify"

    @property
    def image_classifier(self) -> bool:
        """Whether it classifies images (a CNN of the zoo): what every framework's image
        pipeline and the pre-flight's compute probe can build and feed."""
        return self.transformer is None and self.objective == "classify"

    def tokens_per_sample(self, dataset: str) -> int | None:
        """Tokens of one sample of a token dataset (its sequence); None for images."""
        ds = self.check_dataset(dataset)
        return ds.seq_len if ds.tokens else None

    def flops_per_sample(self, dataset: str) -> int | None:
        """Training FLOPs per sample (forward + backward; the module docstring says how)."""
        ds = self.check_dataset(dataset)
        t = self.transformer
        if t is None:
            return self.counted_flops.get(dataset)
        tokens = t.tokens(ds)
        matmul = self.expected_params[dataset] - t.lookup_params(ds)
        return tokens * (6 * matmul + 12 * t.layers * t.heads * t.head_dim * tokens)


_MODELS: tuple[ModelSpec, ...] = (
    ModelSpec(
        name="lenet5",
        title="LeNet-5",
        paper_ref=(
            "Y. LeCun, L. Bottou, Y. Bengio, P. Haffner: Gradient-based learning applied to "
            "document recognition. Proc. IEEE 86(11), 1998"
        ),
        description=(
            "Classic LeNet-5 layout on 3x32x32 input with ReLU and 2x2/2 max-pooling: "
            "conv1 5x5 3->6 (no padding, 28x28) - ReLU - pool1 (14x14) - conv2 5x5 6->16 "
            "(10x10) - ReLU - pool2 (5x5) - flatten 400 - fc1 120 - ReLU - fc2 84 - ReLU - "
            "fc3 10. All layers have biases; full C3 connectivity (no partial connection "
            "table), no Gaussian/RBF output layer. CIFAR only."
        ),
        datasets=("cifar",),
        expected_params={"cifar": 62_006},
        counted_flops={"cifar": 3_204_720},
    ),
    ModelSpec(
        name="alexnet",
        title="AlexNet",
        paper_ref=(
            "A. Krizhevsky: One weird trick for parallelizing convolutional neural networks. "
            "arXiv:1404.5997, 2014 (torchvision variant of Krizhevsky et al., NIPS 2012)"
        ),
        description=(
            "torchvision AlexNet, no LRN, all layers with biases. features: conv1 11x11/4 pad 2 "
            "3->64 - ReLU - pool1 3x3/2 - conv2 5x5 pad 2 64->192 - ReLU - pool2 3x3/2 - "
            "conv3 3x3 192->384 - ReLU - conv4 3x3 384->256 - ReLU - conv5 3x3 256->256 - ReLU - "
            "pool5 3x3/2; avgpool adaptive 6x6; classifier: dropout - fc6 9216->4096 - ReLU - "
            "dropout - fc7 4096->4096 - ReLU - fc8 4096->classes. CIFAR variant: conv1 is 3x3/1 "
            "pad 1 (3->64), pool1 is removed (pool5 output 7x7, adaptive pool to 6x6 = 2x2/1 "
            "average pool), fc8 has 10 outputs; everything else unchanged."
        ),
        datasets=("cifar", "imagenet"),
        expected_params={"cifar": 57_023_306, "imagenet": 61_100_840},
        counted_flops={"cifar": 5_108_367_360, "imagenet": 4_144_577_280},
    ),
    ModelSpec(
        name="googlenet",
        title="GoogLeNet (Inception v1)",
        paper_ref="C. Szegedy et al.: Going deeper with convolutions. CVPR 2015, arXiv:1409.4842",
        description=(
            "torchvision GoogLeNet without auxiliary classifiers: every conv is conv (no bias) + "
            "BatchNorm(eps=1e-3) + ReLU; the '5x5' inception branch uses a 3x3 conv as in "
            "torchvision (needed for its parameter count); ceil-mode max-pools; global average "
            "pool, dropout 0.2, fc 1024->classes. Stem: conv1 7x7/2 3->64 - maxpool1 - conv2 1x1 "
            "64->64 - conv3 3x3 64->192 - maxpool2. CIFAR variant: conv1 is 3x3/1 pad 1, maxpool1 "
            "and maxpool2 are removed (inception3 at 32x32, inception4 at 16x16, inception5 at "
            "8x8), fc has 10 outputs."
        ),
        datasets=("cifar", "imagenet"),
        expected_params={"cifar": 5_602_474, "imagenet": 6_624_904},
        counted_flops={"cifar": 8_702_717_952, "imagenet": 8_754_229_248},
    ),
    ModelSpec(
        name="resnet18",
        title="ResNet-18",
        paper_ref=(
            "K. He, X. Zhang, S. Ren, J. Sun: Deep residual learning for image recognition. "
            "CVPR 2016, arXiv:1512.03385"
        ),
        description=(
            "torchvision ResNet-18: BasicBlock [2,2,2,2], widths 64/128/256/512, convs without "
            "bias + BatchNorm, 1x1-conv+BN projection shortcuts when shape changes, stem conv1 "
            "7x7/2 + bn1 + ReLU + maxpool 3x3/2, global average pool, fc 512->classes. CIFAR "
            "variant: conv1 is 3x3/1 pad 1, no maxpool (layer1..4 at 32/16/8/4), fc 512->10."
        ),
        datasets=("cifar", "imagenet"),
        expected_params={"cifar": 11_173_962, "imagenet": 11_689_512},
        counted_flops={"cifar": 3_328_997_376, "imagenet": 10_648_412_160},
    ),
    ModelSpec(
        name="resnet50",
        title="ResNet-50",
        paper_ref=(
            "K. He, X. Zhang, S. Ren, J. Sun: Deep residual learning for image recognition. "
            "CVPR 2016, arXiv:1512.03385"
        ),
        description=(
            "torchvision ResNet-50 (v1.5: stride on the 3x3 conv of the bottleneck): Bottleneck "
            "[3,4,6,3], expansion 4, widths 64/128/256/512 (outputs 256..2048), convs without "
            "bias + BatchNorm, stem conv1 7x7/2 + bn1 + ReLU + maxpool 3x3/2, global average "
            "pool, fc 2048->classes. CIFAR variant: conv1 is 3x3/1 pad 1, no maxpool, fc 2048->10."
        ),
        datasets=("cifar", "imagenet"),
        expected_params={"cifar": 23_520_842, "imagenet": 25_557_032},
        counted_flops={"cifar": 7_783_440_384, "imagenet": 24_299_077_632},
    ),
    ModelSpec(
        name="gpt-nano",
        title="GPT nano",
        paper_ref="A. Radford et al.: Language models are unsupervised multitask learners "
        "(GPT-2). OpenAI, 2019",
        description=(
            "A GPT-2 decoder small enough for CPUs and tests: 2 blocks, 4 heads, width 128, "
            "context of the dataset's sequence, output layer tied to the token embedding."
        ),
        datasets=("bytes", "webtext"),
        expected_params={"bytes": 445_952, "webtext": 6_960_768},
        libraries=("torch", "tensorflow"),
        transformer=Transformer("gpt", layers=2, d_model=128, heads=4),
    ),
    ModelSpec(
        name="gpt2-small",
        title="GPT-2 small (124M)",
        paper_ref="A. Radford et al.: Language models are unsupervised multitask learners "
        "(GPT-2). OpenAI, 2019",
        description=(
            "GPT-2 small as Hugging Face's GPT2LMHeadModel: 12 pre-LayerNorm blocks, 12 heads, "
            "width 768, GELU MLP 3072, learned positions, output layer tied to the token "
            "embedding (124,439,808 parameters on webtext)."
        ),
        datasets=("bytes", "webtext"),
        expected_params={"bytes": 85_350_912, "webtext": 124_439_808},
        libraries=("torch", "tensorflow"),
        transformer=Transformer("gpt", layers=12, d_model=768, heads=12),
    ),
    ModelSpec(
        name="gpt2-medium",
        title="GPT-2 medium (355M)",
        paper_ref="A. Radford et al.: Language models are unsupervised multitask learners "
        "(GPT-2). OpenAI, 2019",
        description=(
            "GPT-2 medium: 24 blocks, 16 heads, width 1024, GELU MLP 4096, output layer tied "
            "(354,823,168 parameters on webtext)."
        ),
        datasets=("bytes", "webtext"),
        expected_params={"bytes": 302_704_640, "webtext": 354_823_168},
        libraries=("torch", "tensorflow"),
        transformer=Transformer("gpt", layers=24, d_model=1024, heads=16),
    ),
    ModelSpec(
        name="bert-base",
        title="BERT-base (masked LM)",
        paper_ref="J. Devlin et al.: BERT: Pre-training of deep bidirectional transformers for "
        "language understanding. NAACL 2019, arXiv:1810.04805",
        description=(
            "BERT-base as Hugging Face's BertForMaskedLM without the pooler: word, position "
            "and token-type embeddings + LayerNorm, 12 post-LayerNorm encoder blocks (12 heads, "
            "width 768, GELU MLP 3072), the masked-LM head (dense + GELU + LayerNorm, decoder "
            "tied to the word embedding, its own bias). Loss on the 15 % masked positions."
        ),
        datasets=("bookswiki",),
        expected_params={"bookswiki": 109_514_298},
        libraries=("torch",),
        transformer=Transformer("bert", layers=12, d_model=768, heads=12),
    ),
    ModelSpec(
        name="vit-b16",
        title="ViT-B/16",
        paper_ref="A. Dosovitskiy et al.: An image is worth 16x16 words: transformers for image "
        "recognition at scale. ICLR 2021, arXiv:2010.11929",
        description=(
            "torchvision's vit_b_16: 16x16 patches by a strided conv (768 channels), class "
            "token, learned positions, 12 pre-LayerNorm blocks (12 heads, GELU MLP 3072), "
            "final LayerNorm, linear head."
        ),
        datasets=("imagenet",),
        expected_params={"imagenet": 86_567_656},
        libraries=("torch",),
        transformer=Transformer("vit", layers=12, d_model=768, heads=12, patch=16),
    ),
)

MODELS: Mapping[str, ModelSpec] = MappingProxyType({m.name: m for m in _MODELS})


def names() -> list[str]:
    """Sorted list of the model names in the catalogue."""
    return sorted(MODELS)


def get(name: str) -> ModelSpec:
    """Return the :class:`ModelSpec` called ``name``.

    Raises :class:`UnknownModelError` (a ``KeyError`` and ``ValueError``) whose message lists the
    valid names, e.g. ``unknown model 'x'; valid: alexnet, googlenet, lenet5, resnet18, resnet50``.
    """
    try:
        return MODELS[name]
    except (KeyError, TypeError):
        raise UnknownModelError(f"unknown model {name!r}; valid: {', '.join(names())}") from None
