"""Outputs put in place whole, never through a link and never over what kernelscope did not write.

Every command's output is staged and swapped in at the end, so a failed or interrupted command leaves nothing
half-written: a new run, comparison or study is built in a hidden sibling directory and renamed into place
(`staged_directory`); a file is written beside its name and linked or renamed to it (`new_file`); changes to an
existing run are written into a hidden directory inside it and moved over the old entries once all of them are
written (`updating_run`).

A run directory may come from someone else, so nothing inside it is trusted as a place to write: a folder on the
way to an output inside a run (`inside_run`), an output that would be replaced, and a run entry that an update
replaces must each be a real folder or file, never a symbolic link; a folder is replaced only when it holds the
file kernelscope writes into every such folder (its `signature`). Outputs named on the command line are the
user's own paths: links above them are followed as the user wrote them, but the output itself is never a link.

An output's name is claimed by creating it empty and locking it (`flock`, released by the system however the
process ends): a second command aimed at the same output is refused while the first runs, and an empty claim
that nobody holds any more (its command was killed) is taken over, with the hidden staging folders it left.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import re
import shutil
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from kernelscope.errors import UserError
from kernelscope.workers import mark_output_in_place, signals_held

PARTIAL = ".partial-"
OLD = ".old-"
UPDATE_PREFIX = ".update"
# What the system says when a write cannot go on: said of the output, since the file the error came from is a
# hidden staging file the user never named.
_WRITE_ERRORS = frozenset({errno.ENOSPC, errno.EFBIG, errno.EDQUOT, errno.EROFS, errno.EIO, errno.EACCES,
                           errno.EPERM, errno.EMFILE, errno.ENFILE})


def umask() -> int:
    """The process's file-creation mask (reading it means setting it: put it straight back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def private_temp_directory(prefix: str, parent: Path) -> Path:
    """A fresh hidden directory in `parent` for staging; mkdtemp makes it 0700, so give it the mode any other
    directory made here would have (the umask's), or teammates could not read the run it becomes."""
    tmp = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    os.chmod(tmp, 0o777 & ~umask())
    return tmp


def anchored(path: Path) -> Path:
    """`path` made absolute with the folders above it resolved (links there are the user's own path), its last
    component kept as written: the output itself is never resolved through a link."""
    path = Path(os.path.abspath(path)) if path.name in ("", ".", "..") else path
    return path.parent.resolve() / path.name if path.name else path.resolve()


def refuse_link(path: Path) -> None:
    if path.is_symlink():
        raise UserError(f"{path}: is a symbolic link; kernelscope never writes through a link (remove it, or "
                        f"choose another output)")


def inside_run(run_dir: Path, *parts: str, create: bool = False) -> Path:
    """run_dir/parts…: every folder on the way from the run down checked to be a real folder, never a link or a
    file (with `create`, made where missing); the last part itself never a link."""
    path = run_dir
    for part in parts[:-1]:
        path = path / part
        if not _real_directory(path, create):
            break  # missing: nothing below it can be a link
    final = run_dir.joinpath(*parts)
    if os.path.lexists(final.parent):
        refuse_link(final)
    return final


def _real_directory(path: Path, create: bool) -> bool:
    """Whether the real folder `path` exists (made if asked); a link or a file there is refused."""
    if create:
        try:
            os.mkdir(path)
            return True
        except FileExistsError:
            pass
        except OSError as exc:
            raise UserError(f"{path}: cannot create the directory ({exc.strerror or exc})") from None
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return False
    if stat.S_ISLNK(mode):
        refuse_link(path)
    if not stat.S_ISDIR(mode):
        raise UserError(f"{path}: not a directory")
    return True


def claim_parent(final: Path) -> None:
    """Create the folders above `final`; a file where a folder should be is the user's to fix."""
    try:
        final.parent.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise UserError(f"{final.parent}: not a directory") from None
    except OSError as exc:
        raise UserError(f"{final.parent}: cannot create the directory ({exc.strerror or exc})") from None
    if not final.parent.is_dir():
        raise UserError(f"{final.parent}: not a directory")


