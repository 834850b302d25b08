"""Count every zoo model's parameters in one framework (rank side, for ``orch models``).

Runs in that framework's environment and prints one JSON object:
``{"framework": ..., "versions": ..., "counts": {model: {dataset: params}}}``. A model the
framework's zoo does not implement is absent. Counts are trainable parameters (weights,
biases, batch-norm scale/shift; not running statistics), as orchestrator/zoo.py defines them.
Python 3.6-compatible (CNTK): no zoo import there.
"""

import argparse
import json


def _torch():
    import torch

    from . import zoo_names
    from .torch import models as models_torch

    counts = {}
    for name, datasets in zoo_names("torch"):
        for ds in datasets:
            with torch.device("meta"):  # counted, not initialised: gpt2-medium at once
                net = models_torch.build(name, ds)
            counts.setdefault(name, {})[ds] = sum(p.numel() for p in net.parameters()
                                                  if p.requires_grad)
    return counts, {"torch": torch.__version__}


def _tensorflow():
    import tensorflow as tf

    from . import zoo_names
    from .tf import models as models_tf

    counts = {}
    for name, datasets in zoo_names("tensorflow"):
        for ds in datasets:
            counts.setdefault(name, {})[ds] = int(models_tf.count_params(
                models_tf.build(name, ds)))
    return counts, {"tensorflow": tf.__version__}


def _mxnet():
    import mxnet as mx

    from . import zoo_names
    from .mxnet import models as mm

    counts = {}
    for name, datasets in zoo_names("mxnet"):
        for ds in datasets:
            net = mm.build(name, ds)
            net.initialize(mx.init.Xavier())
            mm.trace(net, mx.nd.zeros((1, *mm.input_shape(ds))))  # resolves deferred shapes
            counts.setdefault(name, {})[ds] = int(mm.param_count(net))
    return counts, {"mxnet": mx.__version__}


def _cntk():
    from .cntk import models as mc

    C = mc.C
    counts = {}
    for name in mc.MODELS:
        for ds in mc.DATASETS[name]:
            z = mc.build(name, ds, C.input_variable(mc.input_shape(ds)))
            counts.setdefault(name, {})[ds] = int(mc.count_params(z))
    return counts, {"cntk": C.__version__}


def _chainer():
    import chainer

    from . import zoo_names
    from .chainer import models as mch

    counts = {}
    for name, datasets in zoo_names("chainer"):
        if name not in mch.MODELS:
            continue
        for ds in datasets:
            counts.setdefault(name, {})[ds] = int(mch.count_params(mch.build(name, ds)))
    return counts, {"chainer": chainer.__version__}


COUNTERS = {"torch": _torch, "tensorflow": _tensorflow, "mxnet": _mxnet, "cntk": _cntk,
            "chainer": _chainer}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--framework", required=True, choices=sorted(COUNTERS))
    a = p.parse_args(argv)
    counts, versions = COUNTERS[a.framework]()
    print(json.dumps({"framework": a.framework, "versions": versions, "counts": counts}))


if __name__ == "__main__":
    main()
