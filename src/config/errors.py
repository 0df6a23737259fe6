"""The error every entry point turns into one line and exit code 2."""


class ConfigError(ValueError):
    """An override, config value or input that cannot run; reported as one line, exit code 2."""
