"""Container images: specs, recipes, builds, digests, checks and the wrapper a rank runs under."""
