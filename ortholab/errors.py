"""The errors a user acts on, importable by every package (models, data modules, store, app) without the others."""


class ConfigError(ValueError):
    """A configuration value a user must change; the message names the key and the fix."""
