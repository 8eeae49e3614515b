"""A simulated node's package download cache and the disk space it takes.

``apt-get install --download-only`` (``-d``) resolves like an install, then only fetches
the .deb files into ``/var/cache/apt/archives`` (named ``NAME_VERSION_ARCH.deb``, a
version's ``:`` written ``%3a``) and installs nothing. It checks the space it needs on
that filesystem first and stops with ``E: You don't have enough free space in
/var/cache/apt/archives/.`` (exit 100) after printing what it would fetch, as apt does;
on success it prints ``Get:`` lines, ``Fetched ...`` and ``Download complete and in
download only mode``. Files already in the cache are not fetched again. ``apt-get
clean`` empties the cache. A later ``apt-get install`` of the same versions uses the
cached files. ``df`` shows the cache's bytes as used; ``find ... -printf '%s %f\\n'`` lists
the cache.
"""

from __future__ import annotations

import zlib
from typing import Any

from k3rollout.checks import driver_facts as df
from k3sim import repos

Out = tuple[int, str, str]
ARCHIVES = "/var/cache/apt/archives"


def deb_name(name: str, version: str) -> str:
    return f"{name}_{version.replace(':', '%3a')}_amd64.deb"


def deb_size(name: str, version: str) -> int:
    """A stable size per package file: tens of MB for driver libraries, less for the rest."""
    base = 40_000_000 if df.is_driver_package(name) else 2_000_000
    return base + zlib.crc32(f"{name}={version}".encode()) % 30_000_000


def cache(state: dict[str, Any]) -> dict[str, int]:
    return state.setdefault("apt_archives", {})


def used_bytes(state: dict[str, Any]) -> int:
    return sum(cache(state).values())


def free_bytes(state: dict[str, Any]) -> int:
    return int(state.get("disk_free_gib", 2048)) * 1024 ** 3 - used_bytes(state)


def _human(n: float) -> str:
    for unit in ("B", "kB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}".replace(".0 ", " ")
        n /= 1000.0
    return f"{n} GB"


def apt_download(state: dict[str, Any], wanted: dict[str, str]) -> Out:
    catalog = repos.offers(state)
    head = "Reading package lists...\nBuilding dependency tree...\nReading state information...\n"
    for name, ver in wanted.items():
        if name not in catalog:
            return 100, head, f"E: Unable to locate package {name}\n"
        if ver not in [o["version"] for o in catalog[name]]:
            return 100, head, f"E: Version '{ver}' for '{name}' was not found\n"
    pk = state["packages"]
    todo = {n: v for n, v in wanted.items() if pk.get(n) != v}
    if not todo:
        return 0, head + "".join(f"{n} is already the newest version ({v}).\n" for n, v in wanted.items()) + \
            "0 upgraded, 0 newly installed, 0 to remove and 12 not upgraded.\n", ""
    new = [n for n in todo if n not in pk]
    upgraded = [n for n in todo if n in pk]
    files = {deb_name(n, v): deb_size(n, v) for n, v in todo.items()}
    fetch = {f: s for f, s in files.items() if f not in cache(state)}
    need = sum(fetch.values())
    out = [head.rstrip("\n")]
    if upgraded:
        out += ["The following packages will be upgraded:", "  " + " ".join(upgraded)]
    if new:
        out += ["The following NEW packages will be installed:", "  " + " ".join(new)]
    out += [f"{len(upgraded)} upgraded, {len(new)} newly installed, 0 to remove and 12 not upgraded.",
            f"Need to get {_human(need)}/{_human(sum(files.values()))} of archives." if need != sum(files.values())
            else f"Need to get {_human(need)} of archives.",
            f"After this operation, {_human(sum(files.values()) * 3)} of additional disk space will be used."]
    if need > free_bytes(state):
        return 100, "\n".join(out) + "\n", f"E: You don't have enough free space in {ARCHIVES}/.\n"
    src = f"http://archive.ubuntu.com/ubuntu {repos.codename(state)}-updates/restricted amd64"
    for i, (n, v) in enumerate(todo.items(), start=1):
        f = deb_name(n, v)
        if f in fetch:
            out.append(f"Get:{i} {src} {n} {v} [{_human(fetch[f])}]")
    cache(state).update(fetch)
    out += [f"Fetched {_human(need)} in 4s ({_human(need / 4)}/s)", "Download complete and in download only mode"]
    return 0, "\n".join(out) + "\n", ""


def apt_clean(state: dict[str, Any]) -> Out:
    cache(state).clear()
    return 0, "", ""


def find(state: dict[str, Any], args: list[str]) -> Out:
    """``find /var/cache/apt/archives -maxdepth 1 -name '*.deb' -printf '%s %f\\n'``"""
    if not args or args[0].rstrip("/") != ARCHIVES or "-printf" not in args:
        return 1, "", "find: k3rollout sim lists /var/cache/apt/archives with -printf '%s %f\\n' only\n"
    return 0, "".join(f"{s} {f}\n" for f, s in sorted(cache(state).items())), ""


def sha256sum(state: dict[str, Any], args: list[str]) -> Out:
    """``sha256sum --check [--strict] [--quiet] MANIFEST`` over the host's model weights
    (host var ``sim_weights``: manifest path -> {file: ok | missing | corrupt}), with
    coreutils' messages and exit status."""
    if "--check" not in args and "-c" not in args:
        return 1, "", "sha256sum: k3rollout sim checks manifests only (--check)\n"
    quiet = "--quiet" in args
    manifests = [a for a in args if not a.startswith("-")]
    out: list[str] = []
    err: list[str] = []
    bad = unreadable = 0
    for m in manifests:
        files = (state.get("weights") or {}).get(m)
        if files is None:
            err.append(f"sha256sum: {m}: No such file or directory")
            return 1, "", "\n".join(err) + "\n"
        for f, status in files.items():
            if status == "missing":
                err.append(f"sha256sum: {f}: No such file or directory")
                out.append(f"{f}: FAILED open or read")
                unreadable += 1
            elif status == "corrupt":
                out.append(f"{f}: FAILED")
                bad += 1
            elif not quiet:
                out.append(f"{f}: OK")
    if unreadable:
        err.append(f"sha256sum: WARNING: {unreadable} listed file{'s' if unreadable > 1 else ''} could not be read")
    if bad:
        err.append(f"sha256sum: WARNING: {bad} computed checksum{'s' if bad > 1 else ''} did NOT match")
    return (1 if bad or unreadable else 0), "".join(o + "\n" for o in out), "".join(e + "\n" for e in err)
