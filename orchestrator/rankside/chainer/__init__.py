"""Chainer's rank side (chainermn): the model zoo (models) and the epoch loop (epochs)."""
