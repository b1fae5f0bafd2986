"""``run -b OBJ``: BPF objects in a command-line run, with output as BPF tools print it.

Ring buffer records and perf event samples print as they are submitted (the hex bytes
of each: a tool's own printer would know the struct; ``bpftool`` has none either), the
``bpf_trace_printk`` lines as trace_pipe shows them, and at exit every map but the ring
buffers, perf event arrays and ``.rodata`` as ``bpftool map dump`` prints it.
"""

from __future__ import annotations

from emu.probes.bpf_api import BPF_MAP_TYPE_PERF_EVENT_ARRAY, BPF_MAP_TYPE_RINGBUF, MAP_TYPE_NAMES, has_variable
from kernel_model.errors import InputError


def _hex(data: bytes) -> str:
    return " ".join(f"{b:02x}" for b in data)


def _int_value(name: str, text: str) -> int:
    try:
        return int(text, 0)
    except ValueError:
        raise InputError(f"--bpf-set {name}: {text!r} is not an integer") from None


def load_cli_bpf(m, args, out) -> list:
    """Load each ``-b`` object with the ``--bpf-attach``/``--bpf-set`` settings that
    name its programs and variables; every setting must name something."""
    attach = dict(args.bpf_attach)
    values = {name: _int_value(name, text) for name, text in args.bpf_set}
    used_attach: set[str] = set()
    used_values: set[str] = set()
    loaded = []
    pid = getattr(args, "pid", None)
    m.kernel.bpf.printk_output = out
    for path in args.bpf:
        obj = m.bpf.load(path, attach=attach, rodata=values, pid=pid, strict=False)
        used_attach |= set(attach) & set(obj.programs)
        used_values |= {v for v in values if has_variable(obj.object, v)}
        for name, view in obj.maps.items():
            if view.map.map_type == BPF_MAP_TYPE_RINGBUF:
                obj.on_ringbuf(name, lambda rec, name=name: out.write(f"ringbuf {name}: {_hex(rec)}\n"))
            elif view.map.map_type == BPF_MAP_TYPE_PERF_EVENT_ARRAY:
                obj.on_perf_output(name, lambda cpu, rec, name=name: out.write(f"perf {name} cpu {cpu}: {_hex(rec)}\n"))
        loaded.append(obj)
    for what, names, used in (("--bpf-attach", attach, used_attach), ("--bpf-set", values, used_values)):
        missing = sorted(set(names) - used)
        if missing:
            raise InputError(f"{what} {missing[0]}: no loaded BPF object has it")
    return loaded


def dump_cli_bpf(objects, out) -> None:
    """The maps at exit, each under a ``map NAME (TYPE):`` line."""
    for obj in objects:
        for name, view in obj.maps.items():
            kind = view.map.map_type
            if kind in (BPF_MAP_TYPE_RINGBUF, BPF_MAP_TYPE_PERF_EVENT_ARRAY) or name.endswith(".rodata"):
                continue
            out.write(f"map {name} ({MAP_TYPE_NAMES.get(kind, kind)}):\n{view.dump()}")
    out.flush()
