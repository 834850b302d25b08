"""Tests for the PyTorch model zoo orchestrator.rankside.torch.models."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from orchestrator import zoo  # noqa: E402
from orchestrator.rankside.torch import models as mt  # noqa: E402

PAIRS = [(name, ds) for name in zoo.names() for ds in zoo.get(name).datasets]
CNNS = [n for n in zoo.names() if zoo.get(n).transformer is None]


def _param_count(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize(("name", "dataset"), PAIRS, ids=[f"{n}-{d}" for n, d in PAIRS])
def test_param_count_matches_zoo(name: str, dataset: str) -> None:
    with torch.device("meta"):  # no memory, no initialisation: gpt2-medium counts at once
        model = mt.build(name, dataset)
    assert isinstance(model, torch.nn.Module)
    assert _param_count(model) == zoo.get(name).expected_params[dataset]


def test_every_model_has_cifar_and_all_but_lenet_have_imagenet() -> None:
    assert {n for n, d in PAIRS if d == "cifar"} == set(CNNS)
    assert {n for n, d in PAIRS if d == "imagenet"} == set(CNNS) - {"lenet5"} | {"vit-b16"}


def test_input_shape_and_num_classes_come_from_zoo() -> None:
    assert mt.input_shape("cifar") == (3, 32, 32)
    assert mt.input_shape("imagenet") == (3, 224, 224)
    assert mt.num_classes("cifar") == 10
    assert mt.num_classes("imagenet") == 1000
    with pytest.raises(KeyError, match="valid: bookswiki, bytes, cifar, imagenet"):
        mt.input_shape("mnist")


@pytest.mark.parametrize("name", CNNS)
def test_cifar_forward_shape(name: str) -> None:
    torch.manual_seed(0)
    model = mt.build(name, "cifar").eval()
    x = torch.randn(2, *mt.input_shape("cifar"))
    with torch.no_grad():
        y = model(x)
    assert y.shape == (2, 10)
    assert torch.isfinite(y).all()


def test_imagenet_forward_shape_resnet18() -> None:
    model = mt.build("resnet18", "imagenet").eval()
    x = torch.randn(2, *mt.input_shape("imagenet"))
    with torch.no_grad():
        y = model(x)
    assert y.shape == (2, 1000)


def test_train_step_backward_lenet5() -> None:
    torch.manual_seed(0)
    model = mt.build("lenet5", "cifar").train()
    x = torch.randn(4, *mt.input_shape("cifar"))
    loss = torch.nn.functional.cross_entropy(model(x), torch.tensor([0, 1, 2, 3]))
    loss.backward()
    assert all(p.grad is not None for p in model.parameters())


# Spatial size of the named module's output for a 32x32 input: documents the CIFAR adaptation.
CIFAR_SPATIAL = {
    "lenet5": {"conv1": 28, "pool1": 14, "conv2": 10, "pool2": 5},
    "alexnet": {"features.conv1": 32, "features.pool2": 15, "features.pool5": 7, "avgpool": 6},
    "googlenet": {"conv3": 32, "inception3b": 32, "inception4e": 16, "inception5b": 8},
    "resnet18": {"conv1": 32, "layer1": 32, "layer2": 16, "layer3": 8, "layer4": 4},
    "resnet50": {"conv1": 32, "layer1": 32, "layer2": 16, "layer3": 8, "layer4": 4},
}


@pytest.mark.parametrize("name", sorted(CIFAR_SPATIAL))
def test_cifar_spatial_sizes_and_module_names(name: str) -> None:
    model = mt.build(name, "cifar").eval()
    modules = dict(model.named_modules())
    seen: dict[str, int] = {}
    for mod_name in CIFAR_SPATIAL[name]:
        modules[mod_name].register_forward_hook(
            lambda _m, _i, out, mod_name=mod_name: seen.__setitem__(mod_name, out.shape[-1])
        )
    with torch.no_grad():
        model(torch.randn(1, *mt.input_shape("cifar")))
    assert seen == CIFAR_SPATIAL[name]


def test_imagenet_module_names_follow_torchvision() -> None:
    resnet = dict(mt.build("resnet50", "imagenet").named_modules())
    for key in ("conv1", "bn1", "maxpool", "layer1.0.downsample.0", "layer4.2.conv3", "fc"):
        assert key in resnet
    alexnet = dict(mt.build("alexnet", "imagenet").named_modules())
    for key in ("features.conv1", "features.pool1", "features.conv5", "classifier.fc8"):
        assert key in alexnet


def test_cifar_variants_drop_stem_pools() -> None:
    assert dict(mt.build("resnet18", "cifar").named_modules()).keys().isdisjoint({"maxpool"})
    googlenet = dict(mt.build("googlenet", "cifar").named_modules())
    assert "maxpool1" not in googlenet and "maxpool2" not in googlenet
    assert "maxpool3" in googlenet


def test_build_rejects_unknown_or_unsupported() -> None:
    with pytest.raises(KeyError, match="valid: alexnet, bert-base, googlenet"):
        mt.build("vgg16")
    with pytest.raises(ValueError, match="supported: cifar"):
        mt.build("lenet5", "imagenet")
    with pytest.raises(KeyError, match="unknown dataset 'mnist'"):
        mt.build("resnet18", "mnist")


PAIRS_COUNTED = [(n, d) for n, d in PAIRS if n in CNNS]


@pytest.mark.parametrize(("name", "dataset"), PAIRS_COUNTED,
                         ids=[f"{n}-{d}" for n, d in PAIRS_COUNTED])
def test_cnn_flops_are_what_torch_counts(name: str, dataset: str) -> None:
    """The zoo's CNN FLOPs per sample (MFU's numerator) are one training step's, as
    torch.utils.flop_counter counts PyTorch's build (forward + backward, per sample)."""
    from torch.utils.flop_counter import FlopCounterMode

    model = mt.build(name, dataset)
    x = torch.randn(2, *mt.input_shape(dataset))
    with FlopCounterMode(display=False) as counter:
        model(x).sum().backward()
    assert counter.get_total_flops() // 2 == zoo.get(name).flops_per_sample(dataset)


