"""Code generator for schemas/records.toml (stdlib only, so it runs before any install)."""
