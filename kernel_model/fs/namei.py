"""The guest's filesystem view: a mount table and the path walk (fs/namei.c).

The namespace the guest sees (see README, "What a guest can read and write"):

* ``/`` is the *sysroot* (default the host's ``/``), mounted read-only: the guest may
  read files and list directories there, never write (``EROFS``);
* each granted host directory is mounted writable where the guest sees it: at its
  path in the sysroot when it lies there, else at its own absolute host path;
* ``/proc`` and ``/dev`` are modeled filesystems (:class:`kernel_model.fs.fs_types.SpecialNode`
  trees) mounted over the sysroot's; ``/sys`` is a read-only sysfs holding only the
  modeled machine's CPU list (:mod:`kernel_model.fs.sysfs`: the host's sysfs
  describes the host's hardware and kernel, not the modeled machine).

:class:`Nameidata` walks a path as ``link_path_walk``/``path_lookupat`` do: one component
at a time, each host inode opened ``O_PATH|O_NOFOLLOW`` from its parent's descriptor
(nothing is ever opened by a full host name, so a host process swapping a component for
a symlink cannot lead the walk anywhere the guest's namespace does not), mounts crossed
by guest path, ``..`` popping the walk's own stack of locations (above a mount root it
goes back to the parent mount, above ``/`` it stays), symlinks read and followed in the
*guest* namespace (absolute targets restart at the guest ``/``), ``ELOOP`` after 40 links.

A process's working directory and a directory descriptor are held by their inode (a
host descriptor) and a relative walk starts there; their guest path (``Process.fs.pwd``,
``HostFile.guest_path``) is what ``getcwd`` reports and what ``..`` above the starting
directory walks from ``/``.
Host inodes other than regular files, directories and symlinks (FIFOs, sockets, device
nodes) can be stat'ed but not opened (``EACCES``): one could block the emulator or reach
host hardware.
"""

from __future__ import annotations

import errno as E
import os
import stat as S
import weakref
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kernel_model.errors import InputError
from kernel_model.fs.fs_types import Attrs, SpecialNode

if TYPE_CHECKING:
    from kernel_model.fs.file import OpenFile

PATH_MAX, NAME_MAX, MAXSYMLINKS = 4096, 255, 40
RESOLVE_NO_XDEV, RESOLVE_NO_MAGICLINKS, RESOLVE_NO_SYMLINKS = 0x01, 0x02, 0x04
RESOLVE_BENEATH, RESOLVE_IN_ROOT, RESOLVE_CACHED = 0x08, 0x10, 0x20
MAY_EXEC, MAY_WRITE, MAY_READ = 1, 2, 4
O_PATH_NOFOLLOW = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC


def _err(e: OSError) -> int:
    return -(e.errno or E.EIO)


def join(parent: str, name: str) -> str:
    return parent.rstrip("/") + "/" + name


