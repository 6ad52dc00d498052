"""Names vulture (``make lint``) cannot see used: framework entry points only (none is reported at the confidence
``make lint`` uses)."""