def _lock_nowait(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False


def _open_directory(path: Path) -> int | None:
    """A descriptor of the real directory `path` (None if it is a link or no directory)."""
    try:
        return os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        return None


def _claim(final: Path) -> int:
    """Create `final` empty and lock it; or take over an empty `final` that no command holds. The descriptor
    holds the lock until it is closed."""
    try:
        os.mkdir(final)
    except FileExistsError:
        pass
    except OSError as exc:
        raise UserError(f"{final}: cannot create ({exc.strerror or exc})") from None
    fd = _open_directory(final)
    if fd is None:
        refuse_link(final)
        raise UserError(f"{final}: already exists (choose another --out or remove it)")
    if not _lock_nowait(fd):
        os.close(fd)
        raise UserError(f"{final}: another kernelscope command is writing this output; try again when it has "
                        f"finished")
    if os.listdir(fd):
        os.close(fd)
        raise UserError(f"{final}: already exists (choose another --out or remove it)")
    return fd


def _remove_stale_staging(parent: Path, stem: str) -> None:
    """Hidden staging folders `stem`.partial-… and `stem`.old-… in `parent` that no command holds any more
    (their command was killed while it wrote): the caller holds the lock that every command writing them
    holds, so none is in use."""
    prefixes = (f"{stem}{PARTIAL}", f"{stem}{OLD}")
    with contextlib.suppress(OSError):
        for entry in os.scandir(parent):
            if entry.name.startswith(prefixes) and entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path, ignore_errors=True)


def _replaceable(final: Path, signature: str | None) -> None:
    """An existing `final` that a command may replace: a real folder holding the file kernelscope writes into
    every such folder (`signature`); never a link, a file or a folder of someone else's."""
    try:
        mode = os.lstat(final).st_mode
    except FileNotFoundError:
        return
    refuse_link(final)
    if not stat.S_ISDIR(mode):
        raise UserError(f"{final}: not a directory (remove it, or choose another --out)")
    if signature is not None:
        try:
            mark = os.lstat(final / signature).st_mode
        except OSError:
            mark = 0
        if not stat.S_ISREG(mark):
            raise UserError(f"{final}: not written by kernelscope (no {signature} in it); remove it or choose "
                            f"another --out")


@contextmanager
def named_errors(output: Path) -> Iterator[None]:
    """An OSError of a write (disk full, file too large, read-only, …) said of `output`, the path the user named,
    not of a hidden staging file."""
    try:
        yield
    except OSError as exc:
        code = exc.errno if exc.errno is not None else _rust_errno(str(exc))
        if code not in _WRITE_ERRORS:
            raise
        raise UserError(f"{output}: cannot write ({exc.strerror or os.strerror(code)})") from None


def _rust_errno(text: str) -> int | None:
    """The error number of an OSError raised by a library written in Rust (Polars' writers), which gives no errno
    but says `… (os error 27)`."""
    match = re.search(r"\(os error (\d+)\)", text)
    return int(match.group(1)) if match else None


@contextmanager
def staged_directory(final: Path, replace: bool = False, signature: str | None = None) -> Iterator[Path]:
    """Yield a temporary directory next to `final`; rename it to `final` if the block succeeds.

    Without `replace`, `final` is claimed first (created empty and locked: of two commands writing to one --out,
    the second is refused at once instead of one result silently replacing the other). With `replace`, an
    existing `final` is replaced only if it is a real folder holding `signature`. On failure the claim is taken
    back."""
    final = anchored(final)
    claim_parent(final)
    claim: int | None = None
    tmp: Path | None = None
    try:
        with signals_held():  # a signal here is raised as the block ends, inside this try: cleaned up
            if replace:
                _replaceable(final, signature)
            else:
                claim = _claim(final)
                _remove_stale_staging(final.parent, f".{final.name}")
            try:
                tmp = private_temp_directory(f".{final.name}{PARTIAL}", final.parent)
            except OSError as exc:
                raise UserError(f"{final.parent}: cannot write here ({exc.strerror or exc})") from None
        with named_errors(final):
            yield tmp
        with signals_held():  # the output is renamed into place whole; a signal waits for that
            if claim is None and final.is_dir() and not final.is_symlink():
                _replaceable(final, signature)  # still what was checked before the work began
                old = Path(tempfile.mkdtemp(prefix=f".{final.name}{OLD}", dir=final.parent))
                os.replace(final, old / final.name)
                os.replace(tmp, final)
                shutil.rmtree(old, ignore_errors=True)
            else:
                refuse_link(final)
                os.replace(tmp, final)  # over the empty directory that claimed the name
            mark_output_in_place()
    except BaseException:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
        if claim is not None:
            with contextlib.suppress(OSError):
                os.rmdir(final)  # only if still our empty claim
        raise
    finally:
        if claim is not None:
            os.close(claim)


