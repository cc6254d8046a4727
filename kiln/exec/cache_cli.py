"""``kiln cache info`` / ``kiln cache clear``: look at or empty the build cache (kiln/cache.py)."""

from __future__ import annotations


def add_arguments(parser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="ACTION")
    sub.add_parser("info", help="where the cache is, how many entries and bytes it holds, its bound")
    sub.add_parser("clear", help="delete every entry")


def _mb(n: int) -> str:
    return f"{n / (1 << 20):.1f} MiB"


def run(args) -> int:
    from kiln import cache

    action = getattr(args, "action", None) or "info"
    if cache.directory() is None:
        print("the build cache is off (KILN_CACHE_DIR is empty or 'off')")
        return 0
    if action == "clear":
        n, size = cache.clear()
        print(f"removed {n} entries ({_mb(size)}) from {cache.directory()}")
        return 0
    s = cache.info()
    print(f"directory  {s['directory']}\nentries    {s['entries']}\nsize       {_mb(s['bytes'])} "
          f"(bound {_mb(s['limit'])}, KILN_CACHE_SIZE)")
    return 0
