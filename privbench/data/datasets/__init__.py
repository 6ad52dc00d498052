"""One file per dataset; each registers its loader with its info (privbench.data.base.register_dataset)."""
