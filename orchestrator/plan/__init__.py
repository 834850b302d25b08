"""The plan: a sweep spec or a study file expanded into runs."""
