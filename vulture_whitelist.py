"""Names vulture (``make lint``) cannot see used because a framework reads them. Functions and classes a
registry or click reaches through a decorator are ignored in pyproject.toml ([tool.vulture] ignore_decorators)."""
# Python's module and object hooks
__getattr__  # noqa: F821, B018
__dir__  # noqa: F821, B018
__class__  # noqa: F821, B018
# torch.nn.Module, pickle.Unpickler, yaml Dumper, torchvision datasets, torch-fidelity feature extractors, opacus
# accountants: methods and attributes the library calls or reads
forward  # noqa: F821, B018
find_class  # noqa: F821, B018
ignore_aliases  # noqa: F821, B018
processed_folder  # noqa: F821, B018
get_provided_features_list  # noqa: F821, B018
get_default_feature_layer_for_metric  # noqa: F821, B018
can_be_compiled  # noqa: F821, B018
get_dummy_input_for_compile  # noqa: F821, B018
history  # noqa: F821, B018
conv1  # noqa: F821, B018
maxpool  # noqa: F821, B018
# class attributes of registered methods and attacks, read by name (core.registry.entry_attribute)
report_order  # noqa: F821, B018
provenance_keys  # noqa: F821, B018
coinciding_note  # noqa: F821, B018
# dataclass fields read through dataclasses.fields()/asdict: config settings (--set) and the result schema (JSON)
secmi_t  # noqa: F821, B018
secmi_t_latent  # noqa: F821, B018
epsilon_budget  # noqa: F821, B018
schema_version  # noqa: F821, B018
neighbouring_relation  # noqa: F821, B018
noise_label  # noqa: F821, B018
noise_calibrated  # noqa: F821, B018
fallback  # noqa: F821, B018
conditional_epsilon  # noqa: F821, B018
conditional_on  # noqa: F821, B018
conditional_basis  # noqa: F821, B018
end_to_end  # noqa: F821, B018
public_split  # noqa: F821, B018
claim_kind  # noqa: F821, B018
claimed_by_paper  # noqa: F821, B018
train_s  # noqa: F821, B018
references_s  # noqa: F821, B018
attack_s  # noqa: F821, B018
records_per_s  # noqa: F821, B018
reference_training  # noqa: F821, B018
auxiliary_data  # noqa: F821, B018
queries_per_record  # noqa: F821, B018
# torch.backends.cudnn's switch (benchmarks/gpu_check.py); Registry.register, the decorator plug-ins use for
# functions; privbench.testing's fakes for plug-in authors' tests (docs/api.md §9)
benchmark  # noqa: F821, B018
register  # noqa: F821, B018
records_evaluated  # noqa: F821, B018
gaussian_eps  # noqa: F821, B018
# the public Python API's properties a user reads (docs/api.md)
headline  # noqa: F821, B018
