"""Names vulture (``make lint``) cannot see used: click passes every option of ``attack`` and ``run`` to the
command, which hands the outside-model ones on as a group (``cli._external_kw(ctx.params)``)."""
claimed_epsilon  # noqa: F821, B018
claimed_delta  # noqa: F821, B018
claim_basis  # noqa: F821, B018
