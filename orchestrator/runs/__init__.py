"""A run's life: its directory written once, provenance, verdict, fabric attestation,
watching, faults, progress and the signals that stop a sweep."""
