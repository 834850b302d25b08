"""CNTK's rank side (cntk): the model zoo (models) and the epoch loop (epochs). CNTK runs on
Python 3.6: everything here stays valid there (tests/test_layout.py compiles it)."""
