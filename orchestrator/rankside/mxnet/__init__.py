"""MXNet's rank side (mxnet-kvstore): the Gluon model zoo (models) and the epoch loop (epochs)."""
