"""Reference services Parley's toolsets talk to (not part of the product)."""
