"""The LRU lists of LRU hash maps, as ``kernel/bpf/bpf_lru_list.c`` keeps them: the
common LRU with per-CPU local free/pending lists, or per-CPU LRUs for
``BPF_F_NO_COMMON_LRU``, with the reference bit set by lookups from programs, rotation of
the active/inactive lists and shrinking from the inactive tail, so the element
:class:`~kernel_model.bpf.hashtab.HashMap` evicts is the one Linux evicts.
"""

from __future__ import annotations

from typing import Any

LOCAL_FREE_TARGET = 128
LOCAL_NR_SCANS = LOCAL_FREE_TARGET
PERCPU_FREE_TARGET = 4

# node types: the LRU lists, then the per-CPU local ones
_T_ACTIVE, _T_INACTIVE, _T_FREE, _T_LOCAL_FREE, _T_LOCAL_PENDING = range(5)


class _Link:
    """A ``struct list_head``: circular, doubly linked, with the head as sentinel."""

    __slots__ = ("next", "prev")

    def __init__(self) -> None:
        self.next: _Link = self
        self.prev: _Link = self


def _list_add(node: _Link, head: _Link) -> None:
    node.next, node.prev = head.next, head
    head.next.prev = node
    head.next = node


def _list_del(node: _Link) -> None:
    node.prev.next = node.next
    node.next.prev = node.prev
    node.next = node.prev = node


def _list_move(node: _Link, head: _Link) -> None:
    _list_del(node)
    _list_add(node, head)


def _reverse(head: _Link) -> list[LruNode]:
    """The entries from the tail to the head (``list_for_each_entry_safe_reverse``)."""
    out = []
    cur = head.prev
    while cur is not head:
        assert isinstance(cur, LruNode)
        out.append(cur)
        cur = cur.prev
    return out


class LruNode(_Link):
    """``struct bpf_lru_node`` of element ``elem``."""

    __slots__ = ("cpu", "elem", "ref", "type")

    def __init__(self, elem: int) -> None:
        super().__init__()
        self.elem = elem
        self.type = _T_FREE
        self.ref = 0
        self.cpu = 0


class _LruList:
    """``struct bpf_lru_list``: active, inactive and free lists, the counts of the first
    two, and where the next inactive rotation starts."""

    def __init__(self) -> None:
        self.lists = [_Link(), _Link(), _Link()]
        self.counts = [0, 0]
        self.next_inactive_rotation: _Link = self.lists[_T_INACTIVE]


class _LocalList:
    """``struct bpf_lru_locallist``: a CPU's free and pending lists."""

    def __init__(self, cpu: int) -> None:
        self.free = _Link()
        self.pending = _Link()
        self.next_steal = cpu


