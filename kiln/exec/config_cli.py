"""``kiln config``: print the settings kiln reads from the environment."""

from __future__ import annotations


def add_arguments(parser) -> None:
    del parser


def run(args) -> int:
    del args
    from kiln import config

    for name, value, doc in config.describe():
        print(f"{name:14s} {value:34s} {doc}".rstrip())
    return 0
