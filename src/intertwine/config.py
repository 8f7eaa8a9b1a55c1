"""Readable config errors: the key path, what is wrong, and what is allowed."""

from __future__ import annotations


def key_path(path) -> str:
    return ".".join(str(part) for part in path) or "(top level)"


def describe_validation_error(error) -> str:
    """One message for a ``jsonschema.ValidationError`` raised while validating the config."""
    where = key_path(error.absolute_path)
    if error.validator == "additionalProperties" and "properties" in error.schema:
        unknown = sorted(set(error.instance) - set(error.schema["properties"]))
        allowed = ", ".join(error.schema["properties"])
        first = f"{where}.{unknown[0]}" if error.absolute_path else unknown[0]
        return f"config key {first}: unknown key (misspelt?); the keys allowed under {where} are: {allowed}"
    if error.validator == "uniqueItems":
        return (
            f"config key {where}: {error.instance} lists an item more than once; list each once "
            "(a repeated item would run the same jobs twice and count them as independent evidence)"
        )
    return f"config key {where}: {error.message}"
