"""``kiln config``: print the settings kiln reads from the environment."""

from __future__ import annotations


def add_arguments(parser) -> None:
    del parser


def run(args) -> int:
    del args
    from kiln import config

    rows = list(config.describe())
    width = max(len(name) for name, _, _ in rows)
    for name, value, doc in rows:
        print(f"{name:{width}s} {value:34s} {doc}".rstrip())
    return 0
