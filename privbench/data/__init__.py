"""Datasets (digits embedded; torchvision formats from a data root) and member / client splits."""
from .datasets import load_dataset, dataset_info  # noqa: F401  (registers the datasets)
from .splits import MemberSplit, ClientSplit, member_split, client_split  # noqa: F401
