"""A front end's memory hook on virtual addresses, over Unicorn's, which are physical.

With guest paging, Unicorn calls a memory hook for the *physical* address of the access
and matches its range against it.  A hook on a virtual range is therefore one Unicorn
hook per page of the range, on the frame behind that page, each moved when the page's
entry changes (a fault populates it, copy-on-write replaces the frame, munmap drops it);
the callback turns the physical address back into the virtual one.  A hook on every
address is one unbounded Unicorn hook, translated through the reverse map.
"""

from __future__ import annotations

from kernel_model.arch.x86.mm.pgtable import PTE_PFN_MASK


class PagedMemHook:
    """The Unicorn hooks behind one front-end memory hook (see the module docstring)."""

    checkpoint_by_reference = True

    def __init__(self, uc, mem, kind: int, begin: int, end: int, call):
        self.uc, self.mem, self.kind = uc, mem, kind
        self.begin, self.end = begin, end
        self.call = call  # (virtual address, size, value) -> None
        self.handle: PagedMemHook | None = self  # not None while installed (see Cpu.remove_hook)
        self.thunk = None  # not a code hook
        self._runs: list = []  # Unicorn handles, one per run of frames
        self._everywhere = None
        if begin > end:
            self._everywhere = uc.hook_add(kind, self._on_any, None, 1, 0)
            return
        for vpn in range(begin >> 12, (end >> 12) + 1):
            mem.pt.watch(vpn, self._moved)
        self._rebuild()

    def _rebuild(self) -> None:
        """One Unicorn hook per run of pages whose frames are consecutive too (a file
        mapping's frames usually are: one hook for a whole text)."""
        for handle in self._runs:
            self.uc.hook_del(handle)
        self._runs = []
        ptes = self.mem.pt.ptes
        run = None  # [first vpn, first frame, last vpn]
        for vpn in self.mem.pt.vpns_in(self.begin, self.end + 1):
            frame = ptes[vpn] & PTE_PFN_MASK
            if run is not None and vpn == run[2] + 1 and frame == run[1] + ((vpn - run[0]) << 12):
                run[2] = vpn
                continue
            if run is not None:
                self._hook_run(*run)
            run = [vpn, frame, vpn]
        if run is not None:
            self._hook_run(*run)

    def _hook_run(self, first: int, frame: int, last: int) -> None:
        lo = max(self.begin, first << 12)
        hi = min(self.end, (last << 12) | 0xFFF)
        base = first << 12
        self._runs.append(
            self.uc.hook_add(self.kind, self._on_page, (base, frame), frame + lo - base, frame + hi - base)
        )

    def _moved(self, _vpn: int) -> None:
        self._rebuild()

    def _on_page(self, _uc, _acc, paddr: int, size: int, value: int, data) -> None:
        base, frame = data
        self.call(base + paddr - frame, size, value)

    def _on_any(self, _uc, _acc, paddr: int, size: int, value: int, _data) -> None:
        frame = paddr & ~0xFFF
        vpn = self.mem.pt.rmap.get(frame) if self.mem.pt is not None else None
        if vpn is not None:
            self.call((vpn << 12) | (paddr & 0xFFF), size, value)

    def remove(self) -> None:
        """Every Unicorn hook goes; the pages are no longer watched."""
        if self.uc._uch is not None:
            if self._everywhere is not None:
                self.uc.hook_del(self._everywhere)
            for handle in self._runs:
                self.uc.hook_del(handle)
        pt = self.mem.pt
        if pt is not None and self._everywhere is None:
            for vpn in range(self.begin >> 12, (self.end >> 12) + 1):
                pt.unwatch(vpn, self._moved)
        self._runs = []
        self._everywhere = None
        self.handle = None
