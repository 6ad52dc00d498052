"""Datasets (privbench.data.base; one registered file each in privbench.data.datasets) and the member / client
splits (privbench.data.splits)."""