class BpfLru:
    """``struct bpf_lru``: the common LRU (a global list plus per-CPU local lists) or,
    for ``BPF_F_NO_COMMON_LRU``, one LRU list per CPU.  A CPU's local free list is
    refilled with ``target_free`` elements at a time, half of each CPU's share of the map
    up to 128 (older kernels always took 128); Linux 6.18 was measured to do this."""

    def __init__(self, nr_cpus: int, percpu: bool, del_from_htab: Any) -> None:
        self.nr_cpus = nr_cpus
        self.percpu = percpu
        self.del_from_htab = del_from_htab
        self.nr_scans = LOCAL_NR_SCANS
        self.target_free = LOCAL_FREE_TARGET
        if percpu:
            self.percpu_lru = [_LruList() for _ in range(nr_cpus)]
        else:
            self.common = _LruList()
            self.local = [_LocalList(cpu) for cpu in range(nr_cpus)]

    # list moves
    @staticmethod
    def _count_dec(lst: _LruList, t: int) -> None:
        if t < 2:
            lst.counts[t] -= 1

    @staticmethod
    def _count_inc(lst: _LruList, t: int) -> None:
        if t < 2:
            lst.counts[t] += 1

    def _move_to_free(self, lst: _LruList, node: LruNode, free_list: _Link, tgt: int) -> None:
        if node is lst.next_inactive_rotation:
            lst.next_inactive_rotation = lst.next_inactive_rotation.prev
        self._count_dec(lst, node.type)
        node.type = tgt
        _list_move(node, free_list)

    def _move_in(self, lst: _LruList, node: LruNode, tgt: int) -> None:
        self._count_inc(lst, tgt)
        node.type = tgt
        node.ref = 0
        _list_move(node, lst.lists[tgt])

    def _move(self, lst: _LruList, node: LruNode, tgt: int) -> None:
        if node.type != tgt:
            self._count_dec(lst, node.type)
            self._count_inc(lst, tgt)
            node.type = tgt
        node.ref = 0
        if node is lst.next_inactive_rotation:
            lst.next_inactive_rotation = lst.next_inactive_rotation.prev
        _list_move(node, lst.lists[tgt])

    def _rotate_active(self, lst: _LruList) -> None:
        active = lst.lists[_T_ACTIVE]
        if active.next is active:
            return
        first = active.next
        for i, node in enumerate(_reverse(active), 1):
            self._move(lst, node, _T_ACTIVE if node.ref else _T_INACTIVE)
            if i == self.nr_scans or node is first:
                break

    def _rotate_inactive(self, lst: _LruList) -> None:
        inactive = lst.lists[_T_INACTIVE]
        if inactive.next is inactive:
            return
        last = lst.next_inactive_rotation.next
        if last is inactive:
            last = last.next
        cur = lst.next_inactive_rotation
        nxt = cur
        i = 0
        while i < self.nr_scans:
            if cur is inactive:
                cur = cur.prev
                continue
            assert isinstance(cur, LruNode)
            nxt = cur.prev
            if cur.ref:
                self._move(lst, cur, _T_ACTIVE)
            if cur is last:
                break
            cur = nxt
            i += 1
        lst.next_inactive_rotation = nxt

    def _rotate(self, lst: _LruList) -> None:
        if lst.counts[_T_INACTIVE] < lst.counts[_T_ACTIVE]:
            self._rotate_active(lst)
        self._rotate_inactive(lst)

    def _shrink_inactive(self, lst: _LruList, tgt_nshrink: int, free_list: _Link, tgt: int) -> int:
        inactive = lst.lists[_T_INACTIVE]
        nshrinked = 0
        for i, node in enumerate(_reverse(inactive), 1):
            if node.ref:
                self._move(lst, node, _T_ACTIVE)
            elif self.del_from_htab(node):
                self._move_to_free(lst, node, free_list, tgt)
                nshrinked += 1
                if nshrinked == tgt_nshrink:
                    break
            if i == self.nr_scans:
                break
        return nshrinked

    def _shrink(self, lst: _LruList, tgt_nshrink: int, free_list: _Link, tgt: int) -> int:
        nshrinked = self._shrink_inactive(lst, tgt_nshrink, free_list, tgt)
        if nshrinked:
            return nshrinked
        inactive = lst.lists[_T_INACTIVE]
        force = inactive if inactive.next is not inactive else lst.lists[_T_ACTIVE]
        for node in _reverse(force):
            if self.del_from_htab(node):
                self._move_to_free(lst, node, free_list, tgt)
                return 1
        return 0

    # population
    def populate(self, nodes: list[LruNode]) -> None:
        if self.percpu:
            pcpu_entries = len(nodes) // self.nr_cpus
            i = 0
            for cpu in range(self.nr_cpus):
                lst = self.percpu_lru[cpu]
                while True:
                    node = nodes[i]
                    node.cpu, node.type, node.ref = cpu, _T_FREE, 0
                    _list_add(node, lst.lists[_T_FREE])
                    i += 1
                    if i == len(nodes) or i % pcpu_entries == 0:
                        break
                if i == len(nodes):
                    break
        else:
            for node in nodes:
                node.type, node.ref = _T_FREE, 0
                _list_add(node, self.common.lists[_T_FREE])
            self.target_free = min(max((len(nodes) // self.nr_cpus) // 2, 1), LOCAL_FREE_TARGET)

    # bpf_lru_pop_free / bpf_lru_push_free
    def pop_free(self, cpu: int) -> LruNode | None:
        if self.percpu:
            lst = self.percpu_lru[cpu]
            self._rotate(lst)
            free_list = lst.lists[_T_FREE]
            if free_list.next is free_list:
                self._shrink(lst, PERCPU_FREE_TARGET, free_list, _T_FREE)
            if free_list.next is free_list:
                return None
            node = free_list.next
            assert isinstance(node, LruNode)
            node.ref = 0
            self._move(lst, node, _T_INACTIVE)
            return node
        loc = self.local[cpu]
        node2 = self._local_pop_free(loc)
        if node2 is None:
            self._pop_free_to_local(loc)
            node2 = self._local_pop_free(loc)
        if node2 is not None:
            self._add_pending(loc, cpu, node2)
            return node2
        first_steal = steal = loc.next_steal
        while True:
            sloc = self.local[steal]
            node2 = self._local_pop_free(sloc)
            if node2 is None:
                node2 = self._local_pop_pending(sloc)
            steal = (steal + 1) % self.nr_cpus
            if node2 is not None or steal == first_steal:
                break
        loc.next_steal = steal
        if node2 is not None:
            self._add_pending(loc, cpu, node2)
        return node2

    def _local_pop_free(self, loc: _LocalList) -> LruNode | None:
        node = loc.free.next
        if node is loc.free:
            return None
        assert isinstance(node, LruNode)
        _list_del(node)
        return node

    def _local_pop_pending(self, loc: _LocalList) -> LruNode | None:
        for force in (False, True):
            for node in _reverse(loc.pending):
                if (not node.ref or force) and self.del_from_htab(node):
                    _list_del(node)
                    return node
        return None

    @staticmethod
    def _add_pending(loc: _LocalList, cpu: int, node: LruNode) -> None:
        node.cpu = cpu
        node.type = _T_LOCAL_PENDING
        node.ref = 0
        _list_add(node, loc.pending)

    def _pop_free_to_local(self, loc: _LocalList) -> None:
        lst = self.common
        for node in _reverse(loc.pending):  # __local_list_flush
            self._move_in(lst, node, _T_ACTIVE if node.ref else _T_INACTIVE)
        self._rotate(lst)
        nfree = 0
        free = lst.lists[_T_FREE]
        while free.next is not free and nfree < self.target_free:
            first = free.next
            assert isinstance(first, LruNode)
            self._move_to_free(lst, first, loc.free, _T_LOCAL_FREE)
            nfree += 1
        if nfree < self.target_free:
            self._shrink(lst, self.target_free - nfree, loc.free, _T_LOCAL_FREE)

    def push_free(self, node: LruNode) -> None:
        if self.percpu:
            self._move(self.percpu_lru[node.cpu], node, _T_FREE)
            return
        if node.type == _T_LOCAL_PENDING:
            node.type = _T_LOCAL_FREE
            node.ref = 0
            _list_move(node, self.local[node.cpu].free)
            return
        self._move(self.common, node, _T_FREE)
