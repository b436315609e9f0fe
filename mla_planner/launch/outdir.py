"""Writing the launch folder, all or nothing.

Every file is written into a temporary folder beside the target first; only when all of them are
written does it replace the target. A new or empty target is replaced by the temporary folder. With
`force`, a folder an earlier emit wrote is emptied of that emit's files (named in its manifest,
MANIFEST) and the new ones moved in, so no stale node-K.sh survives; a folder holding anything else
is refused. Every OSError becomes one PlanError line naming the path.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Optional

from mla_planner import __version__
from mla_planner.core.errors import PlanError

MANIFEST = ".mla-plan-emit.json"


class FolderNotEmpty(PlanError):
    """The target holds files and `force` was not given (the CLI adds how to override)."""


def write_folder(files: dict[str, tuple[str, bool]], out_dir: Path, force: bool = False) -> list[Path]:
    """Write {name: (text, executable)} into `out_dir` with a manifest; return the files' paths."""
    out_dir = Path(out_dir)
    if not str(out_dir):
        raise PlanError("the output folder name is empty")
    try:
        return _write(files, out_dir, force)
    except OSError as exc:
        raise PlanError(f"{out_dir}: cannot write the launch folder there ({exc.strerror or exc})") from None


def _write(files: dict[str, tuple[str, bool]], out_dir: Path, force: bool) -> list[Path]:
    if out_dir.exists() and not out_dir.is_dir():
        raise PlanError(f"{out_dir}: a file is there, not a folder: give a folder name for the launch scripts")
    present = sorted(p.name for p in out_dir.iterdir()) if out_dir.exists() else []
    if present and not force:
        raise FolderNotEmpty(f"{out_dir} is not empty; choose an empty folder")
    if present:
        _check_only_emitted(out_dir, present)
    target = out_dir.resolve()   # "." and symlinks: work on the real folder, never rename the cwd
    blocker = next((p for p in target.parents if p.exists()), None)
    if blocker is not None and not blocker.is_dir():
        raise PlanError(f"{out_dir}: {blocker} is a file, not a folder")
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        for name, (text, executable) in files.items():
            (tmp / name).write_text(text)
            (tmp / name).chmod(0o755 if executable else 0o644)
        (tmp / MANIFEST).write_text(json.dumps({"written_by": f"mla-plan {__version__}",
                                                "files": sorted(files)}, indent=1) + "\n")
        if target.exists():
            _swap(tmp, target, present)
        else:
            tmp.chmod(0o755)
            tmp.rename(target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return [out_dir / name for name in files]


def _emitted(out_dir: Path) -> Optional[set[str]]:
    """Names an earlier emit wrote into `out_dir` (its manifest), None when it has no readable manifest."""
    try:
        data = json.loads((out_dir / MANIFEST).read_text())
        return set(data["files"]) | {MANIFEST}
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _check_only_emitted(out_dir: Path, present: list[str]) -> None:
    """Refuse unless every entry is a plain file an earlier emit named: a folder or link that merely
    carries an emitted file's name is the user's, and --force must never delete it."""
    emitted = _emitted(out_dir)
    foreign = [n for n in present if emitted is None or n not in emitted
               or (out_dir / n).is_symlink() or not (out_dir / n).is_file()]
    if foreign:
        shown = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")
        raise PlanError(f"{out_dir} holds files that emit did not write ({shown}); --force replaces only an "
                        "earlier emit's files: move them away or choose another folder")


def _swap(tmp: Path, target: Path, present: list[str]) -> None:
    """Move the old files aside, the new ones in; on failure put the old ones back."""
    old = Path(tempfile.mkdtemp(prefix=f".{target.name}.old.", dir=target.parent))
    moved_out: list[str] = []
    moved_in: list[str] = []
    try:
        for name in present:
            os.replace(target / name, old / name)
            moved_out.append(name)
        for p in sorted(tmp.iterdir()):
            os.replace(p, target / p.name)
            moved_in.append(p.name)
    except OSError:
        for name in moved_in:
            (target / name).unlink(missing_ok=True)
        for name in moved_out:
            os.replace(old / name, target / name)
        old.rmdir()
        raise
    shutil.rmtree(old)