def test_gpt_nano_trains_on_tokens_with_sdpa() -> None:
    """gpt-nano: token ids in, next-token logits out; attention goes through SDPA (its FLOPs
    are counted under the SDPA op), a step lowers the loss, and the count of one step matches
    the 6N + 12LHQT formula's matrix products within what it leaves out (softmax, norms)."""
    from orchestrator.rankside.torch.workload import Workload, flop_counter

    torch.manual_seed(0)
    w = Workload("gpt-nano", "bytes")
    x, y = w.synthetic(4, torch.Generator().manual_seed(0))
    assert x.shape == y.shape == (4, 128) and torch.equal(x[:, 1:], y[:, :-1])
    optimizer = torch.optim.SGD(w.model.parameters(), lr=0.1)
    with flop_counter() as counter:
        loss = w.loss_fn(w.model(x), y)
        loss.backward()
    ops = {str(k) for k in counter.get_flop_counts()["Global"]}
    assert any("scaled_dot_product" in op for op in ops), ops
    formula = zoo.get("gpt-nano").flops_per_sample("bytes")
    assert abs(counter.get_total_flops() / 4 / formula - 1) < 0.05
    first = float(loss)
    optimizer.step()
    assert float(w.loss_fn(w.model(x), y)) < first


def test_bert_masks_a_share_and_ignores_the_rest() -> None:
    from orchestrator.rankside.torch.transformers import IGNORE, MASK_ID, lm_pair

    tokens = torch.randint(200, 300, (8, 513), generator=torch.Generator().manual_seed(1))
    x, y = lm_pair(tokens, "masked-lm", torch.Generator().manual_seed(2))
    masked = y != IGNORE
    assert 0.10 < masked.float().mean() < 0.20
    assert (x[masked] == MASK_ID).all() and torch.equal(y[masked], tokens[:, :-1][masked])
