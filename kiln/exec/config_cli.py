"""``kiln config``: print the settings kiln reads from the environment."""

from __future__ import annotations

import dataclasses


def add_arguments(parser) -> None:
    del parser


def run(args) -> int:
    del args
    from kiln import config

    cfg = config.get()
    for field in dataclasses.fields(cfg):
        print(f"{field.name:14s} {getattr(cfg, field.name)!r}")
    return 0
