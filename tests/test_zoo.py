"""Tests for the framework-free model catalogue orchestrator.zoo."""

from __future__ import annotations

import ast
import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator import zoo

REPO = Path(__file__).resolve().parents[1]
ZOO_SRC = REPO / "orchestrator" / "zoo.py"
FRAMEWORKS = ("torch", "tensorflow", "mxnet", "chainer", "cntk", "jax", "keras", "torchvision")

# torchvision's ImageNet parameter counts (GoogLeNet without auxiliary heads).
TORCHVISION_IMAGENET = {
    "alexnet": 61_100_840,
    "googlenet": 6_624_904,
    "resnet18": 11_689_512,
    "resnet50": 25_557_032,
}


CNNS = ["alexnet", "googlenet", "lenet5", "resnet18", "resnet50"]
TRANSFORMERS = ["bert-base", "gpt-nano", "gpt2-medium", "gpt2-small", "vit-b16"]


def test_names_sorted_and_complete() -> None:
    assert zoo.names() == sorted(CNNS + TRANSFORMERS)


@pytest.mark.parametrize("name", ["alexnet", "googlenet", "lenet5", "resnet18", "resnet50"])
def test_get_returns_matching_spec(name: str) -> None:  # the CNNs
    spec = zoo.get(name)
    assert isinstance(spec, zoo.ModelSpec)
    assert spec.name == name
    assert spec.title and spec.paper_ref and spec.description
    assert "cifar" in spec.datasets
    assert set(spec.expected_params) == set(spec.datasets)
    assert all(isinstance(v, int) and v > 0 for v in spec.expected_params.values())


def test_unknown_model_message_lists_valid_names() -> None:
    with pytest.raises(KeyError) as excinfo:
        zoo.get("vgg16")
    assert isinstance(excinfo.value, ValueError)
    assert str(excinfo.value) == (
        "unknown model 'vgg16'; valid: alexnet, bert-base, googlenet, gpt-nano, gpt2-medium, "
        "gpt2-small, lenet5, resnet18, resnet50, vit-b16"
    )


def test_datasets() -> None:
    assert set(zoo.DATASETS) == {"cifar", "imagenet", "bytes", "webtext", "bookswiki"}
    cifar, imagenet = zoo.DATASETS["cifar"], zoo.DATASETS["imagenet"]
    assert cifar.shape_chw == (3, 32, 32) and cifar.shape_hwc == (32, 32, 3)
    assert cifar.num_classes == 10
    assert imagenet.shape_chw == (3, 224, 224) and imagenet.shape_hwc == (224, 224, 3)
    assert imagenet.num_classes == 1000
    assert zoo.DATASETS["bytes"].tokens and zoo.DATASETS["bytes"].num_classes == 256
    webtext = zoo.DATASETS["webtext"]
    assert (webtext.seq_len, webtext.num_classes) == (1024, 50257)
    with pytest.raises(KeyError, match="valid: bookswiki, bytes, cifar, imagenet, webtext"):
        zoo.get_dataset("mnist")


def test_imagenet_counts_are_torchvision_counts() -> None:
    for name, count in TORCHVISION_IMAGENET.items():
        assert zoo.get(name).expected_params["imagenet"] == count
    assert zoo.get("lenet5").datasets == ("cifar",)


def test_unsupported_dataset_is_rejected() -> None:
    spec = zoo.get("lenet5")
    assert not spec.supports("imagenet")
    with pytest.raises(ValueError, match="supported: cifar"):
        spec.params("imagenet")
    assert spec.params("cifar") == spec.expected_params["cifar"]


def test_specs_are_immutable() -> None:
    spec = zoo.get("resnet18")
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.name = "other"  # type: ignore[misc]
    with pytest.raises(TypeError):
        spec.expected_params["cifar"] = 1  # type: ignore[index]
    with pytest.raises(TypeError):
        zoo.MODELS["x"] = spec  # type: ignore[index]


def test_zoo_does_not_import_torch_at_runtime() -> None:
    code = (
        "import orchestrator.zoo, sys; "
        f"bad = [m for m in {FRAMEWORKS!r} if m in sys.modules]; "
        "assert not bad, bad"
    )
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr


def test_zoo_source_has_no_framework_imports() -> None:
    tree = ast.parse(ZOO_SRC.read_text())
    imported: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module.split(".")[0])
    assert not imported & set(FRAMEWORKS)


# Hugging Face's and torchvision's counts of the same architectures (GPT2LMHeadModel for
# gpt2 and gpt2-medium, BertForMaskedLM without the pooler, torchvision's vit_b_16).
PUBLISHED = {("gpt2-small", "webtext"): 124_439_808, ("gpt2-medium", "webtext"): 354_823_168,
             ("bert-base", "bookswiki"): 109_514_298, ("vit-b16", "imagenet"): 86_567_656}


def test_transformer_counts_are_the_published_ones() -> None:
    for (name, ds), count in PUBLISHED.items():
        assert zoo.get(name).params(ds) == count


def test_transformer_flops_follow_palm() -> None:
    # GPT-2 small on webtext: N = 124,439,808 - 1024*768 (wpe), 12 layers, 12 heads of 64.
    spec = zoo.get("gpt2-small")
    n = 124_439_808 - 1024 * 768
    assert spec.flops_per_sample("webtext") == 1024 * (6 * n + 12 * 12 * 12 * 64 * 1024)
    assert spec.tokens_per_sample("webtext") == 1024
    # ViT: 197 tokens (196 patches + the class token), positions and class token looked up.
    vit = zoo.get("vit-b16")
    n = 86_567_656 - 197 * 768 - 768
    assert vit.flops_per_sample("imagenet") == 197 * (6 * n + 12 * 12 * 12 * 64 * 197)
    assert vit.tokens_per_sample("imagenet") is None  # an image, not a token sequence
    assert zoo.get("resnet50").flops_per_sample("imagenet") == 24_299_077_632


def test_which_libraries_build_what() -> None:
    assert all(zoo.get(m).built_by(lib) for m in CNNS
               for lib in ("torch", "tensorflow", "mxnet", "cntk", "chainer"))
    assert zoo.get("gpt-nano").built_by("tensorflow") and not zoo.get("gpt-nano").built_by("mxnet")
    assert not zoo.get("vit-b16").built_by("tensorflow")
