"""Tests for the PyTorch model zoo orchestrator.rankside.torch.models."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from orchestrator import zoo  # noqa: E402
from orchestrator.rankside.torch import models as mt  # noqa: E402

PAIRS = [(name, ds) for name in zoo.names() for ds in zoo.get(name).datasets]


def _param_count(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize(("name", "dataset"), PAIRS, ids=[f"{n}-{d}" for n, d in PAIRS])
def test_param_count_matches_zoo(name: str, dataset: str) -> None:
    model = mt.build(name, dataset)
    assert isinstance(model, torch.nn.Module)
    assert _param_count(model) == zoo.get(name).expected_params[dataset]


def test_every_model_has_cifar_and_all_but_lenet_have_imagenet() -> None:
    assert {n for n, d in PAIRS if d == "cifar"} == set(zoo.names())
    assert {n for n, d in PAIRS if d == "imagenet"} == set(zoo.names()) - {"lenet5"}


def test_input_shape_and_num_classes_come_from_zoo() -> None:
    assert mt.input_shape("cifar") == (3, 32, 32)
    assert mt.input_shape("imagenet") == (3, 224, 224)
    assert mt.num_classes("cifar") == 10
    assert mt.num_classes("imagenet") == 1000
    with pytest.raises(KeyError, match="valid: cifar, imagenet"):
        mt.input_shape("mnist")


@pytest.mark.parametrize("name", zoo.names())
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
    with pytest.raises(KeyError, match="valid: alexnet, googlenet, lenet5, resnet18, resnet50"):
        mt.build("vgg16")
    with pytest.raises(ValueError, match="supported: cifar"):
        mt.build("lenet5", "imagenet")
    with pytest.raises(KeyError, match="unknown dataset 'mnist'"):
        mt.build("resnet18", "mnist")