@contextmanager
def updating_run(run_dir: Path) -> Iterator[Path]:
    """Yield a hidden staging directory inside `run_dir`: whatever the block writes there (files, or whole
    directories such as report/) replaces the run's entries of the same names once the block succeeds; run.json
    goes last. On failure, in the block or while swapping, the run is left as it was. One command at a time
    updates a run: the directory itself is locked (flock, released by the system even if the process dies); the
    staging folders a killed update left are removed under that lock."""
    with _locked(run_dir):
        _remove_stale_staging(run_dir, UPDATE_PREFIX)
        staging: Path | None = None
        try:
            with signals_held():  # a signal here is raised as the block ends, inside this try: cleaned up
                try:
                    staging = private_temp_directory(f"{UPDATE_PREFIX}{PARTIAL}", run_dir)
                except OSError as exc:
                    raise UserError(f"{run_dir}: cannot write into the run ({exc.strerror or exc})") from None
            with named_errors(run_dir):
                yield staging
            entries = sorted(staging.iterdir(), key=lambda p: p.name == "run.json")
            for entry in entries:  # checked before anything moves: a refusal leaves the run as it was
                refuse_link(run_dir / entry.name)
            with signals_held():  # the swap is short: a signal waits until the run is whole again
                _swap_all(entries, run_dir, staging.with_name(staging.name.replace(PARTIAL, OLD)))
                mark_output_in_place()
        finally:
            if staging is not None:
                shutil.rmtree(staging, ignore_errors=True)
                shutil.rmtree(staging.with_name(staging.name.replace(PARTIAL, OLD)), ignore_errors=True)


@contextmanager
def _locked(run_dir: Path) -> Iterator[None]:
    try:
        fd = os.open(run_dir, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as exc:
        raise UserError(f"{run_dir}: cannot open the run ({exc.strerror or exc})") from None
    try:
        if not _lock_nowait(fd):
            raise UserError(f"{run_dir}: another kernelscope command is updating this run; try again when it "
                            f"has finished")
        yield
    finally:
        os.close(fd)  # releases the lock


def _swap_all(entries: list[Path], run_dir: Path, aside: Path) -> None:
    """Move each staged entry over the run's entry of the same name, the old ones first set aside; if any move
    fails, every entry already swapped is put back."""
    aside.mkdir()
    done: list[tuple[Path, Path | None]] = []
    try:
        for entry in entries:
            old = run_dir / entry.name
            kept = None
            if os.path.lexists(old):
                kept = aside / entry.name
                os.replace(old, kept)
            done.append((old, kept))
            os.replace(entry, old)
    except BaseException:
        for old, kept in reversed(done):
            if old.is_dir() and not old.is_symlink():
                shutil.rmtree(old, ignore_errors=True)
            else:
                old.unlink(missing_ok=True)
            if kept is not None:
                os.replace(kept, old)
        raise


@contextmanager
def new_file(target: Path, replace: bool = False) -> Iterator[Path]:
    """Yield a temporary path next to `target` to write; once the block succeeds it becomes `target`. Unless
    `replace`, `target` must not exist (a hard link claims the name atomically: an existing file is never
    overwritten); with `replace`, an existing `target` must be a regular file. Never a link. Its mode follows the
    umask."""
    target = anchored(target)
    claim_parent(target)
    refuse_link(target)
    if target.exists():
        if not replace:
            raise UserError(f"{target}: already exists (choose another --out or remove it)")
        if not target.is_file():
            raise UserError(f"{target}: not a regular file (remove it, or choose another --out)")
    tmp: Path | None = None
    try:
        with signals_held():  # a signal here is raised as the block ends, inside this try: cleaned up
            try:
                fd, name = tempfile.mkstemp(prefix=f".{target.name}{PARTIAL}", dir=target.parent)
            except OSError as exc:
                raise UserError(f"{target.parent}: cannot write here ({exc.strerror or exc})") from None
            os.close(fd)
            tmp = Path(name)
        os.chmod(tmp, 0o666 & ~umask())
        with named_errors(target):
            yield tmp
        with signals_held():  # the file is put in place whole; a signal waits for that, then no longer counts
            if replace:
                refuse_link(target)
                os.replace(tmp, target)
            else:
                try:
                    os.link(tmp, target)
                except FileExistsError:
                    raise UserError(f"{target}: already exists (written by another command meanwhile)") from None
            mark_output_in_place()
    finally:
        if tmp is not None:
            tmp.unlink(missing_ok=True)
