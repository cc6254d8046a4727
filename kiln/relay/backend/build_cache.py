"""relay.build's kernels on disk: skip TE lowering, the TIR pipeline and LLVM for an unchanged model.

All of a model's kernels are compiled into one object, so the object is cached whole. Its key
describes every kernel before any of them is lowered, which is what makes a hit cheap: per
kernel its symbol, the structure of its fused relay function (ops, attributes, types, scalar
constants), its weight transform and its tuning config; then the target as LLVM sees it
(triple, CPU, features, opt level: plain "llvm" means *this* CPU) and ``cache.fingerprint()``
(kiln's sources, LLVM's version). A changed schedule config, target or kiln gives another key.

The entry holds the object, the module metadata and the LLVM IR (compressed), so
``get_source()`` works on a hit as after a fresh build. An entry whose functions are not the
ones asked for is treated as a miss.
"""

from __future__ import annotations

import json
import logging
import zlib

from kiln import cache, config

logger = logging.getLogger("kiln.relay.build")


def kernel_part(name: str, structure: tuple, transform, cfg) -> tuple:
    """The stable description of one kernel (raises cache.Uncacheable)."""
    weight = None if transform is None else (transform.index, tuple(transform.shape), transform.key)
    return (name, structure, weight, _config_part(cfg))


def _config_part(cfg):
    if cfg is None:
        return None
    if hasattr(cfg, "to_json_dict"):  # an autotvm ConfigEntity: knob values, index, code hash
        return ("autotvm", json.dumps(cfg.to_json_dict(), sort_keys=True, default=str))
    if isinstance(cfg, dict):
        return ("dict", cfg)
    raise cache.Uncacheable(f"tuning config of type {type(cfg).__name__}")


def module_key(target, kernels: list | None) -> str | None:
    """The entry key of a module of ``kernels`` (kernel_part each) for ``target``; None when the
    cache is off, reading is pointless (KILN_DEBUG=2 wants the IR printed) or a part is unstable."""
    if kernels is None or cache.directory() is None or config.get().debug >= 2:
        return None
    if target.kind.name != "llvm":  # GPU modules carry device code beside the host object: not yet
        return None
    from kiln.codegen.llvm import code_identity

    try:
        return cache.key("relay.build", str(target), *code_identity(target), kernels)
    except cache.Uncacheable as err:
        logger.info("relay.build: not cached (%s)", err)
        return None


def load(key: str, names: list[str], target):
    """The CompiledModule stored under ``key`` if it defines exactly ``names``; else None."""
    files = cache.load(key)
    if files is None:
        return None
    try:
        meta = json.loads(files["meta"])
        if [f["name"] for f in meta["functions"]] != names:
            return None
        obj, ll = files["obj"], files["ll"]
    except (KeyError, TypeError, ValueError):
        return None
    from kiln.codegen.llvm import module_from_cache

    module = module_from_cache(obj, meta, lambda: zlib.decompress(ll).decode(), target)
    logger.info("relay.build: %d kernels from the build cache (%s)", len(names), key[:12])
    return module


def store(key: str, module) -> None:
    """Keep a freshly built CompiledModule (one object) under ``key``."""
    if len(module.objects) != 1 or "ll" not in module.sources:
        return
    cache.store(key, {"obj": module.objects[0], "meta": json.dumps(module.metadata).encode(),
                      "ll": zlib.compress(module.sources["ll"].encode(), 1)})
