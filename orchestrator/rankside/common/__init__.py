"""Rank-side code every library's ranks share: the epoch runs' sharding and loop (epochs). Valid
Python 3.6 (CNTK imports it)."""
