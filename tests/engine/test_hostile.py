"""Hostile or broken input: a clear message on stderr, the documented exit code, and nothing
written (whole-tree snapshot equality)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

import enginekit as kit
from enginekit import STATE, cli, show

ENV, TARGET, DRIFTED, UNSUPPORTED = 3, 4, 11, 13


def _state(path: Path):
    return kit.snapshot(path) if path.is_dir() else kit.sha_file(path) if path.exists() else "missing"


def refused(site: Path, args: tuple[str, ...], code: int, words: tuple[str, ...], watch: tuple[Path, ...] = (),
            prefix: list[str] | None = None, cwd: Path | None = None) -> None:
    """``args`` fail with ``code``, a one-line message holding ``words``, and no change to
    ``site`` or to anything in ``watch`` (files or folders, which must stay missing if so)."""
    roots = (site, *watch)
    before = [_state(r) for r in roots]
    res = cli(site, *args, prefix=prefix, cwd=cwd)
    assert res.returncode == code, f"{args}: " + show(res)
    assert "Traceback" not in res.stderr, show(res)
    assert res.stderr.startswith("vllm-compat: error:"), f"{args}: no clear message on stderr\n" + show(res)
    for w in words:
        assert w in res.stderr, f"{args}: {w!r} not in the message\n" + show(res)
    after = [_state(r) for r in roots]
    for root, b, a in zip(roots, before, after):
        if isinstance(b, dict):
            diff = kit.snapshot_diff(b, a)
            assert not diff, f"{args} wrote into {root}:\n" + "\n".join(diff)
        else:
            assert a == b, f"{args} changed {root}"


def _outside(tmp_path: Path) -> Path:
    out = tmp_path / "outside.py"
    out.write_text("SECRET = 1\n")
    return out


@pytest.mark.parametrize("how", ["dotdot", "absolute"])
def test_manifest_paths_outside_the_site(patched: Path, tmp_path: Path, how: str) -> None:
    outside = _outside(tmp_path)
    rel = "../outside.py" if how == "dotdot" else str(outside)
    mpath = patched / STATE / "manifest.json"
    manifest = json.loads(mpath.read_bytes())
    manifest["files"][rel] = {"dist": "speculators", "pristine": kit.sha_file(outside), "applied": "0" * 64,
                              "patches": ["speculators.request_eos_token_id"], "shim": False}
    mpath.write_text(json.dumps(manifest))
    for args in (("verify",), ("status",), ("apply",), ("revert",), ("revert", "--force")):
        refused(patched, args, ENV, ("refusing path outside site-packages", repr(rel)), (outside,))


def _generator_to_symlink_out_of(site: Path, tmp_path: Path) -> Path:
    """Move the generator out of the site, leaving a symlink to it; returns where it went."""
    gen = site / kit.GENERATOR
    elsewhere = tmp_path / "elsewhere.py"
    shutil.copy2(gen, elsewhere)
    gen.unlink()
    gen.symlink_to(elsewhere)
    return elsewhere


def test_managed_file_is_a_symlink_out_of_the_site(site: Path, tmp_path: Path) -> None:
    elsewhere = _generator_to_symlink_out_of(site, tmp_path)
    for args in (("apply",), ("apply", "--dry-run"), ("status",), ("verify",)):
        refused(site, args, ENV, ("symlink", kit.GENERATOR), (elsewhere,))


def test_patched_file_replaced_by_a_symlink(patched: Path, tmp_path: Path) -> None:
    elsewhere = _generator_to_symlink_out_of(patched, tmp_path)
    for args in (("verify",), ("revert",), ("revert", "--force"), ("apply",)):
        refused(patched, args, ENV, ("symlink", kit.GENERATOR), (elsewhere,))


def _ro_prefix(site: Path) -> list[str] | None:
    """Run a command with ``site`` mounted read-only in a private mount namespace (root
    ignores permission bits, not a read-only mount)."""
    prefix = ["unshare", "-m", "sh", "-c", 'mount --bind "$0" "$0" && mount -o remount,bind,ro "$0" && exec "$@"', str(site)]
    if shutil.which("unshare") is None:
        return None
    probe = subprocess.run(prefix + ["touch", str(site / ".probe")], capture_output=True)
    if probe.returncode == 0 or (site / ".probe").exists():
        (site / ".probe").unlink(missing_ok=True)
        return None
    ok = subprocess.run(prefix + ["true"], capture_output=True)
    return prefix if ok.returncode == 0 else None


def _nobody_prefix() -> list[str] | None:
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        return None
    return ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]


def test_read_only_site(site: Path, tmp_path: Path) -> None:
    prefix = _ro_prefix(site)
    if prefix is None:  # no mount namespaces: an unprivileged user on a root-owned tree
        prefix = _nobody_prefix()
        assert prefix is not None, "neither a read-only mount nor an unprivileged user is available"
        os.chmod(site, 0o755)
    refused(site, ("apply",), ENV, ("not writable", str(site)), prefix=prefix)
    # the dry run only reads: it works on a read-only site
    res = cli(site, "apply", "--dry-run", prefix=prefix)
    assert res.returncode == 0, show(res)
    res = cli(site, "apply")
    assert res.returncode == 0, show(res)
    refused(site, ("revert",), ENV, ("not writable",), prefix=prefix)
    res = cli(site, "verify", prefix=prefix)
    assert res.returncode == 0, show(res)


def test_immutable_target_file(site: Path) -> None:
    gen = site / kit.GENERATOR
    if subprocess.run(["chattr", "+i", str(gen)], capture_output=True).returncode != 0:
        pytest.skip("chattr +i is not supported here (the read-only mount test covers the path)")
    try:
        refused(site, ("apply",), ENV, ("not writable", kit.GENERATOR))
    finally:
        subprocess.run(["chattr", "-i", str(gen)], check=True)


def test_target_with_a_syntax_error(site: Path) -> None:
    """A RECORD-exact file that does not parse (a broken build of the wheel): exit 4."""
    gen = site / kit.GENERATOR
    data = gen.read_bytes() + b"\ndef broken(:\n    pass\n"
    gen.write_bytes(data)
    kit.rewrite_record(kit.dist_info_of(site, "speculators"), {kit.GENERATOR: data})
    assert not kit.all_record_exact(site)
    refused(site, ("apply",), TARGET, (kit.GENERATOR, "does not parse"))
    refused(site, ("apply", "--dry-run"), TARGET, (kit.GENERATOR, "does not parse"))


def _as_version(site: Path, version: str) -> None:
    """Rewrite the speculators dist-info as that of ``version``, RECORD consistent."""
    old = kit.dist_info_of(site, "speculators")
    new = site / f"speculators-{version}.dist-info"
    meta = (old / "METADATA").read_text()
    meta = meta.replace("Version: 0.3.0\n", f"Version: {version}\n", 1)
    (old / "METADATA").write_text(meta)
    old.rename(new)
    kit.rewrite_record(new, {f"{old.name}/METADATA": meta.encode()}, {old.name + "/": new.name + "/"})
    assert not kit.all_record_exact(site)


def test_unknown_speculators_version(site: Path) -> None:
    _as_version(site, "0.10.0")
    refused(site, ("apply",), UNSUPPORTED, ("speculators 0.10.0", "--allow-unsupported"))
    st = cli(site, "status")
    assert st.returncode == UNSUPPORTED and "speculators 0.10.0 is outside the proven range" in st.stdout, show(st)
    ver = cli(site, "verify")
    assert ver.returncode == UNSUPPORTED, show(ver)
    before = kit.snapshot(site)
    res = cli(site, "apply", "--allow-unsupported")
    assert res.returncode == 0, show(res)
    assert "nothing to do" in res.stdout or "applied" in res.stdout, show(res)
    if "nothing to do" in res.stdout:  # no patch covers 0.10.0: not a byte written
        assert not kit.snapshot_diff(before, kit.snapshot(site))
    ver = cli(site, "verify", "--allow-unsupported")
    assert ver.returncode == 0, show(ver)


def test_no_speculators_installed(tmp_path: Path) -> None:
    site = kit.build(tmp_path / "site", None, "0.32.0", lean=True)
    before = kit.snapshot(site)
    st = cli(site, "status")
    assert "speculators is not installed" in st.stdout + st.stderr, show(st)
    ver = cli(site, "verify")
    assert ver.returncode != 0, "verify passes on a site without speculators\n" + show(ver)
    assert "speculators" in ver.stdout + ver.stderr
    assert not kit.snapshot_diff(before, kit.snapshot(site))


def test_speculators_uninstalled_after_apply(patched: Path) -> None:
    kit.pip_uninstall(patched, kit.dist_info_of(patched, "speculators"))
    ver = cli(patched, "verify")
    assert ver.returncode == 12 and "speculators was uninstalled" in ver.stdout, show(ver)


@pytest.mark.parametrize("what", ["manifest", "journal"])
def test_corrupt_state(patched: Path, what: str) -> None:
    if what == "manifest":
        (patched / STATE / "manifest.json").write_text('{"format": 1, "files": ')
        cmds = (("verify",), ("status",), ("apply",), ("revert",), ("revert", "--force"))
        words = ("corrupt manifest",)
    else:  # a journal edited by hand (atomic writes never tear it)
        (patched / STATE / "journal.json").write_text('{"files": [')
        cmds = (("apply",), ("revert",))
        words = ("unreadable journal",)
    for args in cmds:
        refused(patched, args, ENV, words)