class Mount:
    """One mount (``struct mount``): a host directory (held open ``O_PATH`` for the
    machine's lifetime, so the walk never names it again) or a modeled node tree,
    mounted at the guest path ``point``."""

    def __init__(
        self,
        point: str,
        *,
        host: str | None = None,
        node: SpecialNode | None = None,
        writable: bool = False,
        mnt_id: int = 0,
    ):
        self.point, self.node, self.writable, self.mnt_id = point, node, writable, mnt_id
        self.host = host
        self.fd = None
        if host is not None:
            try:
                self.fd = os.open(host, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
            except OSError as e:
                raise InputError(f"{host!r}: {e.strerror}") from None
            weakref.finalize(self, os.close, self.fd)


@dataclass(eq=False)
class Loc:
    """A location the walk reached (``struct path``): its mount, its guest path, and
    the inode - a host ``O_PATH`` descriptor owned by the walk, a modeled node, or (a
    /proc magic link to a descriptor without a path) the open file itself."""

    mount: Mount
    path: str
    fd: int | None = None
    st: os.stat_result | None = None
    node: SpecialNode | None = None
    file: OpenFile | None = None
    _attrs: Attrs | None = field(default=None, repr=False)

    def attrs(self, task) -> Attrs:
        if self._attrs is None:
            if self.st is not None:
                self._attrs = Attrs.from_host(self.st)
            elif self.node is not None:
                self._attrs = self.node.attrs(task)
            else:
                attrs = getattr(self.file, "attrs", None)  # (not every open file has them)
                self._attrs = attrs() if attrs is not None else Attrs(mode=S.S_IFREG | 0o600, ino=0, dev=0)
        return self._attrs

    def mode(self, task) -> int:
        return self.st.st_mode if self.st is not None else self.attrs(task).mode

    def is_dir(self, task) -> bool:
        return S.S_ISDIR(self.mode(task))

    def is_link(self, task) -> bool:
        return S.S_ISLNK(self.mode(task))


def in_group(cred, gid: int) -> bool:
    """in_group_p: the filesystem gid or a supplementary group."""
    return cred.fsgid == gid or gid in cred.groups


def fs_capable(cred) -> bool:
    """CAP_DAC_OVERRIDE/CAP_DAC_READ_SEARCH under the root model: effective uid 0 and
    filesystem uid 0 (``cap_emulate_setxuid`` and ``setfsuid`` drop the fs caps)."""
    return cred.euid == 0 and cred.fsuid == 0


def generic_permission(cred, attrs: Attrs, mask: int) -> int:
    """generic_permission: the owner, group or other bits for ``mask`` (MAY_*), then
    root's overrides - directories always, files for read and write, and for exec only
    when at least one x bit is set."""
    mode = attrs.mode
    if cred.fsuid == attrs.uid:
        bits = mode >> 6
    elif in_group(cred, attrs.gid):
        bits = mode >> 3
    else:
        bits = mode
    mask &= MAY_READ | MAY_WRITE | MAY_EXEC
    if mask & ~bits & 7 == 0:
        return 0
    if fs_capable(cred):
        if S.S_ISDIR(mode) or not mask & MAY_EXEC or mode & 0o111:
            return 0
    return -E.EACCES


class EmptyDir(SpecialNode):
    """An empty read-only directory."""

    def __init__(self, ino: int = 1, dev: int = 0x15):
        self._attrs = Attrs(mode=S.S_IFDIR | 0o555, ino=ino, dev=dev, nlink=2)

    def attrs(self, task):
        return self._attrs

    def lookup(self, task, name):
        return -E.ENOENT

    def children(self, task):
        return []


class Nameidata:
    """One path walk (``struct nameidata``): the symlink count, openat2's RESOLVE_*
    restrictions, and the host descriptors opened on the way, all closed by
    :meth:`close`."""

    def __init__(self, vfs: "Vfs", task, cred=None):
        self.vfs, self.task = vfs, task
        self.cred = cred if cred is not None else task.cred
        self.links = 0
        self.checking = True  # search permission checked (not in start())
        self.resolve = 0
        self.scope: list[Loc] | None = None  # RESOLVE_BENEATH/IN_ROOT: the starting stack
        self._fds: list[int] = []

    def restrict(self, resolve: int, start: list[Loc]) -> None:
        """openat2's resolve flags (LOOKUP_NO_XDEV ... LOOKUP_IN_ROOT) for this walk;
        ``start`` is the directory a scoped walk may not leave."""
        self.resolve = resolve
        if resolve & (RESOLVE_BENEATH | RESOLVE_IN_ROOT):
            self.scope = list(start)

    def jump_root(self, stack: list[Loc]) -> list[Loc] | int:
        """nd_jump_root: where an absolute name (or symlink target) starts - the root,
        the scope under RESOLVE_IN_ROOT; EXDEV under RESOLVE_BENEATH, or under
        RESOLVE_NO_XDEV when that changes the mount."""
        if self.resolve & RESOLVE_BENEATH:
            return -E.EXDEV
        new = list(self.scope) if self.resolve & RESOLVE_IN_ROOT else self.root()  # type: ignore[arg-type]  # scoped
        if self.resolve & RESOLVE_NO_XDEV and stack and new[-1].mount is not stack[-1].mount:
            return -E.EXDEV
        return new

    def close(self) -> None:
        for fd in self._fds:
            os.close(fd)
        self._fds.clear()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- locations ---------------------------------------------------------------------
    def mount_root(self, m: Mount) -> Loc:
        if m.node is not None:
            return Loc(m, m.point, node=m.node)
        fd = os.dup(m.fd)  # type: ignore[arg-type]  # a mount without a node: its host directory
        self._fds.append(fd)
        return Loc(m, m.point, fd=fd, st=os.fstat(fd))

    def root(self) -> list[Loc]:
        return [self.mount_root(self.vfs.root)]

    def adopt(self, loc: Loc) -> list[Loc]:
        """A walk starting at an inode held elsewhere (the working directory, a
        directory descriptor): its own duplicate of the descriptor."""
        if loc.fd is None:
            return [Loc(loc.mount, loc.path, node=loc.node, file=loc.file)]
        fd = os.dup(loc.fd)
        self._fds.append(fd)
        return [Loc(loc.mount, loc.path, fd=fd, st=os.fstat(fd))]

    def dotdot(self, stack: list[Loc]) -> list[Loc] | int:
        """follow_dotdot: the previous location, never above / (nor above the scope:
        RESOLVE_IN_ROOT stays, RESOLVE_BENEATH is EXDEV); a walk that started at a held
        inode finds its parent by guest path."""
        if self.scope is not None and len(stack) <= len(self.scope):
            return -E.EXDEV if self.resolve & RESOLVE_BENEATH else stack
        if len(stack) > 1:
            if self.resolve & RESOLVE_NO_XDEV and stack[-2].mount is not stack[-1].mount:
                return -E.EXDEV
            return stack[:-1]
        if stack[0].path == "/":
            return stack
        parent = self.held(stack[0].path.rsplit("/", 1)[0] or "/")
        return -E.ENOENT if parent == -E.ENOTDIR else parent

    def start(self, base: str) -> list[Loc] | int:
        """The walk's stack at a directory known by its guest path (the working
        directory or a directory descriptor): ENOENT once it is gone.  No search
        permission is needed on its ancestors: the kernel holds the directory itself,
        checked when it was entered (chdir) or opened."""
        stack = self.held(base)
        if isinstance(stack, int):
            return -E.ENOENT if stack == -E.ENOTDIR else stack
        return stack if stack[-1].is_dir(self.task) else -E.ENOTDIR

    def held(self, path: str) -> list[Loc] | int:
        """The stack at an inode the task already holds (its working directory, an open
        file's path): walked without search permission checks."""
        was, self.checking = self.checking, False
        saved = self.resolve, self.scope
        self.resolve, self.scope = 0, None
        try:
            return self.lookup(self.root(), path, follow=True)
        finally:
            self.checking = was
            self.resolve, self.scope = saved

    def step(self, cur: Loc, name: str) -> Loc | int:
        """One component beneath ``cur`` (lookup_fast/lookup_slow + follow_managed):
        a mount root when the child's guest path is a mount point."""
        path = join(cur.path, name)
        m = self.vfs.mounts.get(path)
        if m is not None:
            return -E.EXDEV if self.resolve & RESOLVE_NO_XDEV else self.mount_root(m)
        if cur.node is not None:
            child = cur.node.lookup(self.task, name)
            return child if isinstance(child, int) else Loc(cur.mount, path, node=child)
        if cur.fd is None:
            return -E.ENOTDIR
        try:
            fd = os.open(name, O_PATH_NOFOLLOW, dir_fd=cur.fd)
        except OSError as e:
            return _err(e)
        self._fds.append(fd)
        return Loc(cur.mount, path, fd=fd, st=os.fstat(fd))

    # -- the walk ----------------------------------------------------------------------
    def parent(self, stack: list[Loc], path: str) -> tuple[list[Loc], str | None, bool] | int:
        """Every component but the last (filename_parentat): the parent's stack, the
        last name (None for a path that ends in ``/`` alone or is ``/``) and whether the
        path had a trailing slash."""
        if len(os.fsencode(path)) >= PATH_MAX:
            return -E.ENAMETOOLONG
        walk = self.jump_root(stack) if path.startswith("/") else list(stack)
        if isinstance(walk, int):
            return walk
        names = [c for c in path.split("/") if c]
        trailing = path.endswith("/") and bool(names)
        for name in names[:-1]:
            walk = self.component(walk, name, follow=True)
            if isinstance(walk, int):
                return walk
        err = self.may_lookup(walk[-1])
        if err:
            return err
        return walk, (names[-1] if names else None), trailing

    def may_lookup(self, cur: Loc) -> int:
        """A directory to look a name up in: ENOTDIR, or EACCES without search (x)."""
        if not cur.is_dir(self.task):
            return -E.ENOTDIR
        if not self.checking:
            return 0
        return self.vfs.permission(self.cred, cur, MAY_EXEC, self.task)

    def component(self, stack: list[Loc], name: str, *, follow: bool) -> list[Loc] | int:
        """walk_component: ``.``, ``..`` (never above ``/``), or a child, its symlink
        followed when ``follow``."""
        err = self.may_lookup(stack[-1])
        if err:
            return err
        if name == ".":
            return stack
        if name == "..":
            return self.dotdot(stack)
        if len(os.fsencode(name)) > NAME_MAX:
            return -E.ENAMETOOLONG
        child = self.step(stack[-1], name)
        if isinstance(child, int):
            return child
        if follow and child.is_link(self.task):
            return self.follow_link(stack, child)
        return stack + [child]

    def follow_link(self, stack: list[Loc], link: Loc) -> list[Loc] | int:
        """pick_link/get_link: continue at the link's target in the guest namespace,
        relative to the link's directory; a /proc magic link jumps to an open file."""
        self.links += 1
        if self.links > MAXSYMLINKS or self.resolve & RESOLVE_NO_SYMLINKS:
            return -E.ELOOP
        if link.node is not None:
            target = link.node.follow(self.task)
        else:
            try:
                target = os.fsdecode(os.readlink("", dir_fd=link.fd))
            except OSError as e:
                return _err(e)
        if isinstance(target, int):
            return target
        if not isinstance(target, str):  # nd_jump_link
            if self.resolve & RESOLVE_NO_MAGICLINKS:
                return -E.ELOOP
            if self.scope is not None:
                return -E.EXDEV
            path = getattr(target, "guest_path", None)
            if path:
                return self.held(path)
            return stack + [Loc(link.mount, link.path, file=target)]
        if target == "":
            return -E.ENOENT
        return self.lookup(stack, target, follow=True)

    def lookup(self, stack: list[Loc], path: str, *, follow: bool) -> list[Loc] | int:
        """path_lookupat: the stack ending at ``path``'s last component, its symlink
        followed when ``follow`` or when the path has a trailing slash (which also
        requires a directory)."""
        r = self.parent(stack, path)
        if isinstance(r, int):
            return r
        parent, last, trailing = r
        if last is None:
            return parent
        found = self.component(parent, last, follow=follow or trailing)
        if isinstance(found, int):
            return found
        if trailing and not found[-1].is_dir(self.task):
            return -E.ENOTDIR
        return found


class Vfs:
    """The guest's mount table and the operations on it that need more than one walk.

    ``sysroot``: the host directory shown at ``/`` (read-only); ``grant_dirs``: host
    directories mounted writable at their own paths; ``special``: guest path ->
    root :class:`SpecialNode` (``/proc``, ``/dev``, ``/sys``)."""

    def __init__(
        self, sysroot: str = "/", grant_dirs: list[str] | tuple = (), special: dict[str, SpecialNode] | None = None
    ):
        if not isinstance(sysroot, str) or not os.path.isdir(sysroot):
            raise InputError(f"sysroot {sysroot!r} is not a directory")
        self.sysroot = os.path.realpath(sysroot)
        self.root = Mount("/", host=self.sysroot, writable=False, mnt_id=1)
        self.mounts: dict[str, Mount] = {}
        self._cwds: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # Process -> Loc
        self.grant_dirs: dict[str, str] = {}  # host directory -> guest mount point
        for i, d in enumerate(grant_dirs):
            if not isinstance(d, str) or not os.path.isdir(d):
                raise InputError(f"grant dir {d!r} is not a directory")
            real = os.path.realpath(d)
            point = self._sysroot_path(real) or real
            self.grant_dirs[real] = point
            if point == "/":
                self.root = Mount("/", host=self.sysroot, writable=True, mnt_id=1)
            else:
                self.mounts[point] = Mount(point, host=real, writable=True, mnt_id=10 + i)
        for point, node in (special or {}).items():
            self.mount(point, node)

    def mount(self, point: str, node: SpecialNode) -> None:
        """Mount a modeled filesystem's root node at the absolute guest path ``point``
        (over whatever the sysroot has there).  Writability is the nodes' business
        (their modes and ``open``), not the mount's."""
        if not isinstance(point, str) or not point.startswith("/") or point != os.path.normpath(point) or point == "/":
            raise InputError(f"mount point must be a normalized absolute path other than /, not {point!r}")
        self.mounts[point] = Mount(point, node=node, writable=True, mnt_id=30 + len(self.mounts))

    def nameidata(self, task, cred=None) -> Nameidata:
        return Nameidata(self, task, cred)

    # -- working directories ------------------------------------------------------------
    def hold_cwd(self, proc, loc: Loc) -> None:
        """fs->pwd: the process's working directory held by its inode (an O_PATH
        descriptor), so lookups relative to it need no walk from / and still work
        once it is removed, as the kernel's do."""
        fd = os.dup(loc.fd) if loc.fd is not None else None
        held = Loc(loc.mount, loc.path, fd=fd, st=loc.st, node=loc.node)
        if fd is not None:
            weakref.finalize(held, os.close, fd)
        self._cwds[proc] = held

    def cwd_loc(self, proc) -> Loc | None:
        """The held working directory when it is still the one ``proc.fs.pwd`` names (a
        forked child starts with its parent's)."""
        held = self._cwds.get(proc)
        if held is None and proc.parent is not None:
            held = self._cwds.get(proc.parent)
            if held is not None and held.path == proc.fs.pwd:
                self._cwds[proc] = held
        return held if held is not None and held.path == proc.fs.pwd else None

    # -- the host's names as the guest sees them ----------------------------------------
    def _sysroot_path(self, real: str) -> str | None:
        """Where a host path lies in the sysroot, as a guest path (None: outside it)."""
        if self.sysroot == "/":
            return real
        if real == self.sysroot or real.startswith(self.sysroot + "/"):
            return "/" + real[len(self.sysroot) :].lstrip("/")
        return None

    def guest_path_of_host(self, host_path: str) -> str | None:
        """A host path's guest path, when the guest can see it (under a grant, or under
        the sysroot and not hidden by a modeled mount); None otherwise."""
        real = os.path.realpath(host_path)
        for host in sorted(self.grant_dirs, key=len, reverse=True):
            if real == host or real.startswith(host.rstrip("/") + "/"):
                return os.path.normpath(self.grant_dirs[host] + "/" + real[len(host) :])
        guest = self._sysroot_path(real)
        if guest is None:
            return None
        for point, m in self.mounts.items():
            if m.node is not None and (guest == point or guest.startswith(point + "/")):
                return None
        return guest

    # -- permissions --------------------------------------------------------------------
    def permission(self, cred, loc: Loc, mask: int, task=None) -> int:
        """inode_permission: EROFS for a write to a regular file, directory or symlink
        on a read-only mount (sb_permission), then generic_permission."""
        attrs = loc.attrs(task)
        if mask & MAY_WRITE and not loc.mount.writable and S.S_IFMT(attrs.mode) in (S.S_IFREG, S.S_IFDIR, S.S_IFLNK):
            return -E.EROFS
        return generic_permission(cred, attrs, mask)
