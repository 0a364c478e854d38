"""The on-machine proof that ``vllm-compat prove`` records, and its verification.

A proof says: on this machine, at this date, the patched stack made of exactly these files ran
against HF transformers and matched.  It lives next to the manifest
(``<site>/.vllm_compat/proof.json``) and binds:

- the catalog digest (the engine and every catalog in use, :mod:`.catalogs`),
- every distribution the catalogs look at (vLLM, speculators): version and the sha256 of its
  RECORD (which lists the sha256 of every file it installed; ``prove`` checked the files
  against it before running),
- the sha256 of every managed file (patched files and vendored shims) as they were proven.

It is authenticated with an HMAC-SHA256 keyed by a per-machine secret kept outside every site
(``$VLLM_COMPAT_KEY_FILE``, else ``$XDG_CONFIG_HOME/vllm-compat/machine.key``, else
``~/.config/vllm-compat/machine.key``; created 0600 by the first ``prove``), so a proof edited by
hand, or copied from another machine, is refused.  Standard library only (``status`` reads it).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets

__all__ = ["FORMAT", "ProofError", "accept", "binding", "key_path", "load", "machine_key", "sign", "write"]

FORMAT = 1
NAME = "proof.json"


class ProofError(Exception):
    """The proof cannot be used (message says why)."""


def key_path() -> str:
    explicit = os.environ.get("VLLM_COMPAT_KEY_FILE")
    if explicit:
        return explicit
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return os.path.join(base, "vllm-compat", "machine.key")


def machine_key(create: bool = False) -> bytes:
    """This machine's secret (created, 0600 in a 0700 folder, when ``create``)."""
    path = key_path()
    try:
        st = os.stat(path)
    except FileNotFoundError:
        if not create:
            raise ProofError(f"this machine has no proof key ({path}): no proof was made here") from None
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(secrets.token_hex(32) + "\n")
        st = os.stat(path)
    if st.st_mode & 0o077:
        raise ProofError(f"the proof key {path} is readable by others (mode {oct(st.st_mode & 0o777)}): "
                         f"chmod 600 it, or delete it and prove again")
    with open(path, encoding="ascii") as fh:
        key = fh.read().strip()
    if len(key) < 32:
        raise ProofError(f"the proof key {path} is too short")
    return key.encode()


def _canonical(body: dict) -> bytes:
    return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()


def sign(body: dict, key: bytes) -> str:
    return hmac.new(key, _canonical(body), hashlib.sha256).hexdigest()


def binding(catalog: str, dists: dict[str, tuple[str, str]], files: dict[str, str]) -> dict:
    """What a proof is bound to: ``dists`` {package: (version, RECORD sha256)}, ``files``
    {site-relative path: sha256}."""
    return {"catalog": catalog,
            "dists": {pkg: {"version": v, "record": r} for pkg, (v, r) in sorted(dists.items())},
            "files": dict(sorted(files.items()))}


def write(state_dir: str, bound: dict, date: str, results: dict, extra: dict) -> str:
    """Sign and write the proof (atomically); returns its path."""
    body = {"format": FORMAT, "date": date, "bound": bound, "results": results, **extra}
    body["hmac"] = sign(body, machine_key(create=True))
    path = os.path.join(state_dir, NAME)
    tmp = path + ".vllm-compat-tmp"
    os.makedirs(state_dir, exist_ok=True)
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(json.dumps(body, indent=1, sort_keys=True) + "\n")
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    return path


def load(state_dir: str) -> dict | None:
    """The proof as written, authenticated; ``None`` when there is none.  Raises
    :class:`ProofError` for a proof that is unreadable, tampered with or from another machine."""
    path = os.path.join(state_dir, NAME)
    try:
        with open(path, "rb") as fh:
            raw = fh.read()
    except FileNotFoundError:
        return None
    try:
        body = json.loads(raw)
        mac = body.pop("hmac")
        if body.get("format") != FORMAT:
            raise ValueError(f"unknown proof format {body.get('format')!r}")
        body["bound"]["files"], body["bound"]["dists"], body["bound"]["catalog"]  # noqa: B018
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ProofError(f"unreadable proof {path}: {exc}") from exc
    try:
        key = machine_key()
    except ProofError as exc:
        raise ProofError(f"{path} cannot be checked: {exc}") from exc
    if not isinstance(mac, str) or not hmac.compare_digest(mac, sign(body, key)):
        raise ProofError(f"{path} was not made on this machine, or was edited since (its HMAC does not match)")
    return body


def accept(proof: dict, bound_now: dict, pristine: dict[str, str | None]) -> tuple[bool, str]:
    """Whether ``proof`` covers the site now (``bound_now``: :func:`binding` of what is installed;
    ``pristine``: each file's wheel hash).  A file back at its wheel bytes (a reinstall of the
    same wheel) is accepted here: apply then checks it writes the proven bytes.
    Returns ``(ok, why not)``."""
    b = proof["bound"]
    if b["catalog"] != bound_now["catalog"]:
        return False, "the catalogs (or vllm-compat) changed since the proof"
    for pkg in sorted(set(b["dists"]) | set(bound_now["dists"])):
        then, now = b["dists"].get(pkg), bound_now["dists"].get(pkg)
        if then != now:
            if then is None or now is None:
                return False, f"{pkg} was {'installed' if then is None else 'uninstalled'} since the proof"
            if then["version"] != now["version"]:
                return False, f"{pkg} changed {then['version']} -> {now['version']} since the proof"
            return False, f"{pkg} {now['version']} was reinstalled with other files since the proof"
    if set(b["files"]) != set(bound_now["files"]):
        return False, "the set of patched files changed since the proof"
    for rel, sha in sorted(b["files"].items()):
        now = bound_now["files"][rel]
        if now != sha and now != pristine.get(rel, "-"):  # (a shim's "pristine" is absent: None)
            return False, f"{rel} changed since the proof"
    return True, ""
